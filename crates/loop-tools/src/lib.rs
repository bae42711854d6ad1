//! # loop-tools
//!
//! The tools a model may call, behind one choke point: [`ToolBox::execute`]
//! checks the tool is granted, parses its arguments strictly, resolves every
//! path through the workspace [`Jail`], and runs every command through
//! `loop-sandbox`. A refusal or a failure is an [`Observation`] for the
//! model, naming the rule — never a crash.

pub mod exec_policy;
pub mod shell;
pub mod specs;

use loop_protocol::observation::head_tail;
use loop_protocol::{Control, Observation, ToolCall, ToolOutcome, ToolSpec};
use loop_sandbox::redact::redact;
use loop_sandbox::{ExecRequest, Net, Settings};
use loop_workspace::{Change, Intent, Jail, Journal, Manifest, patch, write_atomic};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::PathBuf;
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
        }
    }
}

/// The tools and the authority that governs them.
pub struct ToolBox {
    step: std::cell::RefCell<StepEdits>,
    jail: Jail,
    journal: Journal,
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
}

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
        })
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
        self.commands.is_some() && matches!(self.net, Net::None)
    }

    /// The rule that makes `call` wait for a person's approval, if any
    /// (`run_command` under a `prompt` rule, not yet approved).
    pub fn needs_approval(&self, call: &ToolCall) -> Option<String> {
        if call.tool != "run_command" || self.approved.contains(&call.id) {
            return None;
        }
        let command = call.args.get("command")?.as_str()?;
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
    pub fn with_journal(mut self, dir: &std::path::Path) -> Result<(Self, usize), ToolsError> {
        self.journal = Journal::new(dir, self.jail.root());
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
        let mut undone = 0;
        if loop_sandbox::overlay_available()
            && let Some(task_dir) = dir.parent()
        {
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

    /// A new step: the changed-lines budget starts again.
    pub fn begin_step(&mut self) {
        *self.step.borrow_mut() = StepEdits::default();
    }

    /// Why the code-policy gate refuses the file a command left at `rel`
    /// in its upper layer, if it does.
    fn policy_refusal(&self, upper: &std::path::Path, rel: &str) -> Option<String> {
        use std::io::Read;
        const MAX_JUDGED: u64 = 4 * 1024 * 1024;
        let lang_by_name = loop_gates::language_of(rel);
        let path = upper.join(rel);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if !meta.is_file() {
            return None;
        }
        let policed = |lang: Option<loop_gates::Language>| match lang {
            Some(loop_gates::Language::Python) => self.code_policy.python != Default::default(),
            Some(
                loop_gates::Language::JavaScript
                | loop_gates::Language::TypeScript
                | loop_gates::Language::Tsx,
            ) => self.code_policy.javascript != Default::default(),
            _ => false,
        };
        if self.code_policy == Default::default() {
            return None;
        }
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_JUDGED + 1).read_to_end(&mut bytes))
            .ok()?;
        if bytes.len() as u64 > MAX_JUDGED {
            // Too large to judge: refused where the rules police its
            // language (by name, else by its `#!` line).
            let head = String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]);
            let lang = lang_by_name.or_else(|| loop_gates::syntax::language_of_content(&head));
            return policed(lang).then(|| {
                format!(
                    "gate: code policy: {} bytes, more than the {MAX_JUDGED} the gate reads",
                    meta.len()
                )
            });
        }
        let text = String::from_utf8_lossy(&bytes);
        loop_gates::check_policy(rel, &text, &self.code_policy)
            .err()
            .map(|r| format!("{} at {}:{}:{}", r.rule, r.file, r.line, r.column))
    }

    /// Whether workspace directory `dir` is a Python package (holds an
    /// `__init__.py`): a module inside one shadows nothing.
    fn is_package(&self, dir: &str) -> bool {
        let rel = if dir.is_empty() {
            "__init__.py".to_string()
        } else {
            format!("{dir}/__init__.py")
        };
        self.jail
            .resolve(&rel, loop_workspace::Intent::Read)
            .is_ok_and(|(_, full)| full.is_file())
    }

    /// The path a write really lands on, relative to the workspace: gates
    /// judge the file that will be written (a link resolved), not the name
    /// the model asked for.
    fn resolved_rel(&self, full: &std::path::Path) -> String {
        full.strip_prefix(self.jail.root())
            .map(loop_workspace::jail::to_slash)
            .unwrap_or_else(|_| full.display().to_string())
    }

    /// Refuse `proposed` edits (path, content before this change, content
    /// after) if the step would then change more lines than allowed, or
    /// write binary content; otherwise count them.
    fn admit(
        &self,
        id: &str,
        tool: &str,
        proposed: &[(String, Option<&str>, Option<&str>)],
    ) -> Result<(), Observation> {
        if !self.limits.allow_binary
            && let Some((rel, _, _)) = proposed
                .iter()
                .find(|(_, _, new)| new.is_some_and(|n| n.contains('\0')))
        {
            return Err(Observation::refused(
                id,
                tool,
                "limit: binary content",
                format!("Refused: {rel} would contain NUL bytes; binary content is not written."),
            ));
        }
        // The secret gate: no credential may be written into a file unless
        // the file already held that exact value.
        for (rel, before, after) in proposed {
            let Some(after) = after else { continue };
            let existing = before
                .map(loop_sandbox::redact::find_secrets)
                .unwrap_or_default();
            if let Some(s) = loop_sandbox::redact::find_secrets(after)
                .into_iter()
                .find(|s| !existing.iter().any(|e| e.matched == s.matched))
            {
                return Err(Observation::refused(
                    id,
                    tool,
                    "gate: secret",
                    format!(
                        "Refused: {rel}:{}:{} would contain {}; credentials are never written into files (read them from the environment at run time).",
                        s.line, s.col, s.kind
                    ),
                ));
            }
        }
        // The shadow gate: no new module named like the standard library.
        for (rel, before, after) in proposed {
            if before.is_none()
                && after.is_some()
                && let Err(r) = loop_gates::shadow::check(rel, &|d| self.is_package(d))
            {
                return Err(Observation::refused(
                    id,
                    tool,
                    r.rule.clone(),
                    format!("Refused: {}.", r.message),
                ));
            }
        }
        // The syntax and code-policy gates: a change that would leave a
        // file unparseable, or bring in what the rules ban, never enters.
        for (rel, before, after) in proposed {
            let Some(after) = after else { continue };
            if let Err(r) = loop_gates::check(rel, *before, after, &self.code_policy) {
                return Err(Observation::refused(
                    id,
                    tool,
                    r.rule.clone(),
                    format!(
                        "Refused: {}:{}:{}: {}.",
                        r.file, r.line, r.column, r.message
                    ),
                ));
            }
        }
        let mut step = self.step.borrow_mut();
        let mut counted = step.lines.clone();
        for (rel, before, after) in proposed {
            let base = step
                .base
                .entry(rel.clone())
                .or_insert_with(|| before.unwrap_or("").to_string())
                .clone();
            counted.insert(rel.clone(), changed_lines(&base, after.unwrap_or("")));
        }
        let total: usize = counted.values().sum();
        if total > self.limits.max_diff_lines {
            // Files first seen in this refused proposal keep no base.
            let StepEdits { base, lines } = &mut *step;
            base.retain(|k, _| lines.contains_key(k));
            return Err(Observation::refused(
                id,
                tool,
                "limit: max_diff_lines",
                format!(
                    "Refused: this step would change {total} lines, over the limit of {}; make smaller steps.",
                    self.limits.max_diff_lines
                ),
            ));
        }
        step.lines = counted;
        Ok(())
    }

    /// Narrow the granted tools (authority can be narrowed, never widened).
    pub fn narrow(&mut self, keep: &[&str]) {
        self.granted.retain(|t| keep.contains(&t.as_str()));
    }

    /// The workspace jail.
    pub fn jail(&self) -> &Jail {
        &self.jail
    }

    /// Specs of the granted tools.
    pub fn specs(&self) -> Vec<ToolSpec> {
        specs::all()
            .into_iter()
            .filter(|s| self.granted.contains(&s.name))
            .map(|mut s| {
                // A network-less command whose effects are staged and
                // committed all at once: nothing of it happened unless all
                // of it did, so it may run again after a crash.
                if s.name == "run_command" && self.commands_all_or_nothing() {
                    s.effect = loop_protocol::Effect::Idempotent;
                }
                s
            })
            .collect()
    }

    /// Merkle root of the workspace content.
    pub fn workspace_root(&self) -> Result<String, ToolsError> {
        // Only files that changed since the last time are read again.
        let mut cache = self.stat_cache.borrow_mut();
        Manifest::of_cached(self.jail.root(), &mut cache)
            .map(|m| m.root)
            .map_err(ToolsError::Hash)
    }

    /// The choke point: authority, arguments, jail, then the tool.
    pub fn execute(&mut self, call: &ToolCall) -> ToolOutcome {
        let id = call.id.as_str();
        let tool = call.tool.as_str();
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
        let observation = match tool {
            "read_file" => self
                .parse(call)
                .map(|a: PathArgs| self.read_file(id, &a.path)),
            "write_file" => self
                .parse(call)
                .map(|a: WriteArgs| self.write_file(id, &a.path, &a.content)),
            "edit_file" => self.parse(call).map(|a: EditArgs| self.edit_file(id, &a)),
            "apply_patch" => self
                .parse(call)
                .map(|a: PatchArgs| self.apply_patch(id, &a.patch)),
            "list_files" => self
                .parse(call)
                .map(|a: ListArgs| self.list_files(id, a.path.as_deref().unwrap_or("."))),
            "run_command" => self
                .parse(call)
                .map(|a: RunArgs| self.run_command(id, &a, self.approved.contains(id))),
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

    fn parse<T: for<'de> Deserialize<'de>>(&self, call: &ToolCall) -> Result<T, Observation> {
        let args = if call.args.is_null() {
            serde_json::json!({})
        } else {
            call.args.clone()
        };
        // The schema first: its errors name the argument and what it should be.
        let specs = self.specs();
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

    fn read_file(&self, id: &str, path: &str) -> Observation {
        let (rel, full) = match self.resolve(id, "read_file", path, Intent::Read) {
            Ok(p) => p,
            Err(o) => return o,
        };
        match read_regular(&full) {
            Ok(bytes) => match String::from_utf8(bytes) {
                // Secrets in files are not shown to the model or recorded.
                Ok(text) => Observation::ok(
                    id,
                    "read_file",
                    head_tail(&redact(&text), self.limits.max_shown_bytes),
                    false,
                ),
                Err(e) => Observation::ok(
                    id,
                    "read_file",
                    format!("{rel} is binary ({} bytes); not shown", e.as_bytes().len()),
                    false,
                ),
            },
            Err(e) => Observation::error(id, "read_file", format!("cannot read {rel}: {e}")),
        }
    }

    fn write_file(&self, id: &str, path: &str, content: &str) -> Observation {
        let (rel, full) = match self.resolve(id, "write_file", path, Intent::Write) {
            Ok(p) => p,
            Err(o) => return o,
        };
        if content.len() > self.limits.max_write_bytes {
            return Observation::refused(
                id,
                "write_file",
                "limit: max_write_bytes",
                format!(
                    "Refused: {} bytes exceeds the {}-byte file limit.",
                    content.len(),
                    self.limits.max_write_bytes
                ),
            );
        }
        if full.is_dir() {
            return Observation::error(id, "write_file", format!("{rel} is a directory"));
        }
        let before = read_regular(&full).ok();
        let changed = before.as_deref() != Some(content.as_bytes());
        let before_text = before.as_deref().map(String::from_utf8_lossy);
        if let Err(o) = self.admit(
            id,
            "write_file",
            &[(
                self.resolved_rel(&full),
                before_text.as_deref(),
                Some(content),
            )],
        ) {
            return o;
        }
        match write_atomic(&full, content.as_bytes()) {
            Ok(()) => Observation::ok(
                id,
                "write_file",
                format!(
                    "{} {rel}: {} bytes, {} lines",
                    if before.is_some() {
                        "replaced"
                    } else {
                        "created"
                    },
                    content.len(),
                    content.lines().count()
                ),
                changed,
            ),
            Err(e) => Observation::error(id, "write_file", format!("cannot write {rel}: {e}")),
        }
    }

    fn edit_file(&self, id: &str, a: &EditArgs) -> Observation {
        let (rel, full) = match self.resolve(id, "edit_file", &a.path, Intent::Write) {
            Ok(p) => p,
            Err(o) => return o,
        };
        let text = match read_regular(&full).and_then(|b| {
            String::from_utf8(b)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        }) {
            Ok(t) => t,
            Err(e) => {
                return Observation::error(id, "edit_file", format!("cannot read {rel}: {e}"));
            }
        };
        if a.old.is_empty() {
            return Observation::error(
                id,
                "edit_file",
                "`old` is empty; give the exact text to replace",
            );
        }
        let count = text.matches(a.old.as_str()).count();
        if count != 1 {
            let why = if count == 0 {
                format!("`old` was not found in {rel}; read the file and copy the exact text")
            } else {
                format!(
                    "`old` occurs {count} times in {rel}; include more surrounding text so it is unique"
                )
            };
            return Observation::error(id, "edit_file", why);
        }
        let updated = text.replacen(a.old.as_str(), a.new.as_str(), 1);
        if updated.len() > self.limits.max_write_bytes {
            return Observation::refused(
                id,
                "edit_file",
                "limit: max_write_bytes",
                "Refused: the edited file would exceed the file size limit.",
            );
        }
        if let Err(o) = self.admit(
            id,
            "edit_file",
            &[(self.resolved_rel(&full), Some(&text), Some(&updated))],
        ) {
            return o;
        }
        let line = text[..text.find(a.old.as_str()).unwrap_or(0)]
            .matches('\n')
            .count()
            + 1;
        match write_atomic(&full, updated.as_bytes()) {
            Ok(()) => Observation::ok(
                id,
                "edit_file",
                format!(
                    "edited {rel} at line {line}: replaced {} line(s) with {}",
                    a.old.lines().count().max(1),
                    a.new.lines().count()
                ),
                updated != text,
            ),
            Err(e) => Observation::error(id, "edit_file", format!("cannot write {rel}: {e}")),
        }
    }

    fn apply_patch(&self, id: &str, text: &str) -> Observation {
        const TOOL: &str = "apply_patch";
        let files = match patch::parse(text) {
            Ok(f) => f,
            Err(e) => {
                return Observation::error(
                    id,
                    TOOL,
                    format!("patch refused, nothing applied: {e}"),
                );
            }
        };
        // Later sections see earlier sections' results.
        let mut pending: BTreeMap<String, (PathBuf, Option<String>)> = BTreeMap::new();
        let (mut added, mut removed) = (0usize, 0usize);
        for fp in &files {
            let old = match &fp.old {
                Some(rel) => {
                    let (rel, full) = match self.resolve(id, TOOL, rel.as_str(), Intent::Read) {
                        Ok(p) => p,
                        Err(o) => return o,
                    };
                    match pending.get(&rel) {
                        Some((_, content)) => content.clone(),
                        None => match read_regular(&full) {
                            Ok(bytes) => match String::from_utf8(bytes) {
                                Ok(t) => Some(t),
                                Err(_) => {
                                    return Observation::error(
                                        id,
                                        TOOL,
                                        format!("{rel} is binary; patches apply to text"),
                                    );
                                }
                            },
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                            Err(e) => {
                                return Observation::error(
                                    id,
                                    TOOL,
                                    format!("cannot read {rel}: {e}"),
                                );
                            }
                        },
                    }
                }
                None => {
                    // A creation: the target must not exist yet.
                    let target = fp.new.as_ref().map(|p| p.as_str()).unwrap_or_default();
                    let (rel, full) = match self.resolve(id, TOOL, target, Intent::Write) {
                        Ok(p) => p,
                        Err(o) => return o,
                    };
                    let exists = match pending.get(&rel) {
                        Some((_, content)) => content.is_some(),
                        None => full.exists(),
                    };
                    exists.then(String::new)
                }
            };
            let new = match patch::apply(fp, old.as_deref()) {
                Ok(n) => n,
                Err(e) => {
                    return Observation::error(
                        id,
                        TOOL,
                        format!("patch refused, nothing applied: {e}"),
                    );
                }
            };
            for h in &fp.hunks {
                for l in &h.lines {
                    match l {
                        patch::Line::Add(_) => added += 1,
                        patch::Line::Remove(_) => removed += 1,
                        patch::Line::Context(_) => {}
                    }
                }
            }
            if let Some(old_rel) = &fp.old
                && fp.new.as_ref() != Some(old_rel)
            {
                // A deletion or the old side of a rename writes the old path.
                let (rel, full) = match self.resolve(id, TOOL, old_rel.as_str(), Intent::Write) {
                    Ok(p) => p,
                    Err(o) => return o,
                };
                pending.insert(rel, (full, None));
            }
            if let Some(new_rel) = &fp.new {
                let (rel, full) = match self.resolve(id, TOOL, new_rel.as_str(), Intent::Write) {
                    Ok(p) => p,
                    Err(o) => return o,
                };
                let content = new.unwrap_or_default();
                if content.len() > self.limits.max_write_bytes {
                    return Observation::refused(
                        id,
                        TOOL,
                        "limit: max_write_bytes",
                        format!(
                            "Refused: {rel} would be {} bytes, over the {}-byte limit; nothing applied.",
                            content.len(),
                            self.limits.max_write_bytes
                        ),
                    );
                }
                pending.insert(rel, (full, Some(content)));
            }
        }
        let proposed: Vec<(String, Option<String>, Option<String>)> = pending
            .iter()
            .map(|(_, (full, content))| {
                let before = read_regular(full)
                    .ok()
                    .map(|b| String::from_utf8_lossy(&b).into_owned());
                (self.resolved_rel(full), before, content.clone())
            })
            .collect();
        let view: Vec<(String, Option<&str>, Option<&str>)> = proposed
            .iter()
            .map(|(r, b, a)| (r.clone(), b.as_deref(), a.as_deref()))
            .collect();
        if let Err(o) = self.admit(id, TOOL, &view) {
            return o;
        }
        let changes: Vec<Change> = pending
            .into_iter()
            .map(|(rel, (full, content))| Change::file(rel, full, content.map(String::into_bytes)))
            .collect();
        if let Err(e) = self.journal.commit(&changes) {
            // The journal restores the files it may have touched.
            let _ = self.journal.recover();
            return Observation::error(
                id,
                TOOL,
                format!("cannot apply the patch, nothing changed: {e}"),
            );
        }
        let names: Vec<String> = changes
            .iter()
            .map(|c| {
                format!(
                    "{}{}",
                    c.rel,
                    if c.content.is_none() {
                        " (deleted)"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        Observation::ok(
            id,
            TOOL,
            format!(
                "applied to {} file(s): {}; +{added} -{removed} lines",
                changes.len(),
                names.join(", ")
            ),
            true,
        )
    }

    fn list_files(&self, id: &str, path: &str) -> Observation {
        let (rel, full) = match self.resolve(id, "list_files", path, Intent::Read) {
            Ok(p) => p,
            Err(o) => return o,
        };
        let manifest = match Manifest::of(&full) {
            Ok(m) => m,
            Err(e) => {
                return Observation::error(id, "list_files", format!("cannot list {rel}: {e}"));
            }
        };
        let mut out = String::new();
        for e in manifest.entries.iter().take(self.limits.max_list_entries) {
            out.push_str(&format!("{}\t{} bytes\n", e.path, e.size));
        }
        if manifest.entries.len() > self.limits.max_list_entries {
            out.push_str(&format!(
                "[… {} more entries …]\n",
                manifest.entries.len() - self.limits.max_list_entries
            ));
        }
        if manifest.entries.is_empty() {
            out.push_str("(no files)\n");
        }
        Observation::ok(
            id,
            "list_files",
            head_tail(&out, self.limits.max_shown_bytes),
            false,
        )
    }

    fn run_command(&self, id: &str, a: &RunArgs, approved: bool) -> Observation {
        if a.command.trim().is_empty() {
            return Observation::error(id, "run_command", "`command` is empty");
        }
        // The exec policy: the one place a command is allowed to run.
        let verdict = self.exec_policy.evaluate(&a.command);
        let rule = verdict.rule.clone().unwrap_or_else(|| "default".into());
        match verdict.decision {
            exec_policy::Decision::Forbidden => {
                return Observation::refused(
                    id,
                    "run_command",
                    format!("exec policy: forbidden ({rule})"),
                    format!(
                        "`{}` is forbidden by the exec policy (rule `{rule}`); it was not run",
                        verdict.command
                    ),
                );
            }
            exec_policy::Decision::Prompt if !approved => {
                return Observation::refused(
                    id,
                    "run_command",
                    format!("exec policy: needs approval ({rule})"),
                    format!(
                        "`{}` needs a person's approval (rule `{rule}`); it was not run",
                        verdict.command
                    ),
                );
            }
            _ => {}
        }
        let max = self.limits.command_timeout;
        let timeout = a
            .timeout_secs
            .map(Duration::from_secs)
            .unwrap_or(max)
            .min(max);
        let staging = match self.commands.as_ref().map(|c| {
            loop_sandbox::unique_name("cmd").map(|n| c.scratch.join(n.trim_start_matches("cmd-")))
        }) {
            None => None,
            Some(Ok(p)) => Some(p),
            Some(Err(e)) => {
                return Observation::error(
                    id,
                    "run_command",
                    format!("cannot stage the command: {e}"),
                );
            }
        };
        let before = match &staging {
            Some(_) => None,
            None => Manifest::of(self.jail.root()).map(|m| m.root).ok(),
        };
        let mut req = ExecRequest::shell(a.command.clone(), self.jail.root());
        req.overlay_scratch = staging.clone();
        req.workspace = Some(self.jail.root().to_path_buf());
        // Protected paths are read-only to commands too, not only to the file tools.
        req.read_only_paths = self.jail.protected().existing(self.jail.root());
        req.timeout = timeout;
        req.net = self.net;
        self.sandbox.apply(&mut req);
        req.max_output = self.limits.max_shown_bytes * 2;
        let result = match loop_sandbox::run(&req) {
            Ok(r) => r,
            Err(e) => {
                if let Some(s) = &staging {
                    let _ = std::fs::remove_dir_all(s);
                }
                let mut o = Observation::error(id, "run_command", e.to_string());
                o.transient = e.is_transient();
                return o;
            }
        };
        // Staged: the command's effects enter the workspace now, all at once.
        let mut refused = Vec::new();
        let changed = match (&staging, &self.commands) {
            (Some(s), Some(c)) => {
                // Protected paths, names no record can show faithfully
                // (control characters) and new modules named like the
                // standard library are refused, each with its rule.
                let upper = s.join("upper");
                let admitted = std::cell::Cell::new(0u64);
                let refuse = |rel: &str| -> Option<String> {
                    if let Some(rule) = self.jail.protected().matching(rel) {
                        return Some(format!("protected by {rule}"));
                    }
                    // Apparent size: a sparse file counts whole, since
                    // everything that hashes or diffs it reads every byte.
                    if let Ok(m) = std::fs::symlink_metadata(upper.join(rel))
                        && m.is_file()
                    {
                        if m.len() > self.limits.max_file_bytes {
                            return Some(format!(
                                "{} bytes, over the per-file limit of {} (limits.max_file_bytes)",
                                m.len(),
                                self.limits.max_file_bytes
                            ));
                        }
                        // All of one command's files together, too.
                        let cap = self.limits.max_file_bytes.saturating_mul(4);
                        let total = admitted.get().saturating_add(m.len());
                        if total > cap {
                            return Some(format!(
                                "the command's files would reach {total} bytes, over the per-command total of {cap} (4 × limits.max_file_bytes)"
                            ));
                        }
                        admitted.set(total);
                    }
                    if rel.chars().any(char::is_control) {
                        return Some("a control character in the name".into());
                    }
                    // The code-policy gate judges what a command wrote as
                    // it judges the file tools' writes.
                    if let Some(why) = self.policy_refusal(&upper, rel) {
                        return Some(why);
                    }
                    if std::fs::symlink_metadata(self.jail.root().join(rel)).is_err()
                        && let Some((lang, module)) =
                            loop_gates::shadow::shadowed(rel, &|d| self.is_package(d))
                    {
                        return Some(format!(
                            "gate: stdlib shadow ({lang} {module}): it would shadow the {lang} standard module `{module}`"
                        ));
                    }
                    None
                };
                let merged = loop_workspace::OverlayCommit::new(&c.journal).merge(
                    &upper,
                    self.jail.root(),
                    &refuse,
                );
                let _ = std::fs::remove_dir_all(s);
                match merged {
                    Ok(m) => {
                        refused = m.refused;
                        !m.paths.is_empty()
                    }
                    Err(e) => {
                        return Observation::error(
                            id,
                            "run_command",
                            format!("the command ran, but its effects could not be committed: {e}"),
                        );
                    }
                }
            }
            _ => before != Manifest::of(self.jail.root()).map(|m| m.root).ok(),
        };
        let status = match (result.exit_code, result.signal, result.timed_out) {
            _ if result.cancelled => "cancelled; the command's process tree was killed".to_string(),
            (_, _, true) => format!("timed out after {} s and was killed", timeout.as_secs()),
            (Some(c), _, _) => format!("exit {c}"),
            (None, Some(s), _) => format!("killed by signal {s}"),
            _ => "ended".to_string(),
        };
        let mut content = format!("{status} ({:.2} s)\n", result.duration.as_secs_f64());
        for (name, c) in [("stdout", &result.stdout), ("stderr", &result.stderr)] {
            if c.total() > 0 {
                content.push_str(&format!("--- {name} ---\n{}\n", c.excerpt()));
            }
        }
        if !refused.is_empty() {
            content.push_str(&format!(
                "--- not applied (refused) ---\n{}\n",
                refused.join("\n")
            ));
        }
        Observation::ok(id, "run_command", content, changed)
    }
}

/// What the current step has changed, per file: the content before the
/// step and the lines changed since.
#[derive(Debug, Default)]
struct StepEdits {
    base: BTreeMap<String, String>,
    lines: BTreeMap<String, usize>,
}

/// Inserted plus deleted lines between two texts.
fn changed_lines(a: &str, b: &str) -> usize {
    similar::TextDiff::from_lines(a, b)
        .ops()
        .iter()
        .map(|op| {
            let (tag, old, new) = op.as_tag_tuple();
            match tag {
                similar::DiffTag::Equal => 0,
                similar::DiffTag::Delete => old.len(),
                similar::DiffTag::Insert => new.len(),
                similar::DiffTag::Replace => old.len() + new.len(),
            }
        })
        .sum()
}

fn refused(id: &str, tool: &str, rule: &str, text: String) -> ToolOutcome {
    ToolOutcome {
        observation: Observation::refused(id, tool, rule, text),
        control: None,
    }
}

#[cfg(test)]
mod tests;

/// Read a workspace file the way every tool must: opened without blocking
/// (a FIFO the model made would hang the runtime forever) and refused
/// unless it is a regular file. Links were resolved inside the workspace
/// by the jail before this.
fn read_regular(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, socket, device or directory is never read)",
        ));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    f.read_to_end(&mut out)?;
    Ok(out)
}
