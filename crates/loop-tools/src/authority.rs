//! The one choke point every write passes: the step's changed-lines
//! budget, binary content, the secret gate, the stdlib-shadow gate, the
//! syntax and code-policy gates; and, for a command's effects, the same
//! judgements file by file at the merge.

use crate::ToolBox;
use loop_protocol::Observation;
use std::collections::BTreeMap;

impl ToolBox {
    /// Why the code-policy gate refuses the file a command left at `rel`
    /// in its upper layer, if it does.
    #[allow(clippy::disallowed_methods)] // the ended command's upper layer (lstat first; nothing runs to change it any more)
    pub(crate) fn policy_refusal(&self, upper: &std::path::Path, rel: &str) -> Option<String> {
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
    #[allow(clippy::disallowed_methods)] // a path the jail resolved beneath the workspace
    pub(crate) fn is_package(&self, dir: &str) -> bool {
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
    pub(crate) fn resolved_rel(&self, full: &std::path::Path) -> String {
        full.strip_prefix(self.jail.root())
            .map(loop_workspace::jail::to_slash)
            .unwrap_or_else(|_| full.display().to_string())
    }

    /// Refuse `proposed` edits (path, content before this change, content
    /// after) if the step would then change more lines than allowed, or
    /// write binary content; otherwise count them.
    pub(crate) fn admit(
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
}

/// What the current step has changed, per file: the content before the
/// step and the lines changed since.
#[derive(Debug, Default)]
pub(crate) struct StepEdits {
    base: BTreeMap<String, String>,
    lines: BTreeMap<String, usize>,
}

/// Inserted plus deleted lines between two texts.
pub(crate) fn changed_lines(a: &str, b: &str) -> usize {
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
