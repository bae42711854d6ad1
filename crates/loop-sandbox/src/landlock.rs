//! Landlock: the filesystem allow-list, built in the runtime (where
//! allocation and path lookups are safe) and enforced in the child with one
//! `landlock_restrict_self` call just before exec.

use crate::confinement::HostView;
use landlock::{ABI, Access, AccessFs, BitFlags, PathFd, Ruleset, RulesetAttr, Scope};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::OnceLock;

/// A ruleset ready to be enforced in the child.
pub struct Prepared {
    /// The ruleset file descriptor.
    pub fd: OwnedFd,
    /// The kernel's Landlock ABI version.
    pub abi: u32,
    /// The read+execute access mask, for rules added in the child.
    pub read_mask: u64,
    /// Every handled access right, for read-write rules added in the child.
    pub all_mask: u64,
    /// Read and execute for a file (directory rights removed).
    pub read_file_mask: u64,
}

const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

/// `struct landlock_path_beneath_attr` (packed in the kernel ABI).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `landlock_add_rule` of one path-beneath rule, as the kernel takes it
/// (no `stat` of the parent first: callers know whether it is a file);
/// the system call's return. Async-signal-safe: the child calls it too.
///
/// # Safety
/// `ruleset` and `parent` are open descriptors (a ruleset, and a path).
pub(crate) unsafe fn add_path_rule(ruleset: RawFd, parent: RawFd, access: u64) -> libc::c_long {
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: parent,
    };
    // SAFETY: the attribute is a local of the kernel's layout; the
    // descriptors are the caller's.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    }
}

/// The Landlock ABI the kernel offers (0 when Landlock is unavailable);
/// asked once per process (a running kernel's answer does not change).
pub fn kernel_abi() -> u32 {
    static ABI_VERSION: OnceLock<u32> = OnceLock::new();
    *ABI_VERSION.get_or_init(|| {
        const LANDLOCK_CREATE_RULESET_VERSION: libc::c_ulong = 1;
        // SAFETY: querying the ABI version takes no pointers (NULL, 0).
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        if v < 0 { 0 } else { v as u32 }
    })
}

/// Devices a command may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// Descriptors of the host view's trees, opened once per process: a new
/// ruleset per command then costs one `landlock_add_rule` per tree and no
/// path lookups.
struct StaticRules {
    abi: ABI,
    rules: Vec<(PathBuf, PathFd, BitFlags<AccessFs>)>,
    /// Per rule: its path lies in a host tree a command's own root shows
    /// through an overlay (where the rule must be on the overlay's inodes:
    /// the child adds it). Worked out once: it is the same for every
    /// command, and comparing each path with each tree was a tenth of a
    /// millisecond of every command's start.
    overlaid: Vec<bool>,
}

fn static_rules(view: &'static HostView, abi: ABI) -> &'static StaticRules {
    static RULES: OnceLock<StaticRules> = OnceLock::new();
    RULES.get_or_init(|| {
        let read_exec = AccessFs::from_read(abi);
        let file = AccessFs::from_file(abi);
        let mut rules = Vec::with_capacity(view.read_exec.len() + DEVICES.len());
        for p in &view.read_exec {
            if let Ok(fd) = PathFd::new(p) {
                let access = if view.files.contains(p) {
                    read_exec & file
                } else {
                    read_exec
                };
                rules.push((p.clone(), fd, access));
            }
        }
        for d in DEVICES {
            if let Ok(fd) = PathFd::new(d) {
                rules.push((
                    PathBuf::from(d),
                    fd,
                    (read_exec | AccessFs::WriteFile | ioctl_dev(abi)) & file,
                ));
            }
        }
        let shown_through_overlays: Vec<&PathBuf> = view
            .trees
            .iter()
            .filter(|t| crate::root::overlaid(t, true) && !crate::root::special(t))
            .collect();
        let overlaid = rules
            .iter()
            .map(|(p, _, _)| {
                shown_through_overlays
                    .iter()
                    .any(|t| crate::pathcmp::under(p, t))
            })
            .collect();
        StaticRules {
            abi,
            rules,
            overlaid,
        }
    })
}

/// Build a ruleset: `read_write` trees get every right; the host view's
/// trees get read and execute (except, with `overlays`, those the child
/// shows through an overlay, whose rules it adds itself); a few devices
/// are writable.
/// Returns `None` when the kernel has no Landlock.
pub fn prepare(
    view: &'static HostView,
    read_write: &[PathBuf],
    read_only: &[PathBuf],
    overlays: bool,
) -> Result<Option<Prepared>, crate::SandboxError> {
    let abi_n = kernel_abi();
    if abi_n == 0 {
        return Ok(None);
    }
    let abi = ABI::from(abi_n as i32);
    let all = AccessFs::from_all(abi);
    let err = |e: &dyn std::fmt::Display| crate::SandboxError::Prepare(format!("landlock: {e}"));
    let spare = SPARE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take_if(|(o, _)| *o == overlays)
        .map(|(_, fd)| fd);
    let fd = match spare {
        Some(fd) => {
            tracing::debug!(
                target: "loop_sandbox::phases",
                "sandbox: the Landlock ruleset's common part was made ahead"
            );
            fd
        }
        None => match base(view, abi_n, overlays)? {
            Some(fd) => fd,
            None => return Ok(None),
        },
    };
    let fixed = static_rules(view, abi);
    let read = AccessFs::from_read(fixed.abi);
    let file = AccessFs::from_file(fixed.abi);
    for p in read_write {
        let Ok(parent) = PathFd::new(p) else { continue };
        add(&fd, &parent, all, file).map_err(|e| err(&format!("{}: {e}", p.display())))?;
    }
    for p in read_only {
        let Ok(parent) = PathFd::new(p) else { continue };
        let access = if p.is_dir() { read } else { read & file };
        add(&fd, &parent, access, file).map_err(|e| err(&format!("{}: {e}", p.display())))?;
    }
    Ok(Some(Prepared {
        fd,
        abi: abi_n,
        read_mask: read.bits(),
        all_mask: all.bits(),
        read_file_mask: (read & file).bits(),
    }))
}

/// A ruleset with the host view's rules and nothing of any command's,
/// made for the next command while one runs ([`make_spare`]), with the
/// `overlays` it was made for.
static SPARE: std::sync::Mutex<Option<(bool, OwnedFd)>> = std::sync::Mutex::new(None);

/// Make the next command's ruleset's common part now (its creation and
/// the host view's rules, a rule a system call), while a command runs,
/// unless one is kept already: [`prepare`] then adds only the command's
/// own rules. One is kept per process: a ruleset is changed by the
/// command it is given to, never given twice.
pub(crate) fn make_spare(view: &'static HostView, overlays: bool) {
    let abi_n = kernel_abi();
    if abi_n == 0 || SPARE.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
        return;
    }
    if let Ok(Some(fd)) = base(view, abi_n, overlays) {
        let mut kept = SPARE.lock().unwrap_or_else(|e| e.into_inner());
        if kept.is_none() {
            *kept = Some((overlays, fd));
        }
    }
}

/// A new ruleset handling every right of ABI `abi_n` (and its scopes)
/// with the host view's rules (but those the child adds on its overlays,
/// with `overlays`); `None` where the kernel makes none.
fn base(
    view: &'static HostView,
    abi_n: u32,
    overlays: bool,
) -> Result<Option<OwnedFd>, crate::SandboxError> {
    let abi = ABI::from(abi_n as i32);
    let err = |e: &dyn std::fmt::Display| crate::SandboxError::Prepare(format!("landlock: {e}"));
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| err(&e))?;
    if abi_n >= 6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(|e| err(&e))?;
    }
    let created = ruleset.create().map_err(|e| err(&e))?;
    let Some(fd) = Option::<OwnedFd>::from(created) else {
        return Ok(None);
    };
    let fixed = static_rules(view, abi);
    let file = AccessFs::from_file(fixed.abi);
    // The host view's rules come with their file-ness known from its walk:
    // each is one system call, no `stat`.
    for ((path, parent, access), overlaid) in fixed.rules.iter().zip(&fixed.overlaid) {
        if overlays && *overlaid {
            continue;
        }
        add(&fd, parent, *access, file).map_err(|e| err(&format!("{}: {e}", path.display())))?;
    }
    Ok(Some(fd))
}

/// Allow `access` beneath `parent` in `ruleset`. A parent that is a file
/// (a path of the host view made a file since the view was read) takes a
/// file's rights only, as the kernel requires; any other refusal is an
/// error.
fn add(
    ruleset: &OwnedFd,
    parent: &PathFd,
    access: BitFlags<AccessFs>,
    file: BitFlags<AccessFs>,
) -> std::io::Result<()> {
    let try_with = |access: BitFlags<AccessFs>| {
        // SAFETY: both descriptors are open for the call.
        let r = unsafe {
            add_path_rule(
                ruleset.as_raw_fd(),
                parent.as_fd().as_raw_fd(),
                access.bits(),
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    match try_with(access) {
        Err(e)
            if e.raw_os_error() == Some(libc::EINVAL)
                && access & file != access
                && !is_dir(parent) =>
        {
            try_with(access & file)
        }
        r => r,
    }
}

/// Whether `fd` is a directory (what the kernel refuses a directory's
/// rights for, it is not: only then are they narrowed).
fn is_dir(fd: &PathFd) -> bool {
    // SAFETY: fstat of an open descriptor into a zeroed struct.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd.as_fd().as_raw_fd(), &mut st) == 0
            && st.st_mode & libc::S_IFMT == libc::S_IFDIR
    }
}

fn ioctl_dev(abi: ABI) -> BitFlags<AccessFs> {
    AccessFs::from_all(abi) & AccessFs::IoctlDev
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ruleset handling every right of this kernel's ABI (`None` where
    /// the kernel has no Landlock: nothing to add rules to).
    fn ruleset() -> Option<(OwnedFd, BitFlags<AccessFs>, BitFlags<AccessFs>)> {
        let abi_n = kernel_abi();
        if abi_n == 0 {
            eprintln!("this kernel has no Landlock: no ruleset to add rules to");
            return None;
        }
        let abi = ABI::from(abi_n as i32);
        let all = AccessFs::from_all(abi);
        let created = Ruleset::default()
            .handle_access(all)
            .unwrap()
            .create()
            .unwrap();
        Some((Option::from(created)?, all, AccessFs::from_file(abi)))
    }

    /// A fresh directory under the system's temporary directory.
    struct Dir(PathBuf);
    impl Dir {
        fn new() -> Dir {
            let p = std::env::temp_dir().join(crate::unique_name("landlock-test").unwrap());
            std::fs::create_dir(&p).unwrap();
            Dir(p)
        }
        fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Held by the tests that call [`prepare`], which may take the one
    /// spare ruleset another test is looking at.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// What a process restricted by `ruleset` may create: (in `allowed`,
    /// in `other`), from a forked child that only makes system calls.
    fn creates(ruleset: &OwnedFd, allowed: &Dir, other: &Dir) -> (bool, bool) {
        use std::os::unix::ffi::OsStringExt;
        let a =
            std::ffi::CString::new(allowed.path().join("f").into_os_string().into_vec()).unwrap();
        let o = std::ffi::CString::new(other.path().join("f").into_os_string().into_vec()).unwrap();
        let fd = ruleset.as_raw_fd();
        // SAFETY: the child makes system calls on data made before the
        // fork, then `_exit`s; the parent reaps it.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                    libc::_exit(9);
                }
                let mut code = 0;
                for (bit, path) in [(1, &a), (2, &o)] {
                    if libc::open(path.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o600) >= 0 {
                        code |= bit;
                    }
                }
                libc::_exit(code);
            }
            let mut st = 0;
            assert_eq!(libc::waitpid(pid, &mut st, 0), pid);
            let code = libc::WEXITSTATUS(st);
            assert_ne!(code, 9, "the child could not restrict itself");
            (code & 1 != 0, code & 2 != 0)
        }
    }

    /// The next command's ruleset, made while one runs, is given once, and
    /// only to a command with the `overlays` it was made for; with the
    /// command's own rules added it confines as a ruleset made at once:
    /// the workspace writable, a directory no rule names not.
    #[test]
    fn a_spare_ruleset_is_given_once_for_its_overlays_and_confines_as_a_fresh_one() {
        let _spare = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        if kernel_abi() == 0 {
            eprintln!("this kernel has no Landlock");
            return;
        }
        let view = crate::confinement::host_view();
        let (ws, other) = (Dir::new(), Dir::new());
        let spare = || SPARE.lock().unwrap().as_ref().map(|(o, _)| *o);
        *SPARE.lock().unwrap() = None;
        make_spare(view, false);
        assert_eq!(spare(), Some(false));
        // Kept while one is: not made twice.
        make_spare(view, true);
        assert_eq!(spare(), Some(false));
        let for_overlays = prepare(view, &[ws.path().to_path_buf()], &[], true).unwrap();
        assert_eq!(spare(), Some(false), "taken by a command with overlays");
        let taken = prepare(view, &[ws.path().to_path_buf()], &[], false)
            .unwrap()
            .unwrap();
        assert_eq!(spare(), None, "not taken");
        let fresh = prepare(view, &[ws.path().to_path_buf()], &[], false)
            .unwrap()
            .unwrap();
        assert_eq!(creates(&taken.fd, &ws, &other), (true, false));
        assert_eq!(creates(&fresh.fd, &ws, &other), (true, false));
        assert_eq!(
            creates(&for_overlays.unwrap().fd, &ws, &other),
            (true, false)
        );
    }

    #[test]
    fn a_rule_is_one_call_and_a_file_takes_only_a_files_rights() {
        let Some((fd, all, file)) = ruleset() else {
            return;
        };
        let dir = Dir::new();
        let f = dir.path().join("f");
        std::fs::write(&f, "x").unwrap();
        // A directory takes every right.
        add(&fd, &PathFd::new(dir.path()).unwrap(), all, file).unwrap();
        // The kernel refuses a directory's rights on a file...
        let parent = PathFd::new(&f).unwrap();
        // SAFETY: both descriptors are open.
        let raw = unsafe { add_path_rule(fd.as_raw_fd(), parent.as_fd().as_raw_fd(), all.bits()) };
        assert_eq!(raw, -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINVAL)
        );
        // ...which `add` gives it as a file's (a view's directory that
        // became a file since the view was read still gets its rule).
        add(&fd, &parent, all, file).unwrap();
        // A right the ruleset does not handle is an error for a
        // directory, never narrowed away.
        let abi = ABI::from(kernel_abi() as i32);
        let narrow: OwnedFd = Option::from(
            Ruleset::default()
                .handle_access(AccessFs::from_read(abi))
                .unwrap()
                .create()
                .unwrap(),
        )
        .unwrap();
        let e = add(&narrow, &PathFd::new(dir.path()).unwrap(), all, file);
        assert_eq!(e.unwrap_err().raw_os_error(), Some(libc::EINVAL));
        // SAFETY: both descriptors are open; bit 63 names no right of any ABI.
        let raw = unsafe { add_path_rule(fd.as_raw_fd(), parent.as_fd().as_raw_fd(), 1 << 63) };
        assert_eq!(raw, -1, "the kernel refuses a right it does not know");
    }

    #[test]
    fn the_host_views_files_get_only_a_files_rights_in_a_ruleset_built_from_it() {
        let _spare = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let Some((_, _, _)) = ruleset() else {
            return;
        };
        let view = crate::confinement::host_view();
        let dir = Dir::new();
        let ws = dir.path().to_path_buf();
        let prepared = prepare(view, std::slice::from_ref(&ws), &[], false)
            .unwrap()
            .expect("a ruleset where the kernel has Landlock");
        assert_eq!(prepared.abi, kernel_abi());
        let fixed = static_rules(view, ABI::from(prepared.abi as i32));
        // Every file of the view is given only a file's rights.
        let file = AccessFs::from_file(fixed.abi);
        for (path, _, access) in &fixed.rules {
            if view.files.contains(path) {
                assert_eq!(*access & file, *access, "{}", path.display());
            }
        }
    }
}
