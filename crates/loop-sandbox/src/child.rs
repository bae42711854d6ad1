//! What happens in the child between fork and exec. Everything here was
//! prepared by the runtime (strings, rulesets, filters), so the child only
//! makes system calls: no allocation, no locks — safe after fork in a
//! multi-threaded process.
//!
//! With namespaces the child becomes three processes:
//!
//! ```text
//! runtime ─ relay (outside the new PID namespace; what the runtime waits for)
//!             └─ init (PID 1 inside: reaps orphans, reports the command's status)
//!                  └─ command (mounts, limits, Landlock, seccomp, then exec)
//! ```
//!
//! When `init` exits the kernel kills everything left in the namespace, so
//! no daemon, `setsid`'d or double-forked, outlives the command.

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

/// Everything the child needs, prepared before fork.
pub struct ChildPlan {
    /// Namespaces to create (`CLONE_NEW*`), 0 for none.
    pub unshare_flags: libc::c_int,
    /// Whether a user namespace is among them (then the id maps are written).
    pub userns: bool,
    /// `/proc/self/uid_map` content.
    pub uid_map: Vec<u8>,
    /// `/proc/self/gid_map` content.
    pub gid_map: Vec<u8>,
    /// The cgroup files (v2 `cgroup.procs`, v1 `tasks`) the child writes
    /// itself into before anything forks.
    pub cgroup_procs: Vec<CString>,
    /// Mount a fresh procfs for the new PID namespace.
    pub mount_proc: bool,
    /// An overlay to mount on the workspace (target, options), then the
    /// directory to re-enter so the command works inside it.
    pub overlay: Option<(CString, CString, CString)>,
    /// Paths to bind read-only onto themselves, with the flags their mount must keep.
    pub ro_binds: Vec<(CString, libc::c_ulong)>,
    /// The Landlock ruleset to extend with mounts made in the child (the
    /// fresh `/proc`, an overlay), with the read and the full access masks.
    pub late_rules: Option<(RawFd, u64, u64)>,
    /// Bring up `lo` in the new network namespace.
    pub loopback_up: bool,
    /// Listen on the egress proxy's address in the new network namespace
    /// and send the socket over this descriptor (see `egress.rs`).
    pub proxy_sock: Option<RawFd>,
    /// Build a root from the allowed trees and enter it (see `root.rs`).
    pub root: Option<crate::root::RootPlan>,
    /// The command's disk: a size-capped tmpfs mounted before anything
    /// else that holds its `/tmp` and its layer over the workspace.
    pub disk: Option<DiskPlan>,
    /// Resource limits to set.
    pub rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    /// A Landlock ruleset to enforce.
    pub landlock_fd: Option<RawFd>,
    /// seccomp BPF programs to install, in order.
    pub seccomp: Option<Vec<Vec<libc::sock_filter>>>,
    /// Per-user kernel objects bounded inside the new user namespace
    /// (`/proc/sys/user/…` file, value): what the command may take of the
    /// caller's per-user allowances (inotify instances and watches).
    pub user_sysctls: Vec<(CString, Vec<u8>)>,
    /// Where to write the name of a failing step.
    pub diag_fd: RawFd,
    /// Standard input is a pseudo-terminal the runtime owns: make it the
    /// new session's controlling terminal.
    pub ctty: bool,
    /// Namespaces made for this command ahead of time (see `spawner.rs`):
    /// a user namespace with its id maps and limits written (-1 for none)
    /// and a network namespace owned by it with `lo` up, both new and
    /// entered by this command only. They take the place of the user and
    /// network namespaces `unshare_flags` asks for. Never sent: only the
    /// spawner sets it, in its own copy of the plan. In a session (see
    /// `warm.rs`) the user namespace is the session's and the network
    /// namespace (-1) is made by the command itself, in it.
    pub made: Option<(RawFd, RawFd)>,
    /// Which session the command may share its user namespace and its
    /// root's shared tree with (see `warm.rs`): 0 none, else a kind that
    /// never shares with another (a task's commands, its checks).
    pub session: u8,
    /// The session's mount namespace, its root's shared tree built
    /// (`RootPlan::shared`): the command's own mount namespace is a copy
    /// of it, and only the command's own steps are made. Never sent.
    pub made_mnt: Option<RawFd>,
}

/// The command's disk, as the child makes it.
pub struct DiskPlan {
    /// Where the tmpfs is mounted.
    pub at: CString,
    /// Its mount options (`size=`).
    pub options: CString,
    /// Directories to make on it, parents first, with their modes.
    pub dirs: Vec<(CString, libc::mode_t)>,
    /// The child's end of the socket pair the disk's descriptor is sent
    /// over, so the runtime can read it after the command has ended.
    pub send: RawFd,
}

fn fail(diag: RawFd, step: &'static [u8]) -> io::Error {
    let e = io::Error::last_os_error();
    // SAFETY: writing a static buffer to a pipe we own.
    unsafe {
        libc::write(diag, step.as_ptr().cast(), step.len());
    }
    e
}

fn check(ret: libc::c_long, diag: RawFd, step: &'static [u8]) -> io::Result<()> {
    if ret < 0 {
        Err(fail(diag, step))
    } else {
        Ok(())
    }
}

/// Map the user namespace this process just made to our own ids only
/// (`setgroups` denied, then the gid and uid maps) and bound its per-user
/// kernel objects (a limit this kernel lacks is skipped); the step that
/// failed, in the words a command's error names it. Async-signal-safe:
/// the command's child and the spawner's makers all call it after a fork.
pub(crate) fn map_user(
    uid_map: &[u8],
    gid_map: &[u8],
    sysctls: &[(CString, Vec<u8>)],
) -> Result<(), &'static [u8]> {
    if !write_file(b"/proc/self/setgroups\0", b"deny")
        || !write_file(b"/proc/self/gid_map\0", gid_map)
        || !write_file(b"/proc/self/uid_map\0", uid_map)
    {
        return Err(b"write user namespace id maps");
    }
    for (path, value) in sysctls {
        // SAFETY: reads this thread's errno.
        if !write_file(path.as_bytes_with_nul(), value)
            && unsafe { *libc::__errno_location() } != libc::ENOENT
        {
            return Err(b"bound per-user kernel objects");
        }
    }
    Ok(())
}

pub(crate) fn write_file(path: &[u8], data: &[u8]) -> bool {
    // SAFETY: `path` is NUL-terminated (static or prepared); plain syscalls.
    unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        n == data.len() as isize
    }
}

/// Close every descriptor except the two of `keep` (-1: none;
/// `close_range`, before Linux 5.9 one by one up to the open-files limit
/// in force).
pub(crate) fn close_all_except(keep: [RawFd; 2]) {
    let (a, b) = (keep[0].min(keep[1]), keep[0].max(keep[1]));
    // SAFETY: close_range/close on descriptor numbers; errors are harmless.
    unsafe {
        let range = |from: RawFd, to: RawFd| {
            from > to || libc::syscall(libc::SYS_close_range, from as u32, to as u32, 0u32) == 0
        };
        // With `a` at -1 the first range is empty and the second starts at 0.
        if range(0, a - 1) && range(a + 1, b - 1) && range(b + 1, i32::MAX) {
            return;
        }
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_max.min(1 << 20) as RawFd
        } else {
            1 << 20
        };
        for fd in 0..top {
            if !keep.contains(&fd) {
                libc::close(fd);
            }
        }
    }
}

/// Run in the forked child (via `pre_exec`). Returns only in the process
/// that goes on to exec the command.
///
/// # Safety
/// Must be called between fork and exec; only async-signal-safe calls follow.
pub unsafe fn enter(plan: &ChildPlan) -> io::Result<()> {
    // SAFETY: this function's conditions.
    unsafe { enter_reporting(plan, -1) }
}

/// [`enter`], with the command's end told on `report` (a socket, -1 for
/// none) as soon as everything in its PID namespace has ended, before the
/// namespaces are torn down (see [`split_pid_namespace`]). The command
/// then joins its cgroups itself, once the relay and init are made (as a
/// chain's command does, see [`enter_rest`]): the relay, still ending
/// when its report is read, is in none of them, and they can be removed
/// at once.
///
/// # Safety
/// As [`enter`].
pub unsafe fn enter_reporting(plan: &ChildPlan, report: RawFd) -> io::Result<()> {
    let d = plan.diag_fd;
    let report = if plan.unshare_flags & libc::CLONE_NEWPID != 0 {
        report
    } else {
        -1
    };
    // SAFETY (whole body): raw system calls on prepared, NUL-terminated data.
    unsafe {
        // A new session: no controlling terminal, so `/dev/tty` names
        // nothing and the caller's terminal cannot be typed into; the
        // session's id is also its process group's, which the runtime kills.
        check(libc::setsid() as libc::c_long, d, b"setsid")?;
        if plan.ctty {
            // The runtime's own terminal (see `pty.rs`), never the caller's.
            check(
                libc::ioctl(0, libc::TIOCSCTTY, 0) as libc::c_long,
                d,
                b"take the runtime's terminal",
            )?;
        }
        close_inherited(d)?;
        check(
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) as libc::c_long,
            d,
            b"pdeathsig",
        )?;
        if report < 0 {
            join_cgroups(plan)?;
        }
        if plan.unshare_flags != 0 {
            let mut flags = plan.unshare_flags;
            if report >= 0 {
                flags &= !libc::CLONE_NEWCGROUP;
            }
            flags = enter_made(plan, flags)?;
            check(
                libc::unshare(flags) as libc::c_long,
                d,
                b"unshare namespaces",
            )?;
            if plan.userns && plan.made.is_none() {
                // Only our own ids are mapped: inside, we are who we were.
                map_user(&plan.uid_map, &plan.gid_map, &plan.user_sysctls)
                    .map_err(|step| fail(d, step))?;
            }
            split_pid_namespace(d, report)?;
            if report >= 0 {
                join_cgroups_then_their_namespace(plan)?;
            }
            setup_namespaces(plan, false)?;
        }
    }
    // SAFETY: between fork and exec, as this function.
    unsafe { restrict(plan) }
}

/// A chain's command, once its order has come (see `warm.rs`): what
/// [`enter`] does after the namespaces are entered and the PID
/// namespace's processes made, which the chain did ahead: the mounts and
/// the network inside the namespaces, then [`restrict`].
///
/// # Safety
/// In a chain's command process, between its order and exec.
pub(crate) unsafe fn enter_rest(plan: &ChildPlan) -> io::Result<()> {
    let d = plan.diag_fd;
    // SAFETY: the helpers' conditions are this function's.
    unsafe {
        close_inherited(d)?;
        // The chain made every other namespace.
        join_cgroups_then_their_namespace(plan)?;
        // Its `lo` was brought up by the chain.
        setup_namespaces(plan, true)?;
        restrict(plan)
    }
}

/// The cgroups first, then the cgroup namespace (when the plan makes
/// one), whose root is the cgroup it is made in: the command sees its own
/// cgroups as `/`, as a command whose first process joined them does.
///
/// # Safety
/// Between fork and exec (async-signal-safe system calls only).
unsafe fn join_cgroups_then_their_namespace(plan: &ChildPlan) -> io::Result<()> {
    join_cgroups(plan)?;
    if plan.unshare_flags & libc::CLONE_NEWCGROUP != 0 {
        // SAFETY: unshare of a flag; the caller's conditions.
        check(
            unsafe { libc::unshare(libc::CLONE_NEWCGROUP) } as libc::c_long,
            plan.diag_fd,
            b"unshare namespaces",
        )?;
    }
    Ok(())
}

/// Join the command's cgroups (writing `0`, this process, into each
/// `cgroup.procs` or v1 `tasks`), before it forks anything of its own.
fn join_cgroups(plan: &ChildPlan) -> io::Result<()> {
    for procs in &plan.cgroup_procs {
        if !write_file(procs.as_bytes_with_nul(), b"0") {
            return Err(fail(plan.diag_fd, b"join cgroup"));
        }
    }
    Ok(())
}

/// The namespaces a chain makes ahead of its order for a command whose
/// plan makes `flags`: all but the user namespace (the session's is
/// entered) and the cgroup namespace (made by the command once it has
/// joined its cgroups, see [`enter_rest`]).
pub(crate) fn chain_unshares(flags: libc::c_int) -> libc::c_int {
    flags & !(libc::CLONE_NEWUSER | libc::CLONE_NEWCGROUP)
}

/// A chain's init, made before its command is known (see `warm.rs`): a
/// process the session's zygote cloned with `flags`' namespaces (the
/// zygote is in the session's user and mount namespaces, and in a task's
/// session in its `park`ed network namespace, where init waits while the
/// command enters its own at its order, [`enter_chain_net`]; in a
/// check's session `flags` make the check's network namespace, whose
/// `lo` is brought up here) and `CLONE_PARENT`, so its parent is the
/// spawner, which reaps it as it reaps a command's first process. It
/// makes a new session (process group), closes every descriptor but
/// `keep` (the spawner's socket, and the session's network namespace if
/// any, which only the command-to-be keeps), and forks the command-to-be
/// (see [`init_then_command`]: with no relay outside the PID namespace,
/// init itself ends whatever the command left there before it tells the
/// command's end). Init keeps the spawner's priority and cgroups (the
/// command sets its own after the order, as a command forked with a
/// report does, see [`enter_reporting`]). Returns in the command-to-be;
/// `Err` where the caller should `_exit`.
///
/// # Safety
/// Only in a process just cloned by a session's single-threaded zygote.
pub(crate) unsafe fn chain_init(flags: libc::c_int, keep: [RawFd; 2]) -> io::Result<()> {
    // SAFETY (whole body): system calls on descriptors this process holds.
    unsafe {
        // Its parent is the spawner (`CLONE_PARENT`). Should the spawner
        // have died before this, the chain's socket is closed: the
        // command-to-be ends at its first read, and init with it.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        check(libc::setsid() as libc::c_long, -1, b"")?;
        if flags & libc::CLONE_NEWNET != 0 {
            bring_up_loopback(-1)?;
        }
        close_all_except(keep);
        init_then_command(-1, keep[0], -1)
    }
}

/// A chain's command enters its network namespace, at its order (so
/// once the session's last command and everything it started have
/// ended): the session's `net`, `lo` up, if it is untouched
/// ([`net_untouched`]); else a new one, its `lo` brought up, as a
/// command without a session makes. So a task's command
/// never finds anything of an earlier one there: not a socket of any
/// family (a connection in `TIME_WAIT` among them, which would keep its
/// port, or one kept alive only by a descriptor in flight), not a packet
/// counted, not an IPv6 flow label left to linger. A check never shares
/// one: each check's network namespace is new. Closes `net`; a failure
/// is written to `d`.
///
/// # Safety
/// In a chain's command-to-be, between its order and exec.
pub(crate) unsafe fn enter_chain_net(net: RawFd, d: RawFd) -> io::Result<()> {
    // SAFETY (whole body): system calls on a descriptor this process holds
    // and on buffers on this stack.
    unsafe {
        if net >= 0 {
            let entered = libc::setns(net, libc::CLONE_NEWNET) == 0;
            libc::close(net);
            if entered && net_untouched() {
                return Ok(());
            }
        }
        check(
            libc::unshare(libc::CLONE_NEWNET) as libc::c_long,
            d,
            b"unshare network namespace",
        )?;
        bring_up_loopback(d)
    }
}

/// Whether this process's network namespace is as made (false where
/// `/proc/self/net` cannot be read):
/// - every interface's counters zero (`lo`, and any the kernel puts in
///   every new namespace, which a command cannot bring up): no packet
///   ever sent or received;
/// - no socket of any family in it (`sockstat`: none in use, none
///   orphaned or in `TIME_WAIT`);
/// - no IPv6 flow label (which lingers after its socket, for anyone to
///   read or to keep from taking), where the kernel has IPv6.
fn net_untouched() -> bool {
    let mut buf = [0u8; 4096];
    let Some(dev) = read_proc(c"/proc/self/net/dev", &mut buf) else {
        return false;
    };
    // Two heading lines, then one line per interface.
    let mut lo = false;
    for line in dev.split(|&b| b == b'\n').filter(|l| !l.is_empty()).skip(2) {
        let mut parts = line.splitn(2, |&b| b == b':');
        let name = parts.next().unwrap_or_default().trim_ascii();
        let mut counters = parts
            .next()
            .unwrap_or_default()
            .split(|b| b.is_ascii_whitespace())
            .filter(|c| !c.is_empty())
            .peekable();
        if counters.peek().is_none() || !counters.all(|c| c == b"0") {
            return false;
        }
        lo |= name == b"lo";
    }
    if !lo {
        return false;
    }
    let mut buf = [0u8; 1024];
    let Some(stat) = read_proc(c"/proc/self/net/sockstat", &mut buf) else {
        return false;
    };
    /// The word after `name` in `line`.
    fn field<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
        let mut words = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|w| !w.is_empty());
        words.by_ref().find(|w| *w == name)?;
        words.next()
    }
    let mut seen = 0;
    for line in stat.split(|&b| b == b'\n') {
        let wanted: &[&[u8]] = if line.starts_with(b"sockets:") {
            &[b"used"]
        } else if line.starts_with(b"TCP:") {
            &[b"inuse", b"orphan", b"tw"]
        } else {
            continue;
        };
        for name in wanted {
            if field(line, name) != Some(b"0") {
                return false;
            }
        }
        seen += 1;
    }
    if seen != 2 {
        return false;
    }
    let mut buf = [0u8; 1024];
    match read_proc(c"/proc/self/net/ip6_flowlabel", &mut buf) {
        // Its heading line alone.
        Some(labels) => {
            labels
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .count()
                == 1
        }
        // No IPv6 in this kernel (no such file): no flow label.
        None => {
            // SAFETY: access on a NUL-terminated path.
            let gone =
                unsafe { libc::access(c"/proc/self/net/ip6_flowlabel".as_ptr(), libc::F_OK) } != 0;
            gone && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT)
        }
    }
}

/// The whole of a small `/proc` file read into `buf` (`None`: it could
/// not be read, or is larger than `buf`).
fn read_proc<'a>(path: &std::ffi::CStr, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    // SAFETY: open/read/close on a NUL-terminated path and a buffer we own.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let mut got = 0usize;
        let ok = loop {
            if got == buf.len() {
                break false;
            }
            let n = libc::read(fd, buf.as_mut_ptr().add(got).cast(), buf.len() - got);
            if n > 0 {
                got += n as usize;
            } else if n == 0 {
                break true;
            } else if *libc::__errno_location() != libc::EINTR {
                break false;
            }
        };
        libc::close(fd);
        ok.then(|| &buf[..got])
    }
}

/// The last steps before exec: limits, privileges dropped,
/// `no_new_privs`, the Landlock ruleset and the seccomp filters.
///
/// # Safety
/// Between fork and exec (async-signal-safe system calls only).
unsafe fn restrict(plan: &ChildPlan) -> io::Result<()> {
    let d = plan.diag_fd;
    // SAFETY (whole body): raw system calls on prepared data.
    unsafe {
        for (resource, value) in &plan.rlimits {
            let lim = libc::rlimit {
                rlim_cur: *value,
                rlim_max: *value,
            };
            check(
                libc::setrlimit(*resource, &lim) as libc::c_long,
                d,
                b"setrlimit",
            )?;
        }
        drop_privileges(d)?;
        check(
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long,
            d,
            b"no_new_privs",
        )?;
        if let Some(fd) = plan.landlock_fd {
            check(
                libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32),
                d,
                b"landlock_restrict_self",
            )?;
        }
        for filter in plan.seccomp.iter().flatten() {
            let prog = libc::sock_fprog {
                len: filter.len() as libc::c_ushort,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            check(
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                    0,
                    0,
                ) as libc::c_long,
                d,
                b"seccomp",
            )?;
        }
    }
    Ok(())
}

/// Enter the namespaces made before the command (`plan.made`, and a
/// session's mount namespace): the flags left for `unshare` to make.
///
/// # Safety
/// Between fork and exec (async-signal-safe system calls only).
unsafe fn enter_made(plan: &ChildPlan, mut flags: libc::c_int) -> io::Result<libc::c_int> {
    let d = plan.diag_fd;
    let Some((user, net)) = plan.made else {
        return Ok(flags);
    };
    // SAFETY: setns on descriptors the spawner holds open.
    unsafe {
        if user >= 0 {
            check(
                libc::setns(user, libc::CLONE_NEWUSER) as libc::c_long,
                d,
                b"enter the command's user namespace",
            )?;
        }
        // The session's tree: `unshare` below makes the command's own
        // mount namespace a copy of it.
        if let Some(mnt) = plan.made_mnt {
            check(
                libc::setns(mnt, libc::CLONE_NEWNS) as libc::c_long,
                d,
                b"enter the session's mount namespace",
            )?;
        }
        if net >= 0 {
            check(
                libc::setns(net, libc::CLONE_NEWNET) as libc::c_long,
                d,
                b"enter the command's network namespace",
            )?;
            flags &= !libc::CLONE_NEWNET;
        }
        flags &= !libc::CLONE_NEWUSER;
    }
    Ok(flags)
}

/// Mount the command's disk, make its directories, and send the runtime a
/// descriptor of it.
///
/// # Safety
/// Between fork and exec, in the command's own mount namespace.
unsafe fn mount_disk(disk: &DiskPlan, d: RawFd) -> io::Result<()> {
    // SAFETY: mount/mkdir/chmod/open/close on prepared NUL-terminated strings.
    unsafe {
        check(
            libc::mount(
                c"tmpfs".as_ptr(),
                disk.at.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                disk.options.as_ptr().cast(),
            ) as libc::c_long,
            d,
            b"mount the command's disk",
        )?;
        for (dir, mode) in &disk.dirs {
            if libc::mkdir(dir.as_ptr(), 0o700) != 0 || libc::chmod(dir.as_ptr(), *mode) != 0 {
                return Err(fail(d, b"directory on the command's disk"));
            }
        }
        let fd = libc::open(
            disk.at.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if fd < 0 || !crate::fdpass::send(disk.send, fd) {
            return Err(fail(d, b"hand the command's disk to the runtime"));
        }
        libc::close(fd);
        libc::close(disk.send);
    }
    Ok(())
}

/// A fresh read-only sysfs at `at` (the command's own network namespace's
/// view), or, where the kernel refuses one, the host's bound read-only.
///
/// # Safety
/// Between fork and exec; `at` is NUL-terminated.
unsafe fn sysfs(at: &std::ffi::CStr, keep: libc::c_ulong, d: RawFd) -> io::Result<()> {
    let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: mount on NUL-terminated strings.
    unsafe {
        if libc::mount(
            c"sysfs".as_ptr(),
            at.as_ptr(),
            c"sysfs".as_ptr(),
            flags,
            std::ptr::null(),
        ) == 0
        {
            return Ok(());
        }
        check(
            libc::mount(
                c"/sys".as_ptr(),
                at.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ) as libc::c_long,
            d,
            b"bind /sys",
        )?;
        check(
            libc::mount(
                std::ptr::null(),
                at.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | keep,
                std::ptr::null(),
            ) as libc::c_long,
            d,
            b"read-only /sys",
        )
    }
}

/// Make the mount at `at` and every mount beneath it `nosuid` and `nodev`
/// (`mount_setattr`, Linux 5.12+; before, the top mount alone, by a
/// remount that keeps the flags a user namespace may not drop).
///
/// # Safety
/// Between fork and exec; `at` is NUL-terminated.
unsafe fn harden(at: &std::ffi::CStr, keep: libc::c_ulong, d: RawFd) -> io::Result<()> {
    const MOUNT_ATTR_NOSUID: u64 = 0x2;
    const MOUNT_ATTR_NODEV: u64 = 0x4;
    let attr: [u64; 4] = [MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, 0];
    // SAFETY: mount_setattr/mount on a NUL-terminated path.
    unsafe {
        if libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            at.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            attr.as_ptr(),
            std::mem::size_of_val(&attr),
        ) == 0
        {
            return Ok(());
        }
        check(
            libc::mount(
                std::ptr::null(),
                at.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV | keep,
                std::ptr::null(),
            ) as libc::c_long,
            d,
            b"make the workspace nosuid",
        )
    }
}

const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Give up every capability for good: the bounding and ambient sets
/// emptied, the effective, permitted and inheritable sets cleared, and
/// uid 0 no longer special (`SECBIT_NOROOT`, locked), so that root inside
/// the sandbox (the runtime run as root maps uid 0 to itself) is an
/// ordinary user: it cannot set file capabilities, and regains nothing
/// at exec. A process that holds no capability has nothing to drop.
///
/// # Safety
/// Between fork and exec (async-signal-safe system calls only).
unsafe fn drop_privileges(d: RawFd) -> io::Result<()> {
    // SAFETY: capget/capset/prctl on local structures.
    unsafe {
        let mut hdr = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let mut data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        check(
            libc::syscall(
                libc::SYS_capget,
                &mut hdr as *mut CapHeader,
                data.as_mut_ptr(),
            ),
            d,
            b"capget",
        )?;
        let held = data
            .iter()
            .any(|c| c.effective | c.permitted | c.inheritable != 0);
        if held {
            check(
                libc::prctl(
                    libc::PR_SET_SECUREBITS,
                    SECBIT_NOROOT
                        | SECBIT_NOROOT_LOCKED
                        | SECBIT_NO_SETUID_FIXUP
                        | SECBIT_NO_SETUID_FIXUP_LOCKED
                        | SECBIT_KEEP_CAPS_LOCKED
                        | SECBIT_NO_CAP_AMBIENT_RAISE
                        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
                    0,
                    0,
                    0,
                ) as libc::c_long,
                d,
                b"securebits",
            )?;
            // Every capability the kernel knows (it answers EINVAL past the last).
            for cap in 0..64 {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                    if *libc::__errno_location() == libc::EINVAL {
                        break;
                    }
                    return Err(fail(d, b"empty the capability bounding set"));
                }
            }
        }
        // The ambient set may be non-empty without any other capability.
        check(
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            ) as libc::c_long,
            d,
            b"clear ambient capabilities",
        )?;
        if held {
            let zero = [CapData {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            }; 2];
            check(
                libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, zero.as_ptr()),
                d,
                b"drop capabilities",
            )?;
        }
    }
    Ok(())
}

const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Whatever descriptors the caller left open (above stderr) do not reach
/// the command: each is marked close-on-exec, so the sandbox's own
/// descriptors still work until the exec and none survives it.
///
/// # Safety
/// Between fork and exec (async-signal-safe system calls only).
unsafe fn close_inherited(d: RawFd) -> io::Result<()> {
    // SAFETY: close_range/fcntl on descriptor numbers.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) == 0 {
            return Ok(());
        }
        // Before Linux 5.11: one by one, up to the open-files limit in force.
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(fail(d, b"close inherited descriptors"));
        }
        let top = lim.rlim_max.min(1 << 20) as libc::c_int;
        for fd in 3..top {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}

/// Fork twice: the relay stays outside the PID namespace and mirrors the
/// command's end; init is PID 1 inside and reaps. Returns in the command;
/// its errors' names are written to `d`. With a `report` socket (the
/// runtime's own, see [`enter_reporting`]; a chain's init has none, see
/// [`chain_init`]),
/// `E` and the wait status the relay ends with are sent there as soon as
/// everything in the PID namespace has ended, before the namespaces are
/// torn down: by init, once it has reaped the command and has no child
/// left; else by the relay, once init has been reaped (its exit ends
/// whatever was left).
///
/// # Safety
/// Called between fork and exec: it forks again and makes only
/// async-signal-safe calls on data prepared before the first fork.
unsafe fn split_pid_namespace(d: RawFd, report: RawFd) -> io::Result<()> {
    // SAFETY: fork/wait/pipe/_exit only.
    unsafe {
        let mut status_pipe = [0 as RawFd; 2];
        check(
            libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) as libc::c_long,
            d,
            b"pipe",
        )?;
        let init = libc::fork();
        if init < 0 {
            return Err(fail(d, b"fork init"));
        }
        if init > 0 {
            // The relay. Neither it nor init may be looked into by what
            // the command starts (`/proc/PID/fd`, `pidfd_getfd`: a status
            // written or an end told for it), even where Landlock, which
            // keeps a command from other processes, is off: not dumpable,
            // they take a capability in the runtime's user namespace.
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            close_all_except([status_pipe[0], report]);
            // Init's word: the command's wait status, and whether nothing
            // else was left in the namespace (1) once it was reaped.
            let mut word = [0u8; 5];
            let mut got = 0usize;
            while got < word.len() {
                let n = libc::read(
                    status_pipe[0],
                    word.as_mut_ptr().add(got).cast(),
                    word.len() - got,
                );
                if n > 0 {
                    got += n as usize;
                } else if n == 0 || *libc::__errno_location() != libc::EINTR {
                    break;
                }
            }
            let mut st = i32::from_ne_bytes([word[0], word[1], word[2], word[3]]);
            let mut init_st: libc::c_int = 0;
            while libc::waitpid(init, &mut init_st, 0) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
            if got < word.len() {
                st = init_st;
            }
            // Where init was left alone, it told the command's end itself.
            if got < word.len() || word[4] != 1 {
                tell_end(report, st);
            }
            mirror(st);
        }
        init_then_command(d, report, status_pipe[1])
    }
}

/// Init, PID 1 of the command's PID namespace: fork the command (returns
/// in it), then reap until the command has ended. With everything else in
/// the namespace ended too, the command's end is told on `report` (if
/// any) at once. Then, beneath a relay (`relay` the pipe it reads), the
/// command's wait status and whether init was alone are written to it and
/// init exits, ending whatever was left (the kernel kills it with init),
/// the relay telling the end where init did not. Without one (a chain's
/// init, whose parent is the spawner), init ends what was left itself
/// (`kill(-1)` reaches every process in its namespace but init), reaps
/// until it has no child at all, so nothing else is left, and tells the
/// end then.
///
/// # Safety
/// In a new PID namespace's first process, between fork and exec: it
/// forks and makes only async-signal-safe calls.
unsafe fn init_then_command(d: RawFd, report: RawFd, relay: RawFd) -> io::Result<()> {
    // SAFETY: fork/wait/kill/write/_exit only.
    unsafe {
        // Init: PID 1 of the new namespace; not dumpable (see above)
        // before the command is forked from it (its exec makes the
        // command dumpable again).
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        let cmd = libc::fork();
        if cmd < 0 {
            return Err(fail(d, b"fork command"));
        }
        if cmd > 0 {
            close_all_except([relay, report]);
            loop {
                let mut st: libc::c_int = 0;
                let pid = libc::waitpid(-1, &mut st, 0);
                if pid == cmd {
                    // Every process in the namespace is init's descendant,
                    // and the command's orphans are init's children by
                    // the time its end can be waited for: with no child
                    // left (`__WALL`: whatever signal a child would end
                    // with), nothing but init is left in the namespace.
                    let alone = loop {
                        let mut other: libc::c_int = 0;
                        let r = libc::waitpid(-1, &mut other, libc::WNOHANG | libc::__WALL);
                        if r > 0 {
                            continue;
                        }
                        break r < 0 && *libc::__errno_location() == libc::ECHILD;
                    };
                    // Then the command and everything it started have
                    // ended: told now, while init ends and the namespace
                    // is torn down (the relay tells otherwise, once the
                    // kernel has ended what was left, with init).
                    if alone {
                        tell_end(report, st);
                    }
                    if relay < 0 {
                        // No relay: what was left is ended here, each
                        // process reaped (the orphans of those ended
                        // are init's children too) until none is left.
                        if !alone {
                            libc::kill(-1, libc::SIGKILL);
                            loop {
                                let mut other: libc::c_int = 0;
                                if libc::waitpid(-1, &mut other, libc::__WALL) < 0
                                    && *libc::__errno_location() == libc::ECHILD
                                {
                                    break;
                                }
                            }
                            tell_end(report, st);
                        }
                        // Told or not, init ends with the command's code,
                        // or 128 and its signal (init cannot end by a
                        // signal of its own), never 0 for a command that
                        // did not end with 0: an end that could not be
                        // told is read from init's (the spawner reaps
                        // it), and so is one whose report the spawner
                        // had not read when it saw init's end.
                        libc::_exit(exit_code_of(st));
                    }
                    let mut word = [0u8; 5];
                    word[..4].copy_from_slice(&st.to_ne_bytes());
                    word[4] = u8::from(alone);
                    libc::write(relay, word.as_ptr().cast(), word.len());
                    // The relay reads the word; its own end is the
                    // command's code anyway, as without a relay.
                    libc::_exit(exit_code_of(st));
                }
                // The command is init's child until reaped: this is not
                // reached; were it, its end is unknown, and never read
                // as success.
                if pid < 0 && *libc::__errno_location() == libc::ECHILD {
                    libc::_exit(1);
                }
            }
        }
        // The command.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
    }
    Ok(())
}

/// Send `E` and the wait status the relay ends with for the command's
/// `st` on `report` (-1: none), and close it. One that could not be sent
/// is read from the sender's own end, which says the command's too (the
/// relay ends as the command did; init with its code, or 128 and its
/// signal).
///
/// # Safety
/// In the relay or init, between fork and exit (send/close only).
unsafe fn tell_end(report: RawFd, st: libc::c_int) {
    if report < 0 {
        return;
    }
    let mut end = [b'E', 0, 0, 0, 0];
    end[1..].copy_from_slice(&mirrored(st).to_le_bytes());
    // SAFETY: send from a buffer we own; close of our descriptor.
    unsafe {
        libc::send(report, end.as_ptr().cast(), end.len(), libc::MSG_NOSIGNAL);
        libc::close(report);
    }
}

/// The exit code a process that cannot end by the command's signal ends
/// with for the command's `st`: its code, or 128 and its signal (as a
/// shell says it).
fn exit_code_of(st: libc::c_int) -> libc::c_int {
    let end = mirrored(st);
    if libc::WIFSIGNALED(end) {
        128 + libc::WTERMSIG(end)
    } else {
        libc::WEXITSTATUS(end)
    }
}

/// The wait status [`mirror`] ends a process with, for the command's `st`
/// (a core dump's flag aside).
pub(crate) fn mirrored(st: libc::c_int) -> libc::c_int {
    if libc::WIFSIGNALED(st) {
        libc::WTERMSIG(st)
    } else if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st) << 8
    } else {
        1 << 8
    }
}

/// End this process the way the command ended: same exit code, or the same signal.
///
/// # Safety
/// Only in the relay or init process (never in the runtime): it resets a
/// signal's disposition, raises it and `_exit`s, all async-signal-safe.
unsafe fn mirror(st: libc::c_int) -> ! {
    // One decision, the one the relay reports early (`mirrored`).
    let end = mirrored(st);
    // SAFETY: signal/kill/_exit only.
    unsafe {
        if libc::WIFSIGNALED(end) {
            let sig = libc::WTERMSIG(end);
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(libc::WEXITSTATUS(end))
    }
}

/// Add a Landlock rule for `path` (opened now, inside the namespaces).
///
/// # Safety
/// `path` is a NUL-terminated string that outlives the call, `ruleset` a
/// Landlock ruleset descriptor; between fork and exec (async-signal-safe
/// calls only).
unsafe fn allow_beneath(
    ruleset: RawFd,
    path: *const libc::c_char,
    access: u64,
    d: RawFd,
    step: &'static [u8],
) -> io::Result<()> {
    // SAFETY: open/landlock_add_rule/close on a NUL-terminated path.
    unsafe {
        let fd = libc::open(path, libc::O_PATH | libc::O_CLOEXEC);
        if fd < 0 {
            // A path that is gone grants nothing, and is no reason not to
            // run: the host's view is resolved once per process, and a file
            // in it (a tool's lock file under a toolchain tree) may have been
            // removed since.
            if *libc::__errno_location() == libc::ENOENT {
                return Ok(());
            }
            return Err(fail(d, step));
        }
        let r = crate::landlock::add_path_rule(ruleset, fd, access);
        libc::close(fd);
        check(r, d, step)
    }
}

/// Mounts and network inside the new namespaces.
///
/// # Safety
/// Between fork and exec, in the namespaces `plan` asked for; every string
/// it passes is NUL-terminated and prepared before the fork.
unsafe fn setup_namespaces(plan: &ChildPlan, lo_up: bool) -> io::Result<()> {
    let d = plan.diag_fd;
    // SAFETY: mount/socket/ioctl on prepared NUL-terminated strings.
    unsafe {
        if plan.unshare_flags & libc::CLONE_NEWNS != 0 {
            setup_mounts(plan, d)?;
        }
        if plan.loopback_up {
            if !lo_up && plan.made.is_none_or(|(_, net)| net < 0) {
                bring_up_loopback(d)?;
            }
            if let Some(pair) = plan.proxy_sock
                && !crate::egress::send_listener(pair)
            {
                return Err(fail(d, b"egress proxy socket"));
            }
        }
    }
    Ok(())
}

/// The new mount namespace, in order: every mount made private, the
/// command's disk, a fresh `/proc` (when no root of its own mounts one),
/// the overlay on the workspace, the protected paths bound read-only, and
/// the command's own root entered.
///
/// # Safety
/// Between fork and exec, in the command's own mount namespace; every
/// string it passes is NUL-terminated and prepared before the fork.
unsafe fn setup_mounts(plan: &ChildPlan, d: RawFd) -> io::Result<()> {
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: mount on prepared NUL-terminated strings; the helpers' own
    // conditions are this function's.
    unsafe {
        check(
            libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) as libc::c_long,
            d,
            b"make mounts private",
        )?;
        if let Some(disk) = &plan.disk {
            mount_disk(disk, d)?;
        }
        if plan.mount_proc && plan.root.is_none() {
            mount_fresh_proc(plan.late_rules, d)?;
        }
        if let Some(overlay) = &plan.overlay {
            mount_workspace_overlay(overlay, plan.late_rules, d)?;
        }
        for (path, keep) in &plan.ro_binds {
            bind_protected(path, *keep, d)?;
        }
        if let Some(root) = &plan.root {
            let ruleset = plan.late_rules.map(|(fd, _, _)| fd);
            enter_root(root, ruleset, plan.made_mnt.is_some(), d)?;
        }
    }
    Ok(())
}

/// A fresh procfs on `/proc` for the new PID namespace, readable under
/// Landlock (`late_rules`: the ruleset and its read mask).
///
/// # Safety
/// Between fork and exec, in the command's own mount namespace.
unsafe fn mount_fresh_proc(late_rules: Option<(RawFd, u64, u64)>, d: RawFd) -> io::Result<()> {
    // SAFETY: mount on static NUL-terminated strings.
    unsafe {
        check(
            libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ) as libc::c_long,
            d,
            b"mount /proc",
        )?;
        // The new procfs did not exist when the ruleset was built:
        // allow reading it now, from inside.
        if let Some((ruleset, read, _)) = late_rules {
            allow_beneath(
                ruleset,
                c"/proc".as_ptr(),
                read,
                d,
                b"landlock rule for /proc",
            )?;
        }
    }
    Ok(())
}

/// The overlay (target, options, directory to re-enter) on the workspace,
/// writable under Landlock (`late_rules`: the ruleset and its full access
/// mask), with the command's working directory re-entered inside it.
///
/// # Safety
/// Between fork and exec, in the command's own mount namespace; the
/// strings are NUL-terminated and prepared before the fork.
unsafe fn mount_workspace_overlay(
    (target, options, cwd): &(CString, CString, CString),
    late_rules: Option<(RawFd, u64, u64)>,
    d: RawFd,
) -> io::Result<()> {
    // SAFETY: mount/chdir on prepared NUL-terminated strings.
    unsafe {
        check(
            libc::mount(
                c"overlay".as_ptr(),
                target.as_ptr(),
                c"overlay".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                options.as_ptr().cast(),
            ) as libc::c_long,
            d,
            b"mount overlay",
        )?;
        // Landlock sees an overlay's merged tree as its own: rules on
        // the directory underneath do not reach into it.
        if let Some((ruleset, _, all)) = late_rules {
            allow_beneath(
                ruleset,
                target.as_ptr(),
                all,
                d,
                b"landlock rule for the overlay",
            )?;
        }
        check(
            libc::chdir(cwd.as_ptr()) as libc::c_long,
            d,
            b"enter overlay",
        )?;
    }
    Ok(())
}

/// Bind a protected `path` onto itself, then remount it read-only keeping
/// the flags `keep` its mount must keep.
///
/// # Safety
/// Between fork and exec, in the command's own mount namespace; `path` is
/// NUL-terminated and prepared before the fork.
unsafe fn bind_protected(path: &CString, keep: libc::c_ulong, d: RawFd) -> io::Result<()> {
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: mount on a prepared NUL-terminated string.
    unsafe {
        check(
            libc::mount(
                path.as_ptr(),
                path.as_ptr(),
                null,
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ) as libc::c_long,
            d,
            b"bind protected path",
        )?;
        check(
            libc::mount(
                null,
                path.as_ptr(),
                null,
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | keep,
                std::ptr::null(),
            ) as libc::c_long,
            d,
            b"remount protected path read-only",
        )?;
    }
    Ok(())
}

/// Bring up `lo` in the new network namespace.
///
/// # Safety
/// Between fork and exec (socket/ioctl/close on a local structure only).
pub(crate) unsafe fn bring_up_loopback(d: RawFd) -> io::Result<()> {
    // SAFETY: socket/ioctl/close on a zeroed, locally filled `ifreq`.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(fail(d, b"socket for lo"));
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        req.ifr_ifru.ifru_flags =
            (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as libc::c_short;
        let r = libc::ioctl(s, libc::SIOCSIFFLAGS, &req);
        libc::close(s);
        check(r as libc::c_long, d, b"bring up lo")?;
    }
    Ok(())
}

/// Build the new root under the staging directory and make it `/`.
///
/// # Safety
/// Between fork and exec, inside a private mount namespace (its mounts
/// never reach the host's); the plan's strings are NUL-terminated and
/// prepared before the fork.
// The order the kernel needs stays here, one step a line: the root's
// tmpfs, its mounts (parents first), the Landlock rules on them, then
// `pivot_root` and the old root detached; each helper is a straight run
// of async-signal-safe system calls over the prepared plan.
unsafe fn enter_root(
    root: &crate::root::RootPlan,
    ruleset: Option<RawFd>,
    shared_built: bool,
    d: RawFd,
) -> io::Result<()> {
    // SAFETY: the helpers' conditions are this function's.
    unsafe {
        if !shared_built {
            build_shared(root, d)?;
        }
        for op in &root.ops {
            root_op(op, d)?;
        }
        if let Some(ruleset) = ruleset {
            for (path, access) in &root.rules {
                allow_beneath(
                    ruleset,
                    path.as_ptr(),
                    *access,
                    d,
                    b"landlock rule in the new root",
                )?;
            }
        }
        pivot_into(root, d)?;
    }
    Ok(())
}

/// The root's tmpfs on its staging directory, and what every command
/// shares built in it, read-only once built (see `warm.rs`).
///
/// # Safety
/// Between fork and exec (or in a session's maker), inside a private
/// mount namespace; the plan's strings are NUL-terminated.
pub(crate) unsafe fn build_shared(root: &crate::root::RootPlan, d: RawFd) -> io::Result<()> {
    // SAFETY: mount on prepared NUL-terminated strings; `root_op`'s
    // conditions are this function's.
    unsafe {
        check(
            libc::mount(
                c"tmpfs".as_ptr(),
                root.staging.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=755,size=1m".as_ptr().cast(),
            ) as libc::c_long,
            d,
            b"mount the new root",
        )?;
        for op in &root.shared {
            root_op(op, d)?;
        }
    }
    Ok(())
}

/// One step of building the new root (see [`crate::root::Op`]).
///
/// # Safety
/// Between fork and exec, inside a private mount namespace; the op's
/// strings are NUL-terminated and prepared before the fork.
unsafe fn root_op(op: &crate::root::Op, d: RawFd) -> io::Result<()> {
    use crate::root::Op;
    // SAFETY: mkdir/open/symlink/mount on prepared NUL-terminated strings.
    unsafe {
        match op {
            Op::Mkdir(p) => {
                if libc::mkdir(p.as_ptr(), 0o755) != 0 && *libc::__errno_location() != libc::EEXIST
                {
                    return Err(fail(d, b"mkdir in the new root"));
                }
            }
            Op::Touch(p) => {
                let fd = libc::open(
                    p.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                    0o600,
                );
                if fd < 0 {
                    return Err(fail(d, b"mount point in the new root"));
                }
                libc::close(fd);
            }
            Op::Symlink(target, at) => {
                if libc::symlink(target.as_ptr(), at.as_ptr()) != 0
                    && *libc::__errno_location() != libc::EEXIST
                {
                    return Err(fail(d, b"symlink in the new root"));
                }
            }
            Op::Overlay(at, options, flags) => check(
                libc::mount(
                    c"overlay".as_ptr(),
                    at.as_ptr(),
                    c"overlay".as_ptr(),
                    *flags,
                    options.as_ptr().cast(),
                ) as libc::c_long,
                d,
                b"overlay in the new root",
            )?,
            Op::Bind(src, at, rec, ro) => bind_into_root(src, at, *rec, *ro, d)?,
            Op::Tmpfs(at, flags, options) => check(
                libc::mount(
                    c"tmpfs".as_ptr(),
                    at.as_ptr(),
                    c"tmpfs".as_ptr(),
                    *flags,
                    options.as_ptr().cast(),
                ) as libc::c_long,
                d,
                b"tmpfs in the new root",
            )?,
            Op::Harden(at, keep) => harden(at, *keep, d)?,
            Op::ReadOnly(at, keep) => check(
                libc::mount(
                    std::ptr::null(),
                    at.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | *keep,
                    std::ptr::null(),
                ) as libc::c_long,
                d,
                b"make the shared root read-only",
            )?,
            Op::Sysfs(at, keep) => sysfs(at, *keep, d)?,
            Op::Proc(at) => check(
                libc::mount(
                    c"proc".as_ptr(),
                    at.as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ) as libc::c_long,
                d,
                b"mount /proc",
            )?,
        }
    }
    Ok(())
}

/// Bind `src` on `at` in the new root (`rec`ursively or not), read-only
/// keeping the flags in `ro` when it is set.
///
/// # Safety
/// Between fork and exec, inside a private mount namespace; `src` and `at`
/// are NUL-terminated and prepared before the fork.
unsafe fn bind_into_root(
    src: &CString,
    at: &CString,
    rec: bool,
    ro: Option<libc::c_ulong>,
    d: RawFd,
) -> io::Result<()> {
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: mount/mount_setattr on prepared NUL-terminated strings.
    unsafe {
        let rec_flag = if rec { libc::MS_REC } else { 0 };
        check(
            libc::mount(
                src.as_ptr(),
                at.as_ptr(),
                null,
                libc::MS_BIND | rec_flag,
                std::ptr::null(),
            ) as libc::c_long,
            d,
            b"bind into the new root",
        )?;
        if let Some(keep) = ro {
            // Read-only all the way down (a bound tree's own
            // submounts too, e.g. a container's /etc/hosts);
            // kernels before 5.12 get the top mount only.
            const MOUNT_ATTR_RDONLY: u64 = 0x1;
            let attr: [u64; 4] = [MOUNT_ATTR_RDONLY, 0, 0, 0];
            let recursive = rec
                && libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    at.as_ptr(),
                    libc::AT_RECURSIVE as libc::c_uint,
                    attr.as_ptr(),
                    std::mem::size_of_val(&attr),
                ) == 0;
            if !recursive {
                check(
                    libc::mount(
                        null,
                        at.as_ptr(),
                        null,
                        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | keep,
                        std::ptr::null(),
                    ) as libc::c_long,
                    d,
                    b"read-only bind in the new root",
                )?;
            }
        }
    }
    Ok(())
}

/// Enter the built root: the old root is stacked under the new one, then
/// detached, so nothing of the host's tree stays reachable; then the
/// working directory.
///
/// # Safety
/// Between fork and exec, inside a private mount namespace, once the root
/// at `root.staging` is built; its strings are NUL-terminated and prepared
/// before the fork.
unsafe fn pivot_into(root: &crate::root::RootPlan, d: RawFd) -> io::Result<()> {
    // SAFETY: chdir/pivot_root/umount2 on prepared NUL-terminated strings.
    unsafe {
        check(
            libc::chdir(root.staging.as_ptr()) as libc::c_long,
            d,
            b"enter the new root",
        )?;
        check(
            libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()),
            d,
            b"pivot_root",
        )?;
        check(
            libc::umount2(c".".as_ptr(), libc::MNT_DETACH) as libc::c_long,
            d,
            b"detach the old root",
        )?;
        check(libc::chdir(c"/".as_ptr()) as libc::c_long, d, b"chdir /")?;
        check(
            libc::chdir(root.cwd.as_ptr()) as libc::c_long,
            d,
            b"enter the working directory",
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run `body` in a forked child whose `close_range` answers `ENOSYS`
    /// (as on kernels before 5.9): its exit code, 0 when `body` held.
    fn without_close_range(body: fn() -> bool) -> i32 {
        use seccompiler::{BpfProgram, SeccompAction, SeccompFilter};
        let mut rules = std::collections::BTreeMap::new();
        rules.insert(libc::SYS_close_range, Vec::new());
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            std::env::consts::ARCH.try_into().unwrap(),
        )
        .unwrap();
        let prog = BpfProgram::try_from(filter).unwrap();
        // SAFETY: the child only makes system calls and exits.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                if seccompiler::apply_filter(&prog).is_err() {
                    libc::_exit(3);
                }
                if libc::syscall(libc::SYS_close_range, 3u32, 3u32, 0u32) == 0 {
                    libc::_exit(4); // the filter did not take
                }
                libc::_exit(if body() { 0 } else { 1 });
            }
            exit_code(pid)
        }
    }

    /// Five descriptors, inherited on exec (no allocation: this runs in a
    /// forked child of a threaded process).
    fn open_some() -> [RawFd; 5] {
        // SAFETY: plain opens of /dev/null.
        [(); 5].map(|_| unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) })
    }

    fn is_open(fd: RawFd) -> bool {
        // SAFETY: fcntl on a descriptor number.
        unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
    }

    #[test]
    fn descriptors_are_closed_where_close_range_is_missing() {
        // Every descriptor but the one kept is closed, by the fallback.
        let code = without_close_range(|| {
            let fds = open_some();
            let keep = fds[2];
            close_all_except([keep, -1]);
            is_open(keep) && fds.iter().all(|&fd| fd == keep || !is_open(fd))
        });
        assert_eq!(
            code, 0,
            "close_all_except left a descriptor open (or the filter failed)"
        );
        // Every inherited one is marked close-on-exec, by the fallback.
        let code = without_close_range(|| {
            let fds = open_some();
            // SAFETY: only fcntl and getrlimit, in the forked child.
            if unsafe { close_inherited(2) }.is_err() {
                return false;
            }
            fds.iter().all(|&fd| {
                // SAFETY: fcntl on a descriptor number.
                unsafe { libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC != 0 }
            })
        });
        assert_eq!(code, 0, "close_inherited left a descriptor to the command");
    }

    /// The exit code of child `pid`, once it has ended (128 when killed
    /// by a signal: a crash never passes).
    fn exit_code(pid: libc::pid_t) -> i32 {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128
        }
    }

    /// Runs `body` in a forked child (with `close_range` where the kernel
    /// has it); its exit code, 0 when `body` held.
    fn in_child(body: fn() -> bool) -> i32 {
        // SAFETY: the child only makes system calls and exits.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                libc::_exit(if body() { 0 } else { 1 });
            }
            exit_code(pid)
        }
    }

    /// A network namespace is judged untouched only as made: a socket of
    /// any family open in it (a Unix one, a TCP one that sent nothing),
    /// or a packet ever counted on `lo`, and it is not. Closed sockets
    /// leave it untouched again (the kernel may free one a moment after
    /// its close: waited for).
    #[test]
    fn a_network_namespace_is_untouched_only_as_made() {
        fn settles() -> bool {
            (0..200).any(|_| {
                net_untouched() || {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    false
                }
            })
        }
        fn body() -> bool {
            // SAFETY: in a forked child of the test: namespaces and sockets
            // of its own.
            unsafe {
                if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0
                    || bring_up_loopback(-1).is_err()
                    || !settles()
                {
                    return false;
                }
                for (family, kind) in [
                    (libc::AF_UNIX, libc::SOCK_DGRAM),
                    (libc::AF_INET, libc::SOCK_STREAM),
                ] {
                    let fd = libc::socket(family, kind, 0);
                    let open_seen = fd >= 0 && !net_untouched();
                    libc::close(fd);
                    if !open_seen || !settles() {
                        return false;
                    }
                }
                // One packet on `lo` (to a port nothing listens on): touched
                // for good.
                let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
                let addr = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: 9u16.to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
                    },
                    sin_zero: [0; 8],
                };
                let sent = libc::sendto(
                    s,
                    b"x".as_ptr().cast(),
                    1,
                    0,
                    (&addr as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                );
                libc::close(s);
                std::thread::sleep(std::time::Duration::from_millis(50));
                sent == 1 && !net_untouched()
            }
        }
        assert_eq!(in_child(body), 0);
    }

    #[test]
    fn a_relay_keeps_its_two_descriptors_and_closes_the_rest() {
        fn body() -> bool {
            let fds = open_some();
            let keep = [fds[3], fds[1]];
            close_all_except(keep);
            fds.iter().all(|&fd| is_open(fd) == keep.contains(&fd))
        }
        assert_eq!(in_child(body), 0, "with close_range");
        assert_eq!(without_close_range(body), 0, "by the fallback");
        // One kept (the other -1).
        fn one() -> bool {
            let fds = open_some();
            close_all_except([-1, fds[4]]);
            fds.iter().all(|&fd| is_open(fd) == (fd == fds[4]))
        }
        assert_eq!(in_child(one), 0);
    }

    /// What the relay tells the spawner early is the status its own end
    /// gives: an exit code passed through, a signal raised again.
    #[test]
    fn the_status_a_relay_reports_is_the_one_it_ends_with() {
        for st in [
            0,
            7 << 8,
            255 << 8,
            libc::SIGTERM,
            libc::SIGKILL,
            libc::SIGSEGV | 0x80,
        ] {
            // SAFETY: the child only sets a limit and ends as `mirror` does.
            let got = unsafe {
                let pid = libc::fork();
                assert!(pid >= 0);
                if pid == 0 {
                    // No core dump (not even to a piped `core_pattern`).
                    libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
                    mirror(st);
                }
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
                status
            };
            // A core dump's flag aside, which the runtime does not read.
            assert_eq!(got & !0x80, mirrored(st), "command status {st:#x}");
        }
    }

    /// What a chain's init ends with, told or not (its end may be seen
    /// before its report is read): the command's code, or 128 and its
    /// signal; never 0 for a command that did not end with 0.
    #[test]
    fn an_end_init_could_not_tell_is_never_read_as_success() {
        assert_eq!(exit_code_of(0), 0);
        assert_eq!(exit_code_of(7 << 8), 7);
        assert_eq!(exit_code_of(255 << 8), 255);
        assert_eq!(exit_code_of(libc::SIGKILL), 128 + libc::SIGKILL);
        assert_eq!(exit_code_of(libc::SIGSEGV | 0x80), 128 + libc::SIGSEGV);
    }
}
