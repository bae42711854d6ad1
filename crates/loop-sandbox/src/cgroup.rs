//! Per-command cgroups for memory and process limits, where the machine
//! offers writable ones (cgroup v2, or v1 `memory` and `pids` hierarchies).
//! The child joins them before it forks anything, so every descendant is
//! counted; the runtime kills what is left and removes them afterwards.
//!
//! On cgroup v1 the child joins through `tasks`, moving its one thread
//! (itself, just forked): the kernel then skips the global lock a
//! `cgroup.procs` write takes, whose first taker waits for an RCU grace
//! period — 5 to 16 ms a command on this machine whenever commands come
//! apart, as a task's do. For a single-threaded process the two are the
//! same move.

use std::path::{Path, PathBuf};

/// The cgroup directories of one command.
#[derive(Debug, Default)]
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
    /// Create cgroups limiting memory to `mem_bytes` and processes to `pids`.
    pub fn create(mem_bytes: u64, pids: u64) -> Cgroups {
        let mut cg = Cgroups::default();
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
                let ok = std::fs::write(dir.join("memory.max"), mem_bytes.to_string()).is_ok()
                    & std::fs::write(dir.join("memory.swap.max"), "0").is_ok()
                    & std::fs::write(dir.join("pids.max"), pids.to_string()).is_ok();
                if ok {
                    cg.memory = true;
                    cg.swap_bounded = true;
                    cg.pids = true;
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

    /// Kill whatever is left in the cgroups and remove them.
    pub fn destroy(&self) {
        for dir in &self.dirs {
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
            let _ = std::fs::remove_dir(dir);
        }
    }
}
