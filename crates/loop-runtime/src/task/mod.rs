//! A task from its request to its receipt, in the order it lives: `intake`
//! (a front end's request becomes the task's contract), `request` (what is
//! stored and reported), `prepare` (workspace, baseline, stored request),
//! `baseline_cache` (baseline results kept between tasks of one tree),
//! `stored_workspace` (the workspace as the store keeps it, for a resume
//! elsewhere), `adapters` (the component crates plugged into the Director's
//! traits), `drive` (claim, record, Director), `change_set` (what the run
//! changed), `end` (artifacts, change set, signed receipt, the task
//! closed), `run` (submit and run, resume), `control` (cancel, answer),
//! `delegate` (a child task started, run and merged back), `asking` (one
//! person asked by a task and its children, one question at a time).

pub mod adapters;
pub mod asking;
pub(crate) mod baseline_cache;
pub(crate) mod change_set;
pub mod control;
pub(crate) mod delegate;
pub(crate) mod drive;
pub(crate) mod end;
pub mod intake;
pub(crate) mod memory;
pub mod prepare;
pub mod request;
pub mod run;
pub(crate) mod stored_workspace;
