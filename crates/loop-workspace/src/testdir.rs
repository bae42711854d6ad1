//! A temporary directory for tests, removed on drop.

use std::path::{Path, PathBuf};

/// A fresh directory under the system temp dir.
pub struct TestDir(PathBuf);

impl TestDir {
    /// Create `loop-test-<name>-<pid>-<n>`.
    #[allow(clippy::disallowed_methods)] // a test's own scratch directory
    pub fn new(name: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "loop-test-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        if let Err(e) = std::fs::create_dir_all(&p) {
            panic!("cannot create test dir {}: {e}", p.display());
        }
        TestDir(p)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = crate::snapshot::remove_tree(&self.0);
    }
}
