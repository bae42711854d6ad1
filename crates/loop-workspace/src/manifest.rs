//! Content manifests: SHA-256 per file and a Merkle root over the tree.
//! Progress detection and receipts key on content, never on mtimes.

use crate::jail::to_slash;
use loop_protocol::hash::{Sha256Stream, hex};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum EntryKind {
    /// A regular file (digest over its bytes).
    File,
    /// A symbolic link (digest over its target path).
    Symlink,
}

/// One manifest entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// `/`-separated path relative to the root.
    pub path: String,
    /// File or symlink.
    pub kind: EntryKind,
    /// SHA-256 of the content (or link target).
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
    /// Owner-executable bit.
    pub executable: bool,
    /// The path's raw bytes in hex, when they are not UTF-8 (`path` then
    /// holds a lossy rendering for people; the Merkle leaf hashes these
    /// bytes, so `a\xff` and `a\u{FFFD}` never share a root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_path: Option<String>,
}

impl Entry {
    /// The path's bytes as the file system has them.
    pub fn path_bytes(&self) -> Vec<u8> {
        match &self.raw_path {
            Some(h) => (0..h.len() / 2)
                .filter_map(|i| u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok())
                .collect(),
            None => self.path.as_bytes().to_vec(),
        }
    }
}

/// The raw bytes of `rel` in hex when they are not UTF-8.
fn raw_if_lossy(rel: &Path) -> Option<String> {
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(rel.as_os_str());
    std::str::from_utf8(bytes).is_err().then(|| hex(bytes))
}

/// Every file under a root, sorted by path, and their Merkle root.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// Entries, sorted by path.
    pub entries: Vec<Entry>,
    /// Merkle root over the entries.
    pub root: String,
}

/// Content hashes remembered by file identity and timestamps, so a
/// manifest taken again re-reads only files that changed. An entry is
/// trusted only when the file's size, inode, modification and change times
/// all match and its change time was more than two seconds old when it was
/// hashed (a file changed within the same clock tick is never trusted).
#[derive(Debug, Default)]
pub struct StatCache {
    map: std::collections::HashMap<String, (u64, u64, i64, i64, String)>,
}

impl Manifest {
    /// Walk `dir` and hash every file and symlink.
    pub fn of(dir: &Path) -> std::io::Result<Manifest> {
        Self::of_cached(dir, &mut StatCache::default())
    }

    /// [`Manifest::of`], re-hashing only files whose identity or timestamps
    /// changed since `cache` saw them. The same manifest, to the byte.
    pub fn of_cached(dir: &Path, cache: &mut StatCache) -> std::io::Result<Manifest> {
        let mut entries = Vec::new();
        let mut next = StatCache::default();
        walk(dir, dir, &mut entries, cache, &mut next)?;
        *cache = next;
        Ok(Self::from_entries(entries))
    }

    /// The manifest of these entries (sorted, and their root computed).
    pub fn from_entries(mut entries: Vec<Entry>) -> Manifest {
        // By path, then by raw bytes where two names render alike.
        entries.sort_by(|a, b| {
            a.path
                .cmp(&b.path)
                .then_with(|| a.path_bytes().cmp(&b.path_bytes()))
        });
        let root = merkle_root(&entries);
        Manifest { entries, root }
    }

    /// The entry for `path`.
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries
            .binary_search_by(|e| e.path.as_str().cmp(path))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Total bytes.
    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.size).sum()
    }
}

#[allow(clippy::disallowed_methods)] // hashes workspace files opened with O_NOFOLLOW|O_NONBLOCK, links recorded as links
fn walk(
    root: &Path,
    dir: &Path,
    out: &mut Vec<Entry>,
    cache: &StatCache,
    next: &mut StatCache,
) -> std::io::Result<()> {
    for item in std::fs::read_dir(dir)? {
        let item = item?;
        // The root's `.git` is the repository's plumbing (a worktree's
        // pointer to its repository, which names a path of this machine),
        // never the work: left out, a workspace rebuilt elsewhere has the
        // same root.
        if dir == root && item.file_name() == ".git" {
            continue;
        }
        let path = item.path();
        let meta = std::fs::symlink_metadata(&path)?;
        let rel_path = path.strip_prefix(root).unwrap_or(&path);
        let rel = to_slash(rel_path);
        let raw_path = raw_if_lossy(rel_path);
        if meta.file_type().is_symlink() {
            // The target's raw bytes: two targets never share a digest.
            let target = std::fs::read_link(&path)?;
            let t = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str());
            out.push(Entry {
                path: rel,
                kind: EntryKind::Symlink,
                sha256: loop_protocol::hash::sha256_hex(t),
                size: t.len() as u64,
                executable: false,
                raw_path,
            });
        } else if meta.is_dir() {
            walk(root, &path, out, cache, next)?;
        } else if meta.is_file() {
            use std::os::unix::fs::MetadataExt;
            let mtime = meta.mtime().saturating_mul(1_000_000_000) + meta.mtime_nsec();
            let ctime = meta.ctime().saturating_mul(1_000_000_000) + meta.ctime_nsec();
            let sha = match cache.map.get(&rel) {
                Some((size, ino, m, c, sha))
                    if *size == meta.len() && *ino == meta.ino() && *m == mtime && *c == ctime =>
                {
                    sha.clone()
                }
                _ => hash_file(&path)?,
            };
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as i64)
                .unwrap_or(0);
            if ctime < now - 2_000_000_000 {
                next.map.insert(
                    rel.clone(),
                    (meta.len(), meta.ino(), mtime, ctime, sha.clone()),
                );
            }
            out.push(Entry {
                path: rel,
                kind: EntryKind::File,
                sha256: sha,
                size: meta.len(),
                executable: meta.permissions().mode() & 0o100 != 0,
                raw_path,
            });
        }
    }
    Ok(())
}

/// SHA-256 of a file's content, streamed.
#[allow(clippy::disallowed_methods)] // hashes workspace files opened with O_NOFOLLOW|O_NONBLOCK, links recorded as links
pub fn hash_file(path: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    // The workspace is untrusted: a link swapped in since the walk looked is
    // not followed, and a FIFO never blocks the runtime.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    hash_reader(&mut f)
}

/// SHA-256 of everything `r` yields, streamed (never held in memory).
pub fn hash_reader(r: &mut impl Read) -> std::io::Result<String> {
    let mut h = Sha256Stream::default();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finish_hex())
}

/// Merkle root: leaves are `H(0x00 ‖ path ‖ 0 ‖ kind ‖ 0 ‖ digest ‖ 0 ‖ mode)`
/// (the path's raw bytes, as the file system has them),
/// inner nodes `H(0x01 ‖ left ‖ right)`, an odd node is promoted. The empty
/// tree's root is `H("")`.
pub fn merkle_root(entries: &[Entry]) -> String {
    if entries.is_empty() {
        return loop_protocol::hash::sha256_hex(b"");
    }
    let mut level: Vec<[u8; 32]> = entries
        .iter()
        .map(|e| {
            let mut h = Sha256::new();
            h.update([0u8]);
            h.update(e.path_bytes());
            h.update([0u8]);
            h.update(match e.kind {
                EntryKind::File => b"f",
                EntryKind::Symlink => b"l",
            });
            h.update([0u8]);
            h.update(e.sha256.as_bytes());
            h.update([0u8]);
            h.update(if e.executable { b"x" } else { b"-" });
            h.finalize().into()
        })
        .collect();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|pair| match pair {
                [l, r] => {
                    let mut h = Sha256::new();
                    h.update([1u8]);
                    h.update(l);
                    h.update(r);
                    h.finalize().into()
                }
                [one] => *one,
                _ => [0u8; 32],
            })
            .collect();
    }
    hex(&level[0])
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {

    #[test]
    fn a_cached_manifest_is_the_same_manifest_and_sees_every_change() {
        let d = std::env::temp_dir().join(format!("loop-statcache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("sub")).unwrap();
        for i in 0..20 {
            std::fs::write(d.join(format!("sub/f{i}")), format!("content {i:03}")).unwrap();
        }
        // Old enough to be trusted.
        std::thread::sleep(std::time::Duration::from_millis(2_100));
        let mut cache = StatCache::default();
        let first = Manifest::of_cached(&d, &mut cache).unwrap();
        assert_eq!(first, Manifest::of(&d).unwrap());
        assert_eq!(cache.map.len(), 20, "every file remembered");
        // Unchanged: the same manifest, from the cache.
        assert_eq!(Manifest::of_cached(&d, &mut cache).unwrap(), first);
        // A same-size rewrite, a chmod, a new file and a deletion are all seen.
        std::fs::write(d.join("sub/f3"), "content 999").unwrap();
        std::fs::set_permissions(d.join("sub/f4"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(d.join("new"), "n").unwrap();
        std::fs::remove_file(d.join("sub/f5")).unwrap();
        let after = Manifest::of_cached(&d, &mut cache).unwrap();
        assert_eq!(after, Manifest::of(&d).unwrap());
        assert_ne!(after.root, first.root);
        assert_eq!(
            after.get("sub/f3").unwrap().sha256,
            loop_protocol::hash::sha256_hex(b"content 999")
        );
        assert!(after.get("sub/f4").unwrap().executable);
        std::fs::remove_dir_all(&d).unwrap();
    }
    use super::*;
    use crate::testdir::TestDir;

    #[test]
    fn root_changes_with_content_not_with_mtime() {
        let d = TestDir::new("manifest");
        std::fs::write(d.path().join("a.txt"), "one").unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/b.txt"), "two").unwrap();
        let m1 = Manifest::of(d.path()).unwrap();
        assert_eq!(m1.entries.len(), 2);
        assert_eq!(m1.get("sub/b.txt").unwrap().size, 3);
        // Same content rewritten: same root.
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(d.path().join("a.txt"), "one").unwrap();
        assert_eq!(Manifest::of(d.path()).unwrap().root, m1.root);
        std::fs::write(d.path().join("a.txt"), "One").unwrap();
        assert_ne!(Manifest::of(d.path()).unwrap().root, m1.root);
    }

    #[test]
    fn renames_and_modes_change_the_root() {
        let d = TestDir::new("manifest2");
        std::fs::write(d.path().join("a"), "x").unwrap();
        let r1 = Manifest::of(d.path()).unwrap().root;
        std::fs::rename(d.path().join("a"), d.path().join("b")).unwrap();
        let r2 = Manifest::of(d.path()).unwrap().root;
        assert_ne!(r1, r2);
        std::fs::set_permissions(d.path().join("b"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        assert_ne!(Manifest::of(d.path()).unwrap().root, r2);
    }
}
