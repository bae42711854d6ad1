//! The acceptance contract: what "done" means, as executable checks.
//!
//! A contract is compiled from YAML (`--task FILE`) or from command-line
//! flags, validated completely before any work starts, and then locked by
//! its SHA-256 over RFC 8785 canonical JSON. Every error names the file,
//! line and column it refers to, and says what to do about it.

use crate::hash::{CanonicalError, canonical_sha256};
use crate::path::RelPath;
use crate::yaml;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The contract format version this build reads and writes.
pub const CONTRACT_VERSION: u32 = 1;

/// Paths no tool may write, whatever the contract says.
///
/// `.git` at any depth (a nested repository's config runs commands on the
/// host: `core.fsmonitor`, hooks), `.gitmodules` (submodules fetch code),
/// the runtime's own state `.loop/` (and a package's, `pkg/.loop/`, in a
/// repository whose packages are projects of their own) and its policy
/// `Loopfile.yaml`, then secrets. A contract may lift one of these with
/// `unprotect:`.
pub const DEFAULT_PROTECTED: &[&str] = &[
    "**/.git/**",
    "**/.gitmodules",
    ".loop/**",
    "**/.loop/**",
    "Loopfile.yaml",
    ".env*",
    "secrets/**",
    "*.pem",
    "*.key",
];

/// A locked acceptance contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    /// Format version ([`CONTRACT_VERSION`]).
    pub version: u32,
    /// The user's instruction, verbatim.
    pub instruction: String,
    /// What must hold; each criterion has at least one check.
    pub criteria: Vec<Criterion>,
    /// Files that must exist in the sealed result; their hashes go in the receipt.
    pub artifacts: Vec<RelPath>,
    /// Globs (relative to the workspace) that no tool may write, in addition to [`DEFAULT_PROTECTED`].
    pub protected: Vec<String>,
    /// Entries of [`DEFAULT_PROTECTED`] this contract explicitly lifts
    /// (for a task whose work is, say, its `.gitmodules`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unprotect: Vec<String>,
    /// Globs the model may change although they define what a check means
    /// (the check-integrity set: test files, runner configuration, build
    /// manifests; see `docs/formats.md`). Empty: none of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_check_changes: Vec<String>,
    /// Workspace paths that decide a check's verdict (a script it runs, a
    /// module it imports for its assertions, a file it compares) which the
    /// task may write, as a person insists: without it such a contract is
    /// refused before it is locked (a judge the task writes is no judge).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judge_may_change: Vec<String>,
    /// Hosts the checks may reach through the runtime's egress proxy (the
    /// patterns and presets of the Loopfile's `network.allow`). Empty: the
    /// checks have no network at all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_allow: Vec<String>,
    /// The task may drive a headless browser in its sandbox (the `browser`
    /// tool), granted here or by the Loopfile's `browser: true`; off
    /// otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub browser: bool,
    /// Budgets the runtime enforces.
    pub limits: Limits,
}

/// One acceptance criterion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Criterion {
    /// Unique id (letters, digits, `.`, `_`, `-`).
    pub id: String,
    /// What the criterion means, for people.
    pub text: String,
    /// Checks, all of which must pass.
    pub checks: Vec<Check>,
    /// A regression guard: it already held before the task began (the
    /// task need not make it hold, only keep it holding). Set by the
    /// contract critic; shown as such to the model and in the receipt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub guard: bool,
}

/// An executable assertion about the sealed workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Check {
    /// Run a command with `sh -c` in the workspace root.
    Run(RunCheck),
    /// The file exists (and is a regular file).
    FileExists {
        /// The file.
        path: RelPath,
    },
    /// The file contains `text` verbatim.
    FileContains {
        /// The file.
        path: RelPath,
        /// The exact substring.
        text: String,
    },
    /// The file's content matches the regular expression.
    FileMatches {
        /// The file.
        path: RelPath,
        /// The pattern (Rust `regex` syntax).
        regex: String,
    },
    /// The JSON value at `pointer` in the file equals `value`.
    JsonEquals {
        /// The JSON file.
        path: RelPath,
        /// An RFC 6901 JSON pointer ("" is the whole document).
        pointer: String,
        /// The expected value.
        value: serde_json::Value,
    },
    /// A spreadsheet's cell (`B4`) or range (`A1:C3`) holds `value` (a
    /// range: rows of values). XLSX, XLSM, XLS, XLSB, ODS or CSV; a
    /// formula's stored value is what is judged.
    CellEquals {
        /// The spreadsheet.
        path: RelPath,
        /// The sheet (the first when not named).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sheet: Option<String>,
        /// The cell or range.
        cell: String,
        /// The expected value (rows of values for a range).
        value: serde_json::Value,
    },
    /// A sheet's header row (its first row with anything in it) has these
    /// columns, in this order.
    SheetColumns {
        /// The spreadsheet.
        path: RelPath,
        /// The sheet (the first when not named).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sheet: Option<String>,
        /// The column names.
        columns: Vec<String>,
    },
    /// One table holds every one of these rows: a sheet (or a CSV file),
    /// or one of a Word document's tables.
    TableRows {
        /// The spreadsheet or Word document.
        path: RelPath,
        /// The sheet (the first when not named; spreadsheets only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sheet: Option<String>,
        /// The rows, each its cells from the first column.
        rows: Vec<Vec<serde_json::Value>>,
    },
    /// A Word document has these headings, in this order.
    DocHeadings {
        /// The DOCX file.
        path: RelPath,
        /// The headings' text.
        headings: Vec<String>,
    },
    /// A PDF's text contains `text` (runs of white space count as one),
    /// on the page named or on any page.
    PdfText {
        /// The PDF.
        path: RelPath,
        /// The page (from 1), or any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        page: Option<u32>,
        /// The text.
        text: String,
    },
    /// A page the project serves, opened in a real browser (headless
    /// Chromium) inside the check's sandbox: its server started there,
    /// the page opened, and its text, title or an element required.
    Page(PageCheck),
}

/// A `page` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageCheck {
    /// The page's path, from `/`.
    pub path: String,
    /// The command that serves the project, run with `sh -c` in the
    /// workspace root inside the check's sandbox.
    pub serve: String,
    /// The port it listens on, on 127.0.0.1 (the check's own network).
    pub port: u16,
    /// Text the page shows (its visible text contains it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The page's title, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// A CSS selector some element of the page matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub element: Option<String>,
    /// Wall-clock limit for the check (server start, load, render).
    pub timeout_secs: u64,
}

/// A `run` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunCheck {
    /// The command, run as `sh -c COMMAND`.
    pub command: String,
    /// Expected exit status.
    pub expect_exit: i32,
    /// Exact substring expected in stdout.
    pub expect_stdout: Option<String>,
    /// Exact substring expected in stderr.
    pub expect_stderr: Option<String>,
    /// Regular expression stdout must match.
    pub stdout_matches: Option<String>,
    /// Whether a test run must show tests ran. `Some(true)`: a runner's
    /// summary must report tests run (no recognised summary fails).
    /// `None` (the default): a recognised runner's summary that reports
    /// none run fails the check (an empty test run is not a pass).
    /// `Some(false)`: neither, as the contract says (recorded in it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonempty_tests: Option<bool>,
    /// A person's word that this check may pass on an empty workspace (it
    /// proves nothing about the project, and is kept as they insist:
    /// `--allow-vacuous`, or `allow_vacuous: true` in a written contract).
    /// Without it, a written contract with such a check is refused before
    /// it is locked, and a drafted one is rejected whatever it says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_vacuous: bool,
    /// The check runs on a pseudo-terminal the runtime makes (a test
    /// that needs one), never the caller's terminal.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminal: bool,
    /// Wall-clock limit for this check.
    pub timeout_secs: u64,
}

/// Budgets, enforced by the Director.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Model turns.
    pub max_steps: u32,
    /// Input + output tokens, as reported by the model provider.
    pub max_tokens: u64,
    /// Spend limit in US dollars, if any.
    pub budget_usd: Option<f64>,
    /// Wall-clock limit for the whole task.
    pub timeout_secs: u64,
    /// Verification attempts before the task ends as `failed`.
    pub max_verifications: u32,
    /// Lines a single step may change, measured as a diff against the
    /// content before the step.
    #[serde(default = "default_max_diff_lines")]
    pub max_diff_lines: u32,
    /// Largest file a command may leave in the workspace (its apparent
    /// size, so a sparse file counts whole): bigger ones are refused when
    /// the command's effects are merged, so the runtime never hashes or
    /// diffs them.
    #[serde(
        default = "default_max_file_bytes",
        skip_serializing_if = "is_default_max_file_bytes"
    )]
    pub max_file_bytes: u64,
    /// What one command (the agent's, or a check) may write, in MiB: its
    /// `/tmp` and its layer over the workspace share one size-capped tmpfs,
    /// so no command can fill the host's disk; past it, writes fail with
    /// "No space left on device" and the observation names this limit.
    #[serde(
        default = "default_disk_mb",
        skip_serializing_if = "is_default_disk_mb"
    )]
    pub disk_mb: u64,
    /// What the task's commands may write in all, in MiB: what each one's
    /// disk holds at its end ([`Limits::disk_mb`] caps one command), added
    /// up over the task; once it is reached, no more commands run.
    #[serde(
        default = "default_write_mb",
        skip_serializing_if = "is_default_write_mb"
    )]
    pub write_mb: u64,
    /// Child tasks this task may hand parts of its work to (the `delegate`
    /// tool; see `delegation.rs`). 0, the default: it cannot delegate.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_children: u32,
    /// How many levels of children may lie below this task: 1 lets it
    /// delegate to children that cannot delegate further. A child's is
    /// always less than its parent's.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_depth: u32,
}

/// The most children a contract may allow a task (`limits.max_children`).
pub const MAX_CHILDREN: u32 = 64;

/// The most levels of children a contract may allow (`limits.max_depth`).
pub const MAX_DEPTH: u32 = 4;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The default of [`Limits::write_mb`]: 16 GiB (eight commands filling
/// their disk).
pub const DEFAULT_WRITE_MB: u64 = 16 * 1024;

fn default_write_mb() -> u64 {
    DEFAULT_WRITE_MB
}

fn is_default_write_mb(n: &u64) -> bool {
    *n == DEFAULT_WRITE_MB
}

/// The default of [`Limits::disk_mb`]: 2 GiB.
pub const DEFAULT_DISK_MB: u64 = 2048;

fn default_disk_mb() -> u64 {
    DEFAULT_DISK_MB
}

fn is_default_disk_mb(n: &u64) -> bool {
    *n == DEFAULT_DISK_MB
}

fn default_max_diff_lines() -> u32 {
    250
}

/// 128 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 128 * 1024 * 1024;

fn default_max_file_bytes() -> u64 {
    DEFAULT_MAX_FILE_BYTES
}

fn is_default_max_file_bytes(n: &u64) -> bool {
    *n == DEFAULT_MAX_FILE_BYTES
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: 30,
            max_tokens: 200_000,
            budget_usd: None,
            timeout_secs: 1800,
            max_verifications: 5,
            max_diff_lines: default_max_diff_lines(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            disk_mb: DEFAULT_DISK_MB,
            write_mb: DEFAULT_WRITE_MB,
            max_children: 0,
            max_depth: 0,
        }
    }
}

/// The longest a task may be given to run (a week): a request's timeout
/// and a trigger's are refused above it.
pub const MAX_TIMEOUT_SECS: u64 = 7 * 24 * 3600;

/// Default wall-clock limit of a `run` check.
pub const DEFAULT_CHECK_TIMEOUT_SECS: u64 = 300;

impl Check {
    /// The check's kind, as written in YAML.
    pub fn kind(&self) -> &'static str {
        match self {
            Check::Run(_) => "run",
            Check::FileExists { .. } => "file_exists",
            Check::FileContains { .. } => "file_contains",
            Check::FileMatches { .. } => "file_matches",
            Check::JsonEquals { .. } => "json_equals",
            Check::CellEquals { .. } => "cell_equals",
            Check::SheetColumns { .. } => "sheet_columns",
            Check::TableRows { .. } => "table_rows",
            Check::DocHeadings { .. } => "doc_headings",
            Check::PdfText { .. } => "pdf_text",
            Check::Page(_) => "page",
        }
    }

    /// A one-line description for people.
    pub fn describe(&self) -> String {
        match self {
            Check::Run(r) => format!("run `{}`", r.command),
            Check::FileExists { path } => format!("file_exists {path}"),
            Check::FileContains { path, text } => format!("file_contains {path} {text:?}"),
            Check::FileMatches { path, regex } => format!("file_matches {path} /{regex}/"),
            Check::JsonEquals {
                path,
                pointer,
                value,
            } => format!("json_equals {path} {pointer:?} == {value}"),
            Check::CellEquals {
                path,
                sheet,
                cell,
                value,
            } => format!("cell_equals {path}{} {cell} == {value}", in_sheet(sheet)),
            Check::SheetColumns {
                path,
                sheet,
                columns,
            } => format!("sheet_columns {path}{} {columns:?}", in_sheet(sheet)),
            Check::TableRows { path, sheet, rows } => {
                format!("table_rows {path}{} ({} rows)", in_sheet(sheet), rows.len())
            }
            Check::DocHeadings { path, headings } => format!("doc_headings {path} {headings:?}"),
            Check::PdfText { path, page, text } => match page {
                Some(p) => format!("pdf_text {path} page {p} {text:?}"),
                None => format!("pdf_text {path} {text:?}"),
            },
            Check::Page(p) => {
                let mut wants = Vec::new();
                if let Some(t) = &p.title {
                    wants.push(format!("title {t:?}"));
                }
                if let Some(t) = &p.text {
                    wants.push(format!("text {t:?}"));
                }
                if let Some(e) = &p.element {
                    wants.push(format!("element {e:?}"));
                }
                format!(
                    "page {} (served by `{}` on port {}) shows {}",
                    p.path,
                    p.serve,
                    p.port,
                    wants.join(", ")
                )
            }
        }
    }

    /// The file a check reads, for the checks that read one.
    pub fn file(&self) -> Option<&RelPath> {
        match self {
            Check::Run(_) | Check::Page(_) => None,
            Check::FileExists { path }
            | Check::FileContains { path, .. }
            | Check::FileMatches { path, .. }
            | Check::JsonEquals { path, .. }
            | Check::CellEquals { path, .. }
            | Check::SheetColumns { path, .. }
            | Check::TableRows { path, .. }
            | Check::DocHeadings { path, .. }
            | Check::PdfText { path, .. } => Some(path),
        }
    }

    /// Whether the check reads a document's content (spreadsheets, Word
    /// documents, PDFs) rather than its text.
    pub fn is_document(&self) -> bool {
        matches!(
            self,
            Check::CellEquals { .. }
                | Check::SheetColumns { .. }
                | Check::TableRows { .. }
                | Check::DocHeadings { .. }
                | Check::PdfText { .. }
        )
    }
}

/// A check as a contract file writes it (see [`Contract::to_authoring`]).
fn check_authoring(c: &Check) -> serde_json::Value {
    use serde_json::{Map, Value, json};
    match c {
        Check::Run(r) => {
            let mut m = Map::new();
            m.insert("run".into(), r.command.clone().into());
            if r.expect_exit != 0 {
                m.insert("expect_exit".into(), r.expect_exit.into());
            }
            for (k, v) in [
                ("expect_stdout", &r.expect_stdout),
                ("expect_stderr", &r.expect_stderr),
                ("stdout_matches", &r.stdout_matches),
            ] {
                if let Some(v) = v {
                    m.insert(k.into(), v.clone().into());
                }
            }
            if let Some(v) = r.nonempty_tests {
                m.insert("nonempty_tests".into(), v.into());
            }
            if r.allow_vacuous {
                m.insert("allow_vacuous".into(), true.into());
            }
            m.insert("timeout_secs".into(), r.timeout_secs.into());
            Value::Object(m)
        }
        Check::FileExists { path } => json!({"file_exists": path.as_str()}),
        Check::FileContains { path, text } => {
            json!({"file_contains": path.as_str(), "text": text})
        }
        Check::FileMatches { path, regex } => {
            json!({"file_matches": path.as_str(), "regex": regex})
        }
        Check::JsonEquals {
            path,
            pointer,
            value,
        } => json!({"json_equals": path.as_str(), "pointer": pointer, "value": value}),
        Check::CellEquals {
            path,
            sheet,
            cell,
            value,
        } => with_sheet(
            json!({"cell_equals": path.as_str(), "cell": cell, "value": value}),
            sheet,
        ),
        Check::SheetColumns {
            path,
            sheet,
            columns,
        } => with_sheet(
            json!({"sheet_columns": path.as_str(), "columns": columns}),
            sheet,
        ),
        Check::TableRows { path, sheet, rows } => {
            with_sheet(json!({"table_rows": path.as_str(), "rows": rows}), sheet)
        }
        Check::DocHeadings { path, headings } => {
            json!({"doc_headings": path.as_str(), "headings": headings})
        }
        Check::PdfText { path, page, text } => {
            let mut v = json!({"pdf_text": path.as_str(), "text": text});
            if let Some(p) = page {
                v["page"] = (*p).into();
            }
            v
        }
        Check::Page(p) => {
            let mut v = json!({"page": p.path, "serve": p.serve, "port": p.port, "timeout_secs": p.timeout_secs});
            for (k, x) in [
                ("text", &p.text),
                ("title", &p.title),
                ("element", &p.element),
            ] {
                if let Some(x) = x {
                    v[k] = x.clone().into();
                }
            }
            v
        }
    }
}

/// A check's YAML form with its `sheet`, when it names one.
fn with_sheet(mut v: serde_json::Value, sheet: &Option<String>) -> serde_json::Value {
    if let Some(s) = sheet {
        v["sheet"] = s.clone().into();
    }
    v
}

fn in_sheet(sheet: &Option<String>) -> String {
    sheet
        .as_ref()
        .map(|s| format!(" sheet {s:?}"))
        .unwrap_or_default()
}

/// The largest contract read, in bytes (every way in: a file, the API,
/// MCP, a draft).
pub const MAX_CONTRACT_BYTES: usize = 256 * 1024;

/// Criteria a contract may have.
pub const MAX_CRITERIA: usize = 64;

/// Checks a contract may have, all criteria together (each runs on the
/// untouched workspace, on an empty one, and at every verification).
pub const MAX_CHECKS: usize = 128;

impl Contract {
    /// SHA-256 over the RFC 8785 canonical JSON of the contract.
    pub fn sha256(&self) -> Result<String, CanonicalError> {
        canonical_sha256(self)
    }

    /// All protected globs: the defaults (less those the contract lifts
    /// with `unprotect`), then the contract's own.
    pub fn protected_globs(&self) -> Vec<String> {
        DEFAULT_PROTECTED
            .iter()
            .filter(|d| !self.unprotect.iter().any(|u| u == *d))
            .map(|s| s.to_string())
            .chain(self.protected.iter().cloned())
            .collect()
    }

    /// Compile a contract from YAML. `origin` names the source in errors.
    pub fn from_yaml(src: &str, origin: &str) -> Result<Contract, ContractErrors> {
        let mut r = Reader::new(origin);
        if src.len() > MAX_CONTRACT_BYTES {
            r.err(
                None,
                format!(
                    "the contract is {} bytes, over the {MAX_CONTRACT_BYTES}-byte limit",
                    src.len()
                ),
                None,
            );
            return Err(ContractErrors(r.errors));
        }
        let root = match yaml::parse(src) {
            Ok(n) => n,
            Err(e) => {
                r.err(
                    Some(e.pos),
                    e.message,
                    Some("check the indentation and quoting near this position".into()),
                );
                return Err(ContractErrors(r.errors));
            }
        };
        let contract = r.contract(&root);
        match contract {
            Some(c) if r.errors.is_empty() => Ok(c),
            _ => Err(ContractErrors(r.errors)),
        }
    }

    /// The contract as a contract file writes it (JSON, which is YAML):
    /// what [`Contract::from_yaml`] reads back to the same contract.
    pub fn to_authoring(&self) -> serde_json::Value {
        use serde_json::{Map, Value, json};
        let check = check_authoring;
        let criteria: Vec<Value> = self
            .criteria
            .iter()
            .map(|c| {
                let mut m = Map::new();
                m.insert("id".into(), c.id.clone().into());
                m.insert("text".into(), c.text.clone().into());
                if c.guard {
                    m.insert("guard".into(), true.into());
                }
                m.insert("checks".into(), c.checks.iter().map(check).collect());
                Value::Object(m)
            })
            .collect();
        let l = &self.limits;
        let mut limits = json!({
            "max_steps": l.max_steps,
            "max_tokens": l.max_tokens,
            "timeout_secs": l.timeout_secs,
            "max_verifications": l.max_verifications,
            "max_diff_lines": l.max_diff_lines,
            "max_file_bytes": l.max_file_bytes,
        });
        if let Some(b) = l.budget_usd {
            limits["budget_usd"] = b.into();
        }
        if l.disk_mb != DEFAULT_DISK_MB {
            limits["disk_mb"] = l.disk_mb.into();
        }
        if l.write_mb != DEFAULT_WRITE_MB {
            limits["write_mb"] = l.write_mb.into();
        }
        if l.max_children != 0 {
            limits["max_children"] = l.max_children.into();
        }
        if l.max_depth != 0 {
            limits["max_depth"] = l.max_depth.into();
        }
        let mut doc = Map::new();
        doc.insert("version".into(), self.version.into());
        doc.insert("instruction".into(), self.instruction.clone().into());
        doc.insert("criteria".into(), criteria.into());
        let lists = [
            (
                "artifacts",
                self.artifacts
                    .iter()
                    .map(|a| a.as_str().to_string())
                    .collect::<Vec<_>>(),
            ),
            ("protected", self.protected.clone()),
            ("unprotect", self.unprotect.clone()),
            ("allow_check_changes", self.allow_check_changes.clone()),
            ("judge_may_change", self.judge_may_change.clone()),
            ("network_allow", self.network_allow.clone()),
        ];
        for (k, v) in lists {
            if !v.is_empty() {
                doc.insert(k.into(), v.into());
            }
        }
        if self.browser {
            doc.insert("browser".into(), true.into());
        }
        doc.insert("limits".into(), limits);
        Value::Object(doc)
    }

    /// A contract with the instruction and default limits only, no
    /// criteria yet: what a drafter starts from (never run as it is).
    pub fn instruction_only(instruction: &str) -> Result<Contract, ContractErrors> {
        let instruction = instruction.trim();
        if instruction.is_empty() {
            return Err(ContractErrors(vec![Diagnostic {
                origin: "command line".into(),
                pos: None,
                message: "the instruction is empty".into(),
                hint: Some("say what the task should achieve".into()),
            }]));
        }
        Ok(Contract::empty(instruction))
    }

    /// The instruction, default limits, nothing else.
    fn empty(instruction: &str) -> Contract {
        Contract {
            version: CONTRACT_VERSION,
            instruction: instruction.to_string(),
            criteria: Vec::new(),
            artifacts: Vec::new(),
            protected: Vec::new(),
            unprotect: Vec::new(),
            allow_check_changes: Vec::new(),
            judge_may_change: Vec::new(),
            network_allow: Vec::new(),
            browser: false,
            limits: Limits::default(),
        }
    }

    /// Compile a contract from `loop run` flags: one criterion per `--check`.
    pub fn from_flags(
        instruction: &str,
        checks: &[String],
        artifacts: &[String],
    ) -> Result<Contract, ContractErrors> {
        let mut contract = Contract::empty(instruction.trim());
        let mut r = Reader::new("command line");
        if contract.instruction.is_empty() {
            r.err(
                None,
                "the instruction is empty".into(),
                Some("say what the task should achieve: loop run \"…\"".into()),
            );
        }
        contract.add_flags(checks, artifacts, &mut r);
        if contract.criteria.is_empty() && r.errors.is_empty() {
            r.err(
                None,
                "the task has no acceptance check".into(),
                Some(
                    "add --check CMD (repeatable) or --task FILE: without a check nothing can prove the work done"
                        .into(),
                ),
            );
        }
        if r.errors.is_empty() {
            Ok(contract)
        } else {
            Err(ContractErrors(r.errors))
        }
    }

    /// Add `--check` and `--artifact` flags to a contract read from a file.
    pub fn extend_with_flags(
        &mut self,
        checks: &[String],
        artifacts: &[String],
    ) -> Result<(), ContractErrors> {
        let mut r = Reader::new("command line");
        self.add_flags(checks, artifacts, &mut r);
        if r.errors.is_empty() {
            Ok(())
        } else {
            Err(ContractErrors(r.errors))
        }
    }

    fn add_flags(&mut self, checks: &[String], artifacts: &[String], r: &mut Reader) {
        for (i, cmd) in checks.iter().enumerate() {
            if cmd.trim().is_empty() {
                r.err(None, format!("--check #{} is empty", i + 1), None);
                continue;
            }
            let mut n = self.criteria.len() + 1;
            while self.criteria.iter().any(|c| c.id == format!("check-{n}")) {
                n += 1;
            }
            self.criteria.push(Criterion {
                guard: false,
                id: format!("check-{n}"),
                text: format!("`{cmd}` exits 0"),
                checks: vec![Check::Run(RunCheck {
                    command: cmd.clone(),
                    expect_exit: 0,
                    expect_stdout: None,
                    expect_stderr: None,
                    stdout_matches: None,
                    nonempty_tests: None,
                    allow_vacuous: false,
                    terminal: false,
                    timeout_secs: DEFAULT_CHECK_TIMEOUT_SECS,
                })],
            });
        }
        for (i, a) in artifacts.iter().enumerate() {
            match RelPath::parse(a) {
                Ok(p) if p.is_root() => r.err(
                    None,
                    format!("--artifact #{} names the workspace root", i + 1),
                    Some("name a file".into()),
                ),
                Ok(p) => {
                    if !self.artifacts.contains(&p) {
                        self.artifacts.push(p)
                    }
                }
                Err(e) => r.err(
                    None,
                    format!("--artifact #{}: {e}", i + 1),
                    Some(PATH_HINT.into()),
                ),
            }
        }
    }
}

pub use crate::yaml::Diagnostic;

/// Every problem found in a contract (at least one).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ContractErrors(pub Vec<Diagnostic>);

impl fmt::Display for ContractErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::yaml::reader::write_all(&self.0, f)
    }
}

mod read;
pub mod schema;
use crate::yaml::Reader;
use crate::yaml::reader::PATH_HINT;

/// The named sets of hosts an allow-list may hold, resolved on the machine
/// from each toolchain's own configuration (never written here).
pub const NETWORK_PRESETS: &[&str] = &["pypi", "npm", "crates"];

/// What is wrong with an allow-list entry, if anything: a preset name, or
/// `host`, `host:port`, `*.domain`, `*.domain:port` (host names of
/// letters, digits, `-` and `.`, or an IP address; ports 1 to 65535).
pub fn host_pattern_problem(entry: &str) -> Option<String> {
    if NETWORK_PRESETS.contains(&entry) {
        return None;
    }
    let bad = |why: &str| {
        Some(format!(
            "`{entry}` is not a host pattern: {why} (host, host:port, *.domain, or a preset: {})",
            NETWORK_PRESETS.join(", ")
        ))
    };
    let (name, port) = match entry.rsplit_once(':') {
        Some((n, p)) if !n.contains(':') || n.ends_with(']') => (n, Some(p)),
        _ => (entry, None),
    };
    if let Some(p) = port
        && !p.parse::<u16>().is_ok_and(|p| p > 0)
    {
        return bad("its port is not a number from 1 to 65535");
    }
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    let host = name.strip_prefix("*.").unwrap_or(name);
    if host.is_empty() || host.starts_with('.') || host.ends_with('.') || host.len() > 253 {
        return bad("its name is empty or starts or ends with a dot");
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        return bad("only letters, digits, `-` and `.` make a host name, and `*.` only leads");
    }
    None
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests;
