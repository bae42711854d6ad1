//! # loop-workspace
//!
//! The task workspace, as the runtime sees it: the [`Jail`] (every path
//! resolves inside the root, symlinks included; protected paths cannot be
//! written), atomic file writes, content [`Manifest`]s with a Merkle root,
//! and [`Sealed`] snapshots that give each verification check its own fresh
//! view.

pub mod changeset;
pub mod door;
pub mod fsutil;
pub mod jail;
pub mod journal;
pub mod manifest;
pub mod overlay_commit;
pub mod patch;
pub mod rebuild;
pub mod snapshot;
pub mod task_workspace;
#[cfg(any(test, feature = "testing"))]
pub mod testdir;
pub mod untrusted;

pub use changeset::{ChangeSet, ChangeSetError, FileChange, Standing, quote_path};
pub use fsutil::{CopyStats, copy_tree, write_atomic};
pub use jail::{Intent, Jail, JailError, Protected};
pub use journal::{Change, Journal};
pub use manifest::{Entry, EntryKind, Manifest, StatCache};
pub use overlay_commit::{Merged, OverlayCommit};
pub use rebuild::{Delta, Fetched, RebuildError, reconcile, reconcile_from};
pub use snapshot::{Sealed, SnapshotMethod, remove_tree};
pub use task_workspace::{
    Origin, TaskWorkspace, WorkspaceError, git_head, surely_no_repository, uncommitted,
    worktree_pointer,
};
pub use untrusted::{Node, Tree, UntrustedError};

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests;
