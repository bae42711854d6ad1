//! Leftovers of runtimes that were killed: their private temporary
//! directories, default edit journals, `loop exec --overlay` scratch and
//! cgroups. Every such name carries the creating process's id
//! (`PREFIX-PID-SEQ-RANDOM`); a leftover whose process is gone is removed.
//! A pid that runs again (reused) keeps its leftovers: never removing what
//! might be in use matters more than tidiness.

use std::path::{Path, PathBuf};

/// What a sweep removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    /// Temporary directories.
    pub dirs: usize,
    /// Cgroups.
    pub cgroups: usize,
    /// Whose they were: the dead runtimes' process ids and the users that
    /// owned what they left, in order, each once.
    pub runs: Vec<(u32, u32)>,
}

impl Swept {
    /// Whose leftovers these were, for people: `process 123 of user
    /// alice, …`.
    pub fn whose(&self) -> String {
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let name = |uid: u32| {
            passwd
                .lines()
                .find_map(|l| {
                    let mut f = l.split(':');
                    let name = f.next()?;
                    (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
                })
                .unwrap_or_else(|| format!("uid {uid}"))
        };
        let mut out: Vec<String> = self
            .runs
            .iter()
            .take(5)
            .map(|(pid, uid)| format!("process {pid} of user {}", name(*uid)))
            .collect();
        if self.runs.len() > 5 {
            out.push(format!("{} more", self.runs.len() - 5));
        }
        out.join(", ")
    }

    fn owned(&mut self, pid: u32, path: &Path) {
        use std::os::unix::fs::MetadataExt;
        let uid = std::fs::symlink_metadata(path).map_or(u32::MAX, |m| m.uid());
        if !self.runs.contains(&(pid, uid)) {
            self.runs.push((pid, uid));
        }
    }
}

/// The pid in `PREFIX-PID-…`, for the prefixes this crate and its users make.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = ["loop-sbx-", "loop-journal-", "loop-exec-overlay-", "loop-"]
        .iter()
        .find_map(|p| name.strip_prefix(p))?;
    let mut parts = rest.split('-');
    let pid = parts.next()?.parse().ok()?;
    // SEQ and RANDOM follow: a name of another shape is not ours.
    let seq_ok = parts
        .next()
        .is_some_and(|s| s.chars().all(|c| c.is_ascii_digit()));
    // Older builds wrote no random part.
    let rnd_ok = parts
        .next()
        .is_none_or(|r| r.len() == 16 && r.chars().all(|c| c.is_ascii_hexdigit()));
    (seq_ok && rnd_ok && parts.next().is_none()).then_some(pid)
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The entries of `dir` left by dead runtimes, with their pids.
fn stale_entries(dir: &Path) -> Vec<(u32, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let pid = owner_pid(&e.file_name().to_string_lossy())?;
            (!alive(pid)).then(|| (pid, e.path()))
        })
        .collect()
}

/// Remove the leftovers of dead runtimes under `tmp` and in this
/// process's cgroups.
pub fn sweep(tmp: &Path) -> Swept {
    sweep_in(tmp, crate::scratch_tmpfs())
}

/// [`sweep`], with the tmpfs private directories may also be on (see
/// `scratch_tmpfs`); there only private directories are looked at.
fn sweep_in(tmp: &Path, tmpfs: Option<&Path>) -> Swept {
    let mut swept = Swept::default();
    let on_tmpfs = tmpfs
        .filter(|t| *t != tmp)
        .map(stale_entries)
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, p)| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("loop-sbx-"))
        });
    for (pid, dir) in stale_entries(tmp).into_iter().chain(on_tmpfs) {
        if !dir.is_dir() {
            continue;
        }
        swept.owned(pid, &dir);
        if std::fs::remove_dir_all(&dir).is_ok() {
            swept.dirs += 1;
        } else {
            swept.runs.retain(|(p, _)| *p != pid);
        }
    }
    let mut bases = Vec::new();
    for (root, controller) in [
        ("/sys/fs/cgroup", ""),
        ("/sys/fs/cgroup/unified", ""),
        ("/sys/fs/cgroup/memory", "memory"),
        ("/sys/fs/cgroup/pids", "pids"),
    ] {
        if let Some(own) = crate::cgroup::own_path(controller) {
            bases.push(Path::new(root).join(own.trim_start_matches('/')));
        }
    }
    bases.sort();
    bases.dedup();
    for base in bases {
        for (pid, cg) in stale_entries(&base) {
            // Only an empty cgroup can go; a dead runtime's processes died with it.
            let mut whose = Swept::default();
            whose.owned(pid, &cg);
            if std::fs::remove_dir(&cg).is_ok() {
                swept.cgroups += 1;
                for run in whose.runs {
                    if !swept.runs.contains(&run) {
                        swept.runs.push(run);
                    }
                }
            }
        }
    }
    swept
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn only_our_names_of_dead_processes_are_swept() {
        assert_eq!(owner_pid("loop-sbx-123-7-0123456789abcdef"), Some(123));
        assert_eq!(owner_pid("loop-123-0-0123456789abcdef"), Some(123));
        assert_eq!(owner_pid("loop-sbx-123-7"), Some(123), "the older form");
        assert_eq!(owner_pid("loop-sbx-123-7-xyz"), None);
        assert_eq!(owner_pid("loop-demo-t-20261129-125055-f2b376"), None);
        assert_eq!(owner_pid("loop-e2e-keys-123"), None);
        let tmp = std::env::temp_dir().join(format!("loop-sweep-test-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        // A dead pid (beyond pid_max) and a live one (ours).
        let dead = tmp.join("loop-sbx-4194399-0-0123456789abcdef");
        let live = tmp.join(format!(
            "loop-sbx-{}-0-0123456789abcdef",
            std::process::id()
        ));
        let other = tmp.join("loop-keep-me");
        for d in [&dead, &live, &other] {
            std::fs::create_dir_all(d.join("home")).unwrap();
        }
        let s = sweep_in(&tmp, None);
        assert_eq!(s.dirs, 1);
        // Whose they were: the dead process, and the user that owned them.
        let me = std::fs::metadata(&tmp).map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid()
        });
        assert_eq!(s.runs, vec![(4194399, me.unwrap())]);
        assert!(
            s.whose().starts_with("process 4194399 of user "),
            "{}",
            s.whose()
        );
        assert!(!dead.exists());
        assert!(live.exists() && other.exists());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn on_the_tmpfs_only_private_directories_of_dead_processes_are_swept() {
        let base = std::env::temp_dir().join(format!("loop-sweep-shm-{}", std::process::id()));
        let (tmp, shm) = (base.join("tmp"), base.join("shm"));
        let dead_private = shm.join("loop-sbx-4194399-0-0123456789abcdef");
        let dead_other = shm.join("loop-4194399-0-0123456789abcdef");
        let live = shm.join(format!(
            "loop-sbx-{}-0-0123456789abcdef",
            std::process::id()
        ));
        for d in [&tmp, &dead_private, &dead_other, &live] {
            std::fs::create_dir_all(d).unwrap();
        }
        let s = sweep_in(&tmp, Some(&shm));
        assert_eq!(s.dirs, 1);
        assert!(!dead_private.exists());
        assert!(dead_other.exists() && live.exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
