//! Reading a contract from YAML: every error collected, each with its
//! `file:line:column` and a hint ("did you mean"), before any work starts.

use super::{
    CONTRACT_VERSION, Check, Contract, Criterion, DEFAULT_CHECK_TIMEOUT_SECS, DEFAULT_PROTECTED,
    Limits, RunCheck,
};
use crate::path::RelPath;
use crate::yaml::reader::{PATH_HINT, describe_value};
use crate::yaml::{Key, Node, Pos, Reader, Value, closest};

pub(super) const TOP_KEYS: &[&str] = &[
    "version",
    "instruction",
    "criteria",
    "artifacts",
    "protected",
    "unprotect",
    "allow_check_changes",
    "judge_may_change",
    "network_allow",
    "browser",
    "limits",
];
pub(super) const CRITERION_KEYS: &[&str] = &["id", "text", "checks", "guard"];
pub(super) const LIMIT_KEYS: &[&str] = &[
    "max_steps",
    "max_tokens",
    "budget_usd",
    "timeout_secs",
    "max_verifications",
    "max_diff_lines",
    "max_file_bytes",
    "disk_mb",
    "write_mb",
    "max_children",
    "max_depth",
];
pub(super) const CHECK_KINDS: &[&str] = &[
    "run",
    "file_exists",
    "file_contains",
    "file_matches",
    "json_equals",
    "cell_equals",
    "sheet_columns",
    "table_rows",
    "doc_headings",
    "pdf_text",
    "page",
];
const RUN_KEYS: &[&str] = &[
    "run",
    "expect_exit",
    "expect_stdout",
    "expect_stderr",
    "stdout_matches",
    "nonempty_tests",
    "allow_vacuous",
    "terminal",
    "timeout_secs",
];

pub(super) fn keys_for_kind(kind: &str) -> &'static [&'static str] {
    match kind {
        "run" => RUN_KEYS,
        "file_exists" => &["file_exists"],
        "file_contains" => &["file_contains", "text"],
        "file_matches" => &["file_matches", "regex"],
        "cell_equals" => &["cell_equals", "sheet", "cell", "value"],
        "sheet_columns" => &["sheet_columns", "sheet", "columns"],
        "table_rows" => &["table_rows", "sheet", "rows"],
        "doc_headings" => &["doc_headings", "headings"],
        "pdf_text" => &["pdf_text", "page", "text"],
        "page" => &[
            "page",
            "serve",
            "port",
            "text",
            "title",
            "element",
            "timeout_secs",
        ],
        _ => &["json_equals", "pointer", "value"],
    }
}

impl Reader {
    /// A contract: every top-level key read, each problem recorded, and
    /// the missing `instruction` and `criteria` named.
    pub(crate) fn contract(&mut self, root: &Node) -> Option<Contract> {
        let entries = self.mapping(root, "the contract", TOP_KEYS)?;
        let mut version = CONTRACT_VERSION;
        let mut instruction = None;
        let mut criteria = None;
        let mut artifacts = Vec::new();
        let mut protected = Vec::new();
        let mut unprotect = Vec::new();
        let mut allow_check_changes = Vec::new();
        let mut judge_may_change = Vec::new();
        let mut network_allow = Vec::new();
        let mut browser = false;
        let mut limits = Limits::default();
        for (k, v) in entries {
            match k.name.as_str() {
                "version" => {
                    if let Some(n) = self.contract_version(v) {
                        version = n;
                    }
                }
                "instruction" => instruction = self.nonempty_string(v, "`instruction`"),
                "criteria" => criteria = self.criteria(v),
                "artifacts" => self.read_artifacts(v, &mut artifacts),
                "protected" => self.read_globs(v, "`protected`", &mut protected),
                "unprotect" => self.read_unprotect(v, &mut unprotect),
                "allow_check_changes" => {
                    self.read_globs(v, "`allow_check_changes`", &mut allow_check_changes)
                }
                "judge_may_change" => self.read_judge_may_change(v, &mut judge_may_change),
                "network_allow" => self.read_network_allow(v, &mut network_allow),
                "browser" => browser = self.boolean(v, "`browser`").unwrap_or(false),
                "limits" => {
                    if let Some(l) = self.limits(v) {
                        limits = l;
                    }
                }
                _ => {}
            }
        }
        self.contract_missing_keys(root, entries, instruction.is_none());
        Some(Contract {
            version,
            instruction: instruction?,
            criteria: criteria?,
            artifacts,
            protected,
            unprotect,
            allow_check_changes,
            judge_may_change,
            network_allow,
            browser,
            limits,
        })
    }

    /// A contract's `version`: the one this build reads (another is
    /// reported); `None` when it is not a number at all.
    fn contract_version(&mut self, v: &Node) -> Option<u32> {
        let n = self.unsigned(v, "`version`", 1)?;
        if n != u64::from(CONTRACT_VERSION) {
            self.err(
                Some(v.pos),
                format!("unsupported contract version {n}"),
                Some(format!("this build reads version {CONTRACT_VERSION}")),
            );
        }
        Some(CONTRACT_VERSION)
    }

    /// A contract's `artifacts:`, added to `artifacts`; one listed twice is
    /// reported.
    fn read_artifacts(&mut self, v: &Node, artifacts: &mut Vec<RelPath>) {
        if let Some(items) = self.seq(v, "`artifacts`") {
            for item in items {
                if let Some(p) = self.rel_path(item, "artifact") {
                    if artifacts.contains(&p) {
                        self.err(
                            Some(item.pos),
                            format!("artifact `{p}` is listed twice"),
                            None,
                        );
                    } else {
                        artifacts.push(p);
                    }
                }
            }
        }
    }

    /// A list of protected globs (`what`: `protected`,
    /// `allow_check_changes`), added to `out`.
    fn read_globs(&mut self, v: &Node, what: &str, out: &mut Vec<String>) {
        if let Some(items) = self.seq(v, what) {
            for item in items {
                if let Some(g) = self.glob(item) {
                    out.push(g);
                }
            }
        }
    }

    /// A contract's `unprotect:`, added to `out`: each must be one of the
    /// default protections.
    fn read_unprotect(&mut self, v: &Node, out: &mut Vec<String>) {
        if let Some(items) = self.seq(v, "`unprotect`") {
            for item in items {
                let Some(g) = self.nonempty_string(item, "default protection") else {
                    continue;
                };
                if DEFAULT_PROTECTED.contains(&g.as_str()) {
                    out.push(g);
                } else {
                    self.err(
                        Some(item.pos),
                        format!("`{g}` is not one of the default protections"),
                        Some(format!(
                            "`unprotect` lifts one of: {}",
                            DEFAULT_PROTECTED.join(", ")
                        )),
                    );
                }
            }
        }
    }

    /// A contract's `judge_may_change:`, added to `out` without a leading `./`.
    fn read_judge_may_change(&mut self, v: &Node, out: &mut Vec<String>) {
        for item in self.seq(v, "`judge_may_change`").unwrap_or_default() {
            if let Some(p) = self.nonempty_string(item, "a path a judge may change") {
                out.push(p.trim_start_matches("./").to_string());
            }
        }
    }

    /// A contract's `network_allow:`, added to `out`: each a host pattern.
    fn read_network_allow(&mut self, v: &Node, out: &mut Vec<String>) {
        for item in self.seq(v, "`network_allow`").unwrap_or_default() {
            if let Some(h) = self.nonempty_string(item, "an allowed host") {
                match crate::contract::host_pattern_problem(&h) {
                    Some(why) => self.err(Some(item.pos), why, None),
                    None => out.push(h),
                }
            }
        }
    }

    /// Report a contract (at `root`, with `entries`) that has no
    /// `instruction` (`no_instruction`: none was read) or no `criteria`.
    fn contract_missing_keys(
        &mut self,
        root: &Node,
        entries: &[(Key, Node)],
        no_instruction: bool,
    ) {
        if no_instruction && !entries.iter().any(|(k, _)| k.name == "instruction") {
            self.err(
                Some(root.pos),
                "the contract has no `instruction`".into(),
                Some("add `instruction: <what the task should achieve>`".into()),
            );
        }
        if !entries.iter().any(|(k, _)| k.name == "criteria") {
            self.err(
                Some(root.pos),
                "the contract has no `criteria`".into(),
                Some("add `criteria:` with at least one criterion and its checks".into()),
            );
        }
    }

    /// A protected glob, checked (also the Loopfile's `defaults.protected`).
    pub fn glob(&mut self, node: &Node) -> Option<String> {
        let s = self.nonempty_string(node, "protected glob")?;
        if s.starts_with('/') || s.split('/').any(|c| c == "..") {
            self.err(
                Some(node.pos),
                format!("protected glob `{s}` must be relative to the workspace, without `..`"),
                Some(PATH_HINT.into()),
            );
            return None;
        }
        if let Err(e) = globset::Glob::new(&s) {
            self.err(
                Some(node.pos),
                format!("protected glob `{s}` is invalid: {}", e.kind()),
                None,
            );
            return None;
        }
        Some(s)
    }

    /// A contract's `limits:` (also the Loopfile's `defaults.limits`).
    pub fn limits(&mut self, node: &Node) -> Option<Limits> {
        let entries = self.mapping(node, "`limits`", LIMIT_KEYS)?;
        let mut l = Limits::default();
        for (k, v) in entries {
            match k.name.as_str() {
                "max_steps" => {
                    if let Some(n) = self.unsigned(v, "`max_steps`", 1) {
                        l.max_steps = u32::try_from(n).unwrap_or(u32::MAX);
                    }
                }
                "max_tokens" => {
                    if let Some(n) = self.unsigned(v, "`max_tokens`", 1) {
                        l.max_tokens = n;
                    }
                }
                "timeout_secs" => {
                    if let Some(n) = self.unsigned(v, "`timeout_secs`", 1) {
                        l.timeout_secs = n;
                    }
                }
                "max_verifications" => {
                    if let Some(n) = self.unsigned(v, "`max_verifications`", 1) {
                        l.max_verifications = u32::try_from(n).unwrap_or(u32::MAX);
                    }
                }
                "max_diff_lines" => {
                    if let Some(n) = self.unsigned(v, "`max_diff_lines`", 1) {
                        l.max_diff_lines = u32::try_from(n).unwrap_or(u32::MAX);
                    }
                }
                "max_file_bytes" => {
                    if let Some(n) = self.unsigned(v, "`max_file_bytes`", 1) {
                        l.max_file_bytes = n;
                    }
                }
                "disk_mb" => {
                    if let Some(n) = self.unsigned(v, "`disk_mb`", 1) {
                        l.disk_mb = n;
                    }
                }
                "write_mb" => {
                    if let Some(n) = self.unsigned(v, "`write_mb`", 1) {
                        l.write_mb = n;
                    }
                }
                "max_children" => {
                    if let Some(n) = self.unsigned(v, "`max_children`", 0) {
                        if n > u64::from(crate::contract::MAX_CHILDREN) {
                            self.err(
                                Some(v.pos),
                                format!(
                                    "`max_children` may be at most {}, found {n}",
                                    crate::contract::MAX_CHILDREN
                                ),
                                None,
                            );
                        } else {
                            l.max_children = n as u32;
                        }
                    }
                }
                "max_depth" => {
                    if let Some(n) = self.unsigned(v, "`max_depth`", 0) {
                        if n > u64::from(crate::contract::MAX_DEPTH) {
                            self.err(
                                Some(v.pos),
                                format!(
                                    "`max_depth` may be at most {}, found {n}",
                                    crate::contract::MAX_DEPTH
                                ),
                                None,
                            );
                        } else {
                            l.max_depth = n as u32;
                        }
                    }
                }
                "budget_usd" => match v.value {
                    Value::Int(i) if i >= 0 => l.budget_usd = Some(i as f64),
                    Value::Float(f) if f.is_finite() && f >= 0.0 => l.budget_usd = Some(f),
                    _ => self.err(
                        Some(v.pos),
                        format!(
                            "`budget_usd` must be a non-negative number, found {}",
                            describe_value(v)
                        ),
                        None,
                    ),
                },
                _ => {}
            }
        }
        Some(l)
    }

    /// A contract's `criteria:` list (also the Loopfile's `verification.checks`).
    pub fn criteria(&mut self, node: &Node) -> Option<Vec<Criterion>> {
        let items = self.seq(node, "`criteria`")?;
        if items.is_empty() {
            self.err(
                Some(node.pos),
                "`criteria` is empty".into(),
                Some("a contract needs at least one criterion with a check".into()),
            );
            return None;
        }
        if items.len() > super::MAX_CRITERIA {
            self.err(
                Some(node.pos),
                format!(
                    "{} criteria: a contract has at most {}",
                    items.len(),
                    super::MAX_CRITERIA
                ),
                Some(
                    "judge the work with fewer, stronger criteria (a test suite is one check)"
                        .into(),
                ),
            );
            return None;
        }
        let total: usize = items
            .iter()
            .filter_map(|i| match &i.value {
                crate::yaml::Value::Map(entries) => entries
                    .iter()
                    .find(|(k, _)| k.name == "checks")
                    .and_then(|(_, v)| match &v.value {
                        crate::yaml::Value::Seq(s) => Some(s.len()),
                        _ => None,
                    }),
                _ => None,
            })
            .sum();
        if total > super::MAX_CHECKS {
            self.err(
                Some(node.pos),
                format!("{total} checks: a contract has at most {}", super::MAX_CHECKS),
                Some("every check runs on the untouched workspace, an empty one and each verification: fewer, stronger checks".into()),
            );
            return None;
        }
        let mut out: Vec<Criterion> = Vec::new();
        let mut seen: Vec<(String, Pos)> = Vec::new();
        let mut ok = true;
        for item in items {
            match self.criterion(item, &mut seen) {
                Some(c) => out.push(c),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    pub(crate) fn criterion(
        &mut self,
        node: &Node,
        seen: &mut Vec<(String, Pos)>,
    ) -> Option<Criterion> {
        let entries = self.mapping(node, "a criterion", CRITERION_KEYS)?;
        let find = |name: &str| entries.iter().find(|(k, _)| k.name == name);
        // A duplicate id is said, and the rest of the criterion is still
        // read (every problem is reported at once).
        let mut ok = true;
        let id = match find("id") {
            Some((_, v)) => {
                let id = self.nonempty_string(v, "criterion `id`")?;
                if !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                {
                    self.err(
                        Some(v.pos),
                        format!("criterion id `{id}` has characters other than letters, digits, `.`, `_`, `-`"),
                        None,
                    );
                    return None;
                }
                if let Some((_, first)) = seen.iter().find(|(s, _)| *s == id) {
                    self.err(
                        Some(v.pos),
                        format!(
                            "duplicate criterion id `{id}` (first used at line {})",
                            first.line
                        ),
                        Some("give every criterion its own id".into()),
                    );
                    ok = false;
                }
                seen.push((id.clone(), v.pos));
                id
            }
            None => {
                self.err(
                    Some(node.pos),
                    "a criterion has no `id`".into(),
                    Some("add `id: <short-name>`".into()),
                );
                return None;
            }
        };
        let text = match find("text") {
            Some((_, v)) => self.string(v, "criterion `text`")?,
            None => id.clone(),
        };
        let no_check_hint = Some(format!(
            "add `checks:` with at least one of {}: a criterion that cannot be executed cannot be accepted",
            CHECK_KINDS.join(", ")
        ));
        let Some((_, checks_node)) = find("checks") else {
            self.err(
                Some(node.pos),
                format!("criterion `{id}` has no check"),
                no_check_hint,
            );
            return None;
        };
        let items = self.seq(checks_node, "`checks`")?;
        if items.is_empty() {
            self.err(
                Some(checks_node.pos),
                format!("criterion `{id}` has no check"),
                no_check_hint,
            );
            return None;
        }
        let mut checks = Vec::new();
        for item in items {
            match self.check(item) {
                Some(c) => checks.push(c),
                None => ok = false,
            }
        }
        let guard = match find("guard") {
            Some((_, v)) => self.boolean(v, "criterion `guard`")?,
            None => false,
        };
        ok.then_some(Criterion {
            id,
            text,
            checks,
            guard,
        })
    }

    /// A check: its one kind, the keys that kind takes, and each kind's
    /// own reading.
    pub(crate) fn check(&mut self, node: &Node) -> Option<Check> {
        let Value::Map(entries) = &node.value else {
            self.err(
                Some(node.pos),
                format!(
                    "a check must be a mapping, found {}",
                    node.value.type_name()
                ),
                Some(format!(
                    "start a check with one of: {}",
                    CHECK_KINDS.join(", ")
                )),
            );
            return None;
        };
        let kind = self.check_kind(node, entries)?;
        if !self.check_keys_fit(entries, &kind) {
            return None;
        }
        let c = CheckEntries {
            node,
            entries,
            kind,
        };
        let kind_node = c.get(&c.kind)?;
        match c.kind.as_str() {
            "run" => self.run_check(&c, kind_node),
            "file_exists" => Some(Check::FileExists {
                path: self.rel_path(kind_node, "`file_exists` path")?,
            }),
            "file_contains" => {
                let path = self.rel_path(kind_node, "`file_contains` path");
                let text_node = c.required(self, "text")?;
                let text = self.string(text_node, "`text`")?;
                Some(Check::FileContains { path: path?, text })
            }
            "file_matches" => {
                let path = self.rel_path(kind_node, "`file_matches` path");
                let regex_node = c.required(self, "regex")?;
                let regex = self.regex(regex_node, "`regex`")?;
                Some(Check::FileMatches { path: path?, regex })
            }
            "json_equals" => self.json_equals_check(&c, kind_node),
            "page" => self.page_check(&c, kind_node),
            _ => self.document_check(&c, kind_node),
        }
    }

    /// A document check (`cell_equals`, `sheet_columns`, `table_rows`,
    /// `doc_headings`, `pdf_text`): its file (`kind_node`) and its keys.
    fn document_check(&mut self, c: &CheckEntries<'_>, kind_node: &Node) -> Option<Check> {
        let what = format!("`{}` path", c.kind);
        let path = self.rel_path(kind_node, &what);
        let sheet = match c.get("sheet") {
            Some(v) => Some(self.nonempty_string(v, "`sheet`")?),
            None => None,
        };
        let check = match c.kind.as_str() {
            "cell_equals" => {
                let cell_node = c.required(self, "cell")?;
                let cell = self.string(cell_node, "`cell`")?;
                if !is_cell_or_range(&cell) {
                    self.err(
                        Some(cell_node.pos),
                        format!("`cell` {cell:?} is not a cell or a range"),
                        Some("name a cell as B4 or a range as A1:C3".into()),
                    );
                    return None;
                }
                let value_node = c.required(self, "value")?;
                let value = self.json_value(value_node)?;
                Check::CellEquals {
                    path: path?,
                    sheet,
                    cell,
                    value,
                }
            }
            "sheet_columns" => {
                let node = c.required(self, "columns")?;
                let columns = self.strings(node, "`columns`")?;
                Check::SheetColumns {
                    path: path?,
                    sheet,
                    columns: self.nonempty_list(columns, c, "columns")?,
                }
            }
            "table_rows" => {
                let rows_node = c.required(self, "rows")?;
                let mut rows = Vec::new();
                for row in self.seq(rows_node, "`rows`")? {
                    let cells = self.seq(row, "a row of `rows`")?;
                    let mut out = Vec::new();
                    for cell in cells {
                        out.push(self.json_value(cell)?);
                    }
                    rows.push(out);
                }
                Check::TableRows {
                    path: path?,
                    sheet,
                    rows: self.nonempty_list(rows, c, "rows")?,
                }
            }
            "doc_headings" => {
                let node = c.required(self, "headings")?;
                let headings = self.strings(node, "`headings`")?;
                Check::DocHeadings {
                    path: path?,
                    headings: self.nonempty_list(headings, c, "headings")?,
                }
            }
            _ => {
                let page = match c.get("page") {
                    Some(v) => {
                        let n = self.unsigned(v, "`page`", 1)?;
                        match u32::try_from(n) {
                            Ok(p) => Some(p),
                            Err(_) => {
                                self.err(
                                    Some(v.pos),
                                    format!("`page` {n} is past any PDF's"),
                                    None,
                                );
                                return None;
                            }
                        }
                    }
                    None => None,
                };
                let node = c.required(self, "text")?;
                let text = self.nonempty_string(node, "`text`")?;
                Check::PdfText {
                    path: path?,
                    page,
                    text,
                }
            }
        };
        Some(check)
    }

    /// A `page` check: its path (`kind_node`), the command that serves it
    /// and its port, and at least one of the text, title or element the
    /// page must show.
    fn page_check(&mut self, c: &CheckEntries<'_>, kind_node: &Node) -> Option<Check> {
        let path = self.nonempty_string(kind_node, "`page` path")?;
        if !path.starts_with('/') || path.chars().any(char::is_control) {
            self.err(
                Some(kind_node.pos),
                format!("`page` {path:?} is not a path from `/`"),
                Some("name the page as the server serves it, e.g. /index.html".into()),
            );
            return None;
        }
        let node = c.required(self, "serve")?;
        let serve = self.nonempty_string(node, "`serve`")?;
        let node = c.required(self, "port")?;
        let port = self.unsigned(node, "`port`", 1)?;
        let Ok(port) = u16::try_from(port) else {
            self.err(Some(node.pos), format!("`port` {port} is not a port"), None);
            return None;
        };
        let mut want = |key: &str| match c.get(key) {
            Some(v) => self.nonempty_string(v, &format!("`{key}`")).map(Some),
            None => Some(None),
        };
        let (text, title, element) = (want("text")?, want("title")?, want("element")?);
        if text.is_none() && title.is_none() && element.is_none() {
            self.err(
                Some(c.node.pos),
                "a `page` check names what the page must show".into(),
                Some("give `text`, `title` or `element` (a CSS selector)".into()),
            );
            return None;
        }
        let timeout_secs = match c.get("timeout_secs") {
            Some(v) => self.unsigned(v, "`timeout_secs`", 1)?,
            None => 60,
        };
        Some(Check::Page(super::PageCheck {
            path,
            serve,
            port,
            text,
            title,
            element,
            timeout_secs,
        }))
    }

    /// `list`, or an error at the check when it is empty (a check that
    /// asks for nothing proves nothing).
    fn nonempty_list<T>(
        &mut self,
        list: Vec<T>,
        c: &CheckEntries<'_>,
        key: &str,
    ) -> Option<Vec<T>> {
        if list.is_empty() {
            self.err(
                Some(c.node.pos),
                format!("`{key}` of a `{}` check is empty", c.kind),
                Some(format!("list at least one of the {key} the check requires")),
            );
            return None;
        }
        Some(list)
    }

    /// A YAML value as JSON, its error reported where it is.
    fn json_value(&mut self, node: &Node) -> Option<serde_json::Value> {
        match node.to_json() {
            Ok(v) => Some(v),
            Err(e) => {
                self.err(Some(e.pos), e.message, None);
                None
            }
        }
    }

    /// The one kind of the check at `node` (a mapping of `entries`): none,
    /// an unknown one or two are reported.
    fn check_kind(&mut self, node: &Node, entries: &[(Key, Node)]) -> Option<String> {
        // `page` names a kind (a page in a browser) and a key of
        // `pdf_text` (its page): beside `pdf_text` it is that key.
        let pdf = entries.iter().any(|(k, _)| k.name == "pdf_text");
        let kinds: Vec<&Key> = entries
            .iter()
            .map(|(k, _)| k)
            .filter(|k| CHECK_KINDS.contains(&k.name.as_str()) && !(pdf && k.name == "page"))
            .collect();
        match kinds.as_slice() {
            [] => {
                let all: Vec<&str> = CHECK_KINDS
                    .iter()
                    .chain(RUN_KEYS)
                    .copied()
                    .chain(["text", "regex", "pointer", "value"])
                    .collect();
                for (k, _) in entries {
                    if !all.contains(&k.name.as_str()) {
                        let hint = match closest(&k.name, CHECK_KINDS) {
                            Some(s) => format!(
                                "did you mean `{s}`? check kinds: {}",
                                CHECK_KINDS.join(", ")
                            ),
                            None => format!("check kinds: {}", CHECK_KINDS.join(", ")),
                        };
                        self.err(
                            Some(k.pos),
                            format!("unknown check kind `{}`", k.name),
                            Some(hint),
                        );
                        return None;
                    }
                }
                self.err(
                    Some(node.pos),
                    "this check has no kind".into(),
                    Some(format!("start it with one of: {}", CHECK_KINDS.join(", "))),
                );
                None
            }
            [one] => Some(one.name.clone()),
            [first, second, ..] => {
                self.err(
                    Some(second.pos),
                    format!(
                        "a check has one kind; found both `{}` and `{}`",
                        first.name, second.name
                    ),
                    Some("split it into two checks".into()),
                );
                None
            }
        }
    }

    /// Whether every key of a `kind` check's `entries` applies to that
    /// kind; each one that does not is reported.
    fn check_keys_fit(&mut self, entries: &[(Key, Node)], kind: &str) -> bool {
        let allowed = keys_for_kind(kind);
        let mut bad = false;
        for (k, _) in entries {
            if !allowed.contains(&k.name.as_str()) {
                bad = true;
                let is_other_kinds_key = CHECK_KINDS
                    .iter()
                    .any(|kk| keys_for_kind(kk).contains(&k.name.as_str()));
                if is_other_kinds_key {
                    self.err(
                        Some(k.pos),
                        format!("`{}` does not apply to a `{kind}` check", k.name),
                        Some(format!("a `{kind}` check takes: {}", allowed.join(", "))),
                    );
                } else {
                    self.unknown_key(k, &format!("a `{kind}` check"), allowed);
                }
            }
        }
        !bad
    }

    /// A `run` check: its command (`kind_node`) and what it must show.
    fn run_check(&mut self, c: &CheckEntries<'_>, kind_node: &Node) -> Option<Check> {
        let command = self.nonempty_string(kind_node, "`run` command")?;
        let expect_exit = match c.get("expect_exit") {
            Some(v) => match v.value {
                Value::Int(i) if (0..=255).contains(&i) => i as i32,
                _ => {
                    self.err(
                        Some(v.pos),
                        format!(
                            "`expect_exit` must be an exit status 0..=255, found {}",
                            describe_value(v)
                        ),
                        None,
                    );
                    return None;
                }
            },
            None => 0,
        };
        let opt_str = |r: &mut Reader, name: &str| -> Result<Option<String>, ()> {
            match c.get(name) {
                Some(v) => r.string(v, &format!("`{name}`")).map(Some).ok_or(()),
                None => Ok(None),
            }
        };
        let expect_stdout = opt_str(self, "expect_stdout").ok()?;
        let expect_stderr = opt_str(self, "expect_stderr").ok()?;
        let stdout_matches = match c.get("stdout_matches") {
            Some(v) => Some(self.regex(v, "`stdout_matches`")?),
            None => None,
        };
        let nonempty_tests = match c.get("nonempty_tests") {
            Some(v) => Some(self.boolean(v, "`nonempty_tests`")?),
            None => None,
        };
        let allow_vacuous = match c.get("allow_vacuous") {
            Some(v) => self.boolean(v, "`allow_vacuous`")?,
            None => false,
        };
        let terminal = match c.get("terminal") {
            Some(v) => self.boolean(v, "`terminal`")?,
            None => false,
        };
        let timeout_secs = match c.get("timeout_secs") {
            Some(v) => self.unsigned(v, "`timeout_secs`", 1)?,
            None => DEFAULT_CHECK_TIMEOUT_SECS,
        };
        Some(Check::Run(RunCheck {
            command,
            expect_exit,
            expect_stdout,
            expect_stderr,
            stdout_matches,
            nonempty_tests,
            allow_vacuous,
            terminal,
            timeout_secs,
        }))
    }

    /// A `json_equals` check: its file (`kind_node`), its JSON pointer and
    /// the value expected there.
    fn json_equals_check(&mut self, c: &CheckEntries<'_>, kind_node: &Node) -> Option<Check> {
        let path = self.rel_path(kind_node, "`json_equals` path");
        let pointer = match c.get("pointer") {
            Some(v) => {
                let p = self.string(v, "`pointer`")?;
                if !(p.is_empty() || p.starts_with('/')) {
                    self.err(
                        Some(v.pos),
                        format!("`pointer` `{p}` is not a JSON pointer"),
                        Some(
                            "a JSON pointer is empty or starts with `/`, e.g. /items/0/name".into(),
                        ),
                    );
                    return None;
                }
                p
            }
            None => String::new(),
        };
        let value_node = c.required(self, "value")?;
        let value = match value_node.to_json() {
            Ok(v) => v,
            Err(e) => {
                self.err(Some(e.pos), e.message, None);
                return None;
            }
        };
        Some(Check::JsonEquals {
            path: path?,
            pointer,
            value,
        })
    }
}

/// Whether `s` names a cell (`B4`, `$B$4`) or a range (`A1:C3`).
fn is_cell_or_range(s: &str) -> bool {
    let one = |r: &str| {
        let r = r.trim().replace('$', "");
        let letters = r.chars().take_while(|c| c.is_ascii_alphabetic()).count();
        let digits = &r[letters..];
        (1..=3).contains(&letters)
            && !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit())
            && !digits.starts_with('0')
    };
    match s.split_once(':') {
        Some((a, b)) => one(a) && one(b),
        None => one(s),
    }
}

/// A check's entries, where it starts, and the one kind it was found to be.
struct CheckEntries<'n> {
    node: &'n Node,
    entries: &'n [(Key, Node)],
    kind: String,
}

impl<'n> CheckEntries<'n> {
    /// The value of key `name`, if the check has it.
    fn get(&self, name: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, _)| k.name == name)
            .map(|(_, v)| v)
    }

    /// The value of key `name`, reported as needed if the check has none.
    fn required(&self, r: &mut Reader, name: &str) -> Option<&'n Node> {
        let v = self.get(name);
        if v.is_none() {
            let kind = &self.kind;
            r.err(
                Some(self.node.pos),
                format!("a `{kind}` check needs `{name}`"),
                None,
            );
        }
        v
    }
}
