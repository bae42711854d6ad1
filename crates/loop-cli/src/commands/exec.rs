//! `loop exec` and `loop doctor`: one command under the sandbox, and what
//! this machine's kernel offers.

use crate::CliError;
use crate::cli::{ExecArgs, NetArg};
use loop_runtime::{ExecFailureKind, ExecOptions};
use loop_sandbox::{ExecRequest, Net, Program};
use std::io::Write;
use std::time::Duration;

/// `loop exec`: the command's own code passes through; this command's own
/// failures are 125 (126/127 for a command it cannot run or find).
pub(crate) fn command(o: ExecArgs, json: bool) -> Result<u8, CliError> {
    exec(o, json).map_err(|e| match e.code {
        2 | 3 => CliError {
            code: 125,
            message: e.message,
        },
        _ => e,
    })
}

/// Run it; the exit code mirrors the command's (128 + signal when killed).
pub fn exec(o: ExecArgs, json: bool) -> Result<u8, CliError> {
    let layers = o
        .without
        .iter()
        .try_fold(loop_sandbox::Layers::default(), |l, name| l.without(name))
        .map_err(|e| CliError::usage(e.to_string()))?;
    let cwd = match &o.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir()
            .map_err(|e| CliError::usage(format!("current directory: {e}")))?,
    };
    let cwd = cwd
        .canonicalize()
        .map_err(|e| CliError::usage(format!("workspace {}: {e}", cwd.display())))?;
    let mut resolve = Vec::new();
    for r in &o.resolve {
        let parsed = r
            .split_once('=')
            .and_then(|(h, a)| Some((h.to_ascii_lowercase(), a.parse().ok()?)));
        match parsed {
            Some(p) => resolve.push(p),
            None => {
                return Err(CliError::usage(format!(
                    "--resolve {r:?}: expected HOST=IP:PORT"
                )));
            }
        }
    }
    let egress = (!o.allow.is_empty()).then(|| loop_sandbox::egress::Egress {
        allow: o.allow.clone(),
        resolve,
        list: "loop exec --allow".into(),
    });
    let r = loop_runtime::exec(&ExecOptions {
        egress,
        command: o.command.clone(),
        workspace: cwd,
        protect: o.protect.clone(),
        net: match o.net {
            NetArg::None => Net::None,
            NetArg::Host => Net::Host,
        },
        mem_mb: o.mem,
        cpu_secs: o.cpu_secs,
        fsize_mb: o.fsize,
        disk_mb: o.disk,
        timeout: Duration::from_secs(o.timeout),
        max_output: o.max_output,
        isolation: o.isolation.level(),
        overlay: o.overlay,
        layers,
        repeat: o.repeat,
        pause: Duration::from_millis(o.pause_ms),
        terminal: o.tty,
    })
    .map_err(|e| CliError {
        // As `env`, `timeout` and container runtimes do: 127 not found,
        // 126 cannot be run, 125 anything else.
        code: match e.kind {
            ExecFailureKind::NotFound => 127,
            ExecFailureKind::NotRunnable => 126,
            ExecFailureKind::Runtime => 125,
        },
        message: e.message,
    })?;
    if json {
        crate::ui::say_json(&loop_runtime::views::ExecLine::of(&r))?;
    } else {
        // To a terminal, the command's control characters are made visible
        // (`^[`): an escape sequence it wrote could set the clipboard, or
        // make the terminal answer into its own input.
        use std::io::IsTerminal;
        let streams = [
            ("output", &r.stdout, std::io::stdout().is_terminal()),
            ("error output", &r.stderr, std::io::stderr().is_terminal()),
        ];
        for (i, (_, c, terminal)) in streams.iter().enumerate() {
            let text = c.excerpt();
            let text = match terminal {
                true => visible(&text),
                false => text,
            };
            let _ = match i {
                0 => std::io::stdout().write_all(text.as_bytes()),
                _ => std::io::stderr().write_all(text.as_bytes()),
            };
        }
        // What was shown is the kept excerpt, as text: said when it is not
        // what the command wrote, so no one takes it for a copy.
        for (name, c, terminal) in streams {
            if c.truncated() {
                eprintln!(
                    "loop exec: {} of the {} bytes of the command's {name} were left out (--max-output keeps the head and tail of each stream); --json gives the count and SHA-256 of every byte",
                    c.omitted(),
                    c.total()
                );
            } else if !c.excerpt_is_exact() || (terminal && visible(&c.excerpt()) != c.excerpt()) {
                eprintln!(
                    "loop exec: the command's {name} is shown as text, not byte for byte (bytes that are not UTF-8 replaced, secrets redacted, control characters made visible on a terminal); --json gives the count and SHA-256 of what it wrote"
                );
            }
        }
        if r.timed_out {
            eprintln!(
                "loop exec: timed out after {} s; the command's process tree was killed",
                o.timeout
            );
        }
    }
    Ok(match (r.exit_code, r.signal) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
        _ => 1,
    })
}

/// A command's output for a terminal: its control characters made
/// visible (`^[`), its tabs kept (columns of `make`, `go test`).
fn visible(text: &str) -> String {
    text.split('\t')
        .map(crate::ui::screen::defang)
        .collect::<Vec<_>>()
        .join("\t")
}

/// What `loop doctor` found, row by row: printed as aligned lines, or
/// gathered into one JSON object keyed by each label in snake case (`fresh
/// /proc` is `fresh_proc`), a yes/no as a boolean, a label seen twice
/// holding a list.
struct Rows {
    json: bool,
    map: serde_json::Map<String, serde_json::Value>,
}

/// A doctor's label as a JSON key: lower case, each run of anything but
/// letters and digits one `_` (an apostrophe nothing).
fn key_of(label: &str) -> String {
    let mut key = String::new();
    for c in label.chars().filter(|c| *c != '\'') {
        if c.is_ascii_alphanumeric() {
            key.push(c.to_ascii_lowercase());
        } else if !key.is_empty() && !key.ends_with('_') {
            key.push('_');
        }
    }
    key.trim_end_matches('_').to_string()
}

impl Rows {
    /// A yes/no row: `yes` or `NO` on the screen, a boolean in JSON.
    fn flag(&mut self, label: &str, on: bool) {
        self.said(label, if on { "yes" } else { "NO" }.into(), on.into());
    }

    fn row(&mut self, label: &str, value: impl Into<String>) {
        let value = value.into();
        self.said(label, value.clone(), value.into());
    }

    /// A row said as `text` on the screen and as `value` in JSON.
    fn said(&mut self, label: &str, text: String, value: serde_json::Value) {
        if !self.json {
            println!("{label:<13} {text}");
            return;
        }
        let key = key_of(label);
        // Labels that can repeat are lists always, so their type is one.
        if matches!(key.as_str(), "note" | "toolchain") {
            if let serde_json::Value::Array(list) = self
                .map
                .entry(key)
                .or_insert_with(|| serde_json::Value::Array(Vec::new()))
            {
                list.push(value);
            }
            return;
        }
        match self.map.get_mut(&key) {
            Some(serde_json::Value::Array(list)) => list.push(value),
            Some(old) => *old = serde_json::Value::Array(vec![old.take(), value]),
            None => {
                self.map.insert(key, value);
            }
        }
    }
}

/// `loop doctor`: what the sandbox can enforce here, tried for real.
pub fn doctor(project: &std::path::Path, json: bool) -> Result<u8, CliError> {
    let mut out = Rows {
        json,
        map: serde_json::Map::new(),
    };
    let s = loop_sandbox::probe::support();
    out.row("user", if s.root { "root" } else { "unprivileged" });
    out.flag("user ns", s.userns);
    out.flag("namespaces", s.namespaces);
    out.flag("fresh /proc", s.proc_mount);
    out.said(
        "landlock",
        if s.landlock_abi > 0 {
            format!("ABI {}", s.landlock_abi)
        } else {
            "NO".into()
        },
        s.landlock_abi.into(),
    );
    out.flag("seccomp", s.seccomp);
    out.row(
        "shares/setup",
        if s.namespaces {
            "dependency environments and setup layers can be shown to tasks (`loop audit --project DIR` says what a project's tasks would share)"
        } else {
            "NO: sharing .venv, node_modules or a setup layer needs mount namespaces"
        },
    );
    out.row(
        "egress",
        if s.namespaces {
            "declared hosts through the runtime's proxy (network.allow); otherwise no network"
        } else {
            "NO: an allow-list needs a network namespace; tasks that declare one are refused"
        },
    );
    let dir = std::env::temp_dir();
    let mut req = ExecRequest::new(Program::Argv(vec!["true".into()]), &dir);
    req.timeout = Duration::from_secs(10);
    match loop_sandbox::run(&req) {
        Ok(r) => {
            let i = &r.isolation;
            out.flag("memory cgroup", i.memory_cgroup);
            out.flag("pids cgroup", i.pids_cgroup);
            out.flag("ipc namespace", i.ipc_namespace);
            out.flag("cgroup namespace", i.cgroup_namespace);
            out.flag("no terminal", i.no_terminal);
            if i.runtime_terminal {
                out.row("runtime's terminal", "yes (asked for with --tty)");
            }
            out.flag("no capabilities", i.no_capabilities);
            out.row(
                "disk budget",
                match i.disk_mb {
                    Some(mb) => format!("yes (/tmp and the workspace layer: a tmpfs of {mb} MiB)"),
                    None => "NO".into(),
                },
            );
            out.row("rlimits", i.rlimits.join(" "));
            for n in &i.notes {
                out.row("note", n.clone());
            }
            out.row(
                "isolated true",
                format!(
                    "{} in {:.1} ms under full isolation",
                    match (r.exit_code, r.signal) {
                        (Some(c), _) => format!("exit {c}"),
                        (None, Some(s)) => format!("killed by signal {s}"),
                        _ => "ended".to_string(),
                    },
                    r.duration.as_secs_f64() * 1000.0
                ),
            );
        }
        Err(e) => out.row("isolated true", format!("FAILED: {e}")),
    }
    project_doctor(project, &mut out);
    if json {
        println!("{}", serde_json::Value::Object(out.map));
    }
    Ok(0)
}

/// The project's side of `loop doctor`: each detected stack's toolchain,
/// the store, the signing key, and whether the model endpoint answers.
#[allow(clippy::disallowed_methods)] // existence of the user's own store and signing key (loop doctor)
fn project_doctor(project: &std::path::Path, out: &mut Rows) {
    let Ok(runtime) = loop_runtime::Runtime::open(project) else {
        out.row("project", format!("{} cannot be opened", project.display()));
        return;
    };
    let root = runtime.project();
    out.row("project", root.display().to_string());
    let loopfile = loop_runtime::Loopfile::load(root);
    let verification = loopfile
        .as_ref()
        .map(|l| l.verification.clone())
        .unwrap_or_default();
    let mut stacks: Vec<&str> = loop_runtime::project_checks(root, &verification)
        .iter()
        .map(|c| c.stack)
        .collect();
    stacks.dedup();
    for stack in stacks {
        let tools: &[(&str, &[&str])] = match stack {
            "python" => &[("python3", &["--version"])],
            "rust" => &[("cargo", &["--version"]), ("rustc", &["--version"])],
            "go" => &[("go", &["version"])],
            "node" => &[("node", &["--version"]), ("npm", &["--version"])],
            "cmake" => &[("cmake", &["--version"]), ("ctest", &["--version"])],
            "make" => &[("make", &["--version"])],
            _ => &[],
        };
        for (tool, args) in tools {
            let said = loop_runtime::output_of(tool, args)
                .and_then(|o| o.lines().next().map(str::to_string))
                .unwrap_or_else(|| "NOT FOUND".into());
            out.row("toolchain", format!("{stack}: {tool}: {said}"));
        }
    }
    let db = root.join(".loop/loop.db");
    // The store answers (a server's version, the schema's), or says why
    // not. The embedded file is asked only when it exists: opening it
    // would make it.
    let named = loop_runtime::store_url(root);
    let asked = match &named {
        Ok(Some(_)) => true,
        Ok(None) => db.is_file(),
        Err(_) => false,
    };
    out.row(
        "store",
        match &named {
            Err(e) => format!("NO: {}", e.message),
            Ok(_) if !asked => format!("none yet (made at {} on the first run)", db.display()),
            Ok(_) => match runtime
                .describe_store()
                .and_then(|d| Ok((d, runtime.tasks()?)))
            {
                Ok((d, t)) => format!("{d}, {} task(s)", t.len()),
                Err(e) => format!("NO: cannot be reached: {}", e.message),
            },
        },
    );
    if let Ok(Some((_, from))) = &named {
        out.row("store from", from.to_string());
    }
    let key = loop_receipt::signing_key_path();
    let from_env = std::env::var_os("LOOP_SIGNING_KEY").is_some()
        || std::env::var_os("LOOP_SIGNING_KEY_FILE").is_some();
    out.row(
        "signing key",
        if from_env {
            "from LOOP_SIGNING_KEY(_FILE)".to_string()
        } else if key.is_file() {
            key.display().to_string()
        } else {
            format!("none yet (made at {} on the first run)", key.display())
        },
    );
    let endpoint = match &loopfile {
        Ok(l) => loop_runtime::maker_endpoint(l),
        Err(e) => Err(e.clone()),
    };
    out.row(
        "model",
        match endpoint {
            Ok(None) => "none configured in the Loopfile (give --model)".to_string(),
            Err(e) => format!("the Loopfile's models do not resolve: {e}"),
            Ok(Some((model, url))) => format!("{model} at {url}: {}", reachable(&url)),
        },
    );
}

/// Whether a TCP connection to the URL's host opens within 3 seconds (no
/// request is sent, no key is used).
fn reachable(url: &str) -> String {
    use std::net::ToSocketAddrs;
    let Some(after) = url.split_once("://").map(|(_, a)| a) else {
        return format!("not a URL: {url}");
    };
    let auth = after.split('/').next().unwrap_or_default();
    let default_port = if url.starts_with("https") { 443 } else { 80 };
    let target = if auth
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        auth.to_string()
    } else {
        format!("{auth}:{default_port}")
    };
    let addrs: Vec<std::net::SocketAddr> = match target.to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => return format!("UNREACHABLE: {target} does not resolve ({e})"),
    };
    let mut why = String::from("no address");
    for a in &addrs {
        match std::net::TcpStream::connect_timeout(a, Duration::from_secs(3)) {
            Ok(_) => return format!("reachable ({a})"),
            Err(e) => why = format!("{a}: {e}"),
        }
    }
    format!("UNREACHABLE: {why}")
}
