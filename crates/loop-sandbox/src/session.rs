//! A long-lived process in its sandbox that is talked to over its
//! standard input and output (an MCP server a task uses): every layer a
//! command gets, for as long as the session lasts. Its standard error is
//! drained all along (its last bytes kept, to say why it died); stopping
//! or dropping the session kills its whole process group and frees its
//! cgroups and private tmp.

use crate::spawner::Proc;
use crate::{Launched, Prepared};
use loop_protocol::Isolation;
use std::fs::File;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};

/// Bytes of standard error kept (the last ones).
const STDERR_KEPT: usize = 4096;

/// A sandboxed process and its pipes (see [`crate::spawn`]).
pub struct Session {
    child: Proc,
    stdin: Option<File>,
    stdout: Option<File>,
    stderr: Arc<Mutex<Vec<u8>>>,
    prepared: Option<Prepared>,
    isolation: Isolation,
    /// How it ended, once it has (and was reaped, its group killed first).
    ended: Option<String>,
}

impl Session {
    pub(crate) fn new(l: Launched) -> Session {
        let Launched {
            mut child,
            p,
            landlock_abi,
            ..
        } = l;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        if let Some(mut err) = child.stderr.take() {
            let keep = stderr.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    match err.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            let mut k = keep.lock().unwrap_or_else(|e| e.into_inner());
                            k.extend_from_slice(&buf[..n]);
                            if k.len() > STDERR_KEPT {
                                let cut = k.len() - STDERR_KEPT;
                                k.drain(..cut);
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            });
        }
        let network = match (p.use_ns, p.proxy.is_some()) {
            (true, true) => "proxy",
            (true, false) => "none",
            (false, _) => "host",
        };
        let isolation = p.isolation(landlock_abi, network, Vec::new());
        Session {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            child,
            stderr,
            prepared: Some(p),
            isolation,
            ended: None,
        }
    }

    /// Where to write to the process.
    pub fn stdin(&mut self) -> Option<&mut File> {
        self.stdin.as_mut()
    }

    /// Where to read from the process.
    pub fn stdout(&mut self) -> Option<&mut File> {
        self.stdout.as_mut()
    }

    /// The process's id (its group's too).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the process ended, if it has: `exited with status N` or
    /// `killed by signal N`.
    pub fn ended(&mut self) -> Option<String> {
        if self.ended.is_some() {
            return self.ended.clone();
        }
        // What it left in its group is killed before it is reaped.
        let status = match self.child.try_end() {
            Ok(Some(status)) => status,
            Ok(None) => return None,
            Err(e) => {
                self.ended = Some(format!("ended ({e})"));
                return self.ended.clone();
            }
        };
        self.ended = Some(match (status.code(), status.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            _ => "ended".to_string(),
        });
        self.ended.clone()
    }

    /// The last bytes it wrote to standard error (secrets redacted).
    pub fn stderr_tail(&self) -> String {
        let k = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        crate::redact::redact(&String::from_utf8_lossy(&k))
    }

    /// What was enforced.
    pub fn isolation(&self) -> &Isolation {
        &self.isolation
    }

    /// Kill its whole process group, reap it, free its cgroups and tmp.
    pub fn stop(&mut self) {
        self.stdin = None;
        // Once reaped, its group was killed then (the id may be anyone's
        // now).
        if self.ended.is_none() {
            self.child.kill_group();
            let _ = self.child.wait();
            self.ended = Some("stopped".into());
        }
        if let Some(mut p) = self.prepared.take() {
            p.cgroups.destroy();
            if let Some(proxy) = p.proxy.take() {
                let _ = proxy.finish();
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop();
    }
}
