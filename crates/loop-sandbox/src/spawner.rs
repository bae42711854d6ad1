//! The spawner: a small process, made once per runtime process the first
//! time it runs a command, that every later command is forked from.
//!
//! Forking copies the forking process's page tables. A server holding
//! many tasks, or a verification holding a manifest of 100,000 files,
//! is large; the spawner is a fresh `exec` of the same binary that never
//! grows (it keeps a list of the commands it started, nothing else), so
//! each command's fork is cheap wherever it is asked for. The spawner is
//! itself started with `posix_spawn` (no copy of the runtime at all).
//!
//! Nothing about a command's sandbox changes: the runtime prepares the
//! same [`ChildPlan`] as for a fork of its own, sends it (`wire.rs`) with
//! the descriptors it names, and the spawner's child enters it exactly as
//! a child of the runtime would, then runs the program with the
//! variables, directory and standard streams the runtime gave it.
//!
//! The runtime and the spawner talk over a socket pair the spawner reads
//! as its standard input: one message per command, carrying that
//! command's own socket, over which the spawner answers with the
//! command's process id at once and with its wait status once it has
//! ended (its process group killed first, then reaped). When the
//! runtime's end closes (it exited, or was killed), the spawner kills
//! every command it started and exits; each command's first process dies
//! with the spawner (`PR_SET_PDEATHSIG`, as with the runtime).
//!
//! Only a binary that calls [`serve_if_asked`] first thing in `main` and
//! then [`enable`] uses one (the `loop` binary, except `loop exec` of one
//! command, whose process is small and starts one: a spawner would be a
//! second); elsewhere, and with `LOOP_SPAWNER=0`, the runtime forks each
//! command itself. `LOOP_SPAWNER=1` uses one for `loop exec` too.
//!
//! The spawner owes two answers at once: a command's pid when it is
//! ordered, and its status when the runtime asked it to kill the command
//! (a deadline, a cancel). When one has not come within 10 s
//! (`LOOP_SPAWNER_ANSWER_MS`, and again every as long) the spawner's state
//! is read: stopped (`SIGSTOP`, a debugger), or gone, it is killed, with
//! whatever it started, that command fails with an error saying so, and
//! the next command starts another spawner; running or waiting, it is
//! only slow (a fork under memory pressure, a command slow to die, which
//! killing it would not hasten) and is waited for. Its end, once the
//! runtime closes its socket, is waited for the same way: a stopped
//! spawner never hangs the runtime, and a slow one never costs the other
//! commands it runs.

use crate::child::ChildPlan;
use crate::fdpass;
use crate::ordered::{Exec, MAX_FDS, decode_order, run, send_fds};
use crate::spares::{Pair, Spares};
use crate::warm::Sessions;
use crate::wire::{Enc, Head, Order};
use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The hidden first argument that makes the binary a spawner.
pub const ARG: &str = "__loop-spawner";

/// Spawners started in this process before it gives up on them.
const MAX_STARTS: u32 = 3;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// If this process was started as a spawner, serve and exit; otherwise
/// return at once. Call it first in `main`, before any thread starts.
pub fn serve_if_asked() {
    if std::env::args_os().nth(1).as_deref() == Some(OsStr::new(ARG)) {
        std::process::exit(serve());
    }
}

/// Start commands from a spawner in this process (see the module's
/// documentation) if `by_default`; `LOOP_SPAWNER=0` never does, and
/// `LOOP_SPAWNER=1` always does.
pub fn enable(by_default: bool) {
    let on = match std::env::var_os("LOOP_SPAWNER") {
        Some(v) if v == "0" => false,
        Some(v) if v == "1" => true,
        _ => by_default,
    };
    ENABLED.store(on, Ordering::SeqCst);
}

/// Whether this process starts its commands from a spawner.
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::SeqCst)
}

/// A started spawner: the runtime's end of the control socket.
pub(crate) struct Handle {
    ctl: OwnedFd,
    child: Mutex<Child>,
}

impl Handle {
    /// Close the runtime's end and reap the spawner (which kills and
    /// reaps what it started first: their time is then counted in this
    /// process's children's, as a fork of its own would be).
    fn close(&self) {
        // SAFETY: shutdown of a socket we own; it stays open until dropped.
        unsafe { libc::shutdown(self.ctl.as_raw_fd(), libc::SHUT_RDWR) };
        let mut c = self.child.lock().unwrap_or_else(|e| e.into_inner());
        // Closed once already (at exit, then as the last holder lets go):
        // reaped, its id may name another process now.
        if matches!(c.try_wait(), Ok(Some(_))) {
            return;
        }
        // One that does not end when told, being stopped, is killed.
        if let Some(fd) = crate::pidfd_open(c.id() as libc::pid_t)
            && !answered_or_stopped(fd.as_raw_fd(), c.id(), answer_wait())
        {
            let _ = c.kill();
        }
        let _ = c.wait();
    }

    /// Wait for `fd` (an answer of this spawner): whether it came, or the
    /// spawner was found stopped (see the module's documentation).
    fn answers(&self, fd: RawFd) -> bool {
        let pid = self.child.lock().unwrap_or_else(|e| e.into_inner()).id();
        answered_or_stopped(fd, pid, answer_wait())
    }

    /// Take this spawner for hung: kill it (each command it started dies
    /// with it: their first process's parent-death signal) and forget it.
    fn hung(self: &Arc<Self>) {
        tracing::warn!(
            "the spawner did not answer within {} ms and is stopped: it is killed, with what it started; the next command starts another",
            answer_wait().as_millis()
        );
        let _ = self.child.lock().unwrap_or_else(|e| e.into_inner()).kill();
        lost(self);
    }
}

/// How long an answer the spawner owes at once may take before it is
/// taken for hung (see the module's documentation).
fn answer_wait() -> Duration {
    static WAIT: OnceLock<Duration> = OnceLock::new();
    *WAIT.get_or_init(|| {
        std::env::var("LOOP_SPAWNER_ANSWER_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(10), Duration::from_millis)
            .max(Duration::from_millis(10))
    })
}

/// Wait until `fd` is readable: true, or false as soon as, once `wait`
/// has passed without, process `pid` is stopped or gone.
fn answered_or_stopped(fd: RawFd, pid: u32, wait: Duration) -> bool {
    loop {
        if crate::fdpass::readable_within(fd, wait) {
            return true;
        }
        // The state follows the name, which is in parentheses. Only a
        // process known to be stopped or gone is given up on: a read that
        // fails otherwise (no descriptors left, say) says nothing.
        let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
            Err(_) => continue,
        };
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if matches!(state, Some('T' | 't' | 'Z' | 'X')) {
            return false;
        }
    }
}

/// The error of a command whose spawner was taken for hung.
fn hung_error(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "the spawner did not answer within {} ms {what} and was found stopped: it was killed, with every command it had started, and the next command starts another",
            answer_wait().as_millis()
        ),
    )
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.close();
    }
}

/// Set once this process has begun to exit: its spawner is being closed,
/// which kills every command it started. Those ends are the runtime's
/// own, not the commands': see [`never_if_exiting`].
static EXITING: AtomicBool = AtomicBool::new(false);

/// At this process's exit, its spawner is closed and reaped.
extern "C" fn close_at_exit() {
    // Before the close: whatever a command's wait learns from here on may
    // be the kill this close makes.
    EXITING.store(true, Ordering::SeqCst);
    let handle = match STATE.try_lock() {
        Ok(mut s) => s.handle.take(),
        Err(_) => None,
    };
    if let Some(h) = handle {
        h.close();
    }
}

struct State {
    handle: Option<Arc<Handle>>,
    starts: u32,
}

static STATE: Mutex<State> = Mutex::new(State {
    handle: None,
    starts: 0,
});

/// `r`, what a wait for a spawner's command learned, unless this process
/// has begun to exit. Then the command may have been killed by closing
/// the spawner (other threads run on while `exit` runs its handlers),
/// and that end is not the command's: recorded as its result, a task
/// resumed later would take a command the runtime cut short for one that
/// ran. The thread that asked waits for the process's end instead, which
/// comes once the spawner is reaped; so does one asking for a new command.
fn never_if_exiting<T>(r: T) -> T {
    while EXITING.load(Ordering::SeqCst) {
        std::thread::park();
    }
    r
}

/// The spawner to start commands from: `None` when this process does not
/// use one, or could not start one (then it forks commands itself).
pub(crate) fn handle() -> Option<Arc<Handle>> {
    if !ENABLED.load(Ordering::SeqCst) {
        return None;
    }
    never_if_exiting(());
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = &s.handle {
        return Some(h.clone());
    }
    if s.starts >= MAX_STARTS {
        return None;
    }
    s.starts += 1;
    match start() {
        Ok(h) => {
            let h = Arc::new(h);
            s.handle = Some(h.clone());
            static AT_EXIT: std::sync::Once = std::sync::Once::new();
            // SAFETY: registering a plain function to run at exit.
            AT_EXIT.call_once(|| unsafe {
                libc::atexit(close_at_exit);
            });
            Some(h)
        }
        Err(e) => {
            tracing::warn!("commands are forked by the runtime itself: no spawner ({e})");
            None
        }
    }
}

/// Start this process's spawner now (if it uses one) rather than at its
/// first command: it runs at the priority of the thread that starts it,
/// and commands asked for at a lower one than that get its.
pub fn start_now() {
    let _ = handle();
}

/// Forget a spawner that stopped answering (the next command starts
/// another, up to [`MAX_STARTS`]).
fn lost(h: &Arc<Handle>) {
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if s.handle.as_ref().is_some_and(|x| Arc::ptr_eq(x, h)) {
        s.handle = None;
    }
}

fn start() -> io::Result<Handle> {
    let (ours, theirs) = seqpacket_pair()?;
    // `/proc/self/exe` is this binary even if its file was since replaced.
    // It needs no variables (each command's are sent with it), and is
    // better without the runtime's credentials in its environment.
    let child = Command::new("/proc/self/exe")
        .arg(ARG)
        .env_clear()
        .current_dir("/")
        .stdin(theirs)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    Ok(Handle {
        ctl: ours,
        child: Mutex::new(child),
    })
}

fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    crate::fdpass::socket_pair_of(libc::SOCK_SEQPACKET)
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A command started in its sandbox, by the spawner or by a fork of the
/// runtime's own.
pub(crate) struct Proc {
    pid: libc::pid_t,
    how: How,
    pub stdin: Option<File>,
    pub stdout: Option<File>,
    pub stderr: Option<File>,
}

enum How {
    /// Forked by the runtime: its child, a pidfd to sleep on, and the
    /// socket its relay tells the command's end on, with that end once
    /// told (see `child::enter_reporting`).
    Direct(
        Child,
        Option<OwnedFd>,
        Option<(OwnedFd, Option<ExitStatus>)>,
    ),
    /// Forked by the spawner: the socket its end is told on, its status
    /// once told, and the spawner (kept until its commands have ended,
    /// even once replaced: closing it kills what it started).
    Spawned(OwnedFd, Option<ExitStatus>, Arc<Handle>),
}

impl Proc {
    /// A command the runtime forked itself.
    pub fn direct(mut c: Child) -> Proc {
        let pid = c.id() as libc::pid_t;
        let stdin = c.stdin.take().map(|s| File::from(OwnedFd::from(s)));
        let stdout = c.stdout.take().map(|s| File::from(OwnedFd::from(s)));
        let stderr = c.stderr.take().map(|s| File::from(OwnedFd::from(s)));
        Proc {
            pid,
            how: How::Direct(c, crate::pidfd_open(pid), None),
            stdin,
            stdout,
            stderr,
        }
    }

    /// A command the runtime forked itself whose relay tells its end on
    /// `report` (see `child::enter_reporting`): it has ended once that
    /// comes, while the relay's own exit still tears its namespaces down
    /// (the relay is then reaped beside, see `Drop`).
    pub fn direct_reported(c: Child, report: OwnedFd) -> Proc {
        let mut p = Proc::direct(c);
        if let How::Direct(_, _, r) = &mut p.how {
            *r = Some((report, None));
        }
        p
    }

    /// Its process id (its group's too).
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// Its status if it has ended (reaped), else `None`.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match &mut self.how {
            How::Direct(c, _, report) => match relay_told(report, false)? {
                Reported::Ended(st) => Ok(Some(st)),
                Reported::NotYet => Ok(None),
                // No report (or the relay ended without one): its own end,
                // woken for by its pidfd.
                Reported::Gone => c.try_wait(),
            },
            How::Spawned(chan, status, _) => {
                if status.is_none() {
                    *status = never_if_exiting(read_status(chan, false))?;
                }
                Ok(*status)
            }
        }
    }

    /// Wait until it has ended.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        match &mut self.how {
            How::Direct(c, _, report) => match relay_told(report, true)? {
                Reported::Ended(st) => Ok(st),
                Reported::NotYet | Reported::Gone => c.wait(),
            },
            How::Spawned(chan, status, h) => {
                // Asked for once the command was to end (its group killed),
                // or once it has: the answer is owed at once.
                if status.is_none() && !h.answers(chan.as_raw_fd()) {
                    h.hung();
                    return never_if_exiting(Err(hung_error("once the command was to end")));
                }
                if status.is_none() {
                    *status = never_if_exiting(read_status(chan, true))?;
                }
                status.ok_or_else(|| io::Error::other("the spawner gave no status"))
            }
        }
    }

    /// Like [`Proc::try_wait`], but once it has ended whatever is left in
    /// its process group is killed before it is reaped (while the leader
    /// is a zombie its id cannot name another group).
    pub fn try_end(&mut self) -> io::Result<Option<ExitStatus>> {
        match &mut self.how {
            How::Direct(_, _, report @ Some(_)) => match relay_told(report, false)? {
                Reported::Ended(st) => {
                    // SAFETY: killpg of the group we made, its leader
                    // unreaped (reaped only once dropped).
                    unsafe { libc::killpg(self.pid, libc::SIGKILL) };
                    Ok(Some(st))
                }
                Reported::NotYet => Ok(None),
                // The relay's own end, as without a report (now `None`).
                Reported::Gone => self.try_end(),
            },
            How::Direct(c, _, None) => {
                // SAFETY: waitid on our own child with a zeroed siginfo to fill.
                let exited = unsafe {
                    let mut info: libc::siginfo_t = std::mem::zeroed();
                    libc::waitid(
                        libc::P_PID,
                        self.pid as libc::id_t,
                        &mut info,
                        libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                    ) == 0
                        && info.si_pid() != 0
                };
                if !exited {
                    return Ok(None);
                }
                // SAFETY: killpg of the group we made, its leader unreaped.
                unsafe { libc::killpg(self.pid, libc::SIGKILL) };
                c.wait().map(Some)
            }
            // The spawner kills the group before it reaps the leader.
            How::Spawned(..) => self.try_wait(),
        }
    }

    /// Kill its whole process group. A spawner's command is killed by the
    /// spawner, which alone knows whether its leader is still unreaped
    /// (once reaped, its id may name another group); once its status came
    /// the group was killed already.
    pub fn kill_group(&self) {
        match &self.how {
            // SAFETY: killpg of the group we made; as before, the leader
            // may have been reaped by a `wait` of ours just before.
            How::Direct(..) => unsafe {
                libc::killpg(self.pid, libc::SIGKILL);
            },
            How::Spawned(chan, None, _) => answer(chan, b'K', 0),
            How::Spawned(_, Some(_), _) => {}
        }
    }

    /// A descriptor readable once it may have ended (none where its end
    /// is known, or cannot be waited for: then poll it).
    pub fn wake_fd(&self) -> Option<RawFd> {
        match &self.how {
            How::Direct(_, _, Some((fd, None)))
            | How::Direct(_, Some(fd), None)
            | How::Spawned(fd, None, _) => Some(fd.as_raw_fd()),
            _ => None,
        }
    }
}

impl Drop for Proc {
    /// A relay whose report told the command's end is reaped beside, once
    /// its namespaces are torn down (it is never waited for otherwise).
    fn drop(&mut self) {
        if let How::Direct(c, _, Some((_, Some(_)))) = &mut self.how
            && matches!(c.try_wait(), Ok(None))
        {
            let pid = self.pid;
            // Unreaped, its id is still ours alone.
            let reap = move || {
                let mut st = 0;
                // SAFETY: waitpid on our own unreaped child.
                while unsafe { libc::waitpid(pid, &mut st, 0) } < 0
                    && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
                {
                }
            };
            // Without a thread, here (its group was killed: it is ending).
            if std::thread::Builder::new()
                .name("loop-reap".into())
                .spawn(reap)
                .is_err()
            {
                reap();
            }
        }
    }
}

/// What a relay's report socket holds.
enum Reported {
    /// `E` and the wait status the relay ends with.
    Ended(ExitStatus),
    /// Nothing yet (only when not blocking).
    NotYet,
    /// No report, or the relay ended without telling (killed, or failed
    /// before).
    Gone,
}

/// The end a relay's `report` told (kept once told); `Gone` where there
/// is none or the relay ended without telling (the report is then
/// dropped: its own end is waited for).
fn relay_told(
    report: &mut Option<(OwnedFd, Option<ExitStatus>)>,
    block: bool,
) -> io::Result<Reported> {
    let Some((fd, told)) = report else {
        return Ok(Reported::Gone);
    };
    if let Some(st) = told {
        return Ok(Reported::Ended(*st));
    }
    let got = match recv_word(fd, block)? {
        None => Reported::NotYet,
        Some((5, w)) if w[0] == b'E' => {
            tracing::debug!(
                target: "loop_sandbox::phases",
                "sandbox: the command's end told once its PID namespace held nothing else, before the namespaces' teardown"
            );
            Reported::Ended(ExitStatus::from_raw(status_in(&w)))
        }
        Some((0, _)) => Reported::Gone,
        Some(_) => return Err(io::Error::other("the relay's report is malformed")),
    };
    match got {
        Reported::Ended(st) => *told = Some(st),
        Reported::Gone => *report = None,
        Reported::NotYet => {}
    }
    Ok(got)
}

/// One message of at most 8 bytes from `fd`: its length and bytes;
/// `None` when none has come (only when not blocking).
fn recv_word(fd: &OwnedFd, block: bool) -> io::Result<Option<(isize, [u8; 8])>> {
    let mut buf = [0u8; 8];
    loop {
        let flags = if block { 0 } else { libc::MSG_DONTWAIT };
        let n = crate::fdpass::recv_packet(fd.as_raw_fd(), &mut buf, flags);
        if n >= 0 {
            return Ok(Some((n, buf)));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// The wait status in bytes 1..5 of a `kind` + status word.
fn status_in(w: &[u8; 8]) -> i32 {
    i32::from_le_bytes([w[1], w[2], w[3], w[4]])
}

/// Read the spawner's `X` + wait status from a command's socket;
/// `None` when it has not come yet (only when not blocking).
fn read_status(chan: &OwnedFd, block: bool) -> io::Result<Option<ExitStatus>> {
    let Some((n, w)) = recv_word(chan, block)? else {
        return Ok(None);
    };
    match (n, w[0]) {
        (5, kind @ (b'X' | b'x')) => {
            if kind == b'x' {
                tracing::debug!(
                    target: "loop_sandbox::phases",
                    "sandbox: the command's end told by its chain once its PID namespace held nothing else, before the namespaces' teardown"
                );
            }
            Ok(Some(ExitStatus::from_raw(status_in(&w))))
        }
        (0, _) => Err(io::Error::other(
            "the spawner ended before the command (which was killed with it)",
        )),
        _ => Err(io::Error::other("the spawner's answer is malformed")),
    }
}

/// The standard streams of a command started by the spawner.
pub(crate) enum Streams {
    /// Output and error piped to the runtime; input piped too, or empty.
    Piped { stdin: bool },
    /// These three (a terminal's end).
    Given([OwnedFd; 3]),
}

/// Start `cmd` (its program, arguments, variables and directory; its
/// variables are exactly those set on it) entering `plan`, from the
/// spawner `h` (or, if that one is gone, from a new one). An error is the
/// start's: the program could not be run, a sandbox step failed (its name
/// is on the plan's diagnostic pipe), or no spawner took the order
/// (`EAGAIN`).
pub(crate) fn spawn(
    h: Arc<Handle>,
    cmd: &Command,
    plan: &ChildPlan,
    streams: Streams,
) -> io::Result<Proc> {
    // A start cut short by this process's exit is no more the command's
    // than an end is.
    never_if_exiting(order(h, cmd, plan, streams))
}

/// [`spawn`], whatever this process is doing.
fn order(h: Arc<Handle>, cmd: &Command, plan: &ChildPlan, streams: Streams) -> io::Result<Proc> {
    let (theirs, [stdin, stdout, stderr]) = streams_for(streams)?;
    let (failed_read, failed_write) = pipe()?;
    let (chan, chan_theirs) = seqpacket_pair()?;
    let head = Head {
        argv: argv_of(cmd)?,
        envp: envp_of(cmd)?,
        // The spawner's own directory is `/`: made absolute here, as the
        // runtime's fork would have read it.
        cwd: cstring(
            std::path::absolute(cmd.get_current_dir().unwrap_or(".".as_ref()))?.as_os_str(),
        )?,
        // SAFETY: getpriority of the calling thread (Linux: per thread).
        nice: unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) },
        stdio: [
            theirs[0].as_raw_fd(),
            theirs[1].as_raw_fd(),
            theirs[2].as_raw_fd(),
        ],
        failed: failed_write.as_raw_fd(),
    };
    let mut e = Enc::default();
    Order::encode(&head, plan, &mut e);
    let memfd = order_file(&e.buf)?;
    let mut fds = vec![chan_theirs.as_raw_fd(), memfd.as_raw_fd()];
    fds.extend_from_slice(&e.fds);
    let mut h = h;
    // A spawner that is gone (killed, say) is replaced once: the order
    // was never taken, so it is sent again as it was.
    if send_fds(&h.ctl, b"O", &fds).is_err() {
        lost(&h);
        h = handle().ok_or_else(|| io::Error::from_raw_os_error(libc::EAGAIN))?;
        if send_fds(&h.ctl, b"O", &fds).is_err() {
            lost(&h);
            return Err(io::Error::from_raw_os_error(libc::EAGAIN));
        }
    }
    // Only the spawner (then the command) holds these now.
    drop((theirs, failed_write, chan_theirs, memfd));
    if !h.answers(chan.as_raw_fd()) {
        h.hung();
        return Err(hung_error(
            "with the command's process id (the command may have begun)",
        ));
    }
    let (pid, ahead) = read_pid(&chan)?;
    match ahead {
        Ahead::Pair => tracing::debug!(
            target: "loop_sandbox::phases",
            "sandbox: user and network namespaces made ahead"
        ),
        Ahead::Session => tracing::debug!(
            target: "loop_sandbox::phases",
            "sandbox: namespaces made ahead: the session's user namespace and shared root (its network namespace the command's own)"
        ),
        Ahead::NewSession => tracing::debug!(
            target: "loop_sandbox::phases",
            "sandbox: a session made (user namespace, shared root) for this command and those like it"
        ),
        Ahead::Chain => tracing::debug!(
            target: "loop_sandbox::phases",
            "sandbox: namespaces made ahead: a session's chain took the command (the session's user namespace and shared root entered, its own mount, PID and IPC namespaces made with its init, cloned by the session's zygote, before it was ordered; at its order, the session's network namespace entered if untouched, else a new one made)"
        ),
        Ahead::None => {}
    }
    let mut proc = Proc {
        pid,
        how: How::Spawned(chan, None, h),
        stdin,
        stdout,
        stderr,
    };
    // As `std` does: the child's end of this pipe closes at its exec,
    // or carries the errno of what failed before it.
    let mut errno = [0u8; 4];
    if read_full(&failed_read, &mut errno) == 4 {
        let _ = proc.wait();
        return Err(io::Error::from_raw_os_error(i32::from_le_bytes(errno)));
    }
    Ok(proc)
}

/// The child's three standard streams, and the runtime's ends of those
/// that are pipes (input, output, error).
type Ends = ([OwnedFd; 3], [Option<File>; 3]);

fn streams_for(streams: Streams) -> io::Result<Ends> {
    match streams {
        Streams::Given(fds) => Ok((fds, [None, None, None])),
        Streams::Piped { stdin } => {
            let (i_theirs, i_ours) = if stdin {
                let (r, w) = pipe()?;
                (r, Some(File::from(w)))
            } else {
                (OwnedFd::from(File::open("/dev/null")?), None)
            };
            let (o_ours, o_theirs) = pipe()?;
            let (e_ours, e_theirs) = pipe()?;
            Ok((
                [i_theirs, o_theirs, e_theirs],
                [i_ours, Some(File::from(o_ours)), Some(File::from(e_ours))],
            ))
        }
    }
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

pub(crate) fn argv_of(cmd: &Command) -> io::Result<Vec<CString>> {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(cstring)
        .collect()
}

/// The command's variables: exactly those set on it (every command's
/// environment is cleared first), in `std`'s order.
pub(crate) fn envp_of(cmd: &Command) -> io::Result<Vec<CString>> {
    cmd.get_envs()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            cstring(OsStr::from_bytes(&kv))
        })
        .collect()
}

/// The encoded order in a memory file (read by the spawner from its
/// start, whatever its size).
fn order_file(bytes: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: memfd_create with a static name; the result is owned at once.
    let fd = unsafe { libc::memfd_create(c"loop-order".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just created, owned here only.
    let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    io::Write::write_all(&mut &f, bytes)?;
    Ok(OwnedFd::from(f))
}

/// What a command entered that was made before it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ahead {
    None,
    /// A user and a network namespace (`spares.rs`).
    Pair,
    /// A session (`warm.rs`) that served earlier commands.
    Session,
    /// A session made for this command, kept for the next.
    NewSession,
    /// A session's chain: its namespaces entered and its processes made
    /// before the command was ordered (`warm.rs`).
    Chain,
}

/// The spawner's first answer: `P` + the command's pid (`p`: it entered
/// namespaces made ahead; `s`: a session's, `n`: a session made for it),
/// or `E` + the errno of a failed fork or a refused order; none
/// (`EAGAIN`) when the spawner dropped the order or ended.
fn read_pid(chan: &OwnedFd) -> io::Result<(libc::pid_t, Ahead)> {
    // A blocking read has a message or the end.
    let (n, buf) = recv_word(chan, true)?.unwrap_or((0, [0; 8]));
    let value = || i32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]);
    match (n, buf[0]) {
        (5, b'P') => Ok((value(), Ahead::None)),
        (5, b'p') => Ok((value(), Ahead::Pair)),
        (5, b's') => Ok((value(), Ahead::Session)),
        (5, b'n') => Ok((value(), Ahead::NewSession)),
        (5, b'c') => Ok((value(), Ahead::Chain)),
        // The errno itself, so a passing shortage (`EAGAIN` from fork)
        // reads as one.
        (5, b'E') => Err(io::Error::from_raw_os_error(value())),
        (0, _) => Err(io::Error::from_raw_os_error(libc::EAGAIN)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the spawner's answer is malformed",
        )),
    }
}

/// Read until `buf` is full or the pipe's end; the bytes read.
fn read_full(fd: &OwnedFd, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: read into the rest of a buffer we own.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf[got..].as_mut_ptr().cast(),
                buf.len() - got,
            )
        };
        if n > 0 {
            got += n as usize;
        } else if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    got
}

// ---- The spawner's side ----

/// A command the spawner started: its pid and the socket its end is told on.
struct Kid {
    pid: libc::pid_t,
    chan: OwnedFd,
    /// The runtime still holds its end (a `K` may come).
    heard: bool,
    /// A chain's command: the socket its init tells its end on, once
    /// everything else in its PID namespace has ended and before init's
    /// own exit tears the namespaces down.
    report: Option<OwnedFd>,
    /// Its end was told from `report`: it is only reaped now.
    told: bool,
    /// A chain's command: a pipe whose only writer is the command's
    /// process (close-on-exec), with its session. Once it has exec'd (or
    /// died) the next chain of the session is made, beside the program's
    /// run rather than its start (both take the kernel's mount lock).
    started: Option<(OwnedFd, u64)>,
}

/// The spawner's loop: start what is ordered on standard input, tell each
/// command's end; when standard input closes, kill and reap them all.
fn serve() -> i32 {
    // A process group of its own: a terminal's Ctrl-C, or a supervisor
    // signalling the runtime's group, reaches the runtime, which cancels
    // its commands; the spawner ends when the runtime has gone.
    // SAFETY: setpgid of this process, then signal-mask calls on a set we
    // own, then signalfd on it.
    let sigfd = unsafe {
        libc::setpgid(0, 0);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
    };
    if sigfd < 0 {
        return 1;
    }
    // SAFETY: a descriptor just created, owned here only.
    let sigfd = unsafe { OwnedFd::from_raw_fd(sigfd) };
    let mut kids: Vec<Kid> = Vec::new();
    let mut spares = Spares::default();
    let mut sessions = Sessions::default();
    loop {
        let pollfd = |fd: RawFd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut pfds = vec![pollfd(0), pollfd(sigfd.as_raw_fd())];
        pfds.extend(
            kids.iter()
                .filter(|k| k.heard)
                .map(|k| pollfd(k.chan.as_raw_fd())),
        );
        let kids_end = pfds.len();
        let reports: Vec<RawFd> = kids
            .iter()
            .filter_map(|k| k.report.as_ref().map(|r| r.as_raw_fd()))
            .collect();
        pfds.extend(reports.iter().map(|&r| pollfd(r)));
        let reports_end = pfds.len();
        pfds.extend(
            kids.iter()
                .filter_map(|k| k.started.as_ref().map(|(r, _)| pollfd(r.as_raw_fd()))),
        );
        let starts_end = pfds.len();
        pfds.extend(sessions.awaited().map(pollfd));
        let zygotes_end = pfds.len();
        pfds.extend(spares.waiting_on().map(pollfd));
        // An idle session is dropped when due, orders or not.
        let wait = sessions
            .next_expiry(Instant::now())
            .map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as i32 + 1);
        // SAFETY: poll on pollfds we own.
        match unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, wait) } {
            0 => {
                sessions.tick();
                continue;
            }
            n if n < 0 => {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                break;
            }
            _ => {}
        }
        let asked = woken(&pfds[2..kids_end]);
        for k in kids
            .iter_mut()
            .filter(|k| asked.contains(&k.chan.as_raw_fd()))
        {
            hear(k);
        }
        told_ends(&mut kids, &pfds[kids_end..reports_end], &mut sessions);
        sessions.hear_zygotes(&woken(&pfds[starts_end..zygotes_end]));
        chains_after_exec(&mut kids, &pfds[reports_end..starts_end], &mut sessions);
        if pfds[1].revents != 0 {
            let mut info = [0u8; 128];
            // SAFETY: draining the signalfd into a buffer we own.
            while unsafe { libc::read(sigfd.as_raw_fd(), info.as_mut_ptr().cast(), 128) } > 0 {}
            reap(&mut kids, &mut sessions);
            spares.reap();
        }
        if pfds[zygotes_end..].iter().any(|p| p.revents != 0) {
            spares.hear();
        }
        if pfds[0].revents != 0 {
            match receive_order() {
                Received::Order(fds) => start_order(fds, &mut kids, &mut spares, &mut sessions),
                Received::Nothing => {}
                Received::Closed => break,
            }
        }
    }
    if let Some(maker) = spares.maker() {
        // SAFETY: killing and reaping our own child.
        unsafe {
            libc::kill(maker, libc::SIGKILL);
            libc::waitpid(maker, std::ptr::null_mut(), 0);
        }
    }
    for k in &kids {
        // SAFETY: killpg of groups this process made, and of each leader
        // (one that has not yet made its group is not in it).
        unsafe {
            libc::killpg(k.pid, libc::SIGKILL);
            libc::kill(k.pid, libc::SIGKILL);
        }
    }
    for k in &kids {
        // SAFETY: reaping our own children.
        unsafe { libc::waitpid(k.pid, std::ptr::null_mut(), 0) };
    }
    0
}

/// What the runtime asks about a running command: `K`, kill its group
/// (its leader is unreaped: the id names its group only). Its end closed,
/// it is not listened to again.
fn hear(k: &mut Kid) {
    let mut buf = [0u8; 8];
    let n = crate::fdpass::recv_packet(k.chan.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT);
    match (n, buf[0]) {
        // SAFETY: killpg of a group this process made, leader unreaped.
        (5, b'K') => unsafe {
            libc::killpg(k.pid, libc::SIGKILL);
            libc::kill(k.pid, libc::SIGKILL);
        },
        (n, _) if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock => {}
        _ => k.heard = false,
    }
}

/// Tell every command that has ended: its group killed, then reaped (its
/// session, if it had one, free again).
fn reap(kids: &mut Vec<Kid>, sessions: &mut Sessions) {
    kids.retain_mut(|k| {
        // SAFETY: waitid on our own child with a zeroed siginfo to fill.
        let ended = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_PID,
                k.pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            r != 0 || info.si_pid() != 0
        };
        if !ended {
            return true;
        }
        // A chain's init tells the command's end on its report, then
        // exits: seen ended, what it told is queued already (or was never
        // sent). Read first: this loop may have been woken by another
        // command's end before that report was readable, and init's own
        // end says a signal only as a code (128 and its number).
        if !k.told && k.report.is_some() {
            told(k, sessions);
        }
        let mut st: libc::c_int = 0;
        // SAFETY: the leader is a zombie: its id names its group only;
        // then it is reaped.
        unsafe {
            libc::killpg(k.pid, libc::SIGKILL);
            if libc::waitpid(k.pid, &mut st, 0) != k.pid {
                st = libc::SIGKILL;
            }
        }
        if k.told {
            return false;
        }
        // Told first: what the session does next (a chain made for the
        // next command) is not the runtime's wait.
        answer(&k.chan, b'X', st);
        sessions.release(k.pid, st);
        false
    });
}

/// The descriptors in `polled` that poll woke for.
fn woken(polled: &[libc::pollfd]) -> Vec<RawFd> {
    polled
        .iter()
        .filter(|p| p.revents != 0)
        .map(|p| p.fd)
        .collect()
}

/// The chains' commands that have exec'd (or died): their sessions'
/// next chains are made.
fn chains_after_exec(kids: &mut [Kid], polled: &[libc::pollfd], sessions: &mut Sessions) {
    let done = woken(polled);
    for k in kids.iter_mut() {
        if let Some((r, id)) = &k.started
            && done.contains(&r.as_raw_fd())
        {
            sessions.make_chain_ahead(*id);
            k.started = None;
        }
    }
}

/// Hear the chains' inits whose reports are readable in `polled`.
fn told_ends(kids: &mut [Kid], polled: &[libc::pollfd], sessions: &mut Sessions) {
    let ended = woken(polled);
    for k in kids.iter_mut().filter(|k| {
        k.report
            .as_ref()
            .is_some_and(|r| ended.contains(&r.as_raw_fd()))
    }) {
        told(k, sessions);
    }
}

/// A chain's init said how its command ended (`E` and the wait status a
/// relay would end with, everything else in the PID namespace reaped), or
/// closed its socket without (killed, say: it is told when reaped).
/// Told now, its group killed as at [`reap`]; init is reaped once it has
/// gone (at once, where [`reap`] found it ended and read this first).
fn told(k: &mut Kid, sessions: &mut Sessions) {
    let Some(report) = k.report.take() else {
        return;
    };
    let mut buf = [0u8; 8];
    let n = crate::fdpass::recv_packet(report.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT);
    if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock {
        k.report = Some(report);
        return;
    }
    if n != 5 || buf[0] != b'E' {
        return;
    }
    let st = i32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]);
    // SAFETY: killpg of the group this command's init leads (init itself
    // is ending).
    unsafe {
        libc::killpg(k.pid, libc::SIGKILL);
    }
    k.told = true;
    // `x`: `X`, told before init's end (the runtime says which).
    answer(&k.chan, b'x', st);
    sessions.release(k.pid, st);
}

fn answer(chan: &OwnedFd, kind: u8, value: i32) {
    let mut buf = [kind, 0, 0, 0, 0];
    buf[1..].copy_from_slice(&value.to_le_bytes());
    // SAFETY: send from a buffer we own; a runtime that went away is fine.
    unsafe {
        libc::send(
            chan.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_NOSIGNAL,
        );
    }
}

enum Received {
    Order(Vec<OwnedFd>),
    Nothing,
    Closed,
}

/// One message from the runtime: the descriptors it carries (the
/// command's socket, the order, then what the order names).
fn receive_order() -> Received {
    let mut data = [0u8; 8];
    let (n, fds, cut) = fdpass::recv_msg(0, &mut data, MAX_FDS);
    if n == 0 {
        return Received::Closed;
    }
    if n < 0 {
        return match io::Error::last_os_error().kind() {
            io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => Received::Nothing,
            _ => Received::Closed,
        };
    }
    // Cut short, the order is refused: dropping what came closes the
    // command's socket, which the runtime reads as a refusal.
    if cut || data[0] != b'O' || fds.len() < 2 {
        return Received::Nothing;
    }
    Received::Order(fds)
}

/// Start one ordered command: fork, and in the child enter its plan and
/// run it; answer its pid (or why not) on its socket.
fn start_order(
    mut fds: Vec<OwnedFd>,
    kids: &mut Vec<Kid>,
    spares: &mut Spares,
    sessions: &mut Sessions,
) {
    let rest = fds.split_off(2);
    let (Some(memfd), Some(chan)) = (fds.pop(), fds.pop()) else {
        return;
    };
    let raw: Vec<RawFd> = rest.iter().map(|f| f.as_raw_fd()).collect();
    let mut order = match decode_order(&memfd, &rest) {
        Ok(o) => o,
        Err(_) => return answer(&chan, b'E', libc::EINVAL),
    };
    let Ok(prepared) = Exec::new(&order.head) else {
        return answer(&chan, b'E', libc::EINVAL);
    };
    // A session (`warm.rs`) where the plan may share one, else a pair
    // of namespaces made ahead (`spares.rs`).
    let mut given = sessions.take(&order.plan);
    // A session's chain made ahead takes the order as it came.
    if let Some(g) = given.as_mut()
        && let Some(chain) = g.chain.take()
    {
        let mut send = vec![memfd.as_raw_fd()];
        send.extend_from_slice(&raw);
        // Last, named by nothing in the order: the command's end of the
        // pipe that tells its exec.
        let exec_pipe = pipe().ok();
        send.extend(exec_pipe.as_ref().map(|(_, w)| w.as_raw_fd()));
        if let Some((pid, report)) = chain.take_order(&send) {
            sessions.bind(g.id, pid);
            let started = exec_pipe.map(|(r, _)| (r, g.id));
            drop((rest, memfd, given));
            answer(&chan, b'c', pid);
            kids.push(Kid {
                pid,
                chan,
                heard: true,
                report: Some(report),
                told: false,
                started,
            });
            return;
        }
    }
    let pair = match given {
        Some(_) => None,
        None => spares.take(&order.plan),
    };
    order.plan.made = match (&given, &pair) {
        (Some(g), _) => Some((g.user, -1)),
        (None, p) => p.as_ref().map(Pair::raw),
    };
    order.plan.made_mnt = given.as_ref().map(|g| g.mnt);
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    // SAFETY: this process is single-threaded: the child may do anything
    // (it only makes system calls, then execs or `_exit`s).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the child, once.
        unsafe { run(&order, &prepared, me) }
    }
    if pid < 0 {
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if let Some(g) = &given {
            sessions.unbind(g.id);
        }
        return answer(&chan, b'E', errno);
    }
    // The child's descriptors are its own now.
    let kind = match (&given, &pair) {
        (Some(g), _) if g.new => b'n',
        (Some(_), _) => b's',
        (None, Some(_)) => b'p',
        (None, None) => b'P',
    };
    if let Some(g) = &given {
        sessions.bind(g.id, pid);
    }
    drop((rest, memfd, pair, given));
    answer(&chan, kind, pid);
    kids.push(Kid {
        pid,
        chan,
        heard: true,
        report: None,
        told: false,
        started: None,
    });
    spares.refill();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper() -> Child {
        Command::new("sleep").arg("30").spawn().unwrap()
    }

    #[test]
    fn a_slow_answer_is_waited_for_while_the_process_runs() {
        let (r, w) = pipe().unwrap();
        let mut alive = sleeper();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(350));
            // SAFETY: a write to a pipe this thread owns.
            unsafe { libc::write(w.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        });
        let t = Instant::now();
        // Three waits of 100 ms pass without the answer: the process is
        // not stopped, so it is waited for.
        assert!(answered_or_stopped(
            r.as_raw_fd(),
            alive.id(),
            Duration::from_millis(100)
        ));
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t.elapsed()
        );
        writer.join().unwrap();
        alive.kill().unwrap();
        alive.wait().unwrap();
    }

    #[test]
    fn a_stopped_or_gone_process_is_given_up_on_after_one_wait() {
        let (r, _w) = pipe().unwrap();
        let mut stopped = sleeper();
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(stopped.id() as libc::pid_t, libc::SIGSTOP) };
        let t = Instant::now();
        assert!(!answered_or_stopped(
            r.as_raw_fd(),
            stopped.id(),
            Duration::from_millis(100)
        ));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        stopped.kill().unwrap();
        stopped.wait().unwrap();
        // Reaped: no such process.
        assert!(!answered_or_stopped(
            r.as_raw_fd(),
            stopped.id(),
            Duration::from_millis(50)
        ));
    }
}
