//! `loop serve`, `loop worker` and `loop mcp`: the long-lived front ends.
//! Each runs until told to stop; tasks still running are left
//! interrupted, and the next server (or `loop resume`) takes them up.

use crate::CliError;
use crate::cli::{ServeArgs, WorkerArgs};
use std::path::Path;

/// `loop serve`: the HTTP API, the console and MCP over HTTP.
pub(crate) fn serve(args: ServeArgs) -> Result<u8, CliError> {
    let ServeArgs {
        addr,
        rate,
        jobs,
        queue,
        queue_name,
        adopt_cli_tasks,
        project,
    } = args;
    let queue = queue
        .or_else(|| {
            std::env::var("LOOP_QUEUE_URL")
                .ok()
                .filter(|u| !u.is_empty())
        })
        .map(|url| {
            (
                url,
                loop_store::QueueOptions {
                    name: queue_name,
                    ..Default::default()
                },
            )
        });
    loop_server::serve(&loop_server::ServeOptions {
        project,
        addr,
        rate_per_minute: rate.max(1),
        jobs: jobs.max(1),
        queue,
        adopt_cli_tasks,
    })?;
    std::process::exit(0);
}

/// `loop mcp`: MCP over stdio.
pub(crate) fn mcp(project: &Path, jobs: usize) -> Result<u8, CliError> {
    loop_server::mcp::serve_stdio(project, jobs.max(1))?;
    std::process::exit(0);
}

/// `loop worker`: tasks from a queue, until SIGTERM drains it.
pub(crate) fn worker(args: WorkerArgs) -> Result<u8, CliError> {
    let WorkerArgs {
        queue,
        queue_name,
        jobs,
        visibility_secs,
        max_attempts,
        grace,
        metrics_addr,
        project,
    } = args;
    loop_server::worker::work(&loop_server::worker::WorkerOptions {
        project,
        queue_url: crate::commands::run::queue_url(queue)?,
        queue: loop_store::QueueOptions {
            name: queue_name,
            visibility: std::time::Duration::from_secs(visibility_secs.max(1)),
            max_attempts: max_attempts.max(1),
        },
        jobs: jobs.max(1),
        grace: std::time::Duration::from_secs(grace),
        metrics_addr,
    })?;
    std::process::exit(0);
}
