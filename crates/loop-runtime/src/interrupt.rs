//! Ctrl-C (or SIGTERM) asks the Director to stop at its next decision
//! point and kills a running sandboxed command, so the task still ends
//! `cancelled` with a ledger entry and a receipt. A second Ctrl-C kills the
//! process (the handler resets itself).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// The process-wide cancel flag (created on first use).
pub fn flag() -> Arc<AtomicBool> {
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone()
}

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic load and store: async-signal-safe.
    if let Some(f) = FLAG.get() {
        f.store(true, Ordering::SeqCst);
    }
}

/// Create the flag, then install the handler for SIGINT and SIGTERM.
pub fn install() {
    let _ = flag();
    // SAFETY: a zeroed sigaction is a valid starting value; the handler only
    // touches an already-initialised atomic, and SA_RESETHAND restores the
    // default action so a second signal terminates the process.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as usize;
        action.sa_flags = libc::SA_RESETHAND;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}
