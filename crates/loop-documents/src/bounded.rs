//! Reading a document in a child process with its own bounds.
//!
//! The bytes come from a workspace a model wrote. The `loop` binary reads
//! them in a fresh process of itself (the hidden first argument
//! [`ARG`]): its address space capped at 1 GiB and its CPU at 20 s, no
//! file it may create, no new privileges, and — before it reads a byte —
//! Landlock taking every file and network access from it (where the
//! kernel has Landlock). The document arrives on its standard input; its
//! content leaves as JSON on its standard output. The runtime kills it
//! after 30 s of wall-clock time. A bomb, a hang, a panic in a parser:
//! each fails that one read with its reason, and the runtime goes on.
//!
//! Only a binary that calls [`serve_if_asked`] first in `main` and then
//! [`enable`] reads this way; elsewhere (unit tests) [`read`] reads in the
//! calling process, with the same size, entry, row and cell bounds.

use crate::{DocError, Document, Format};
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The hidden first argument that makes the binary a document reader.
pub const ARG: &str = "__loop-read-document";

/// The reader's address space.
const MAX_MEMORY: u64 = 1024 * 1024 * 1024;
/// The reader's CPU seconds.
const MAX_CPU_SECS: u64 = 20;
/// The reader's wall-clock time.
const MAX_WALL: Duration = Duration::from_secs(30);
/// The most JSON the reader may answer with.
const MAX_ANSWER: u64 = 64 * 1024 * 1024;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Read documents in child processes of this binary from now on.
pub fn enable() {
    ENABLED.store(true, Ordering::SeqCst);
}

/// When this process was started as a reader, read and exit.
pub fn serve_if_asked() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(ARG)) {
        return;
    }
    let format = args.next().and_then(|f| {
        serde_json::from_value::<Format>(serde_json::Value::String(f.to_string_lossy().into())).ok()
    });
    let name = args
        .next()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::process::exit(serve(format, &name));
}

fn serve(format: Option<Format>, name: &str) -> i32 {
    let Some(format) = format else {
        eprintln!("no document format given");
        return 2;
    };
    // Its own limits first (set here, not between fork and exec: the
    // runtime starts it without forking its own large process), then
    // Landlock, then the bytes.
    if let Err(e) = limit_self() {
        eprintln!("cannot limit the reader: {e}");
        return 2;
    }
    if let Err(e) = confine() {
        eprintln!("cannot confine the reader: {e}");
        return 2;
    }
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin()
        .take(crate::MAX_BYTES + 1)
        .read_to_end(&mut bytes)
    {
        eprintln!("cannot read the document: {e}");
        return 2;
    }
    let answer: Result<Document, DocError> = crate::read_as(format, name, &bytes);
    let mut out = std::io::stdout().lock();
    if serde_json::to_writer(&mut out, &answer).is_err() || out.flush().is_err() {
        return 2;
    }
    0
}

/// Landlock: no file may be opened, made or run, no TCP port bound or
/// connected, from here on (best effort on kernels without it: the
/// process limits still hold).
fn confine() -> Result<(), landlock::RulesetError> {
    use landlock::{ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr};
    let abi = ABI::V5;
    Ruleset::default()
        .handle_access(AccessFs::from_all(abi))?
        .handle_access(AccessNet::from_all(abi))?
        .create()?
        .restrict_self()?;
    Ok(())
}

/// Read `bytes` (the file `name`) as `format`, in a bounded child process
/// when enabled.
pub fn read(format: Format, name: &str, bytes: &[u8]) -> Result<Document, DocError> {
    if !ENABLED.load(Ordering::SeqCst) {
        // In this process: a parser's panic is this read's failure.
        return std::panic::catch_unwind(|| crate::read_as(format, name, bytes)).unwrap_or_else(
            |_| {
                Err(DocError::new(format!(
                    "reading {name} failed: its reader stopped"
                )))
            },
        );
    }
    if bytes.len() as u64 > crate::MAX_BYTES {
        // Said without starting a reader.
        return crate::read_as(format, name, bytes);
    }
    // This very binary, even if the file it was started from was replaced.
    let exe = std::path::PathBuf::from("/proc/self/exe");
    let format_arg = serde_json::to_value(format)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut cmd = Command::new(exe);
    cmd.arg(ARG)
        .arg(format_arg)
        .arg(name)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| DocError::new(format!("cannot start a reader for {name}: {e}")))?;
    let mut stdin = child.stdin.take();
    let input = bytes.to_vec();
    let feeder = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            // A reader that stopped early closes its end: no error of ours.
            let _ = s.write_all(&input);
        }
    });
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.take(MAX_ANSWER).read_to_end(&mut out);
        }
        out
    });
    let mut stderr = child.stderr.take();
    let errs = std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.take(64 * 1024).read_to_end(&mut out);
        }
        out
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if started.elapsed() >= MAX_WALL => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(DocError::new(format!("the reader of {name} was lost: {e}")));
            }
        }
    };
    let _ = feeder.join();
    let out = reader.join().unwrap_or_default();
    let err = errs.join().unwrap_or_default();
    let Some(status) = status else {
        return Err(DocError::new(format!(
            "reading {name} took more than {} s: stopped",
            MAX_WALL.as_secs()
        )));
    };
    if status.success()
        && let Ok(answer) = serde_json::from_slice::<Result<Document, DocError>>(&out)
    {
        return answer;
    }
    if out.len() as u64 >= MAX_ANSWER {
        return Err(DocError::new(format!(
            "reading {name} gave more than {} MiB of content: not taken",
            MAX_ANSWER >> 20
        )));
    }
    Err(DocError::new(format!(
        "reading {name} failed within its limits ({} MiB of memory, {MAX_CPU_SECS} s of CPU): {}{}",
        MAX_MEMORY >> 20,
        describe(status),
        last_line(&err)
    )))
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (_, Some(libc::SIGXCPU)) | (_, Some(libc::SIGKILL)) => "it ran out of CPU time".into(),
        (_, Some(libc::SIGABRT)) => "it ran out of memory".into(),
        (_, Some(s)) => format!("it was killed by signal {s}"),
        (Some(c), _) => format!("it exited with status {c}"),
        _ => "it ended".into(),
    }
}

fn last_line(err: &[u8]) -> String {
    let text = String::from_utf8_lossy(err);
    match text.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(l) => format!(" ({})", l.chars().take(300).collect::<String>()),
        None => String::new(),
    }
}

/// The reader's own limits: its address space, CPU time, no file it may
/// create or dump, no new privileges.
fn limit_self() -> std::io::Result<()> {
    let limits = [
        (libc::RLIMIT_AS, MAX_MEMORY),
        (libc::RLIMIT_CPU, MAX_CPU_SECS),
        (libc::RLIMIT_FSIZE, 0),
        (libc::RLIMIT_CORE, 0),
    ];
    for (r, v) in limits {
        let lim = libc::rlimit {
            rlim_cur: v,
            rlim_max: v,
        };
        // SAFETY: setrlimit on a prepared struct.
        if unsafe { libc::setrlimit(r, &lim) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: prctl with constant arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
