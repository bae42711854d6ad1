//! `apply_patch`: a model-written unified diff, applied all or nothing
//! through the jail, the gates and the edit journal.

use crate::ToolBox;
use crate::files::read_regular;
use loop_protocol::Observation;
use loop_workspace::{Change, Intent, patch};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The tool's name in observations.
const TOOL: &str = "apply_patch";

/// Files a patch will write, by workspace path: where, and the content
/// (`None`: removed).
type Pending = BTreeMap<String, (PathBuf, Option<String>)>;

impl ToolBox {
    pub(crate) fn apply_patch(&self, id: &str, text: &str) -> Observation {
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
        let mut pending = Pending::new();
        let (mut added, mut removed) = (0usize, 0usize);
        for fp in &files {
            let old = match self.old_side(id, fp, &pending) {
                Ok(o) => o,
                Err(o) => return o,
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
            if let Err(o) = self.stage(id, fp, new, &mut pending) {
                return o;
            }
        }
        self.commit_patch(id, pending, added, removed)
    }

    /// What a section patches: the file as earlier sections left it, or as
    /// it is; for a creation, nothing (or an empty text when the target
    /// exists, so the creation is refused by the applier).
    #[allow(clippy::disallowed_methods)] // a path the jail resolved beneath the workspace
    fn old_side(
        &self,
        id: &str,
        fp: &patch::FilePatch,
        pending: &Pending,
    ) -> Result<Option<String>, Observation> {
        let Some(rel) = &fp.old else {
            // A creation: the target must not exist yet.
            let target = fp.new.as_ref().map(|p| p.as_str()).unwrap_or_default();
            let (rel, full) = self.resolve(id, TOOL, target, Intent::Write)?;
            let exists = match pending.get(&rel) {
                Some((_, content)) => content.is_some(),
                None => full.exists(),
            };
            return Ok(exists.then(String::new));
        };
        let (rel, full) = self.resolve(id, TOOL, rel.as_str(), Intent::Read)?;
        if let Some((_, content)) = pending.get(&rel) {
            return Ok(content.clone());
        }
        match read_regular(&full) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(t) => Ok(Some(t)),
                Err(_) => Err(Observation::error(
                    id,
                    TOOL,
                    format!("{rel} is binary; patches apply to text"),
                )),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Observation::error(
                id,
                TOOL,
                format!("cannot read {rel}: {e}"),
            )),
        }
    }

    /// A section's result, pending: the old path removed (a deletion or
    /// the old side of a rename), the new path's content within the limit.
    fn stage(
        &self,
        id: &str,
        fp: &patch::FilePatch,
        new: Option<String>,
        pending: &mut Pending,
    ) -> Result<(), Observation> {
        if let Some(old_rel) = &fp.old
            && fp.new.as_ref() != Some(old_rel)
        {
            let (rel, full) = self.resolve(id, TOOL, old_rel.as_str(), Intent::Write)?;
            pending.insert(rel, (full, None));
        }
        if let Some(new_rel) = &fp.new {
            let (rel, full) = self.resolve(id, TOOL, new_rel.as_str(), Intent::Write)?;
            let content = new.unwrap_or_default();
            if content.len() > self.limits.max_write_bytes {
                return Err(Observation::refused(
                    id,
                    TOOL,
                    "limit: max_write_bytes",
                    format!(
                        "Refused: {rel} would be {} bytes, over the {}-byte limit; nothing applied.",
                        content.len(),
                        self.limits.max_write_bytes
                    ),
                ));
            }
            pending.insert(rel, (full, Some(content)));
        }
        Ok(())
    }

    /// Every pending file through the gates, then through the journal, all
    /// or nothing.
    fn commit_patch(
        &self,
        id: &str,
        pending: Pending,
        added: usize,
        removed: usize,
    ) -> Observation {
        let proposed: Vec<(String, Option<String>, Option<String>)> = pending
            .values()
            .map(|(full, content)| {
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
        if let Some(o) = self.fenced(id, TOOL) {
            return o;
        }
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
                let deleted = if c.content.is_none() {
                    " (deleted)"
                } else {
                    ""
                };
                format!("{}{deleted}", c.rel)
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
}
