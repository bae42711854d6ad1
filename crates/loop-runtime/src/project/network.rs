//! Declared network egress: the Loopfile's `network:` (hosts commands and
//! setup steps may reach, names pinned to addresses) and the contract's
//! `network_allow` (hosts checks may reach), with presets (`pypi`, `npm`,
//! `crates`) resolved from each toolchain's own configuration on this
//! machine, so a mirror configured for pip, npm or Cargo is the host the
//! preset allows. The sandbox's proxy enforces the lists (see
//! `loop_sandbox::egress`).

use crate::Error;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

/// The allow-lists a task runs with, presets expanded (as stored with the
/// task, so a resumed task keeps the lists it started with).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NetworkPlan {
    /// Hosts `run_command` may reach (`network.allow`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// Hosts setup steps may reach (`network.setup`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<String>,
    /// Hosts checks may reach (the contract's `network_allow`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
    /// Names pinned to an address (`network.resolve`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolve: Vec<(String, SocketAddr)>,
}

/// Which list an egress setting is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// `run_command`.
    Commands,
    /// Setup steps.
    Setup,
    /// Acceptance checks (and their replay).
    Checks,
}

impl NetworkPlan {
    /// The plan for a task: the Loopfile's lists and the contract's.
    pub fn for_task(
        loopfile: &crate::loopfile::Loopfile,
        contract: &loop_protocol::Contract,
    ) -> Result<NetworkPlan, Error> {
        Ok(NetworkPlan {
            commands: expand(&loopfile.network.allow)?,
            setup: expand(&loopfile.network.setup)?,
            checks: expand(&contract.network_allow)?,
            resolve: loopfile.network.resolve.clone(),
        })
    }

    /// The sandbox's egress setting for one use: `None` (no network at
    /// all) when its list is empty.
    pub fn egress(&self, usage: Use) -> Option<loop_sandbox::egress::Egress> {
        let (allow, list) = match usage {
            Use::Commands => (
                &self.commands,
                "network.allow (the Loopfile's, for commands)",
            ),
            Use::Setup => (
                &self.setup,
                "network.setup (the Loopfile's, for setup steps)",
            ),
            Use::Checks => (&self.checks, "network_allow (the contract's, for checks)"),
        };
        (!allow.is_empty()).then(|| loop_sandbox::egress::Egress {
            allow: allow.clone(),
            resolve: self.resolve.clone(),
            list: list.into(),
        })
    }
}

/// `entries` with every preset replaced by the hosts it names here.
pub fn expand(entries: &[String]) -> Result<Vec<String>, Error> {
    let mut out: Vec<String> = Vec::new();
    for e in entries {
        let hosts = match e.as_str() {
            "pypi" => pypi_hosts(),
            "npm" => npm_hosts(),
            "crates" => crates_hosts(),
            _ => Ok(vec![e.to_ascii_lowercase()]),
        }
        .map_err(|NoHosts(why)| Error::usage(format!("network preset `{e}`: {why}")))?;
        for h in hosts {
            if !out.contains(&h) {
                out.push(h);
            }
        }
    }
    Ok(out)
}

/// Why a preset's hosts could not be found on this machine.
struct NoHosts(String);

impl From<&str> for NoHosts {
    fn from(why: &str) -> Self {
        NoHosts(why.to_string())
    }
}

impl From<String> for NoHosts {
    fn from(why: String) -> Self {
        NoHosts(why)
    }
}

/// The host (with its port, when the URL names one) of a URL such as
/// `sparse+https://user@host:443/path`.
pub fn url_host(url: &str) -> Option<String> {
    let url = url.trim().trim_matches(['"', '\'']);
    let after = url.split_once("://")?.1;
    let auth = after.split(['/', '?', '#']).next()?;
    let auth = auth.rsplit_once('@').map_or(auth, |(_, a)| a);
    let auth = auth.to_ascii_lowercase();
    let host = auth.strip_suffix(":443").unwrap_or(&auth);
    (!host.is_empty() && loop_protocol::contract::host_pattern_problem(host).is_none())
        .then(|| host.to_string())
}

/// What a command prints, if it runs and succeeds within 20 seconds. It
/// runs from `/`: a toolchain asked from the project's directory could
/// run the project's own code (a `pip.py` there, for Python's `-m`; a
/// `rust-toolchain.toml` naming a toolchain of the project's). A question
/// whose answer the project's directory changes is asked in the sandbox
/// (see `setup::toolchains`).
pub fn output_of(program: &str, args: &[&str]) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = child.wait_with_output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// pip's index hosts: `PIP_INDEX_URL`/`PIP_EXTRA_INDEX_URL` and pip's
/// configuration (a mirror serves its files itself), else pip's own
/// default index and file host, as the installed pip names them.
fn pypi_hosts() -> Result<Vec<String>, NoHosts> {
    let mut urls: Vec<String> = Vec::new();
    for var in ["PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"] {
        if let Ok(v) = std::env::var(var) {
            urls.extend(v.split_whitespace().map(str::to_string));
        }
    }
    if let Some(listed) = output_of("python3", &["-I", "-m", "pip", "config", "list"]) {
        for line in listed.lines() {
            if let Some((key, value)) = line.split_once('=')
                && (key.ends_with("index-url") || key.ends_with("extra-index-url"))
            {
                urls.extend(
                    value
                        .trim_matches(['\'', '"'])
                        .split_whitespace()
                        .map(str::to_string),
                );
            }
        }
    }
    let mut hosts: Vec<String> = urls.iter().filter_map(|u| url_host(u)).collect();
    if hosts.is_empty() {
        let asked = output_of(
            "python3",
            &[
                "-I",
                "-c",
                "from pip._internal.models.index import PyPI as p; print(p.netloc); print(p.file_storage_domain)",
            ],
        )
        .ok_or("pip could not be asked for its index (is python3 -m pip installed?)")?;
        hosts.extend(
            asked
                .lines()
                .map(|l| l.trim().to_ascii_lowercase())
                .filter(|h| {
                    !h.is_empty() && loop_protocol::contract::host_pattern_problem(h).is_none()
                }),
        );
    }
    if hosts.is_empty() {
        return Err("no index host found in pip's configuration or defaults".into());
    }
    Ok(hosts)
}

/// npm's registry host, as `npm config get registry` gives it.
fn npm_hosts() -> Result<Vec<String>, NoHosts> {
    let url = output_of("npm", &["config", "get", "registry"])
        .ok_or("npm could not be asked for its registry (is npm installed?)")?;
    url_host(&url)
        .map(|h| vec![h])
        .ok_or_else(|| NoHosts(format!("npm's registry {:?} names no host", url.trim())))
}

/// Cargo's registry hosts: the sparse registries Cargo has used here
/// (each index cache under `$CARGO_HOME/registry/index/` that holds the
/// registry's `config.json`: its host, and the download and API hosts the
/// file names; a git index's cache, such as an old `github.com-…`, has none
/// and is not taken) and the sources `config.toml` names.
#[allow(clippy::disallowed_methods)] // the user's own Cargo home, named by the environment, not the project
fn crates_hosts() -> Result<Vec<String>, NoHosts> {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    let mut hosts: Vec<String> = Vec::new();
    let mut add = |h: Option<String>| {
        if let Some(h) = h
            && !hosts.contains(&h)
        {
            hosts.push(h);
        }
    };
    for name in ["config.toml", "config"] {
        if let Ok(text) = std::fs::read_to_string(home.join(name)) {
            for line in text.lines() {
                if let Some((key, value)) = line.split_once('=')
                    && matches!(key.trim(), "registry" | "index")
                {
                    add(url_host(value));
                }
            }
        }
    }
    if let Ok(items) = std::fs::read_dir(home.join("registry/index")) {
        for item in items.flatten() {
            let name = item.file_name().to_string_lossy().to_string();
            let Ok(text) = std::fs::read_to_string(item.path().join("config.json")) else {
                continue;
            };
            // `host-<16 hex digits>`.
            if let Some((host, hash)) = name.rsplit_once('-')
                && hash.len() == 16
                && hash.bytes().all(|b| b.is_ascii_hexdigit())
                && loop_protocol::contract::host_pattern_problem(host).is_none()
            {
                add(Some(host.to_ascii_lowercase()));
            }
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                for key in ["dl", "api"] {
                    add(v[key].as_str().and_then(url_host));
                }
            }
        }
    }
    if hosts.is_empty() {
        return Err(NoHosts(format!(
            "no registry found under {} (run `cargo fetch` once, or name the hosts)",
            home.display()
        )));
    }
    Ok(hosts)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn url_hosts_are_read_without_scheme_credentials_or_the_https_port() {
        for (url, want) in [
            ("https://pkgs.example/simple", Some("pkgs.example")),
            ("sparse+https://idx.example:443/api/", Some("idx.example")),
            (
                "http://u:p@mirror.example:8080/x",
                Some("mirror.example:8080"),
            ),
            ("'https://Q.example/'", Some("q.example")),
            ("no scheme", None),
            ("https:///path", None),
            ("https://bad host/", None),
        ] {
            assert_eq!(url_host(url).as_deref(), want, "{url}");
        }
    }

    #[test]
    fn entries_that_are_not_presets_pass_through_lower_cased_and_once() {
        let got = expand(&[
            "A.example".into(),
            "a.example".into(),
            "*.b.example:8443".into(),
        ])
        .unwrap();
        assert_eq!(got, vec!["a.example", "*.b.example:8443"]);
    }

    #[test]
    fn presets_name_the_hosts_the_toolchains_here_use() {
        // npm's: the registry npm itself reports.
        if let Some(url) = output_of("npm", &["config", "get", "registry"]) {
            let hosts = expand(&["npm".into()]).unwrap();
            assert_eq!(hosts, vec![url_host(&url).unwrap()], "{url}");
        }
        // pip's: never empty where pip runs, and never a pattern.
        if output_of("python3", &["-I", "-m", "pip", "--version"]).is_some() {
            let hosts = expand(&["pypi".into()]).unwrap();
            assert!(!hosts.is_empty());
            assert!(hosts.iter().all(|h| !h.contains(['*', '/'])), "{hosts:?}");
        }
        // Cargo's: the registries whose index this machine has cached.
        let home = std::env::var_os("CARGO_HOME")
            .map(std::path::PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")));
        if let Some(index) = home.map(|h| h.join("registry/index"))
            && let Ok(items) = std::fs::read_dir(&index)
        {
            let hosts = expand(&["crates".into()]).unwrap();
            for item in items.flatten() {
                let name = item.file_name().to_string_lossy().to_string();
                let host = name.rsplit_once('-').unwrap().0.to_string();
                // Only sparse registries (their config.json cached) count.
                let sparse = item.path().join("config.json").is_file();
                assert_eq!(hosts.contains(&host), sparse, "{host} in {hosts:?}");
            }
        }
    }

    #[test]
    fn the_lists_become_egress_settings_only_when_not_empty() {
        let plan = NetworkPlan {
            commands: vec!["a.example".into()],
            setup: vec![],
            checks: vec![],
            resolve: vec![("a.example".into(), "127.0.0.1:9".parse().unwrap())],
        };
        let e = plan.egress(Use::Commands).unwrap();
        assert_eq!(e.allow, vec!["a.example"]);
        assert!(e.list.starts_with("network.allow"));
        assert_eq!(e.resolve.len(), 1);
        assert!(plan.egress(Use::Setup).is_none());
        assert!(plan.egress(Use::Checks).is_none());
    }
}
