//! `loop audit`: what a task in a project would see of its environments
//! (each share and where it stands, the toolchain caches, the network,
//! the setup layer) and the project's readiness, every point a check run
//! now.

use crate::loopfile::Loopfile;
use crate::project::environments::{Cache, Share, Standing};
use std::path::Path;

/// What a task in a project would see of its environments.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Audit {
    /// The Loopfile read, if there is one.
    pub loopfile: Option<std::path::PathBuf>,
    /// Each environment, and where it stands.
    pub shares: Vec<(Share, Standing)>,
    /// The toolchain caches shown read-only.
    pub caches: Vec<Cache>,
    /// Hosts commands and setup steps may reach, presets expanded here
    /// (empty: no network).
    pub network: crate::project::network::NetworkPlan,
    /// Why a preset could not be expanded, if one could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_problem: Option<String>,
    /// The setup steps, their key and whether their layer is cached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup: Option<crate::project::setup::SetupAudit>,
    /// The readiness score, every point a check run now.
    pub readiness: crate::project::readiness::Readiness,
}

/// The audit of `project`'s environments under its Loopfile.
pub fn audit(project: &Path) -> Result<Audit, crate::Error> {
    use crate::project::environments::{caches, plan, standing, tracked_in_git};
    let loopfile = Loopfile::load(project)?;
    let tracked = |p: &str| tracked_in_git(project, p);
    let shares = plan(project, &loopfile)
        .into_iter()
        .map(|s| {
            let st = standing(project, &s, &tracked);
            (s, st)
        })
        .collect();
    let expanded = crate::project::network::expand(&loopfile.network.allow).and_then(|commands| {
        Ok(crate::project::network::NetworkPlan {
            commands,
            setup: crate::project::network::expand(&loopfile.network.setup)?,
            checks: Vec::new(),
            resolve: loopfile.network.resolve.clone(),
        })
    });
    let (network, network_problem) = match expanded {
        Ok(n) => (n, None),
        Err(e) => (
            crate::project::network::NetworkPlan::default(),
            Some(e.to_string()),
        ),
    };
    let setup = crate::project::setup::audit(project, &loopfile);
    Ok(Audit {
        loopfile: loopfile.path,
        shares,
        caches: caches(project),
        network,
        network_problem,
        setup,
        readiness: crate::project::readiness::readiness(project),
    })
}
