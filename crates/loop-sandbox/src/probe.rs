//! What this machine supports, found by trying (once per process).

use std::sync::OnceLock;

/// Kernel features available to this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// Running as root.
    pub root: bool,
    /// Unprivileged-style user namespaces can be created.
    pub userns: bool,
    /// PID, mount and network namespaces can be created (with a user
    /// namespace when not root).
    pub namespaces: bool,
    /// A fresh procfs can be mounted in the new PID namespace.
    pub proc_mount: bool,
    /// Landlock ABI (0 when unavailable).
    pub landlock_abi: u32,
    /// seccomp filters can be installed.
    pub seccomp: bool,
    /// Host trees can be shown through read-only overlays in a command's
    /// root (which keeps socket files in them unreachable).
    pub tree_overlay: bool,
    /// An overlay's upper layer can live on a tmpfs (the command's disk):
    /// the tmpfs keeps the xattrs overlayfs marks whiteouts and opaque
    /// directories with (`user.*` in a user namespace: Linux 6.6+).
    pub disk_layers: bool,
}

static SUPPORT: OnceLock<Support> = OnceLock::new();

/// Probe once and remember (forks a few short-lived children, ~2 ms).
pub fn support() -> &'static Support {
    SUPPORT.get_or_init(probe)
}

/// What a modern kernel offers, assumed without probing so the common case
/// pays nothing; a sandbox step that fails sends the caller to [`support`].
pub fn optimistic() -> Support {
    Support {
        // SAFETY: geteuid has no preconditions.
        root: unsafe { libc::geteuid() } == 0,
        userns: true,
        namespaces: true,
        proc_mount: true,
        landlock_abi: crate::landlock::kernel_abi(),
        seccomp: true,
        tree_overlay: true,
        disk_layers: true,
    }
}

/// Run `f` in a forked child and report whether it returned true.
fn in_child(f: fn() -> bool) -> bool {
    in_child_with(&f)
}

/// [`in_child`] for a closure (which must only make system calls).
fn in_child_with(f: &dyn Fn() -> bool) -> bool {
    // SAFETY: the child only makes system calls, then _exits.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return false;
        }
        if pid == 0 {
            let ok = f();
            libc::_exit(if ok { 0 } else { 1 });
        }
        let mut st = 0;
        while libc::waitpid(pid, &mut st, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                return false;
            }
        }
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0
    }
}

fn try_userns() -> bool {
    // SAFETY: unshare in a throwaway child.
    unsafe { libc::unshare(libc::CLONE_NEWUSER) == 0 }
}

fn ns_flags(userns: bool) -> libc::c_int {
    let base = libc::CLONE_NEWPID
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWCGROUP;
    if userns {
        base | libc::CLONE_NEWUSER
    } else {
        base
    }
}

fn try_ns_with_user() -> bool {
    // SAFETY: unshare in a throwaway child.
    unsafe { libc::unshare(ns_flags(true)) == 0 }
}

fn try_ns_root() -> bool {
    // SAFETY: unshare in a throwaway child.
    unsafe { libc::unshare(ns_flags(false)) == 0 }
}

fn try_proc(userns: bool) -> bool {
    // SAFETY: a throwaway child unshares, forks into the new PID namespace
    // and mounts procfs there; nothing touches the parent's namespaces.
    unsafe {
        if libc::unshare(ns_flags(userns)) != 0 {
            return false;
        }
        let pid = libc::fork();
        if pid == 0 {
            let null = std::ptr::null::<libc::c_char>();
            let ok = libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) == 0
                && libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ) == 0;
            libc::_exit(if ok { 0 } else { 1 });
        }
        let mut st = 0;
        pid > 0
            && libc::waitpid(pid, &mut st, 0) == pid
            && libc::WIFEXITED(st)
            && libc::WEXITSTATUS(st) == 0
    }
}

fn try_proc_user() -> bool {
    try_proc(true)
}

fn try_proc_root() -> bool {
    try_proc(false)
}

fn try_seccomp() -> bool {
    // SAFETY: installs an allow-all filter in a throwaway child.
    unsafe {
        let mut filter = [libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        }];
        let prog = libc::sock_fprog {
            len: 1,
            filter: filter.as_mut_ptr(),
        };
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const _,
                0,
                0,
            ) == 0
    }
}

/// A new empty directory of this process's, for a probe to mount on
/// (removed by the probe).
fn probe_dir(mode: libc::mode_t) -> Option<std::ffi::CString> {
    let name = crate::unique_name("loop-probe").ok()?;
    let dir = std::ffi::CString::new(
        std::env::temp_dir()
            .join(name)
            .into_os_string()
            .into_encoded_bytes(),
    )
    .ok()?;
    // SAFETY: mkdir on a NUL-terminated path we own.
    (unsafe { libc::mkdir(dir.as_ptr(), mode) } == 0).then_some(dir)
}

/// Whether a read-only overlay of `/usr` can be mounted in a new mount
/// namespace (with a user namespace when `userns`).
fn tree_overlay(userns: bool) -> bool {
    let Some(empty) = probe_dir(0o755) else {
        return false;
    };
    let mut opts = format!("lowerdir=/usr:{}", empty.to_string_lossy());
    if userns {
        opts.push_str(",userxattr");
    }
    let ok = std::ffi::CString::new(opts).is_ok_and(|opts| {
        let flags = if userns {
            libc::CLONE_NEWNS | libc::CLONE_NEWUSER
        } else {
            libc::CLONE_NEWNS
        };
        in_child_with(&|| {
            // SAFETY: a throwaway child unshares and mounts in its own namespace.
            unsafe {
                let null = std::ptr::null::<libc::c_char>();
                libc::unshare(flags) == 0
                    && libc::mount(
                        null,
                        c"/".as_ptr(),
                        null,
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) == 0
                    && libc::mount(
                        c"overlay".as_ptr(),
                        empty.as_ptr(),
                        c"overlay".as_ptr(),
                        libc::MS_RDONLY,
                        opts.as_ptr().cast(),
                    ) == 0
            }
        })
    });
    // SAFETY: rmdir on the NUL-terminated path probe_dir made.
    unsafe { libc::rmdir(empty.as_ptr()) };
    ok
}

fn probe() -> Support {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let userns = in_child(try_userns);
    let (namespaces, proc_mount) = if userns && in_child(try_ns_with_user) {
        (true, in_child(try_proc_user))
    } else if root && in_child(try_ns_root) {
        (true, in_child(try_proc_root))
    } else {
        (false, false)
    };
    Support {
        root,
        userns,
        namespaces,
        proc_mount,
        landlock_abi: crate::landlock::kernel_abi(),
        seccomp: in_child(try_seccomp),
        tree_overlay: namespaces && tree_overlay(userns),
        disk_layers: namespaces && (!userns || tmpfs_user_xattr()),
    }
}

/// Whether a tmpfs mounted in a new user namespace takes `user.*` xattrs.
fn tmpfs_user_xattr() -> bool {
    let Some(dir) = probe_dir(0o700) else {
        return false;
    };
    let ok = in_child_with(&|| {
        // SAFETY: a throwaway child unshares, mounts and sets an xattr in
        // its own namespaces.
        unsafe {
            let null = std::ptr::null::<libc::c_char>();
            libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) == 0
                && libc::mount(
                    null,
                    c"/".as_ptr(),
                    null,
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0
                && libc::mount(
                    c"tmpfs".as_ptr(),
                    dir.as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    c"size=1m".as_ptr().cast(),
                ) == 0
                && libc::setxattr(
                    dir.as_ptr(),
                    c"user.overlay.opaque".as_ptr(),
                    c"y".as_ptr().cast(),
                    1,
                    0,
                ) == 0
        }
    });
    // SAFETY: rmdir on the NUL-terminated path probe_dir made.
    unsafe { libc::rmdir(dir.as_ptr()) };
    ok
}
