//! Path comparisons by bytes, for the paths the sandbox holds by the
//! hundred (the host view's entries, a root's mount points): the same
//! answers as `Path::starts_with` and `Path::cmp`, which parse both paths
//! into components at every call (most of a first command's Landlock
//! rules and host view, here, were those comparisons).
//!
//! A path is compared by its bytes only where its bytes are exactly its
//! components joined by single separators (absolute, no empty, `.` or
//! `..` component, no trailing `/`), as nearly every path the host view
//! builds is (canonical, or joined from directory entries). Any other path
//! (one kept as given where it could not be resolved) is compared by
//! components, as before.

use std::cmp::Ordering;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether `b` is an absolute path whose bytes are its components joined
/// by single `/`, none of them `.` or `..`.
fn plain(b: &[u8]) -> bool {
    if b.first() != Some(&b'/') {
        return false;
    }
    if b.len() == 1 {
        return true;
    }
    b[1..]
        .split(|&c| c == b'/')
        .all(|part| !part.is_empty() && part != b"." && part != b"..")
}

/// `p.starts_with(t)`: `t`'s components are the first of `p`'s.
pub(crate) fn under(p: &Path, t: &Path) -> bool {
    let (pb, tb) = (p.as_os_str().as_bytes(), t.as_os_str().as_bytes());
    if !(plain(pb) && plain(tb)) {
        return p.starts_with(t);
    }
    pb.starts_with(tb) && (pb.len() == tb.len() || tb.len() == 1 || pb[tb.len()] == b'/')
}

/// `p.cmp(t)`: component by component. For plain paths that is their
/// bytes' order with `/` below every other byte (a component that is a
/// prefix of another sorts first, as a shorter string does).
pub(crate) fn order(p: &Path, t: &Path) -> Ordering {
    let (pb, tb) = (p.as_os_str().as_bytes(), t.as_os_str().as_bytes());
    if !(plain(pb) && plain(tb)) {
        return p.cmp(t);
    }
    plain_order(pb, tb)
}

/// [`order`] of two plain paths' bytes.
fn plain_order(p: &[u8], t: &[u8]) -> Ordering {
    let same = p.iter().zip(t).take_while(|(a, b)| a == b).count();
    let key = |c: u8| if c == b'/' { 0 } else { u16::from(c) + 1 };
    match (p.get(same), t.get(same)) {
        (Some(&a), Some(&b)) => key(a).cmp(&key(b)),
        _ => p.len().cmp(&t.len()),
    }
}

/// `paths.sort(); paths.dedup()`: by bytes (each path's plainness looked
/// at once) where every path is plain, else by components.
pub(crate) fn sort_unique(paths: &mut Vec<std::path::PathBuf>) {
    if paths.iter().all(|p| plain(p.as_os_str().as_bytes())) {
        paths.sort_by(|a, b| plain_order(a.as_os_str().as_bytes(), b.as_os_str().as_bytes()));
        paths.dedup_by(|a, b| a.as_os_str() == b.as_os_str());
    } else {
        paths.sort();
        paths.dedup();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    /// Paths that sort differently by bytes and by components, or compare
    /// differently as prefixes, with the forms that are not plain.
    fn corpus() -> Vec<&'static Path> {
        let raw: &[&[u8]] = &[
            b"/",
            b"/usr",
            b"/usr/",
            b"/usr//bin",
            b"/usr/./bin",
            b"/usr/bin/.",
            b"/usr/../usr/bin",
            b"/usr/..",
            b"/usr-x",
            b"/usr-x/bin",
            b"/usr.d",
            b"/usrx",
            b"/usr/bin",
            b"/usr/bin/python3",
            b"/usr/bin-x",
            b"/usr/lib",
            b"/usr/lib/x",
            b"/usr /lib",
            b"/usr\x01",
            b"/usr\xff/lib",
            b"/.cargo",
            b"/.cargo/bin",
            b"/..a",
            b"/a/.b",
            b"usr/bin",
            b"",
            b"/etc",
            b"/etc/shadow",
            b"/etc/shadow-",
            b"/etc/ssl/private",
        ];
        raw.iter()
            .map(|b| Path::new(OsStr::from_bytes(b)))
            .collect()
    }

    #[test]
    fn the_answers_are_those_of_components() {
        let all = corpus();
        for p in &all {
            for t in &all {
                assert_eq!(under(p, t), p.starts_with(t), "{p:?} under {t:?}");
                assert_eq!(order(p, t), p.cmp(t), "{p:?} against {t:?}");
            }
        }
        let mut by_bytes = all.clone();
        by_bytes.sort_by(|a, b| order(a, b));
        let mut plain_ones: Vec<std::path::PathBuf> = all
            .iter()
            .filter(|p| plain(p.as_os_str().as_bytes()))
            .map(|p| p.to_path_buf())
            .collect();
        plain_ones.extend(plain_ones.clone());
        let mut expected = plain_ones.clone();
        expected.sort();
        expected.dedup();
        sort_unique(&mut plain_ones);
        assert_eq!(plain_ones, expected);
        let mut mixed: Vec<std::path::PathBuf> = all.iter().map(|p| p.to_path_buf()).collect();
        mixed.extend(mixed.clone());
        sort_unique(&mut mixed);
        assert!(mixed.windows(2).all(|w| w[0] < w[1]), "{mixed:?}");
        let mut by_parts = all.clone();
        by_parts.sort();
        let shown = |v: &[&Path]| {
            v.iter()
                .map(|p| p.as_os_str().to_owned())
                .collect::<Vec<_>>()
        };
        // Equal paths (`/usr` and `/usr/`) may swap: compare as components.
        assert!(
            by_bytes.iter().zip(&by_parts).all(|(a, b)| a == b),
            "{:?}\n{:?}",
            shown(&by_bytes),
            shown(&by_parts)
        );
    }

    #[test]
    fn only_joined_components_are_plain() {
        for ok in ["/", "/a", "/a/b", "/.a", "/a/..b", "/a b"] {
            assert!(plain(ok.as_bytes()), "{ok}");
        }
        for not in [
            "", "a", "a/b", "//a", "/a/", "/a//b", "/./a", "/a/.", "/a/..", "/../a",
        ] {
            assert!(!plain(not.as_bytes()), "{not}");
        }
    }
}
