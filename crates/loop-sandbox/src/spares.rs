//! Namespaces made ahead of time: the spawner keeps a new user namespace
//! (its id maps and per-user limits written) and a new network namespace
//! owned by it (`lo` up) ready for the next command, so that a command's
//! start does not wait for them.
//!
//! A network namespace is the costliest thing a command's start makes
//! (every network subsystem sets itself up in it: about 0.5 ms of a
//! command's start here, most of it kernel time); nothing about it depends
//! on the command. A small process forked from the spawner (the maker)
//! makes a pair exactly as a command's child would (`unshare`, the same id
//! maps and limits, `lo` up), sends their descriptors back and exits; the
//! next command's child enters both (`setns`) where it would have made
//! them, and makes the rest of its namespaces (mount, PID, IPC, UTS)
//! itself. Each pair is entered by one command only and never reused: a
//! command's namespaces are as new as before, made a little earlier. The
//! first command of a spawner, a command whose plan has another kind of
//! namespaces, and any command when no pair is ready make their own, as
//! before; a maker that fails turns the spares off for the spawner's life.

use crate::child::{self, ChildPlan};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Pairs kept ready.
const READY: usize = 2;

/// What a pair is made with: the user namespace's id maps and limits
/// (none without one). The same for every command of a runtime; compared
/// anyway, and a plan of another kind gets none of these.
#[derive(PartialEq, Eq)]
struct Kind {
    userns: bool,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    user_sysctls: Vec<(CString, Vec<u8>)>,
}

impl Kind {
    /// The kind `plan` would make itself, if it makes a network namespace.
    fn of(plan: &ChildPlan) -> Option<Kind> {
        let net = plan.unshare_flags & libc::CLONE_NEWNET != 0 && plan.loopback_up;
        let user = plan.unshare_flags & libc::CLONE_NEWUSER != 0;
        (net && user == plan.userns).then(|| Kind {
            userns: plan.userns,
            uid_map: plan.uid_map.clone(),
            gid_map: plan.gid_map.clone(),
            user_sysctls: plan.user_sysctls.clone(),
        })
    }
}

/// A user namespace (when its kind has one) and a network namespace.
pub(crate) struct Pair {
    user: Option<OwnedFd>,
    net: OwnedFd,
}

impl Pair {
    /// The descriptors as [`ChildPlan::made`] takes them.
    pub(crate) fn raw(&self) -> (RawFd, RawFd) {
        (
            self.user.as_ref().map_or(-1, |u| u.as_raw_fd()),
            self.net.as_raw_fd(),
        )
    }
}

/// The spawner's pairs: those ready, and the maker at work.
#[derive(Default)]
pub(crate) struct Spares {
    kind: Option<Kind>,
    /// Bumped when the kind changes: a maker's pair of an older kind is dropped.
    generation: u64,
    ready: Vec<Pair>,
    /// The maker at work (tagged with the generation it makes for).
    maker: Maker,
    /// A maker failed: none is started again.
    off: bool,
}

/// A small process forked from the spawner that makes namespaces and
/// sends their descriptors back (here, and in `warm.rs`): the one at
/// work, with the tag of what it makes for, and those that answered, to
/// reap once they have exited (never waited for: the spawner serves
/// commands meanwhile).
#[derive(Default)]
pub(crate) struct Maker {
    making: Option<(libc::pid_t, OwnedFd, u64)>,
    done: Vec<libc::pid_t>,
}

impl Maker {
    /// Whether one is at work.
    pub(crate) fn busy(&self) -> bool {
        self.making.is_some()
    }

    /// Fork one that runs `body` with its end of a new socket (a failed
    /// fork starts none). `body` runs in the child and exits it (should
    /// it return, the child exits with 1).
    pub(crate) fn start(&mut self, tag: u64, body: impl FnOnce(RawFd)) {
        let Ok((ours, theirs)) = crate::fdpass::socket_pair_of(libc::SOCK_SEQPACKET) else {
            return;
        };
        // SAFETY: the child only makes system calls on data that exists
        // before the fork, then exits: safe whether this process is the
        // single-threaded spawner or a runtime with other threads
        // ([`make_ahead`]).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            body(theirs.as_raw_fd());
            // SAFETY: ending the forked child.
            unsafe { libc::_exit(1) }
        }
        if pid > 0 {
            self.making = Some((pid, ours, tag));
        }
    }

    /// The socket to poll for its answer, if one is at work.
    pub(crate) fn waiting_on(&self) -> Option<RawFd> {
        self.making.as_ref().map(|(_, s, _)| s.as_raw_fd())
    }

    /// It answered, or ended without: its tag and the descriptors it
    /// sent (at most `max`; none when it failed).
    pub(crate) fn answer(&mut self, max: usize) -> Option<(u64, Vec<OwnedFd>)> {
        let (pid, sock, tag) = self.making.take()?;
        let fds = crate::fdpass::recv_fds(&sock, max);
        self.done.push(pid);
        self.reap();
        Some((tag, fds))
    }

    /// Reap those that have exited.
    pub(crate) fn reap(&mut self) {
        // SAFETY: reaping our own children, without waiting.
        self.done
            .retain(|pid| unsafe { libc::waitpid(*pid, std::ptr::null_mut(), libc::WNOHANG) } == 0);
    }

    /// The one at work, if any, for the spawner's end.
    pub(crate) fn pid(&self) -> Option<libc::pid_t> {
        self.making.as_ref().map(|(pid, _, _)| *pid)
    }
}

impl Spares {
    /// A pair for `plan`, if one of its kind is ready.
    pub(crate) fn take(&mut self, plan: &ChildPlan) -> Option<Pair> {
        let kind = Kind::of(plan)?;
        if self.kind.as_ref() != Some(&kind) {
            self.ready.clear();
            self.kind = Some(kind);
            self.generation += 1;
            return None;
        }
        self.ready.pop()
    }

    /// Start a maker when fewer pairs than wanted are ready and none is
    /// at work (a failed fork: none; commands make their own).
    pub(crate) fn refill(&mut self) {
        if self.off || self.maker.busy() || self.ready.len() >= READY {
            return;
        }
        let Some(kind) = &self.kind else {
            return;
        };
        // SAFETY: in the maker, once.
        self.maker
            .start(self.generation, |sock| unsafe { make(kind, sock) });
    }

    /// The socket to poll for the maker's answer, if one is at work.
    pub(crate) fn waiting_on(&self) -> Option<RawFd> {
        self.maker.waiting_on()
    }

    /// The maker answered, or ended without a pair: keep what it made,
    /// reap it, and start the next.
    pub(crate) fn hear(&mut self) {
        let Some((generation, mut fds)) = self.maker.answer(2) else {
            return;
        };
        let userns = self.kind.as_ref().is_some_and(|k| k.userns);
        let pair = match (userns, fds.len()) {
            (true, 2) => fds.pop().map(|net| Pair {
                net,
                user: fds.pop(),
            }),
            (false, 1) => fds.pop().map(|net| Pair { net, user: None }),
            _ => None,
        };
        match pair {
            Some(p) if generation == self.generation => self.ready.push(p),
            Some(_) => {}
            None => self.off = true,
        }
        self.refill();
    }

    /// Reap the makers that have exited.
    pub(crate) fn reap(&mut self) {
        self.maker.reap();
    }

    /// The maker at work, if any, for the spawner's end.
    pub(crate) fn maker(&self) -> Option<libc::pid_t> {
        self.maker.pid()
    }
}

/// A pair made ahead for a process that forks its one command itself
/// (`loop exec` of one command, which starts no spawner): its maker,
/// forked as the process starts ([`make_ahead`]), makes the namespaces
/// while the process prepares the command (its host view, Landlock rules,
/// root), and the command's child enters them ([`take_ahead`]) where it
/// would have made them. The kind is this process's user's, with the
/// limits every command's user namespace gets; a plan of another kind
/// (no user or network namespace, say) gets none, and the maker is killed.
struct Ahead {
    kind: Kind,
    pid: libc::pid_t,
    sock: OwnedFd,
}

static AHEAD: std::sync::Mutex<Option<Ahead>> = std::sync::Mutex::new(None);

/// How long a command waits for the pair made ahead (begun as the
/// process started, it is normally there); then it makes its own.
const AHEAD_WAIT: std::time::Duration = std::time::Duration::from_millis(1000);

/// Start making a pair for this process's one command (see [`Ahead`]),
/// unless one is being made.
pub fn make_ahead() {
    let mut slot = AHEAD.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_some() {
        return;
    }
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let Ok(user_sysctls) = crate::user_sysctls_for(true) else {
        return;
    };
    let kind = Kind {
        userns: true,
        uid_map: format!("{uid} {uid} 1").into_bytes(),
        gid_map: format!("{gid} {gid} 1").into_bytes(),
        user_sysctls,
    };
    let mut maker = Maker::default();
    // SAFETY: in the maker, once: it makes only system calls on `kind`,
    // made before the fork (this process may have other threads).
    maker.start(0, |sock| unsafe { make(&kind, sock) });
    if let Some((pid, sock, _)) = maker.making.take() {
        *slot = Some(Ahead { kind, pid, sock });
    }
}

/// The pair made ahead, if `plan` is of its kind and it was made (the
/// maker reaped either way; one not answering within [`AHEAD_WAIT`]
/// is killed).
pub(crate) fn take_ahead(plan: &ChildPlan) -> Option<Pair> {
    let a = AHEAD.lock().unwrap_or_else(|e| e.into_inner()).take()?;
    let fds = if Kind::of(plan).as_ref() == Some(&a.kind) {
        if crate::fdpass::readable_within(a.sock.as_raw_fd(), AHEAD_WAIT) {
            crate::fdpass::recv_fds(&a.sock, 2)
        } else {
            Vec::new()
        }
    } else {
        Vec::new()
    };
    // SAFETY: killing (it may still be at work) and reaping our own child.
    unsafe {
        if fds.len() != 2 {
            libc::kill(a.pid, libc::SIGKILL);
        }
        libc::waitpid(a.pid, std::ptr::null_mut(), 0);
    }
    let mut fds = fds;
    let net = fds.pop()?;
    let user = fds.pop()?;
    Some(Pair {
        user: Some(user),
        net,
    })
}

/// The maker: make the namespaces as a command's child would, send their
/// descriptors over `sock`, exit. Exits without sending when a step fails.
///
/// # Safety
/// Only in the child just forked by [`Spares::refill`] or [`make_ahead`].
unsafe fn make(kind: &Kind, sock: RawFd) -> ! {
    // SAFETY (whole body): system calls on data made before the fork.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        let flags = libc::CLONE_NEWNET | if kind.userns { libc::CLONE_NEWUSER } else { 0 };
        if libc::unshare(flags) != 0 {
            libc::_exit(1);
        }
        if kind.userns && child::map_user(&kind.uid_map, &kind.gid_map, &kind.user_sysctls).is_err()
        {
            libc::_exit(1);
        }
        if child::bring_up_loopback(-1).is_err() {
            libc::_exit(1);
        }
        let open = |path: &[u8]| libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        let net = open(b"/proc/self/ns/net\0");
        let user = if kind.userns {
            open(b"/proc/self/ns/user\0")
        } else {
            -2
        };
        if net < 0 || user == -1 {
            libc::_exit(1);
        }
        let fds: &[RawFd] = if kind.userns { &[user, net] } else { &[net] };
        libc::_exit(if send(sock, fds) { 0 } else { 1 })
    }
}

/// Send up to four descriptors over `sock` with nothing allocated (the
/// maker may be forked from a process with other threads, in tests).
///
/// # Safety
/// Plain system calls; `sock` is an open socket.
pub(crate) unsafe fn send(sock: RawFd, fds: &[RawFd]) -> bool {
    let mut data = *b"S";
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let fds = &fds[..fds.len().min(4)];
    let bytes = std::mem::size_of_val(fds);
    // Room for a header and four descriptors, aligned.
    let mut control = [0u64; 8];
    // SAFETY (whole body): a message over buffers on this stack, which
    // outlive the call; CMSG_* walk `control` only.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(bytes as u32) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(bytes as u32) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), fds.len());
        libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

    fn plan(flags: libc::c_int, userns: bool) -> ChildPlan {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        ChildPlan {
            unshare_flags: flags,
            userns,
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
            cgroup_procs: Vec::new(),
            mount_proc: true,
            overlay: None,
            ro_binds: Vec::new(),
            late_rules: None,
            loopback_up: flags & libc::CLONE_NEWNET != 0,
            proxy_sock: None,
            root: None,
            disk: None,
            rlimits: Vec::new(),
            landlock_fd: None,
            seccomp: None,
            user_sysctls: vec![(
                CString::new("/proc/sys/user/max_user_namespaces").unwrap(),
                b"0".to_vec(),
            )],
            diag_fd: -1,
            ctty: false,
            session: 0,
            made: None,
            made_mnt: None,
        }
    }

    fn ino(fd: RawFd) -> u64 {
        // SAFETY: fstat into a zeroed struct.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            assert_eq!(libc::fstat(fd, &mut st), 0);
            st.st_ino
        }
    }

    /// `ioctl(fd, req)` returning a descriptor (or a value), owned when one.
    fn ns_ioctl(fd: RawFd, req: libc::c_ulong) -> i32 {
        // SAFETY: an ns ioctl that takes no argument.
        unsafe { libc::ioctl(fd, req) }
    }

    /// `pair` is a new user namespace and a new network namespace owned by
    /// it, as one a command made after its own user namespace would be.
    fn assert_new(pair: &Pair) {
        let (user, net) = pair.raw();
        assert_eq!(ns_ioctl(user, NS_GET_NSTYPE), libc::CLONE_NEWUSER);
        assert_eq!(ns_ioctl(net, NS_GET_NSTYPE), libc::CLONE_NEWNET);
        let owner = ns_ioctl(net, NS_GET_USERNS);
        assert!(owner >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: a descriptor the ioctl just made.
        let owner = unsafe { OwnedFd::from_raw_fd(owner) };
        assert_eq!(ino(owner.as_raw_fd()), ino(user));
        let own = |name: &str| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(format!("/proc/self/ns/{name}"))
                .unwrap()
                .ino()
        };
        assert_ne!(ino(user), own("user"), "a new user namespace");
        assert_ne!(ino(net), own("net"), "a new network namespace");
    }

    fn made(s: &mut Spares, p: &ChildPlan) -> Pair {
        for _ in 0..4 {
            if let Some(pair) = s.take(p) {
                return pair;
            }
            s.refill();
            assert!(s.waiting_on().is_some(), "a maker is at work");
            s.hear();
        }
        panic!("no pair was made");
    }

    #[test]
    fn a_pair_is_new_namespaces_made_as_a_command_would_and_each_is_given_once() {
        let full =
            libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWUSER | libc::CLONE_NEWNET;
        let p = plan(full, true);
        let mut s = Spares::default();
        assert!(s.take(&p).is_none(), "the first command makes its own");
        let (a, b) = (made(&mut s, &p), made(&mut s, &p));
        assert_new(&a);
        assert_new(&b);
        assert_ne!(a.raw(), b.raw());
        assert_ne!(
            ino(a.raw().1),
            ino(b.raw().1),
            "two namespaces, not one twice"
        );
        // A command on the host's network makes no network namespace:
        // nothing made ahead is for it.
        let host = plan(libc::CLONE_NEWNS | libc::CLONE_NEWUSER, true);
        assert!(s.take(&host).is_none());
    }

    #[test]
    fn a_plan_of_another_kind_drops_what_was_made_for_the_first() {
        let full = libc::CLONE_NEWNS | libc::CLONE_NEWUSER | libc::CLONE_NEWNET;
        let p = plan(full, true);
        let mut s = Spares::default();
        let _ = made(&mut s, &p);
        s.refill();
        s.hear();
        assert!(!s.ready.is_empty());
        let mut other = plan(full, true);
        other.uid_map = b"4000000 4000000 1".to_vec();
        assert!(s.take(&other).is_none(), "made with other maps: not given");
        assert!(s.ready.is_empty(), "and dropped");
    }

    /// One test, in order, for the one pair a process makes ahead for its
    /// one command (the slot is the process's).
    #[test]
    fn a_pair_made_ahead_goes_only_to_a_plan_of_its_kind_and_once() {
        let full =
            libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWUSER | libc::CLONE_NEWNET;
        let mut p = plan(full, true);
        p.user_sysctls = crate::user_sysctls_for(true).unwrap();
        let gone = |pid: libc::pid_t| {
            // SAFETY: waitpid without waiting on a pid that was our child.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) == -1 }
        };
        // A plan on the host's network: none for it, and the maker is
        // killed and reaped.
        make_ahead();
        let maker = AHEAD.lock().unwrap().as_ref().map(|a| a.pid).unwrap();
        let host = plan(libc::CLONE_NEWNS | libc::CLONE_NEWUSER, true);
        assert!(take_ahead(&host).is_none());
        assert!(gone(maker), "the maker is reaped");
        assert!(take_ahead(&p).is_none(), "nothing is left to take");
        // Other maps: none either.
        make_ahead();
        let mut other = plan(full, true);
        other.user_sysctls = p.user_sysctls.clone();
        other.uid_map = b"4000000 4000000 1".to_vec();
        assert!(take_ahead(&other).is_none());
        // Its kind: a new user namespace owning a new network namespace,
        // given once.
        make_ahead();
        let maker = AHEAD.lock().unwrap().as_ref().map(|a| a.pid).unwrap();
        let pair = take_ahead(&p).expect("made ahead for a plan of its kind");
        assert!(gone(maker), "the maker is reaped");
        assert_new(&pair);
        assert!(take_ahead(&p).is_none(), "given once");
    }
}
