//! Every way of reading or writing a file the project's lint bans outside
//! the door. `scripts/lint-canary.sh` runs clippy here with the project's
//! `clippy.toml` and fails unless each line marked `// banned` is refused:
//! a new reader or writer that skips the door cannot land unnoticed.
#![allow(dead_code, unused_must_use)]

use std::path::Path;

fn reads(p: &Path) {
    std::fs::read(p); // banned
    std::fs::read_to_string(p); // banned
    std::fs::read_dir(p); // banned
    std::fs::metadata(p); // banned
    std::fs::symlink_metadata(p); // banned
    std::fs::File::open(p); // banned
    std::fs::OpenOptions::new().read(true).open(p); // banned
    p.read_dir(); // banned
    p.metadata(); // banned
    p.symlink_metadata(); // banned
    p.is_file(); // banned
    p.is_dir(); // banned
    p.exists(); // banned
}

fn writes(p: &Path, q: &Path) {
    std::fs::write(p, b"x"); // banned
    std::fs::remove_file(p); // banned
    std::fs::remove_dir_all(p); // banned
    std::fs::remove_dir(p); // banned
    std::fs::rename(p, q); // banned
    std::fs::create_dir_all(p); // banned
    std::fs::create_dir(p); // banned
    std::fs::File::create(p); // banned
    std::fs::copy(p, q); // banned
    std::fs::hard_link(p, q); // banned
    std::os::unix::fs::symlink(p, q); // banned
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o644)); // banned
}

#[allow(clippy::disallowed_methods)] // the one-line exception, with its reason, is honoured
fn allowed(p: &Path) {
    std::fs::read(p);
}
