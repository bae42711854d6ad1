//! A pseudo-terminal the runtime owns, for a command that needs a terminal
//! ([`crate::ExecRequest::terminal`]).
//!
//! A sandboxed command never gets the caller's terminal: it starts a new
//! session with none (see `child.rs`). One that will not run without a
//! terminal (a test runner that checks `isatty`, a tool that opens
//! `/dev/tty`) gets a fresh pseudo-terminal pair made here: the command's
//! standard input, output and error are the pair's terminal end, which
//! becomes its controlling terminal; the runtime holds the other end and
//! reads what is written there as the command's output. Typing into it
//! (`TIOCSTI`) stays refused by seccomp, and would reach only this
//! terminal, which nobody reads from but the runtime.
//!
//! Its settings: no echo (nothing sent to it comes back as output), no
//! `\n` to `\r\n` translation (output reads as a pipe's would), 80×24
//! columns and rows. Its input is one end-of-file character, so a command
//! that reads its terminal sees end of input, as from `/dev/null`.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

/// A pseudo-terminal pair.
pub struct Terminal {
    /// The runtime's end.
    pub controller: File,
    /// The command's end (its terminal).
    pub terminal: OwnedFd,
    /// Where the terminal end lives on the host (`/dev/pts/N`).
    pub path: PathBuf,
}

fn last_error(what: &str) -> std::io::Error {
    let e = std::io::Error::last_os_error();
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Make a pair with the settings above.
pub fn open() -> std::io::Result<Terminal> {
    // SAFETY: plain system calls; every descriptor returned is owned at once.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if m < 0 {
            return Err(last_error("posix_openpt"));
        }
        let controller = OwnedFd::from_raw_fd(m);
        if libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
            return Err(last_error("unlockpt"));
        }
        let mut name = [0u8; 128];
        if libc::ptsname_r(m, name.as_mut_ptr().cast(), name.len()) != 0 {
            return Err(last_error("ptsname"));
        }
        let len = name.iter().position(|b| *b == 0).unwrap_or(name.len());
        let path = PathBuf::from(String::from_utf8_lossy(&name[..len]).into_owned());
        let s = libc::open(
            name.as_ptr().cast(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if s < 0 {
            return Err(last_error("open the terminal end"));
        }
        let terminal = OwnedFd::from_raw_fd(s);
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(s, &mut t) != 0 {
            return Err(last_error("tcgetattr"));
        }
        t.c_lflag &= !(libc::ECHO | libc::ECHOE | libc::ECHOK | libc::ECHONL | libc::ECHOCTL);
        t.c_oflag &= !libc::ONLCR;
        if libc::tcsetattr(s, libc::TCSANOW, &t) != 0 {
            return Err(last_error("tcsetattr"));
        }
        let size = libc::winsize {
            ws_row: 24,
            ws_col: 80,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        if libc::ioctl(s, libc::TIOCSWINSZ, &size) != 0 {
            return Err(last_error("TIOCSWINSZ"));
        }
        let mut controller = File::from(controller);
        // End of input for a reader of the terminal (canonical mode: an
        // end-of-file character at the start of a line).
        controller.write_all(&[t.c_cc[libc::VEOF]])?;
        Ok(Terminal {
            controller,
            terminal,
            path,
        })
    }
}

impl Terminal {
    /// Three descriptors of the terminal end, for standard input, output
    /// and error.
    pub fn stdio(&self) -> std::io::Result<[OwnedFd; 3]> {
        Ok([
            self.terminal.try_clone()?,
            self.terminal.try_clone()?,
            self.terminal.try_clone()?,
        ])
    }
}

/// Whether `fd` is a terminal (for tests and diagnostics).
pub fn is_terminal(fd: &impl AsRawFd) -> bool {
    // SAFETY: isatty on a valid descriptor.
    unsafe { libc::isatty(fd.as_raw_fd()) == 1 }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_pair_is_a_terminal_without_echo_whose_input_is_at_its_end() {
        let t = open().unwrap();
        assert!(is_terminal(&t.terminal));
        assert!(!is_terminal(&std::fs::File::open("/dev/null").unwrap()));
        assert!(t.path.starts_with("/dev/pts"), "{}", t.path.display());
        // The first read of the terminal end sees end of input.
        let mut term = File::from(t.terminal.try_clone().unwrap());
        let mut buf = [0u8; 16];
        assert_eq!(term.read(&mut buf).unwrap(), 0);
        // What the command writes reaches the runtime's end untranslated,
        // and nothing written to the terminal was echoed before it.
        term.write_all(b"one\ntwo\n").unwrap();
        let mut c = t.controller.try_clone().unwrap();
        let n = c.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"one\ntwo\n");
    }
}
