//! What a command's own process does with its order: the spawner's child
//! just forked (`run`), or a chain's command-to-be that waited for it
//! (`chain_wait`, see `warm.rs`); and how an order is sent and read. Both
//! the spawner and a session's chains use it, so neither needs the other.

use crate::child;
use crate::fdpass;
use crate::wire::{Dec, Head, Order};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Descriptors one order may carry (its socket and plan among them).
pub(crate) const MAX_FDS: usize = 32;

/// Orders larger than this are refused (a plan is a few KiB).
const MAX_ORDER: u64 = 64 << 20;

/// Send a chain its order: the order's file, then the descriptors it names.
pub(crate) fn send_order(sock: &OwnedFd, fds: &[RawFd]) -> io::Result<()> {
    send_fds(sock, b"O", fds)
}

pub(crate) fn send_fds(sock: &OwnedFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE(bytes as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let msg = fdpass::header(&mut iov, &mut control, space);
    // SAFETY: CMSG_* walk the control buffer `msg` points at, which
    // outlives the call.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(bytes as u32) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), fds.len());
        loop {
            let n = libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

fn read_order(memfd: &OwnedFd) -> io::Result<Vec<u8>> {
    let f = File::from(memfd.try_clone()?);
    let len = f.metadata()?.len();
    if len > MAX_ORDER {
        return Err(io::Error::other("order too large"));
    }
    let mut buf = vec![0u8; len as usize];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 0)?;
    Ok(buf)
}

/// The order in `memfd`, naming the descriptors `rest` (in the order they
/// came).
pub(crate) fn decode_order(memfd: &OwnedFd, rest: &[OwnedFd]) -> io::Result<Order> {
    let raw: Vec<RawFd> = rest.iter().map(|f| f.as_raw_fd()).collect();
    read_order(memfd).and_then(|bytes| Order::decode(&mut Dec::new(&bytes, &raw)))
}

/// The arrays `execvp` takes, made before the fork, and the places its
/// search of `PATH` would try, in its order.
pub(crate) struct Exec {
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    candidates: Vec<CString>,
}

impl Exec {
    pub(crate) fn new(h: &Head) -> io::Result<Exec> {
        Ok(Exec::of(&h.argv, &h.envp))
    }

    /// The arrays for `argv` and `envp`, which must outlive them.
    fn of(argv: &[CString], envp: &[CString]) -> Exec {
        let ptrs = |v: &[CString]| {
            v.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        Exec {
            argv: ptrs(argv),
            envp: ptrs(envp),
            candidates: path_candidates(argv, envp),
        }
    }
}

/// [`Exec`] with the strings it points into, for a command forked by the
/// runtime itself through `std`'s `Command` (no spawner): its `pre_exec`
/// execs as a spawned command does, sparing `std`'s `execvp` a failed
/// `execve` for each place in `PATH` before the program's.
pub(crate) struct OwnedExec {
    exec: Exec,
    // Pointed into by `exec`; a `CString`'s bytes stay where they are
    // when the vector moves.
    _strings: (Vec<CString>, Vec<CString>),
}

// SAFETY: the pointers are into strings `OwnedExec` owns and never
// changes; nothing is written through them.
unsafe impl Send for OwnedExec {}
// SAFETY: as for `Send`: shared, it is only read.
unsafe impl Sync for OwnedExec {}

impl OwnedExec {
    pub(crate) fn new(argv: Vec<CString>, envp: Vec<CString>) -> OwnedExec {
        OwnedExec {
            exec: Exec::of(&argv, &envp),
            _strings: (argv, envp),
        }
    }

    /// Exec the program as [`exec_searched`] finds it, with exactly the
    /// variables given; returns only when it could not, with the error
    /// `execvp` ended with (which `std` reports as the spawn's).
    ///
    /// # Safety
    /// Only in the command's process, between fork and exec, its plan
    /// entered.
    pub(crate) unsafe fn exec(&self) -> io::Error {
        // SAFETY: the caller's conditions; the arrays outlive the call.
        unsafe {
            environ = self.exec.envp.as_ptr();
            exec_searched(&self.exec);
        }
        io::Error::last_os_error()
    }
}

/// Where `execvp` would look for the program, in order: each directory of
/// the command's own `PATH` (an empty one is the working directory) joined
/// with its name; none for a name with a `/` (not searched) or without a
/// `PATH` (`execvp` then searches its own default).
fn path_candidates(argv: &[CString], envp: &[CString]) -> Vec<CString> {
    let Some(name) = argv.first().map(|a| a.as_bytes()) else {
        return Vec::new();
    };
    let path = envp
        .iter()
        .find_map(|e| e.as_bytes().strip_prefix(b"PATH="));
    let (Some(path), false) = (path, name.is_empty() || name.contains(&b'/')) else {
        return Vec::new();
    };
    path.split(|b| *b == b':')
        .filter_map(|dir| {
            let mut p = match dir {
                b"" => Vec::new(),
                d => [d, b"/"].concat(),
            };
            p.extend_from_slice(name);
            CString::new(p).ok()
        })
        .collect()
}

/// Exec the program as `execvp` would find it; returns only when it could
/// not. The places in `PATH` are looked at with `faccessat` (after every
/// restriction is in place) as `execvp` goes through them with `execve`:
/// past one that is not there or may not be executed (`ENOENT`,
/// `ENOTDIR`, `EACCES`, and glibc's `ESTALE`, `ENODEV`, `ETIMEDOUT`); the
/// first the command may execute is tried at once, sparing an `execve`
/// for each place before it. On any other answer (a loop of links, a
/// name too long, an I/O error), or should that place fail to exec (a
/// directory, a file the kernel will not run, a Landlock refusal), the
/// whole search is made as `execvp` makes it, so what runs, or the error
/// it ends with, is `execvp`'s.
///
/// # Safety
/// Only in a command's process, with `environ` its own.
unsafe fn exec_searched(exec: &Exec) {
    // SAFETY (whole body): faccessat, errno, execve and execvp on arrays
    // made before the fork.
    unsafe {
        for c in &exec.candidates {
            if libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::X_OK, 0) == 0 {
                libc::execve(c.as_ptr(), exec.argv.as_ptr(), exec.envp.as_ptr());
                break;
            }
            if !matches!(
                *libc::__errno_location(),
                libc::ENOENT
                    | libc::ENOTDIR
                    | libc::EACCES
                    | libc::ESTALE
                    | libc::ENODEV
                    | libc::ETIMEDOUT
            ) {
                break;
            }
        }
        libc::execvp(exec.argv[0], exec.argv.as_ptr());
    }
}

unsafe extern "C" {
    static mut environ: *const *const libc::c_char;
}

/// In the spawner's child: set up as `std` does for a spawned command
/// (signals as a fresh process has them, the standard streams, the
/// directory), enter the plan, exec. Never returns.
///
/// # Safety
/// Only in the child just forked by `spawner::start_order`.
pub(crate) unsafe fn run(order: &Order, exec: &Exec, spawner: libc::pid_t) -> ! {
    let h = &order.head;
    // SAFETY (whole body): system calls on data prepared before the fork.
    unsafe {
        // Dies with the spawner, even one that died before this line.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::getppid() != spawner {
            libc::_exit(127);
        }
        prelude(h);
        exec_entered(h, exec, child::enter(&order.plan))
    }
}

/// Run the program once the plan is `entered`; else, or when exec fails,
/// say why where the runtime reads a failed start.
///
/// # Safety
/// Only in a command's process, its plan entered.
unsafe fn exec_entered(h: &Head, exec: &Exec, entered: io::Result<()>) -> ! {
    // SAFETY (whole body): errno, environ and execvp on arrays made for it.
    unsafe {
        if let Err(e) = entered {
            *libc::__errno_location() = e.raw_os_error().unwrap_or(libc::EINVAL);
            failed(h.failed);
        }
        environ = exec.envp.as_ptr();
        exec_searched(exec);
        failed(h.failed)
    }
}

/// What a spawned command's process sets up as `std` does: signals as a
/// fresh process has them, the standard streams, the directory, and the
/// ordering thread's priority (the server runs tasks at nice +10).
///
/// # Safety
/// Only in a command's process, before its plan is entered.
unsafe fn prelude(h: &Head) {
    // SAFETY (whole body): system calls on data prepared before the fork.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        for (to, fd) in h.stdio.iter().enumerate() {
            if libc::dup2(*fd, to as RawFd) < 0 {
                failed(h.failed);
            }
        }
        if libc::chdir(h.cwd.as_ptr()) != 0 {
            failed(h.failed);
        }
        libc::setpriority(libc::PRIO_PROCESS, 0, h.nice);
    }
}

/// In a chain's command-to-be (see `warm.rs`), its namespaces made with
/// its init: say it is ready on `sock`, wait there for its
/// order (the order's file and the descriptors it names, as the spawner
/// got them), then run it as [`run`] does from the mounts on. Never
/// returns; ends without a word when the order cannot be read (the
/// spawner read the same bytes before sending them).
///
/// # Safety
/// Only in the process [`child::chain_init`] returned in.
pub(crate) unsafe fn chain_wait(sock: RawFd, net: RawFd) -> ! {
    // SAFETY (whole body): this single-threaded process is a fork of a
    // chain's init, a clone of the session's zygote, a fork of the
    // single-threaded spawner (none of them ever had another thread): it
    // may allocate; then system calls only.
    unsafe {
        if libc::send(sock, b"R".as_ptr().cast(), 1, libc::MSG_NOSIGNAL) != 1 {
            libc::_exit(1);
        }
        let mut data = [0u8; 8];
        let (n, mut fds, cut) = loop {
            let got = fdpass::recv_msg(sock, &mut data, MAX_FDS);
            if got.0 < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break got;
        };
        // Without an order there is nowhere to say why: 127, as a command
        // that could not be started ends.
        if n <= 0 || cut || data[0] != b'O' || fds.is_empty() {
            libc::_exit(127);
        }
        let rest = fds.split_off(1);
        let Ok(mut order) = decode_order(&fds[0], &rest) else {
            libc::_exit(127);
        };
        let Ok(exec) = Exec::new(&order.head) else {
            failed(order.head.failed);
        };
        drop(fds);
        libc::close(sock);
        // A task's command's network namespace: the session's if
        // untouched, else a new one (so only now, once the last command
        // has ended); a check's chain made the check's own ahead (`net`
        // -1). A chain takes only a plan that makes one (see `warm.rs`).
        if net >= 0 {
            if order.plan.unshare_flags & libc::CLONE_NEWNET == 0 {
                libc::close(net);
            } else if child::enter_chain_net(net, order.plan.diag_fd).is_err() {
                failed(order.head.failed);
            }
        }
        // The user and mount namespaces were entered or made ahead, and
        // the network one now (`lo` up); the session's shared tree is built.
        order.plan.made = Some((-1, -1));
        order.plan.made_mnt = Some(-1);
        let h = &order.head;
        prelude(h);
        let entered = child::enter_rest(&order.plan);
        // `rest` (the order's descriptors) stays open through the exec:
        // this function never returns, so it is never dropped.
        let _ = &rest;
        exec_entered(h, &exec, entered)
    }
}

/// Write this errno where the runtime reads a failed start, and exit.
///
/// # Safety
/// Only in the spawner's child.
unsafe fn failed(fd: RawFd) -> ! {
    // SAFETY: write of a stack buffer, then _exit.
    unsafe {
        let e = (*libc::__errno_location()).to_le_bytes();
        libc::write(fd, e.as_ptr().cast(), 4);
        libc::_exit(127)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(argv: &[&str], envp: &[&str]) -> Head {
        let c = |v: &[&str]| v.iter().map(|s| CString::new(*s).unwrap()).collect();
        Head {
            argv: c(argv),
            envp: c(envp),
            cwd: CString::new("/").unwrap(),
            nice: 0,
            stdio: [0, 1, 2],
            failed: -1,
        }
    }

    fn shown(h: &Head) -> Vec<String> {
        path_candidates(&h.argv, &h.envp)
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_candidates_are_the_paths_dirs_in_order_an_empty_one_the_working_directory() {
        let h = head(&["greet", "x"], &["HOME=/h", "PATH=/a:/b/c::rel"]);
        assert_eq!(shown(&h), ["/a/greet", "/b/c/greet", "greet", "rel/greet"]);
    }

    #[test]
    fn a_name_with_a_slash_or_no_path_has_no_candidates() {
        assert!(shown(&head(&["./greet"], &["PATH=/a"])).is_empty());
        assert!(shown(&head(&["/usr/bin/true"], &["PATH=/a"])).is_empty());
        assert!(shown(&head(&["greet"], &["HOME=/h"])).is_empty());
        assert!(shown(&head(&[""], &["PATH=/a"])).is_empty());
        assert!(shown(&head(&[], &["PATH=/a"])).is_empty());
        // Only the variable named PATH: not one that ends so.
        assert!(shown(&head(&["greet"], &["MYPATH=/a"])).is_empty());
    }
}
