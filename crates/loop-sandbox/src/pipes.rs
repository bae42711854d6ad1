//! A command's output, read by the thread that waits for the command.
//!
//! One `poll` covers the command's end and its output pipes: no thread is
//! made per stream, so a command's start and end wake fewer tasks (each
//! wake-up of an idle CPU costs, and a task's commands come seconds apart,
//! to idle CPUs). What is read is captured as before (`capture.rs`): head
//! and tail kept, every byte counted and hashed.

use crate::capture::{Captured, Capturing};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// A stream still open: which one (1 output, 2 errors), its read end, and
/// what has come so far.
struct Open {
    stream: u8,
    file: File,
    got: Capturing,
}

/// The command's output streams.
pub(crate) struct Pipes {
    open: Vec<Open>,
    done: [Option<Captured>; 2],
    buf: Vec<u8>,
}

impl Pipes {
    /// Read these streams (1 output, 2 errors), keeping at most that many
    /// bytes of each. Each is read without waiting (`O_NONBLOCK` on the
    /// runtime's own open of it): a command can open its own output pipe
    /// again (`/proc/PID/fd/1`) and take bytes between the `poll` that
    /// saw them and the read, which must then come back empty rather than
    /// wait, past the deadline, for bytes the command never writes.
    pub(crate) fn new(streams: Vec<(u8, File, usize)>) -> Pipes {
        Pipes {
            open: streams
                .into_iter()
                .map(|(stream, file, max)| {
                    // SAFETY: fcntl on a descriptor we own.
                    unsafe {
                        let fd = file.as_raw_fd();
                        let flags = libc::fcntl(fd, libc::F_GETFL);
                        if flags >= 0 {
                            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
                        }
                    }
                    Open {
                        stream,
                        file,
                        got: Capturing::new(max),
                    }
                })
                .collect(),
            done: [None, None],
            buf: vec![0u8; 64 * 1024],
        }
    }

    /// Take `c` as stream `stream`, read elsewhere.
    pub(crate) fn set(&mut self, stream: u8, c: Captured) {
        self.done[usize::from(stream == 2)] = Some(c);
    }

    /// Wait up to `left` (at least a millisecond) for `wake` to become
    /// readable or for output, reading what came.
    pub(crate) fn pump(&mut self, wake: Option<RawFd>, left: Duration) {
        let mut pfds: Vec<libc::pollfd> = wake
            .into_iter()
            .chain(self.open.iter().map(|o| o.file.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        if pfds.is_empty() {
            std::thread::sleep(Duration::from_millis(ms as u64));
            return;
        }
        // SAFETY: poll on descriptors this process holds open.
        if unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) } <= 0 {
            return;
        }
        let first = usize::from(wake.is_some());
        let ready: Vec<bool> = pfds[first..].iter().map(|p| p.revents != 0).collect();
        for (i, _) in ready.iter().enumerate().rev().filter(|(_, r)| **r) {
            self.read_one(i);
        }
    }

    /// One read of open stream `i`; at its end (or an error) it is done.
    /// Nothing there (taken by another reader since the `poll`) is no end.
    fn read_one(&mut self, i: usize) {
        match self.open[i].file.read(&mut self.buf) {
            Ok(n) if n > 0 => self.open[i].got.feed(&self.buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                ) => {}
            _ => {
                let o = self.open.remove(i);
                self.set(o.stream, o.got.finish());
            }
        }
    }

    /// After the command: read each stream to its end, for at most
    /// `grace` in all; one still held open then (by a detached process)
    /// keeps what came, and `notes` says so.
    pub(crate) fn finish(
        mut self,
        grace: Duration,
        notes: &mut Vec<String>,
    ) -> (Captured, Captured) {
        let deadline = Instant::now() + grace;
        while !self.open.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                notes.push(format!(
                    "an output pipe was still held open by a detached process; draining stopped after {} ms",
                    grace.as_millis()
                ));
                for o in std::mem::take(&mut self.open) {
                    self.set(o.stream, o.got.finish());
                }
                break;
            }
            self.pump(None, left);
        }
        let [out, err] = self.done;
        (out.unwrap_or_default(), err.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn pipe() -> (File, File) {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors we then own.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        use std::os::fd::FromRawFd;
        // SAFETY: both were just made and are owned here only.
        unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
    }

    #[test]
    fn both_streams_are_read_whole_and_in_order_while_they_come() {
        let ((out_r, mut out_w), (err_r, mut err_w)) = (pipe(), pipe());
        let mut p = Pipes::new(vec![(1, out_r, 1 << 20), (2, err_r, 1 << 20)]);
        let mut want = Vec::new();
        for i in 0..2000 {
            let line = format!("line {i}\n");
            out_w.write_all(line.as_bytes()).unwrap();
            want.extend_from_slice(line.as_bytes());
            if i % 100 == 0 {
                err_w.write_all(b"e").unwrap();
                p.pump(None, Duration::from_millis(1));
            }
        }
        drop((out_w, err_w));
        let mut notes = Vec::new();
        let (out, err) = p.finish(Duration::from_secs(5), &mut notes);
        assert_eq!(out.total(), want.len() as u64);
        assert_eq!(out.sha256(), loop_protocol::hash::sha256_hex(&want));
        assert_eq!(err.total(), 20);
        assert!(notes.is_empty());
    }

    #[test]
    fn a_read_finding_nothing_comes_back_at_once_and_the_stream_stays_open() {
        let (r, mut w) = pipe();
        // Another open of the same pipe, as a command can make of its own
        // output (`/proc/self/fd/1`): it takes what is written.
        use std::os::fd::AsRawFd;
        let mut thief = File::open(format!("/proc/self/fd/{}", r.as_raw_fd())).unwrap();
        let mut p = Pipes::new(vec![(1, r, 1024)]);
        w.write_all(b"x").unwrap();
        let mut one = [0u8; 1];
        thief.read_exact(&mut one).unwrap();
        // Readable a moment ago, empty now: the read must not wait.
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            p.read_one(0);
            let _ = tx.send(());
            p
        });
        assert!(
            rx.recv_timeout(Duration::from_secs(5)).is_ok(),
            "a read of an empty pipe waited"
        );
        let p = reader.join().unwrap();
        assert_eq!(p.open.len(), 1, "an empty read is not the stream's end");
        w.write_all(b"after").unwrap();
        drop(w);
        let mut notes = Vec::new();
        let (out, _) = p.finish(Duration::from_secs(5), &mut notes);
        assert_eq!(out.excerpt(), "after");
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn a_stream_held_open_keeps_what_came_and_is_said() {
        let (r, mut w) = pipe();
        let p = Pipes::new(vec![(1, r, 1024)]);
        w.write_all(b"partial").unwrap();
        let mut notes = Vec::new();
        let (out, err) = p.finish(Duration::from_millis(50), &mut notes);
        assert_eq!(out.excerpt(), "partial");
        assert_eq!(err.total(), 0);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("still held open"), "{notes:?}");
        drop(w);
    }
}
