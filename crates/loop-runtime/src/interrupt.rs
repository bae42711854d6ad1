//! Ctrl-C asks the Director to stop at its next decision point and kills
//! a running sandboxed command, so the task still ends `cancelled` with a
//! ledger entry and a receipt: a person stopped it. SIGTERM is no person's
//! decision (a shutdown, `docker stop`, a CI runner's timeout): it stops
//! the run the same way but leaves the task interrupted, to be resumed
//! ([`stopping`]), as a server does. Once either came, another one ends
//! the process.
//!
//! A front end that can ask its person ([`ask_first`]) turns the first
//! Ctrl-C into a question instead ([`pending`]): cancel, detach or go on;
//! a second Ctrl-C before the answer cancels.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
/// The first Ctrl-C asks rather than cancels.
static ASK_FIRST: AtomicBool = AtomicBool::new(false);
/// A Ctrl-C waits for its question to be answered.
static PENDING: AtomicBool = AtomicBool::new(false);
/// SIGTERM came: stop, leaving the task interrupted (not cancelled).
static STOP: AtomicBool = AtomicBool::new(false);
/// Task runs under way in this process (see [`RunGuard`]): SIGTERM
/// leaves them to their watcher, which interrupts them; with none, it
/// stops whatever runs (a check, a model call, a replay) as a cancel of
/// the work in hand does, no task being decided by it.
static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A task run under way in this process, for as long as it is held.
pub struct RunGuard(());

impl RunGuard {
    /// A task run begins here.
    pub fn begin() -> RunGuard {
        RUNS.fetch_add(1, Ordering::SeqCst);
        RunGuard(())
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        RUNS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether SIGTERM asked this process to stop: its task is left
/// interrupted, never cancelled (a fault or a shutdown is not a decision).
pub fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// The process-wide cancel flag (created on first use).
pub fn flag() -> Arc<AtomicBool> {
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone()
}

/// Restore the default action of SIGINT and SIGTERM: the next one ends
/// the process. Async-signal-safe (sigaction only).
fn default_next() {
    // SAFETY: a zeroed sigaction with SIG_DFL is valid; sigaction is
    // async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}

extern "C" fn on_signal(signal: libc::c_int) {
    // Only atomic loads and stores, and sigaction: async-signal-safe.
    if signal == libc::SIGINT
        && ASK_FIRST.load(Ordering::SeqCst)
        && !PENDING.swap(true, Ordering::SeqCst)
    {
        return;
    }
    if signal == libc::SIGTERM {
        STOP.store(true, Ordering::SeqCst);
    }
    let runs = RUNS.load(Ordering::SeqCst);
    if (signal != libc::SIGTERM || runs == 0)
        && let Some(f) = FLAG.get()
    {
        f.store(true, Ordering::SeqCst);
    }
    default_next();
}

/// Create the flag, then install the handler for SIGINT and SIGTERM.
pub fn install() {
    let _ = flag();
    // SAFETY: a zeroed sigaction is a valid starting value; the handler only
    // touches already-initialised atomics and calls sigaction.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}

/// With `on`, the first Ctrl-C only sets [`pending`] (someone will ask);
/// a second one cancels.
pub fn ask_first(on: bool) {
    ASK_FIRST.store(on, Ordering::SeqCst);
}

/// Whether a Ctrl-C waits for its question to be answered.
pub fn pending() -> bool {
    PENDING.load(Ordering::SeqCst) && !flag().load(Ordering::SeqCst)
}

/// The question was answered "go on": the next Ctrl-C asks again.
pub fn dismiss() {
    PENDING.store(false, Ordering::SeqCst);
}

/// Cancel now, as a Ctrl-C would without a question; the next Ctrl-C
/// ends the process.
pub fn cancel() {
    flag().store(true, Ordering::SeqCst);
    default_next();
}
