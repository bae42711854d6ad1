//! Per-command cgroups for memory and process limits, where the machine
//! offers writable ones (cgroup v2, or v1 `memory` and `pids` hierarchies).
//! The command's process joins them before its program runs, so every
//! process of the command's own is counted (a command told ended early,
//! from a chain or alone in its PID namespace, joins them itself after its
//! init (and, forked, its relay) are made: those, our own code, are in
//! none and do not hold them once the end is told); the runtime kills what is left
//! and removes them afterwards.
//!
//! On cgroup v1 the child joins through `tasks`, moving its one thread
//! (itself, just forked): the kernel then skips the global lock a
//! `cgroup.procs` write takes, whose first taker waits for an RCU grace
//! period — 5 to 16 ms a command on this machine whenever commands come
//! apart, as a task's do. For a single-threaded process the two are the
//! same move.
//!
//! A command's cgroups, once it has ended and nothing is left in them, are
//! kept for the next command with the same limits (at most [`POOLED`]),
//! rather than removed and made again: removing a v1 memory cgroup moves
//! its pages to the parent and waits for an RCU grace period, and making
//! one costs a dozen writes. A cgroup is kept only when empty (every
//! process killed and gone: its process count is zero) and when at most
//! [`KEPT_CHARGE`] of memory is still charged to it (a command's disk,
//! still held by the runtime, is charged there: such a cgroup is removed,
//! as before, so the next command never starts with it); its limits are
//! written again when it is reused. Those kept are removed at the
//! process's exit (a killed process's are swept).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Cgroup sets kept for reuse at most.
const POOLED: usize = 4;

/// Memory still charged to a cgroup kept for reuse, at most.
const KEPT_CHARGE: u64 = 4 << 20;

/// Empty cgroup sets, with the limits they were made with.
static POOL: Mutex<Vec<((u64, u64), Cgroups)>> = Mutex::new(Vec::new());

/// The cgroup directories of one command.
#[derive(Debug, Default, Clone)]
pub struct Cgroups {
    /// Directories the child writes itself into (`cgroup.procs`, or v1's
    /// `tasks`).
    pub dirs: Vec<PathBuf>,
    /// Whether memory is limited.
    pub memory: bool,
    /// Whether swap counts against that limit too (cgroup v2's
    /// `memory.swap.max` of 0, v1's `memsw` limit), or there is no swap:
    /// only then is the memory limit a bound on everything a command can
    /// hold, and its address space left free.
    pub swap_bounded: bool,
    /// Whether processes are limited.
    pub pids: bool,
    /// Whether the directories are cgroup v1's (joined through `tasks`).
    pub v1: bool,
    /// Why a controller is missing.
    pub notes: Vec<String>,
    /// The limits they were made with (memory bytes, processes).
    limits: (u64, u64),
    /// The limit files written, with their values (written again when
    /// the cgroups are reused).
    written: Vec<(PathBuf, String)>,
    /// The file saying how much memory is charged (v2 `memory.current`,
    /// v1 `memory.usage_in_bytes`).
    usage: Option<PathBuf>,
}

/// This process's cgroup path in a v1 hierarchy (`controller`) or in v2 (`""`).
pub(crate) fn own_path(controller: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let _id = parts.next()?;
        let ctrls = parts.next()?;
        let path = parts.next()?;
        let hit = if controller.is_empty() {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == controller)
        };
        hit.then(|| path.to_string())
    })
}

fn make(base: &Path, name: &str) -> Option<PathBuf> {
    let dir = base.join(name);
    std::fs::create_dir(&dir).ok()?;
    Some(dir)
}

/// Whether this machine has no swap at all (`SwapTotal: 0 kB`).
fn no_swap() -> bool {
    std::fs::read_to_string("/proc/meminfo").is_ok_and(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("SwapTotal:"))
            .is_some_and(|v| v.split_whitespace().next() == Some("0"))
    })
}

fn v2_root() -> Option<PathBuf> {
    for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let controllers = std::fs::read_to_string(Path::new(root).join("cgroup.controllers"));
        if controllers.is_ok() {
            return Some(PathBuf::from(root));
        }
    }
    None
}

impl Cgroups {
    /// Cgroups limiting memory to `mem_bytes` and processes to `pids`:
    /// an empty set kept from an earlier command with the same limits, or
    /// new ones.
    pub fn create(mem_bytes: u64, pids: u64) -> Cgroups {
        let kept = {
            let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
            let at = pool.iter().position(|(l, _)| *l == (mem_bytes, pids));
            at.map(|i| pool.swap_remove(i).1)
        };
        if let Some(mut cg) = kept {
            if cg.written.iter().all(|(f, v)| std::fs::write(f, v).is_ok()) {
                return cg;
            }
            cg.remove();
        }
        let mut cg = Cgroups {
            limits: (mem_bytes, pids),
            ..Cgroups::default()
        };
        let name = match crate::unique_name("loop") {
            Ok(n) => n,
            Err(e) => {
                cg.notes.push(format!("no cgroups: cannot name one ({e})"));
                return cg;
            }
        };
        // cgroup v2 with both controllers delegated to our level.
        if let (Some(root), Some(own)) = (v2_root(), own_path("")) {
            let base = root.join(own.trim_start_matches('/'));
            let enabled =
                std::fs::read_to_string(base.join("cgroup.subtree_control")).unwrap_or_default();
            if enabled.contains("memory")
                && enabled.contains("pids")
                && let Some(dir) = make(&base, &name)
            {
                let files = [
                    (dir.join("memory.max"), mem_bytes.to_string()),
                    (dir.join("memory.swap.max"), "0".to_string()),
                    (dir.join("pids.max"), pids.to_string()),
                ];
                let ok = files
                    .iter()
                    .fold(true, |ok, (f, v)| std::fs::write(f, v).is_ok() & ok);
                if ok {
                    cg.memory = true;
                    cg.swap_bounded = true;
                    cg.pids = true;
                    cg.usage = Some(dir.join("memory.current"));
                    cg.written.extend(files);
                    cg.dirs.push(dir);
                    return cg;
                }
                let _ = std::fs::remove_dir(&dir);
            }
        }
        // cgroup v1 hierarchies.
        if let Some(own) = own_path("memory") {
            let base = Path::new("/sys/fs/cgroup/memory").join(own.trim_start_matches('/'));
            if let Some(dir) = make(&base, &name) {
                if std::fs::write(dir.join("memory.limit_in_bytes"), mem_bytes.to_string()).is_ok()
                {
                    // Swap counts too where the kernel accounts it.
                    let memsw = std::fs::write(
                        dir.join("memory.memsw.limit_in_bytes"),
                        mem_bytes.to_string(),
                    )
                    .is_ok();
                    cg.written
                        .push((dir.join("memory.limit_in_bytes"), mem_bytes.to_string()));
                    if memsw {
                        cg.written.push((
                            dir.join("memory.memsw.limit_in_bytes"),
                            mem_bytes.to_string(),
                        ));
                    }
                    cg.usage = Some(dir.join("memory.usage_in_bytes"));
                    cg.memory = true;
                    cg.swap_bounded = memsw || no_swap();
                    cg.v1 = true;
                    cg.dirs.push(dir);
                } else {
                    let _ = std::fs::remove_dir(&dir);
                }
            }
        }
        if let Some(own) = own_path("pids") {
            let base = Path::new("/sys/fs/cgroup/pids").join(own.trim_start_matches('/'));
            if let Some(dir) = make(&base, &name) {
                if std::fs::write(dir.join("pids.max"), pids.to_string()).is_ok() {
                    cg.written.push((dir.join("pids.max"), pids.to_string()));
                    cg.pids = true;
                    cg.v1 = true;
                    cg.dirs.push(dir);
                } else {
                    let _ = std::fs::remove_dir(&dir);
                }
            }
        }
        if !cg.memory {
            cg.notes.push(
                "no writable memory cgroup on this machine (memory is limited by RLIMIT_AS only: memory held outside the address space, such as memfd, tmpfs and pipe buffers, is not bounded by --mem)"
                    .into(),
            );
        }
        if !cg.pids {
            cg.notes.push("no writable pids cgroup on this machine (processes are limited by RLIMIT_NPROC only)".into());
        }
        cg
    }

    /// Kill whatever is left in the cgroups, then keep them for the next
    /// command if they are empty and there is room, else remove them.
    /// Done once: they are no longer this command's after (another may
    /// have them by the next call).
    pub fn destroy(&mut self) {
        let mut empty = true;
        for dir in &self.dirs {
            empty &= kill_all_in(dir);
        }
        let charged = self.usage.as_ref().map_or(0, |f| {
            std::fs::read_to_string(f)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(u64::MAX)
        });
        if empty && charged <= KEPT_CHARGE && !self.dirs.is_empty() {
            let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
            if pool.iter().any(|(_, c)| c.dirs == self.dirs) {
                return;
            }
            if pool.len() < POOLED {
                if pool.is_empty() {
                    static AT_EXIT: std::sync::Once = std::sync::Once::new();
                    // SAFETY: registering a plain function to run at exit.
                    AT_EXIT.call_once(|| unsafe {
                        libc::atexit(remove_pooled);
                    });
                }
                pool.push((self.limits, self.clone()));
                self.dirs.clear();
                return;
            }
        }
        self.remove();
    }

    /// Remove the (empty) cgroups.
    fn remove(&mut self) {
        for dir in self.dirs.drain(..) {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// At exit, the cgroups kept for reuse are removed.
extern "C" fn remove_pooled() {
    if let Ok(mut pool) = POOL.try_lock() {
        for (_, cg) in pool.drain(..) {
            for dir in &cg.dirs {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

/// Kill every process in the cgroup `dir` until none is left (at most
/// 100 ms): whether it is empty.
fn kill_all_in(dir: &Path) -> bool {
    for _ in 0..50 {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        let pids: Vec<i32> = procs
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            // SAFETY: kill with a pid read from our own cgroup; ESRCH is fine.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    std::fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_pids_file(dirs: &[PathBuf]) -> PathBuf {
        dirs.iter()
            .map(|d| d.join("pids.max"))
            .find(|f| f.is_file())
            .unwrap()
    }

    /// A command's cgroups are kept for the next command with the same
    /// limits only once everything in them is killed and gone: the next
    /// one starts in an empty set. Other limits get other cgroups.
    #[test]
    fn cgroups_are_reused_only_empty_and_only_with_the_same_limits() {
        let (mem, pids) = (123 << 20, 77);
        let mut first = Cgroups::create(mem, pids);
        if first.dirs.is_empty() {
            eprintln!("no writable cgroups here: nothing to test");
            return;
        }
        let dirs = first.dirs.clone();
        // A process left behind in them (as a command's daemon would be).
        let mut left = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .unwrap();
        for d in &dirs {
            std::fs::write(d.join("cgroup.procs"), left.id().to_string()).unwrap();
        }
        first.destroy();
        assert!(first.dirs.is_empty(), "no longer the first command's");
        let status = left.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        // A limit changed while it was kept is written again.
        let pids_file = first_pids_file(&dirs);
        std::fs::write(&pids_file, "999").unwrap();
        let mut next = Cgroups::create(mem, pids);
        assert_eq!(next.dirs, dirs, "the same cgroups, kept");
        assert_eq!(std::fs::read_to_string(&pids_file).unwrap().trim(), "77");
        for d in &next.dirs {
            assert_eq!(
                std::fs::read_to_string(d.join("cgroup.procs"))
                    .unwrap()
                    .trim(),
                ""
            );
        }
        let mut other = Cgroups::create(mem * 2, pids);
        assert!(
            other.dirs.iter().all(|d| !dirs.contains(d)),
            "other limits, other cgroups"
        );
        other.destroy();
        next.destroy();
        remove_pooled();
        for d in &dirs {
            assert!(!d.exists(), "removed at exit: {}", d.display());
        }
    }
}
