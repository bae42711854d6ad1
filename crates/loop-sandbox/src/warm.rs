//! A sandbox session per task: what a task's commands share is built
//! once, by the spawner, and each command starts from it.
//!
//! Every command of a task has the same root but for its own places: the
//! same host trees (each an overlay), the same masks over denied paths,
//! the same `/dev`. Building that tree is most of a command's mounts. A
//! session is a user namespace (its id maps and per-user limits written)
//! and a mount namespace in it holding that tree, built from
//! [`RootPlan::shared`] by a small process forked from the spawner (the
//! maker), which sends them back and stays as the session's [`Zygote`].
//! Each later command with the same shared steps is in the session's user
//! namespace and a copy of its mount namespace (a chain's init cloned by
//! the zygote, see [`Chain`]; else `setns`, then `unshare`), and makes
//! only its own steps there: its `/tmp` on its own disk, the workspace and what
//! is mounted in it, `/proc`, `/sys`, `/dev/shm`, `/run`; its PID, IPC
//! and cgroup namespaces are its own and new, as before, and so are its
//! Landlock ruleset, seccomp filter, limits and cgroups. A task's
//! command's network namespace, the costliest to make and tear down
//! (every network subsystem sets itself up in one), is the session's
//! while that is untouched: at its order a chain's command enters the
//! session's network namespace (`lo` up) only if no packet was ever
//! counted there, no socket of any family is in it and no IPv6 flow
//! label lingers, else it makes a new one, as before
//! (`child::enter_chain_net`). A verification's checks never share one:
//! each check's is new. What a task's command could leave there (a
//! counted packet, a socket in `TIME_WAIT` or held in flight, a flow
//! label) is what the check sees, once its processes have all ended; it
//! holds no capability to change the namespace's settings (and where it
//! runs as the host's root, Landlock keeps `/proc` read-only to it); and
//! whatever else it could leave would reach only the same task's later
//! commands, which share its workspace anyway. A session's next command is
//! made ahead: a [`Chain`], the command's processes up to its order, its
//! namespaces entered and made. It is made once the command
//! before it has exec'd, when that command came from a chain (the
//! spawner hears the exec as the close of a pipe only that command's
//! process held, close-on-exec), else once it has ended: beside the
//! program's run, never beside a command's start, which takes the same
//! kernel mount lock, so a command ordered at once after the last one's
//! end finds its chain ready. While it waits beside the running command,
//! a chain is in the session's user namespace with it (its processes, in
//! a task's session, in a network namespace of the session's own, `lo`
//! down, where nothing is ever bound or sent, until the command-to-be's
//! order; in a check's, in the check's own, made ahead), and nothing
//! else: the command cannot see it (another PID namespace), reach it (no
//! socket in its network namespace, other IPC and mount namespaces, no
//! capability), or signal it; its
//! two processes count toward the command's `RLIMIT_NPROC` there, as
//! the command's own init does, and so does the session's zygote, which
//! cloned it (512 by default), from the moment it is made: a command that
//! runs within three processes of its limit may find them taken. Each
//! running chained command so holds a chain beside it (two processes) for
//! its whole run, and its session's zygote (one).
//!
//! Nothing a command can change is shared:
//!
//! - the session's network namespace is entered only untouched (above),
//!   and only by a task's commands;
//! - the shared tree is read-only once built (its tmpfs mounts remounted
//!   read-only, every host tree read-only), and a command holds no
//!   capability to remount it: what one command could write there, the
//!   next would see;
//! - a command's mount namespace is a copy: what it mounts is gone with it;
//! - the user namespace keeps nothing a process without capabilities can
//!   set (keyrings are refused by seccomp; its limits are read-only to it);
//! - a session serves one command at a time: a second command of the same
//!   kind while one runs gets another session, so two live commands never
//!   share a namespace;
//! - a task's commands and its acceptance checks never share one (the
//!   session's kind is part of its key), nor do commands whose shared steps
//!   differ in a byte (the key is those steps);
//! - a long-lived process, a command on a terminal or behind the egress
//!   proxy gets none (see `session_of` in `lib.rs`).
//!
//! A session unused for [`IDLE`] or older than [`MAX_AGE`] is dropped, so
//! a host tree changed meanwhile is seen fresh by the next one; at most
//! [`KEPT`] idle sessions are kept. A maker that fails turns sessions off
//! for the spawner's life: commands then build their whole root each, as
//! without a spawner.

use crate::child::{self, ChildPlan};
use crate::wire::Enc;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// An idle session is dropped after this long unused.
pub(crate) const IDLE: Duration = Duration::from_secs(15);

/// A session is dropped once this old (when no command is in it).
pub(crate) const MAX_AGE: Duration = Duration::from_secs(60);

/// Idle sessions kept at most.
pub(crate) const KEPT: usize = 4;

/// How long a maker may take before it is killed.
const MAKER_WAIT: Duration = Duration::from_secs(10);

/// A session's namespaces, made by its maker: its user and mount
/// namespaces, held here for the commands that enter them without a
/// chain; and its maker, which holds, for a task's commands (never for
/// checks, whose chains make each check's own network namespace ahead,
/// as before), two network namespaces owned by that user namespace: `park`,
/// where a chain's processes wait for its order (`lo` down, nothing ever
/// sent or bound in it), and `net`, which a chain's command enters at its
/// order if it is untouched (see [`Chain`]).
pub(crate) struct Made {
    user: OwnedFd,
    mnt: OwnedFd,
    /// The session's maker, kept as the zygote its chains are cloned
    /// from (see [`Zygote`]).
    zygote: Zygote,
}

/// A session's maker, which stays in the session's user and mount
/// namespaces (and in a task's, in its `park`ed network namespace) once
/// it has built them, and clones each chain's init there when asked
/// ([`Chain::make`]): a small, single-threaded process, a fork of the
/// spawner, holding nothing but its socket to the spawner (and the
/// session's `net`, for the chains' commands), not dumpable, in no PID
/// namespace a command can see. It ends when its socket closes (its
/// session dropped, the spawner gone: it dies with the spawner too), and
/// is killed and reaped with its session.
struct Zygote {
    pid: libc::pid_t,
    ctl: OwnedFd,
    /// It did not answer in time, or answered what it should not: killed,
    /// and asked nothing again (an answer still on its way would be read
    /// as the next one's).
    dead: std::cell::Cell<bool>,
}

impl Zygote {
    /// Ask for one chain's init making `flags`' namespaces, its end of the
    /// chain's socket `theirs`; its answer is read by [`Zygote::answer`]
    /// (the spawner serves its commands meanwhile). `false` where it is
    /// gone or could not be asked (then killed, and asked nothing again).
    fn ask(&self, flags: libc::c_int, theirs: &OwnedFd) -> bool {
        if self.dead.get() {
            return false;
        }
        let mut ask = [b'C', 0, 0, 0, 0];
        ask[1..].copy_from_slice(&flags.to_le_bytes());
        if crate::ordered::send_fds(&self.ctl, &ask, &[theirs.as_raw_fd()]).is_err() {
            self.kill();
            return false;
        }
        true
    }

    /// The answer to the one question asked: the init's pid (a child of
    /// the spawner's), or `None` where its clone failed (`F`), or where
    /// the zygote is gone, did not answer within `wait` or answered
    /// something else (it is then killed). A clone of a small process: an
    /// answer not here within the maker's wait is a zygote stopped or
    /// gone. Killed then, should its answer still come, an init it cloned
    /// meanwhile finds its chain's socket closed and ends (left unreaped
    /// by the spawner, which reaps only what it knows of).
    fn answer(&self, wait: Duration) -> Option<libc::pid_t> {
        if self.dead.get() {
            return None;
        }
        if !crate::fdpass::readable_within(self.ctl.as_raw_fd(), wait) {
            self.kill();
            return None;
        }
        let mut got = [0u8; 8];
        let n = crate::fdpass::recv_packet(self.ctl.as_raw_fd(), &mut got, libc::MSG_DONTWAIT);
        let pid = i32::from_le_bytes([got[1], got[2], got[3], got[4]]);
        match (n, got[0]) {
            (5, b'P') if pid > 0 => Some(pid),
            (5, b'F') => None,
            _ => {
                self.kill();
                None
            }
        }
    }

    /// Kill it (reaped when dropped); nothing is asked of it again (an
    /// answer still on its way would be read as the next one's).
    fn kill(&self) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        self.dead.set(true);
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        // SAFETY: killing and reaping our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// The zygote's loop (see [`Zygote`]): each `C` and the namespaces' flags,
/// with a chain's socket, clones that chain's init with the spawner as its
/// parent, and answers `P` and its pid (or `F`). Exits when `sock` closes.
///
/// # Safety
/// Only in a session's maker, once it has sent its namespaces, with
/// nothing open but `sock` and `net` (the session's, or -1).
unsafe fn zygote(sock: RawFd, net: RawFd) -> ! {
    // SAFETY (whole body): system calls on descriptors this process holds
    // and buffers on its stack; the clone's child is a copy of this
    // single-threaded process, as a fork's is.
    unsafe {
        loop {
            let mut data = [0u8; 8];
            let (n, mut fds, cut) = crate::fdpass::recv_msg(sock, &mut data, 1);
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                libc::_exit(0);
            }
            let Some(theirs) = fds.pop() else {
                libc::_exit(1);
            };
            if n != 5 || cut || data[0] != b'C' {
                libc::_exit(1);
            }
            let flags = i32::from_le_bytes([data[1], data[2], data[3], data[4]]);
            let clone = child::chain_unshares(flags)
                & !(if net >= 0 { libc::CLONE_NEWNET } else { 0 })
                | libc::CLONE_PARENT;
            let pid = libc::syscall(
                libc::SYS_clone,
                (clone | libc::SIGCHLD) as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            );
            if pid == 0 {
                let keep = [theirs.as_raw_fd(), net];
                if child::chain_init(clone, keep).is_err() {
                    libc::_exit(1);
                }
                crate::ordered::chain_wait(theirs.as_raw_fd(), net)
            }
            drop(theirs);
            let mut answer = [b'P', 0, 0, 0, 0];
            if pid < 0 {
                answer[0] = b'F';
            } else {
                answer[1..].copy_from_slice(&(pid as i32).to_le_bytes());
            }
            if libc::send(sock, answer.as_ptr().cast(), 5, libc::MSG_NOSIGNAL) != 5 {
                libc::_exit(0);
            }
        }
    }
}

/// Whether the commands of a session for `plan` may share its network
/// namespace while it is untouched: a task's commands (session kind 1),
/// which share a workspace anyway; never a verification's checks.
fn shares_net(plan: &ChildPlan) -> bool {
    plan.session == 1
}

/// One session: its namespaces, the command in it, and its times.
struct Entry {
    id: u64,
    key: Vec<u8>,
    ns: Made,
    /// The command in it (0 while it is being forked).
    busy: Option<libc::pid_t>,
    made: Instant,
    used: Instant,
    /// The flags of the namespaces its last command made, when that
    /// command could have been a chain's (see [`Chain`]): chains are made
    /// for it.
    chain_flags: Option<libc::c_int>,
    /// A chain made ahead for its next command.
    chain: Option<Chain>,
}

impl Entry {
    /// Make this session's chain, if it has none and its commands take one.
    fn chain_if_none(&mut self) {
        if self.chain.is_none()
            && let Some(flags) = self.chain_flags
        {
            self.chain = Chain::make(&self.ns, flags);
        }
    }

    /// Read its zygote's answer for its chain, if one is owed, waiting up
    /// to `wait`.
    fn settle(&mut self, wait: Duration) {
        if let Some(c) = self.chain.as_mut() {
            c.settle(&self.ns.zygote, wait);
            // None was made (its clone failed): another may be asked for.
            if c.sock.is_none() && c.init <= 0 {
                self.chain = None;
            }
        }
    }

    /// The zygote's socket, while its answer for this session's chain is
    /// owed.
    fn awaited(&self) -> Option<RawFd> {
        self.chain
            .as_ref()
            .filter(|c| c.asked)
            .map(|_| self.ns.zygote.ctl.as_raw_fd())
    }
}

impl Drop for Entry {
    /// A chain whose init is not yet known is settled first, so that init
    /// is killed and reaped with it.
    fn drop(&mut self) {
        self.settle(MAKER_WAIT);
    }
}

/// A session's next command made ahead, up to its order: its init, cloned
/// by the session's [`Zygote`] (in the session's user and mount
/// namespaces, and in a task's session its `park`ed network namespace)
/// with the command's own mount, PID and IPC namespaces (and, in a
/// check's session, its network namespace; its mount namespace a copy of
/// the session's tree) and with the spawner as its parent, which made
/// itself a new process group and forked the command-to-be
/// ([`child::chain_init`]). The command-to-be says it is ready and waits
/// for its order on a socket (`ordered::chain_wait`). The order brings everything that is the
/// command's own (its streams, directory, cgroups, mounts, limits,
/// Landlock ruleset, seccomp filters, program), and the command-to-be
/// makes the rest of its start as a forked child would: it joins its
/// cgroups, then makes its cgroup namespace (whose root is the cgroup it
/// is made in, so the command sees its own as `/`), then the rest.
///
/// So the init of a chain's command stays in the spawner's cgroups (as
/// the zygote does), where a forked child's relay and init join the
/// command's: the command's memory and process limits count the command
/// and what it starts, not init (which runs nothing of the command's; the
/// kernel memory of the namespaces it made is charged where it is), so a
/// chain's command may start two more processes under the same `pids`
/// limit than a forked one.
///
/// A chain takes only a command of its session whose plan makes exactly
/// its namespaces, has no terminal and no egress proxy; any other command
/// starts as before. Nothing of a command is in a chain before its order:
/// it runs nothing of the command's, and nothing a command can reach
/// (another PID, IPC and mount namespace, a network namespace where
/// nothing is bound or sent, no capability kept) reaches it. At its
/// order a task's command-to-be enters the session's network namespace
/// if it is untouched, else makes a new one (`child::enter_chain_net`).
/// One that is dropped unused (its session dropped, the spawner ending)
/// is killed with its process group and reaped.
pub(crate) struct Chain {
    /// Its first process (init, the spawner's child), which the
    /// command's end is read from; 0 until the zygote's answer is read
    /// (see [`Chain::settle`]), and once handed over.
    init: libc::pid_t,
    sock: Option<OwnedFd>,
    flags: libc::c_int,
    ready: bool,
    /// The zygote was asked for it and its answer (init's pid) is not yet
    /// read: the spawner serves its commands meanwhile (a command's end
    /// told while a chain is cloned beside it is passed on at once), and
    /// reads it when it comes ([`Sessions::hear_zygotes`]) or when it
    /// must ([`Chain::settle`]).
    asked: bool,
}

/// How long a command waits for its session's chain to be ready (it is
/// made once the command before it has exec'd or ended, and takes about a
/// millisecond) before starting without it. The spawner answers nothing
/// else meanwhile, so the wait is short.
const CHAIN_WAIT: Duration = Duration::from_millis(2);

impl Chain {
    /// Ask the zygote of the session whose namespaces are `ns` to clone
    /// a chain's init, making `flags`' namespaces (its answer is read
    /// later, see [`Chain::asked`]).
    fn make(ns: &Made, flags: libc::c_int) -> Option<Chain> {
        let (ours, theirs) = crate::fdpass::socket_pair_of(libc::SOCK_SEQPACKET).ok()?;
        if !ns.zygote.ask(flags, &theirs) {
            return None;
        }
        // The zygote holds its own copy now.
        drop(theirs);
        Some(Chain {
            init: 0,
            sock: Some(ours),
            flags,
            ready: false,
            asked: true,
        })
    }

    /// Read the zygote's answer if it is still owed, waiting up to `wait`
    /// for it: the chain's init is then known (and killed and reaped
    /// with it), or the chain is gone (its clone failed, or the zygote
    /// did not answer: killed).
    fn settle(&mut self, zygote: &Zygote, wait: Duration) {
        if !std::mem::replace(&mut self.asked, false) {
            return;
        }
        match zygote.answer(wait) {
            Some(pid) => self.init = pid,
            None => self.sock = None,
        }
    }

    /// Whether its command-to-be has said it is ready, waiting up to
    /// [`CHAIN_WAIT`] for it (`None`: the chain is gone). Its init must
    /// be known ([`Chain::settle`]).
    fn ready(&mut self) -> Option<bool> {
        if self.ready {
            return Some(true);
        }
        if self.asked || self.init <= 0 {
            return None;
        }
        let sock = self.sock.as_ref()?.as_raw_fd();
        let mut p = libc::pollfd {
            fd: sock,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one descriptor we hold (EINTR reads as not ready).
        unsafe { libc::poll(&mut p, 1, CHAIN_WAIT.as_millis() as libc::c_int) };
        let mut b = [0u8; 1];
        let n = crate::fdpass::recv_packet(sock, &mut b, libc::MSG_DONTWAIT);
        match n {
            1 if b[0] == b'R' => {
                self.ready = true;
                Some(true)
            }
            n if n < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock =>
            {
                Some(false)
            }
            _ => None,
        }
    }

    /// Send it its order (the order's file and the descriptors it
    /// names); its init is then the command's first process, the
    /// spawner's to reap as any command's. Returned with the socket the
    /// command's end is told on, as soon as everything in its PID
    /// namespace has ended (see `child::init_then_command`).
    pub(crate) fn take_order(mut self, fds: &[RawFd]) -> Option<(libc::pid_t, OwnedFd)> {
        let sock = self.sock.take()?;
        crate::ordered::send_order(&sock, fds).ok()?;
        Some((std::mem::replace(&mut self.init, 0), sock))
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        if self.init > 0 {
            // SAFETY: killing and reaping our own child and its group.
            unsafe {
                libc::killpg(self.init, libc::SIGKILL);
                libc::kill(self.init, libc::SIGKILL);
                libc::waitpid(self.init, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// The namespaces a chain would make for `plan`, if a chain may take it
/// (see [`Chain`]).
fn chain_flags(plan: &ChildPlan) -> Option<libc::c_int> {
    (!plan.ctty
        && plan.proxy_sock.is_none()
        && plan.loopback_up
        && plan.unshare_flags & libc::CLONE_NEWNET != 0)
        .then_some(plan.unshare_flags)
}

/// The spawner's sessions.
#[derive(Default)]
pub(crate) struct Sessions {
    entries: Vec<Entry>,
    next_id: u64,
    /// A maker failed: none is made again.
    off: bool,
}

/// A session given to one command: its id, and the user and mount
/// namespaces to enter.
pub(crate) struct Given {
    pub id: u64,
    pub user: RawFd,
    pub mnt: RawFd,
    /// It was made for this command (the first of its kind).
    pub new: bool,
    /// Its chain, ready to take this command.
    pub chain: Option<Chain>,
}

/// What names a session: its kind, the user namespace's maps and
/// limits, and the shared steps; `None` when the plan may not share one.
fn key_of(plan: &ChildPlan) -> Option<Vec<u8>> {
    let root = plan.root.as_ref()?;
    if plan.session == 0 || !plan.userns || root.shared.is_empty() {
        return None;
    }
    let mut e = Enc::default();
    e.buf.push(plan.session);
    e.buf
        .extend_from_slice(&(plan.uid_map.len() as u32).to_le_bytes());
    e.buf.extend_from_slice(&plan.uid_map);
    e.buf
        .extend_from_slice(&(plan.gid_map.len() as u32).to_le_bytes());
    e.buf.extend_from_slice(&plan.gid_map);
    for (path, value) in &plan.user_sysctls {
        e.buf.extend_from_slice(path.as_bytes_with_nul());
        e.buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
        e.buf.extend_from_slice(value);
    }
    e.buf.extend_from_slice(root.staging.as_bytes_with_nul());
    // One task's: its workspace (where the root shows it) is in the key,
    // even where nothing shared names it (a workspace under `/tmp`).
    for op in &root.ops {
        if let crate::root::Op::Harden(ws, _) = op {
            e.buf.extend_from_slice(ws.as_bytes_with_nul());
        }
    }
    crate::wire::encode_ops(&root.shared, &mut e);
    Some(e.buf)
}

impl Sessions {
    /// A free session for `plan`, made now if there is none (`None`: the
    /// plan may not share one, or it could not be made; the command then
    /// builds its whole root). Taken until [`Sessions::bind`]'s command
    /// ends ([`Sessions::release`]).
    pub(crate) fn take(&mut self, plan: &ChildPlan) -> Option<Given> {
        if self.off {
            return None;
        }
        let key = key_of(plan)?;
        self.expire(Instant::now());
        let now = Instant::now();
        let flags = chain_flags(plan);
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.busy.is_none() && e.key == key)
        {
            e.busy = Some(0);
            e.used = now;
            e.chain_flags = flags;
            // Asked for when the last command exec'd or ended, its answer
            // has almost always come by now.
            e.settle(MAKER_WAIT);
            // A chain made for other namespaces is dropped (another is
            // made for these once this command ends); one made for these
            // is waited for if still being made.
            if flags.is_some() && e.chain.as_ref().is_some_and(|c| Some(c.flags) != flags) {
                e.chain = None;
            }
            let state = match flags {
                Some(_) => e.chain.as_mut().map(Chain::ready),
                None => None,
            };
            let chain = match state {
                Some(None) => {
                    e.chain = None;
                    None
                }
                Some(Some(true)) => e.chain.take(),
                _ => None,
            };
            return Some(Given {
                id: e.id,
                user: e.ns.user.as_raw_fd(),
                mnt: e.ns.mnt.as_raw_fd(),
                new: false,
                chain,
            });
        }
        let Some(made) = make(plan) else {
            tracing::debug!("sandbox: a session could not be made; commands build their own roots");
            self.off = true;
            return None;
        };
        self.next_id += 1;
        let id = self.next_id;
        let given = Given {
            id,
            user: made.user.as_raw_fd(),
            mnt: made.mnt.as_raw_fd(),
            new: true,
            chain: None,
        };
        self.entries.push(Entry {
            id,
            key,
            ns: made,
            busy: Some(0),
            made: now,
            used: now,
            chain_flags: flags,
            chain: None,
        });
        Some(given)
    }

    /// Make a chain for the idle session used last whose commands chains
    /// take, if it has none.
    fn make_chain(&mut self) {
        let last = self
            .entries
            .iter_mut()
            .filter(|e| e.chain_flags.is_some() && e.busy.is_none())
            .max_by_key(|e| e.used);
        if let Some(e) = last {
            e.chain_if_none();
        }
    }

    /// Make the chain for the next command of session `id` now, while its
    /// command runs (it has exec'd: see the module's documentation).
    pub(crate) fn make_chain_ahead(&mut self, id: u64) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            e.chain_if_none();
        }
    }

    /// The zygotes whose answers are owed (for the spawner's wait).
    pub(crate) fn awaited(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.entries.iter().filter_map(Entry::awaited)
    }

    /// Read the answers the zygotes whose sockets are in `readable` gave.
    pub(crate) fn hear_zygotes(&mut self, readable: &[RawFd]) {
        for e in &mut self.entries {
            if e.awaited().is_some_and(|fd| readable.contains(&fd)) {
                e.settle(Duration::ZERO);
            }
        }
    }

    /// The command `pid` is in session `id`.
    pub(crate) fn bind(&mut self, id: u64, pid: libc::pid_t) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            e.busy = Some(pid);
        }
    }

    /// Session `id` was given to no command after all (its fork failed).
    pub(crate) fn unbind(&mut self, id: u64) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            e.busy = None;
        }
    }

    /// The command `pid` has ended with wait status `status` (its first
    /// process's, or the one told on a chain's report socket once its PID
    /// namespace held nothing else): its session is free. Its first process ends once its PID
    /// namespace's init has, which kills and reaps everything left in it;
    /// but one that
    /// was killed (`SIGKILL`: a deadline, a cancel) may end before init has
    /// finished that, so its session is dropped rather than given to the
    /// next command while a process of this one may still run in it.
    pub(crate) fn release(&mut self, pid: libc::pid_t, status: libc::c_int) {
        let now = Instant::now();
        let killed = libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL;
        if killed {
            self.entries.retain(|e| e.busy != Some(pid));
        } else if let Some(e) = self.entries.iter_mut().find(|e| e.busy == Some(pid)) {
            e.busy = None;
            e.used = now;
        }
        self.expire(now);
        // A command that did not come from a chain (or ended before its
        // exec) has its session's next chain made now, not beside its own
        // start: both take the kernel's mount lock.
        self.make_chain();
    }

    /// Drop idle sessions unused for [`IDLE`] or older than
    /// [`MAX_AGE`], and the least recently used beyond [`KEPT`].
    fn expire(&mut self, now: Instant) {
        self.entries.retain(|e| {
            e.busy.is_some()
                || (now.duration_since(e.used) < IDLE && now.duration_since(e.made) < MAX_AGE)
        });
        let mut idle: Vec<(Instant, u64)> = self
            .entries
            .iter()
            .filter(|e| e.busy.is_none())
            .map(|e| (e.used, e.id))
            .collect();
        if idle.len() > KEPT {
            idle.sort();
            let drop: Vec<u64> = idle[..idle.len() - KEPT]
                .iter()
                .map(|(_, id)| *id)
                .collect();
            self.entries.retain(|e| !drop.contains(&e.id));
        }
    }

    /// How long until an idle session is due to be dropped (for the
    /// spawner's wait), if one is kept.
    pub(crate) fn next_expiry(&self, now: Instant) -> Option<Duration> {
        self.entries
            .iter()
            .filter(|e| e.busy.is_none())
            .map(|e| {
                let idle = (e.used + IDLE).saturating_duration_since(now);
                let age = (e.made + MAX_AGE).saturating_duration_since(now);
                idle.min(age)
            })
            .min()
    }

    /// Drop what is due (the spawner's wait ran out).
    pub(crate) fn tick(&mut self) {
        self.expire(Instant::now());
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Make a session for `plan`: fork a maker that makes the user namespace
/// as a command would, its network namespaces, a mount namespace in it
/// with the shared tree built, sends the user and mount namespaces back,
/// and stays, as the session's [`Zygote`].
fn make(plan: &ChildPlan) -> Option<Made> {
    let root = plan.root.as_ref()?;
    let (ours, theirs) = crate::fdpass::socket_pair_of(libc::SOCK_SEQPACKET).ok()?;
    // SAFETY: the spawner is single-threaded; the maker only makes system
    // calls on data that exists before the fork, then exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the maker, once.
        unsafe { maker(plan, root, theirs.as_raw_fd()) }
    }
    drop(theirs);
    if pid < 0 {
        return None;
    }
    let mut fds = if crate::fdpass::readable_within(ours.as_raw_fd(), MAKER_WAIT) {
        crate::fdpass::recv_fds(&ours, 2)
    } else {
        Vec::new()
    };
    // From here the maker is the session's zygote, killed and reaped
    // with it (at once, where it did not send all it should have).
    let zygote = Zygote {
        pid,
        ctl: ours,
        dead: std::cell::Cell::new(false),
    };
    if fds.len() != 2 {
        return None;
    }
    let mnt = fds.pop()?;
    let user = fds.pop()?;
    Some(Made { user, mnt, zygote })
}

/// The maker: a new user namespace (its maps and limits as the plan's),
/// its network namespaces (see [`Made`]), a mount namespace in it, every
/// mount private, the shared tree built on the staging directory; the
/// user and mount namespaces sent over `sock`; then the session's
/// [`zygote`], in `park` where made.
/// Exits without sending when a step fails.
///
/// # Safety
/// Only in the child just forked by [`make`].
unsafe fn maker(plan: &ChildPlan, root: &crate::root::RootPlan, sock: RawFd) -> ! {
    // SAFETY (whole body): system calls on data made before the fork.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::unshare(libc::CLONE_NEWUSER) != 0
            || child::map_user(&plan.uid_map, &plan.gid_map, &plan.user_sysctls).is_err()
        {
            libc::_exit(1);
        }
        // For a task's commands: the network namespace where a chain's
        // processes wait (`lo` down, nothing ever in it), and the one they
        // enter while it is untouched (`lo` up; see [`Chain`]).
        let open = |path: &[u8]| libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        let shared = shares_net(plan);
        let mut park = -2;
        if shared {
            if libc::unshare(libc::CLONE_NEWNET) != 0 {
                libc::_exit(1);
            }
            park = open(b"/proc/self/ns/net\0");
            if park < 0
                || libc::unshare(libc::CLONE_NEWNET) != 0
                || child::bring_up_loopback(-1).is_err()
            {
                libc::_exit(1);
            }
        }
        if libc::unshare(libc::CLONE_NEWNS) != 0
            || libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            || child::build_shared(root, -1).is_err()
        {
            libc::_exit(1);
        }
        let user = open(b"/proc/self/ns/user\0");
        let mnt = open(b"/proc/self/ns/mnt\0");
        let net = if shared {
            open(b"/proc/self/ns/net\0")
        } else {
            -2
        };
        if user < 0 || mnt < 0 || net == -1 {
            libc::_exit(1);
        }
        // The zygote: in a task's session, chains wait in `park`; it keeps
        // the session's `net` for their commands, and nothing else.
        if shared && libc::setns(park, libc::CLONE_NEWNET) != 0 {
            libc::_exit(1);
        }
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        // At the root of the session's mount namespace, as one entering
        // it is; signals as a fresh process has them (the spawner blocks
        // SIGCHLD and ignores SIGPIPE).
        if libc::chdir(c"/".as_ptr()) != 0 {
            libc::_exit(1);
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        if !crate::spares::send(sock, &[user, mnt]) {
            libc::_exit(1);
        }
        let net = if shared { net } else { -1 };
        child::close_all_except([sock, net]);
        zygote(sock, net)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::root::{Op, RootPlan};
    use std::ffi::CString;
    use std::path::PathBuf;

    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

    fn c(p: &std::path::Path) -> CString {
        CString::new(p.to_str().unwrap()).unwrap()
    }

    fn plan(staging: &std::path::Path, session: u8) -> ChildPlan {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        ChildPlan {
            unshare_flags: libc::CLONE_NEWNS
                | libc::CLONE_NEWPID
                | libc::CLONE_NEWUSER
                | libc::CLONE_NEWNET
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWCGROUP,
            userns: true,
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
            cgroup_procs: Vec::new(),
            mount_proc: true,
            overlay: None,
            ro_binds: Vec::new(),
            late_rules: None,
            loopback_up: true,
            proxy_sock: None,
            root: Some(RootPlan {
                staging: c(staging),
                shared: vec![
                    Op::Mkdir(c(&staging.join("dev"))),
                    Op::ReadOnly(c(staging), libc::MS_NOSUID | libc::MS_NODEV),
                ],
                ops: Vec::new(),
                rules: Vec::new(),
                cwd: c(staging),
            }),
            disk: None,
            rlimits: Vec::new(),
            landlock_fd: None,
            seccomp: None,
            user_sysctls: Vec::new(),
            diag_fd: -1,
            ctty: false,
            session,
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

    /// What a command entering `g` finds at `staging`: 0 when its shared
    /// tree is there and read-only (a forked child enters both
    /// namespaces, as a command's does, and tries to write).
    fn written_in(g: &Given, staging: &std::path::Path) -> i32 {
        let dev = c(&staging.join("dev"));
        let new = c(&staging.join("new"));
        // SAFETY: the child makes system calls on data made before the
        // fork, then exits; the parent reaps it.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                let code = if libc::setns(g.user, libc::CLONE_NEWUSER) != 0
                    || libc::setns(g.mnt, libc::CLONE_NEWNS) != 0
                {
                    3
                } else if libc::access(dev.as_ptr(), libc::F_OK) != 0 {
                    2
                } else if libc::mkdir(new.as_ptr(), 0o755) == 0 {
                    1
                } else if *libc::__errno_location() == libc::EROFS {
                    0
                } else {
                    4
                };
                libc::_exit(code);
            }
            let mut st = 0;
            assert_eq!(libc::waitpid(pid, &mut st, 0), pid);
            libc::WEXITSTATUS(st)
        }
    }

    /// A plan that joins a cgroup (the test never sends it as an order:
    /// the cgroup is not made).
    fn joining(staging: &std::path::Path, session: u8) -> ChildPlan {
        let mut p = plan(staging, session);
        p.cgroup_procs = vec![CString::new("/sys/fs/cgroup/pids/loop-test/cgroup.procs").unwrap()];
        p
    }

    /// A directory for a test named `name` and the staging directory in
    /// it; `None` where this machine has no user namespaces (nothing to
    /// test).
    fn scene(name: &str) -> Option<(PathBuf, PathBuf)> {
        if !crate::probe::support().userns {
            eprintln!("no user namespaces here: nothing to test");
            return None;
        }
        let base = std::env::temp_dir().join(format!("loop-{name}-{}", std::process::id()));
        let staging = base.join("root");
        std::fs::create_dir_all(&staging).unwrap();
        Some((base, staging))
    }

    /// The parent of `pid`, from `/proc`.
    fn ppid_of(pid: libc::pid_t) -> libc::pid_t {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // After the command's name, in parentheses: its state, its parent.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        rest.split(' ').nth(1).unwrap().parse().unwrap()
    }

    /// The inode of `/proc/PID/ns/NAME`.
    fn ns_of(pid: libc::pid_t, name: &str) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/{pid}/ns/{name}"))
            .unwrap()
            .ino()
    }

    /// Whether process group `pgid` is gone within a few seconds (its
    /// killed members end, and are reaped by whoever took them up).
    fn group_ends(pgid: libc::pid_t) -> bool {
        (0..500).any(|_| {
            // SAFETY: kill with signal 0 only asks.
            let gone = unsafe { libc::kill(-pgid, 0) } == -1;
            if !gone {
                std::thread::sleep(Duration::from_millis(10));
            }
            gone
        })
    }

    #[test]
    fn a_chain_is_made_once_a_command_has_ended_and_takes_only_a_command_it_fits() {
        let Some((base, staging)) = scene("chain") else {
            return;
        };
        let mut s = Sessions::default();
        let first = s.take(&plan(&staging, 1)).expect("a session is made");
        assert!(
            first.new && first.chain.is_none(),
            "the first starts on its own"
        );
        let (session_user, session_mnt) = (ino(first.user), ino(first.mnt));
        s.bind(first.id, 2001);
        // Nothing is made beside a running forked command (the first of
        // its session): its session's chain comes once it has ended.
        assert!(s.entries.iter().all(|e| e.chain.is_none()));
        s.release(2001, 0);
        let mut next = None;
        for _ in 0..400 {
            let g = s.take(&plan(&staging, 1)).unwrap();
            if g.chain.is_some() {
                next = Some(g);
                break;
            }
            s.unbind(g.id);
        }
        let next = next.expect("the chain says it is ready");
        assert_eq!(next.id, first.id);
        let chain = next.chain.unwrap();
        let init = chain.init;
        // Its first process is a process group of its own, in the
        // session's user namespace, with a mount namespace of its own (a
        // copy of the session's), waiting in the session's parked network
        // namespace: not the spawner's, not the one commands enter (a
        // task's session: a check's chain makes the check's own ahead).
        // SAFETY: getpgid of a child of ours.
        assert_eq!(unsafe { libc::getpgid(init) }, init);
        assert_eq!(ns_of(init, "user"), session_user);
        assert_ne!(ns_of(init, "mnt"), session_mnt);
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        assert_ne!(ns_of(init, "net"), ns_of(me, "net"));
        let session = s.entries.iter().find(|e| e.id == first.id).unwrap();
        // Cloned by the session's zygote, with the spawner as its parent:
        // in the zygote's parked network namespace, with a copy of its
        // mount namespace, in its user namespace.
        let zygote = session.ns.zygote.pid;
        assert_eq!(ppid_of(init), me);
        assert_eq!(ns_of(init, "net"), ns_of(zygote, "net"));
        assert_eq!(ns_of(zygote, "mnt"), session_mnt);
        assert_eq!(ns_of(zygote, "user"), session_user);
        assert_ne!(ns_of(init, "pid"), ns_of(zygote, "pid"));
        assert_ne!(ns_of(init, "mnt"), ns_of(me, "mnt"));
        // Dropped unused (no order came): killed and reaped, group and all.
        drop(chain);
        // SAFETY: waitpid on a pid that was our child.
        assert_eq!(
            unsafe { libc::waitpid(init, std::ptr::null_mut(), libc::WNOHANG) },
            -1
        );
        assert!(group_ends(init), "its group is gone");
        s.bind(next.id, 2002);
        s.release(2002, 0);
        // A command that joins cgroups takes a chain too: it joins them
        // once its order has come, and only then makes its cgroup
        // namespace, which the chain has not made.
        let made = s.entries.iter_mut().find(|e| e.id == first.id).unwrap();
        // Asked for, not waited for: its init is known once the zygote's
        // answer is read.
        assert!(made.chain.as_ref().is_some_and(|c| c.asked && c.init == 0));
        made.settle(MAKER_WAIT);
        let c = made.chain.as_mut().expect("made once the command ended");
        assert!(c.init > 0 && !c.asked);
        assert!(
            (0..1000).any(|_| c.ready() == Some(true)),
            "the chain says it is ready"
        );
        let joined = s.take(&joining(&staging, 1)).unwrap();
        assert_eq!(joined.id, first.id);
        let chain = joined.chain.expect("a chain takes a command with cgroups");
        assert_eq!(ns_of(chain.init, "cgroup"), ns_of(me, "cgroup"));
        assert_ne!(ns_of(chain.init, "ipc"), ns_of(me, "ipc"));
        drop(chain);
        s.bind(joined.id, 2003);
        s.release(2003, 0);
        assert!(
            s.entries
                .iter()
                .any(|e| e.id == first.id && e.chain.is_some()),
            "the next is made once it has ended"
        );
        // Nor does a check take a task command's chain.
        let check = s.take(&plan(&staging, 2)).unwrap();
        assert!(check.new && check.chain.is_none());
        s.unbind(check.id);
        // The spawner's end drops every session and kills their chains
        // and zygotes (reaped: no such process is left).
        for e in &mut s.entries {
            e.settle(MAKER_WAIT);
        }
        let inits: Vec<libc::pid_t> = s
            .entries
            .iter()
            .filter_map(|e| e.chain.as_ref().map(|c| c.init))
            .collect();
        let zygotes: Vec<libc::pid_t> = s.entries.iter().map(|e| e.ns.zygote.pid).collect();
        drop(s);
        assert!(!inits.is_empty());
        for r in inits {
            assert!(group_ends(r));
        }
        assert_eq!(zygotes.len(), 2, "the task's session's and the check's");
        for z in zygotes {
            // SAFETY: kill with signal 0 only asks.
            assert_eq!(unsafe { libc::kill(z, 0) }, -1, "zygote {z} is left");
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A zygote that is gone (killed, say) makes no chain, is asked
    /// nothing again, and its session still serves commands (which then
    /// start as without a chain).
    #[test]
    fn a_zygote_gone_makes_no_chain_and_its_session_still_serves() {
        let Some((base, staging)) = scene("zygote") else {
            return;
        };
        let mut s = Sessions::default();
        let first = s.take(&plan(&staging, 1)).expect("a session is made");
        let e = s.entries.iter().find(|e| e.id == first.id).unwrap();
        let zygote = e.ns.zygote.pid;
        // SAFETY: a signal to our own child, then waiting for its end
        // without reaping it (its session reaps it when dropped).
        unsafe {
            libc::kill(zygote, libc::SIGKILL);
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                zygote as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            );
        }
        let flags = chain_flags(&plan(&staging, 1)).unwrap();
        assert!(Chain::make(&e.ns, flags).is_none(), "no chain");
        assert!(e.ns.zygote.dead.get(), "and it is asked nothing again");
        assert!(Chain::make(&e.ns, flags).is_none());
        s.bind(first.id, 4001);
        s.release(4001, 0);
        let again = s.take(&plan(&staging, 1)).expect("the session serves");
        assert_eq!(again.id, first.id);
        assert!(!again.new && again.chain.is_none());
        s.unbind(again.id);
        drop(s);
        // SAFETY: kill with signal 0 only asks.
        assert_eq!(
            unsafe { libc::kill(zygote, 0) },
            -1,
            "reaped with its session"
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_session_serves_one_command_at_a_time_and_only_its_own_kind() {
        let Some((base, staging)) = scene("warm") else {
            return;
        };
        let mut s = Sessions::default();
        assert!(
            s.take(&joining(&staging, 0)).is_none(),
            "a plan that may not share"
        );
        let first = s.take(&joining(&staging, 1)).expect("a session is made");
        assert!(first.new);
        // SAFETY: ns ioctls that take no argument.
        unsafe {
            assert_eq!(libc::ioctl(first.user, NS_GET_NSTYPE), libc::CLONE_NEWUSER);
            assert_eq!(libc::ioctl(first.mnt, NS_GET_NSTYPE), libc::CLONE_NEWNS);
            let owner = libc::ioctl(first.mnt, NS_GET_USERNS);
            assert!(owner >= 0);
            assert_eq!(
                ino(owner),
                ino(first.user),
                "the tree is the session user's"
            );
            libc::close(owner);
        }
        assert_eq!(written_in(&first, &staging), 0, "built, and read-only");
        assert!(
            !staging.join("dev").exists(),
            "built in the session's own mount namespace, not the host's"
        );
        s.bind(first.id, 1001);
        // While it serves a command, the next of its kind gets another.
        let second = s.take(&joining(&staging, 1)).unwrap();
        assert!(second.new && second.id != first.id);
        assert_ne!(ino(second.user), ino(first.user));
        s.bind(second.id, 1002);
        // Its command ended: the session serves the next.
        s.release(1001, 0);
        let again = s.take(&joining(&staging, 1)).unwrap();
        assert!(!again.new);
        assert_eq!(again.id, first.id);
        assert_eq!(ino(again.user), ino(first.user));
        s.bind(again.id, 1003);
        // A check never enters a task command's session.
        let check = s.take(&joining(&staging, 2)).unwrap();
        assert!(check.new && check.id != first.id && check.id != second.id);
        // A task's commands may share their session's network namespace
        // while it is untouched; a verification's checks never do (each
        // check makes its own at its order).
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        let net_of = |id: u64| {
            let zygote = s.entries.iter().find(|e| e.id == id).unwrap().ns.zygote.pid;
            ns_of(zygote, "net") != ns_of(me, "net")
        };
        assert!(net_of(first.id) && net_of(second.id));
        assert!(!net_of(check.id));
        s.unbind(check.id);
        // Idle sessions go once unused for long enough; one in use stays.
        assert_eq!(s.len(), 3);
        s.release(1002, 0);
        s.expire(Instant::now() + IDLE + Duration::from_secs(1));
        assert_eq!(s.len(), 1, "only the one in use is kept");
        s.release(1003, 0);
        assert!(s.next_expiry(Instant::now()).is_some_and(|d| d <= IDLE));
        s.expire(Instant::now() + MAX_AGE);
        assert_eq!(s.len(), 0);
        // A command killed (a deadline, a cancel) may leave a process in
        // its session for a moment: the session is dropped, not reused.
        let killed = s.take(&joining(&staging, 1)).unwrap();
        s.bind(killed.id, 1004);
        s.release(1004, libc::SIGKILL);
        assert_eq!(s.len(), 0);
        let fresh = s.take(&joining(&staging, 1)).unwrap();
        assert!(fresh.new && fresh.id != killed.id);
        let _ = std::fs::remove_dir_all(&base);
    }
}
