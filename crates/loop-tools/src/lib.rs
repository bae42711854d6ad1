//! # loop-tools
//!
//! The tools a model may call, behind one choke point: [`ToolBox::execute`]
//! checks the tool is granted, parses its arguments strictly, resolves every
//! path through the workspace [`Jail`], and runs every command through
//! `loop-sandbox`. A refusal or a failure is an [`Observation`] for the
//! model, naming the rule — never a crash.

mod authority;
pub mod browser;
use authority::StepEdits;
mod command;
pub mod documents;
pub use command::block_cost;
pub mod exec_policy;
mod files;
pub mod mcp;
mod patch_tool;
pub mod shell;
pub mod specs;

use loop_protocol::{Control, Observation, ToolCall, ToolOutcome, ToolSpec};
use loop_sandbox::{Net, Settings};
use loop_workspace::{Intent, Jail, Journal, Manifest};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::time::Duration;

/// Bounds on what tools read, write and show.
#[derive(Debug, Clone)]
pub struct ToolLimits {
    /// Largest file `write_file`/`edit_file` will produce.
    pub max_write_bytes: usize,
    /// Bytes of a file or listing shown to the model.
    pub max_shown_bytes: usize,
    /// Default and maximum `run_command` timeout.
    pub command_timeout: Duration,
    /// Entries `list_files` returns.
    pub max_list_entries: usize,
    /// Lines one step may change (inserted + deleted), diffed against the
    /// content before the step.
    pub max_diff_lines: usize,
    /// Whether files with NUL bytes may be written.
    pub allow_binary: bool,
    /// Largest file (apparent size) a command's effects may bring into the
    /// workspace.
    pub max_file_bytes: u64,
    /// How much the task's commands together may grow the workspace, in
    /// bytes (the contract's `limits.disk_mb`): each command's writes are
    /// capped by its disk as it runs, and what they leave, added up over
    /// the task, by this.
    pub disk_bytes: u64,
    /// What the task's commands may write in all, in bytes (the contract's
    /// `limits.write_mb`): what each one's disk holds at its end, added
    /// up; once reached, no command runs.
    pub write_bytes: u64,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            max_write_bytes: 1024 * 1024,
            max_shown_bytes: 16 * 1024,
            command_timeout: Duration::from_secs(120),
            max_list_entries: 500,
            max_diff_lines: 250,
            allow_binary: false,
            max_file_bytes: loop_protocol::contract::DEFAULT_MAX_FILE_BYTES,
            disk_bytes: loop_protocol::contract::DEFAULT_DISK_MB * 1024 * 1024,
            write_bytes: loop_protocol::contract::DEFAULT_WRITE_MB * 1024 * 1024,
        }
    }
}

/// The tools and the authority that governs them.
pub struct ToolBox {
    step: std::cell::RefCell<StepEdits>,
    jail: Jail,
    journal: Journal,
    /// The model driving the task takes images.
    images: bool,
    granted: BTreeSet<String>,
    limits: ToolLimits,
    net: Net,
    sandbox: Settings,
    exec_policy: exec_policy::ExecPolicy,
    code_policy: loop_gates::CodePolicy,
    /// Where commands' effects are staged and committed all at once (set
    /// with the task's journal, when overlays work here).
    commands: Option<CommandStaging>,
    /// Content hashes of unchanged files, for the workspace root.
    stat_cache: std::cell::RefCell<loop_workspace::StatCache>,
    /// Calls a person approved (their `prompt` rule is satisfied).
    approved: BTreeSet<String>,
    /// Whether the workspace's writes are synced ([`ToolBox::without_syncs`]).
    sync: bool,
    /// Whether this runtime may still write the workspace (its claim on
    /// the task holds); asked right before every write ([`ToolBox::with_fence`]).
    fence: Option<Fence>,
    /// The Loopfile's MCP servers ([`ToolBox::with_mcp_servers`]).
    mcp: Option<std::cell::RefCell<mcp::McpHub>>,
    /// Bytes the task's commands have grown the workspace by so far (in
    /// this process), against [`ToolLimits::disk_bytes`].
    grown: std::sync::atomic::AtomicI64,
    /// Bytes the task's commands have written so far (see
    /// [`ToolLimits::write_bytes`]).
    written: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Where this task's own part of that count is kept.
    written_file: Option<std::path::PathBuf>,
    /// The part of `written` its ended children wrote, charged to it
    /// ([`ToolBox::charge_child`]; kept by the runtime, not in
    /// `written_file`).
    charged: std::sync::atomic::AtomicU64,
    /// The task's browser, while one is open ([`browser`]).
    browser: std::cell::RefCell<Option<loop_sandbox::devtools::Browser>>,
    /// Where screenshots are kept as the task's evidence
    /// ([`ToolBox::with_evidence`]).
    evidence: Option<std::path::PathBuf>,
}

/// Says whether writes may go on ([`ToolBox::with_fence`]).
pub type Fence = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// Where commands' effects are staged and their commits journaled.
struct CommandStaging {
    journal: std::path::PathBuf,
    scratch: std::path::PathBuf,
}

/// The tool runtime itself failed (not a tool call): what it was doing,
/// and the cause, kept.
#[derive(Debug, thiserror::Error)]
pub enum ToolsError {
    /// The edit journal could not be named or recovered.
    #[error("cannot {what} the edit journal: {source}")]
    Journal {
        /// `name` or `recover`.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// Temporary files of a write a crash cut short could not be removed.
    #[error("cannot clean interrupted writes: {0}")]
    InterruptedWrites(#[source] std::io::Error),
    /// A command's commit a crash cut short could not be undone.
    #[error("cannot recover a command's commit: {0}")]
    CommandCommit(#[source] std::io::Error),
    /// The workspace could not be hashed.
    #[error("cannot hash the workspace: {0}")]
    Hash(#[source] std::io::Error),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default)]
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old: String,
    new: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchArgs {
    patch: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunArgs {
    command: String,
    #[serde(default)]
    timeout_secs: Option<u64>,
    #[serde(default)]
    terminal: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinishArgs {
    #[serde(default)]
    summary: String,
}

impl ToolBox {
    /// Every tool granted, in `jail`.
    pub fn new(jail: Jail, limits: ToolLimits) -> Result<Self, ToolsError> {
        let name =
            loop_sandbox::unique_name("loop-journal").map_err(|source| ToolsError::Journal {
                what: "name",
                source,
            })?;
        let journal_dir = std::env::temp_dir().join(name);
        Ok(ToolBox {
            step: Default::default(),
            journal: Journal::new(&journal_dir, jail.root()),
            jail,
            granted: specs::TOOL_NAMES.iter().map(|s| s.to_string()).collect(),
            limits,
            net: Net::None,
            sandbox: Settings::default(),
            exec_policy: exec_policy::ExecPolicy::default(),
            code_policy: loop_gates::CodePolicy::default(),
            commands: None,
            stat_cache: Default::default(),
            approved: BTreeSet::new(),
            browser: Default::default(),
            evidence: None,
            sync: true,
            fence: None,
            mcp: None,
            grown: Default::default(),
            written: Default::default(),
            written_file: None,
            charged: Default::default(),
            images: false,
        })
    }

    /// Ask `fence` right before every write to the workspace (a file, a
    /// patch, a command's commit): when it says no (the runtime's claim on
    /// the task may have lapsed, and another runtime may own the task now),
    /// nothing is written and the call fails, saying why.
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    /// The refusal of a write the fence does not let through, if it does not.
    pub(crate) fn fenced(&self, id: &str, tool: &str) -> Option<Observation> {
        let holds = self.fence.as_ref().is_none_or(|f| f());
        (!holds).then(|| {
            Observation::error(
                id,
                tool,
                "nothing was written: this runtime's claim on the task may have lapsed (its renewal was not confirmed in time), so another runtime may own the task now; the task stops here",
            )
        })
    }

    /// Write the workspace without syncing it (files, the edit journal,
    /// commands' commits): each step stays all-or-nothing against a killed
    /// process, and the machine going down is covered by whoever keeps the
    /// workspace's state (the store, for a task's workspace). Set before
    /// [`ToolBox::with_journal`].
    pub fn without_syncs(mut self) -> Self {
        self.sync = false;
        self.journal = self.journal.unsynced();
        self
    }

    /// The workspace has grown by `bytes` already (a task resumed: what
    /// its earlier runs wrote counts against [`ToolLimits::disk_bytes`]
    /// too, not only what this process's commands write).
    pub fn with_disk_used(self, bytes: i64) -> Self {
        self.grown.store(bytes, std::sync::atomic::Ordering::SeqCst);
        self
    }

    /// Count what the task's commands write in `counter` (which holds
    /// what its earlier runs wrote, for a task resumed, and `charged`, what
    /// its ended children wrote: counted against
    /// [`ToolLimits::write_bytes`] too), and keep this task's own part of
    /// the count in `file` after every command (a kill loses nothing of
    /// it).
    pub fn with_written(
        mut self,
        counter: std::sync::Arc<std::sync::atomic::AtomicU64>,
        (file, charged): (Option<std::path::PathBuf>, u64),
    ) -> Self {
        self.written = counter;
        self.written_file = file;
        self.charged = charged.into();
        self
    }

    /// The most the task's commands may write in all, its children's
    /// included ([`ToolLimits::write_bytes`]; see [`ToolBox::written`]).
    pub fn write_limit(&self) -> u64 {
        self.limits.write_bytes
    }

    /// Count `bytes` more written by the task's commands, and keep its
    /// own part of the total.
    pub(crate) fn count_written(&self, bytes: u64) {
        use std::sync::atomic::Ordering::SeqCst;
        let total = self.written.fetch_add(bytes, SeqCst).saturating_add(bytes);
        // (Not kept, this run still counts it: only a resume would start
        // from less.)
        if let Some(f) = &self.written_file {
            let own = total.saturating_sub(self.charged.load(SeqCst));
            let _ = loop_workspace::write_atomic(f, own.to_string().as_bytes());
        }
    }

    /// Count `bytes` a child of this task wrote (recorded by the runtime
    /// before it calls this) against the task's total.
    pub fn charge_child(&self, bytes: u64) {
        use std::sync::atomic::Ordering::SeqCst;
        self.charged.fetch_add(bytes, SeqCst);
        self.written.fetch_add(bytes, SeqCst);
    }

    /// What is left of the task's writes for one command's disk, in MiB
    /// (a disk's unit), rounded up: a command may pass the total by less
    /// than 1 MiB, never by a whole disk.
    pub(crate) fn write_left_mb(&self) -> u64 {
        self.limits
            .write_bytes
            .saturating_sub(self.written())
            .div_ceil(1024 * 1024)
    }

    /// Bytes counted against [`ToolLimits::write_bytes`] so far (a
    /// child's, once it ended and was charged, with them).
    pub fn written(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Bytes counted against [`ToolLimits::disk_bytes`] so far.
    pub fn disk_used(&self) -> i64 {
        self.grown.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Check every proposed change against these code rules (the syntax
    /// gate runs always).
    pub fn with_code_policy(mut self, policy: loop_gates::CodePolicy) -> Self {
        self.code_policy = policy;
        self
    }

    /// Judge `run_command` calls by this policy.
    pub fn with_exec_policy(mut self, policy: exec_policy::ExecPolicy) -> Self {
        self.exec_policy = policy;
        self
    }

    /// Whether a command's workspace effects are committed all at once
    /// (so an interrupted one can run again: nothing of it happened).
    pub fn commands_all_or_nothing(&self) -> bool {
        self.staged_commands().is_some() && matches!(self.net, Net::None)
    }

    /// Where commands stage their effects, when they are staged (a task
    /// directory is known and overlays work here: asked at the first
    /// command, not before).
    fn staged_commands(&self) -> Option<&CommandStaging> {
        self.commands
            .as_ref()
            .filter(|_| loop_sandbox::overlay_available())
    }

    /// The rule that makes `call` wait for a person's approval, if any
    /// (`run_command` under a `prompt` rule, not yet approved).
    pub fn needs_approval(&self, call: &ToolCall) -> Option<String> {
        if self.approved.contains(&call.id) {
            return None;
        }
        if mcp::McpHub::claims(&call.tool) {
            return self.mcp.as_ref()?.borrow().approval_rule(&call.tool);
        }
        // A command: `run_command`'s, or the server a `browser` call starts.
        let command = match call.tool.as_str() {
            "run_command" => call.args.get("command")?.as_str()?,
            browser::NAME => call.args.get("serve")?.as_str()?,
            _ => return None,
        };
        let v = self.exec_policy.evaluate(command);
        (v.decision == exec_policy::Decision::Prompt)
            .then(|| v.rule.unwrap_or_else(|| "default: prompt".into()))
    }

    /// A person approved `call_id`.
    pub fn approve(&mut self, call_id: &str) {
        self.approved.insert(call_id.to_string());
    }

    /// Keep the edit journal in `dir` (outside the workspace), rolling back
    /// a step a crash interrupted. Returns the files restored.
    #[allow(clippy::disallowed_methods)] // the journal directory the runtime made
    pub fn with_journal(mut self, dir: &std::path::Path) -> Result<(Self, usize), ToolsError> {
        self.journal = Journal::new(dir, self.jail.root());
        if !self.sync {
            self.journal = self.journal.unsynced();
        }
        let restored = self
            .journal
            .recover()
            .map_err(|source| ToolsError::Journal {
                what: "recover",
                source,
            })?;
        // A single-file write cut short leaves only its temporary file: gone
        // too, so the workspace is exactly as before the write or after it.
        let swept = loop_workspace::fsutil::remove_stray_temporaries(self.jail.root())
            .map_err(ToolsError::InterruptedWrites)?;
        // Commands stage their effects beside the journal (same file system
        // as the workspace) and commit them all at once; a commit a crash
        // cut short is undone, and staging left by a killed command dropped.
        // Whether commands are staged at all (overlays work here) is
        // learnt at the first command: a task that runs none starts no
        // sandbox. A journal left behind was written where they were.
        let mut undone = 0;
        if let Some(task_dir) = dir.parent() {
            let staging = CommandStaging {
                journal: task_dir.join("command-journal"),
                scratch: task_dir.join("command-scratch"),
            };
            undone = loop_workspace::OverlayCommit::new(&staging.journal)
                .recover(self.jail.root())
                .map_err(ToolsError::CommandCommit)?;
            let _ = std::fs::remove_dir_all(&staging.scratch);
            self.commands = Some(staging);
        }
        Ok((self, restored + swept + undone))
    }

    /// How commands are isolated and cancelled.
    pub fn with_sandbox(mut self, sandbox: Settings) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Offer the tools of these MCP servers (see [`mcp`]), run with the
    /// commands' sandbox (set it first) in the workspace.
    pub fn with_mcp_servers(mut self, servers: Vec<mcp::McpServer>) -> Self {
        if !servers.is_empty() {
            let hub = mcp::McpHub::new(
                servers,
                self.sandbox.clone(),
                self.jail.root().to_path_buf(),
                self.limits.max_shown_bytes,
            );
            self.mcp = Some(std::cell::RefCell::new(hub));
        }
        self
    }

    /// A new step: the changed-lines budget starts again.
    pub fn begin_step(&mut self) {
        *self.step.borrow_mut() = StepEdits::default();
    }

    /// Offer the document tools (`read_document`, `write_spreadsheet`,
    /// `write_document`): for a task that works with documents.
    pub fn with_documents(mut self, on: bool) -> Self {
        if on {
            for t in documents::NAMES {
                self.granted.insert(t.to_string());
            }
        }
        self
    }

    /// Offer the `browser` tool: for a task whose contract or Loopfile
    /// grants it.
    pub fn with_browser(mut self, on: bool) -> Self {
        if on {
            self.granted.insert(browser::NAME.to_string());
        }
        self
    }

    /// Keep screenshots (by their SHA-256) in `dir`, the task's evidence.
    pub fn with_evidence(mut self, dir: std::path::PathBuf) -> Self {
        self.evidence = Some(dir);
        self
    }

    /// Whether the model driving the task takes images (`view_image`
    /// shows them, or says it cannot).
    pub fn set_images(&mut self, on: bool) {
        self.images = on;
    }

    /// Narrow the granted tools (authority can be narrowed, never widened).
    pub fn narrow(&mut self, keep: &[&str]) {
        self.granted.retain(|t| keep.contains(&t.as_str()));
        // MCP tools stay only if named (and only those named).
        if let Some(hub) = &self.mcp {
            hub.borrow_mut().narrow(keep);
        }
    }

    /// The workspace jail.
    pub fn jail(&self) -> &Jail {
        &self.jail
    }

    /// Specs of the granted tools.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut all: Vec<ToolSpec> = specs::all()
            .into_iter()
            .chain(specs::documents())
            .chain([specs::browser()])
            .filter(|s| self.granted.contains(&s.name))
            .map(|mut s| {
                // A network-less command whose effects are staged and
                // committed all at once: nothing of it happened unless all
                // of it did, so it may run again after a crash.
                // (Not asked here, before any command: a spec's effect is
                // the runtime's own note, and `effect` asks when it counts.)
                if s.name == "run_command"
                    && self.commands.is_some()
                    && matches!(self.net, Net::None)
                    && loop_sandbox::overlay_known() == Some(true)
                {
                    s.effect = loop_protocol::Effect::Idempotent;
                }
                s
            })
            .collect();
        if let Some(hub) = &self.mcp {
            all.extend(hub.borrow_mut().specs());
        }
        all
    }

    /// What running `call` again would do: its spec's effect (without
    /// building every spec), `run_command`'s as [`ToolBox::specs`] says.
    pub fn effect(&self, call: &ToolCall) -> loop_protocol::Effect {
        use loop_protocol::Effect;
        static BY_NAME: std::sync::OnceLock<std::collections::HashMap<String, Effect>> =
            std::sync::OnceLock::new();
        if call.tool == "run_command" && self.commands_all_or_nothing() {
            return Effect::Idempotent;
        }
        if mcp::McpHub::claims(&call.tool) {
            return self
                .mcp
                .as_ref()
                .map_or(Effect::AtMostOnce, |h| h.borrow().effect(&call.tool));
        }
        BY_NAME
            .get_or_init(|| {
                specs::all()
                    .into_iter()
                    .chain(specs::documents())
                    .map(|s| (s.name, s.effect))
                    .collect()
            })
            .get(&call.tool)
            .copied()
            .unwrap_or(Effect::AtMostOnce)
    }

    /// Merkle root of the workspace content.
    pub fn workspace_root(&self) -> Result<String, ToolsError> {
        self.workspace_manifest().map(|m| m.root)
    }

    /// The workspace's manifest.
    pub fn workspace_manifest(&self) -> Result<Manifest, ToolsError> {
        // Only files that changed since the last time are read again.
        let mut cache = self.stat_cache.borrow_mut();
        Manifest::of_cached(self.jail.root(), &mut cache).map_err(ToolsError::Hash)
    }

    /// The choke point: authority, arguments, jail, then the tool.
    pub fn execute(&mut self, call: &ToolCall) -> ToolOutcome {
        let id = call.id.as_str();
        let tool = call.tool.as_str();
        if mcp::McpHub::claims(tool)
            && let Some(hub) = &self.mcp
        {
            // Nothing is sent once this runtime's claim may have lapsed;
            // an approval is used up by the call it was for.
            let observation = match self.fenced(id, tool) {
                Some(refusal) => refusal,
                None => {
                    let approved = self.approved.remove(id);
                    hub.borrow_mut().call(id, tool, &call.args, approved)
                }
            };
            return ToolOutcome {
                observation,
                control: None,
            };
        }
        if documents::NAMES.contains(&tool) && self.granted.contains(tool) {
            let observation = match tool {
                documents::READ => self.parse(call).map(|a| self.read_document(id, &a)),
                documents::VIEW_IMAGE => self.parse(call).map(|a| self.view_image(id, &a)),
                documents::WRITE_SHEET => self.parse(call).map(|a| self.write_spreadsheet(id, a)),
                _ => self.parse(call).map(|a| self.write_word(id, a)),
            };
            return ToolOutcome {
                observation: observation.unwrap_or_else(|e| e),
                control: None,
            };
        }
        if tool == browser::NAME {
            return self.browser_call(call);
        }
        if !specs::TOOL_NAMES.contains(&tool) {
            return refused(
                id,
                tool,
                "authority: unknown tool",
                format!(
                    "There is no tool `{tool}`. Tools: {}.",
                    self.granted.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            );
        }
        if !self.granted.contains(tool) {
            return refused(
                id,
                tool,
                "authority: tool not granted",
                format!("The tool `{tool}` is not granted to this task."),
            );
        }
        use loop_protocol::ToolName;
        let observation = match ToolName::from_name(tool) {
            Some(ToolName::ReadFile) => self
                .parse(call)
                .map(|a: PathArgs| self.read_file(id, &a.path)),
            Some(ToolName::WriteFile) => self
                .parse(call)
                .map(|a: WriteArgs| self.write_file(id, &a.path, &a.content)),
            Some(ToolName::EditFile) => self.parse(call).map(|a: EditArgs| self.edit_file(id, &a)),
            Some(ToolName::ApplyPatch) => self
                .parse(call)
                .map(|a: PatchArgs| self.apply_patch(id, &a.patch)),
            Some(ToolName::ListFiles) => self
                .parse(call)
                .map(|a: ListArgs| self.list_files(id, a.path.as_deref().unwrap_or("."))),
            Some(ToolName::RunCommand) => self.parse(call).map(|a: RunArgs| {
                let o = self.run_command(id, &a, self.approved.contains(id));
                // An approval is used up by its call (a provider that
                // numbers calls afresh each turn never inherits one), unless
                // the call failed for a passing reason and is retried.
                if !o.transient {
                    self.approved.remove(id);
                }
                o
            }),
            Some(ToolName::Delegate) => {
                // The Director runs a child (`Tools::delegate`); a call
                // that reaches the tools themselves has nothing to run it.
                return refused(
                    id,
                    tool,
                    "delegation: off",
                    "No child task can run here.".to_string(),
                );
            }
            _ => {
                return match self.parse::<FinishArgs>(call) {
                    Ok(a) => ToolOutcome {
                        observation: Observation::ok(
                            id,
                            tool,
                            "Verification requested: every acceptance check will run on a sealed copy.",
                            false,
                        ),
                        control: Some(Control::Finish { summary: a.summary }),
                    },
                    Err(obs) => ToolOutcome {
                        observation: obs,
                        control: None,
                    },
                };
            }
        };
        ToolOutcome {
            observation: observation.unwrap_or_else(|e| e),
            control: None,
        }
    }

    /// The `browser` tool, granted or refused by name.
    fn browser_call(&mut self, call: &ToolCall) -> ToolOutcome {
        let (id, tool) = (call.id.as_str(), call.tool.as_str());
        if !self.granted.contains(tool) {
            return refused(
                id,
                tool,
                "authority: tool not granted",
                "The browser is not granted to this task: its contract (`browser: true`) or the Loopfile grants it.".to_string(),
            );
        }
        let observation = self.parse(call).map(|a: browser::BrowserArgs| {
            let o = self.browser(id, &a, self.approved.contains(id));
            self.approved.remove(id);
            o
        });
        ToolOutcome {
            observation: observation.unwrap_or_else(|e| e),
            control: None,
        }
    }

    fn parse<T: for<'de> Deserialize<'de>>(&self, call: &ToolCall) -> Result<T, Observation> {
        let args = if call.args.is_null() {
            serde_json::json!({})
        } else {
            call.args.clone()
        };
        // The schema first: its errors name the argument and what it should be.
        let mut specs = specs::all();
        specs.extend(specs::documents());
        specs.push(specs::browser());
        if let Err(e) = loop_protocol::action::check_call(&specs, &call.tool, &args, &call.tool) {
            return Err(Observation::error(
                &call.id,
                &call.tool,
                format!("invalid arguments for `{}`: {e}", call.tool),
            ));
        }
        serde_json::from_value(args).map_err(|e| {
            Observation::error(
                &call.id,
                &call.tool,
                format!("invalid arguments for `{}`: {e}", call.tool),
            )
        })
    }

    fn resolve(
        &self,
        id: &str,
        tool: &str,
        path: &str,
        intent: Intent,
    ) -> Result<(String, std::path::PathBuf), Observation> {
        self.jail
            .resolve(path, intent)
            .map(|(rel, full)| (rel.to_string(), full))
            .map_err(|e| Observation::refused(id, tool, e.rule(), format!("Refused: {e}.")))
    }
}

fn refused(id: &str, tool: &str, rule: &str, text: String) -> ToolOutcome {
    ToolOutcome {
        observation: Observation::refused(id, tool, rule, text),
        control: None,
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests;
