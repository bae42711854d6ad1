//! Ctrl-C asks the Director to stop at its next decision point, so the task
//! still ends `cancelled` with a ledger entry and a receipt. A second Ctrl-C
//! kills the process (the handler resets itself).

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT or SIGTERM; read by the Director.
pub static CANCEL: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    CANCEL.store(true, Ordering::SeqCst);
}

/// Install the handler for SIGINT and SIGTERM.
pub fn install() {
    // SAFETY: a zeroed sigaction is a valid starting value; the handler only
    // performs an atomic store, and SA_RESETHAND restores the default action
    // so a second signal terminates the process.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as usize;
        action.sa_flags = libc::SA_RESETHAND;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}
