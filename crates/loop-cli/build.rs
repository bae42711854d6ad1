//! A release build of `loop` hands the linker `link-order.txt` (made by
//! `scripts/link-order.sh`): the functions the everyday paths run, placed
//! together, so a run touches a few megabytes of code rather than pages
//! scattered over the whole binary (9.5 instead of 18 MiB of memory for a
//! three-step task). Only where the linker is the one Rust uses by default
//! on x86_64 Linux since 1.90 (LLD, which takes `--symbol-ordering-file`);
//! anywhere else, or with `LOOP_LINK_ORDER=0`, the build is as before.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=link-order.txt");
    println!("cargo:rerun-if-changed=build.rs");
    for var in [
        "LOOP_LINK_ORDER",
        "LOOP_PACK_RELOCS",
        "RUSTC_LINKER",
        "CARGO_ENCODED_RUSTFLAGS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let release = env("PROFILE") == "release";
    let target = env("TARGET") == "x86_64-unknown-linux-gnu";
    let asked_off = env("LOOP_LINK_ORDER") == "0";
    // A linker of one's own (configured, or through flags) may not be LLD.
    let own_linker = !env("RUSTC_LINKER").is_empty()
        || ["fuse-ld", "linker-features", "linker-flavor", "linker="]
            .iter()
            .any(|f| env("CARGO_ENCODED_RUSTFLAGS").contains(f));
    if !release || !target || asked_off || own_linker || !rustc_links_with_lld() {
        return;
    }
    let order = std::path::Path::new(&env("CARGO_MANIFEST_DIR")).join("link-order.txt");
    println!(
        "cargo:rustc-link-arg-bin=loop=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    // Names a newer build no longer has are skipped without a word.
    println!("cargo:rustc-link-arg-bin=loop=-Wl,--no-warn-symbol-ordering");
    // Relative relocations packed (DT_RELR, read by glibc 2.36 and later):
    // the 30,000 entries of 24 bytes the loader reads at every start fit in
    // 8 KiB, and its relocation work at every start falls from about 1.1
    // to 0.15 million cycles (`LD_DEBUG=statistics`; 0.2-0.3 ms of each
    // `loop` process's start on the 2-core VM). Only where this machine's
    // glibc reads them: the binary then needs glibc 2.36 wherever it runs
    // (2.34 otherwise), so a build to be copied to an older system is made
    // with LOOP_PACK_RELOCS=0.
    if env("LOOP_PACK_RELOCS") != "0" && glibc_reads_relr() {
        println!("cargo:rustc-link-arg-bin=loop=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this machine's C library reads packed relative relocations
/// (glibc 2.36 and later; `getconf` answers `glibc 2.36`).
fn glibc_reads_relr() -> bool {
    at_least(Command::new("getconf").arg("GNU_LIBC_VERSION"), (2, 36))
}

/// Whether this rustc links x86_64 Linux binaries with its own LLD by
/// default (1.90 and later; it answers `rustc 1.95.0 (…)`).
fn rustc_links_with_lld() -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    at_least(Command::new(rustc).arg("-V"), (1, 90))
}

/// Whether the version `command` prints as its second word (`NAME X.Y…`)
/// is at least `least` (no answer: no).
fn at_least(command: &mut Command, least: (u32, u32)) -> bool {
    let Ok(out) = command.output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut version = text
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (version.next().unwrap_or(0), version.next().unwrap_or(0)) >= least
}
