//! What a task knows of its project: where tasks live and how they are
//! found (`locate`, `ids`, `workspaces`), the stack and its checks
//! (`stacks`), the dependency environments shared with a task
//! (`environments`), setup steps (`setup`), egress allow-lists (`network`),
//! host files (`host_files`), readiness (`readiness`), the marks of
//! tasks being prepared (`preparing`) and a commit's tree written out
//! (`commits`).

pub(crate) mod commits;
pub mod environments;
pub(crate) mod host_files;
pub(crate) mod ids;
pub mod locate;
pub mod network;
pub(crate) mod preparing;
pub mod readiness;
pub mod setup;
pub mod stacks;
pub mod workspaces;
