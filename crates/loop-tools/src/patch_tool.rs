//! `apply_patch`: a model-written unified diff, applied all or nothing
//! through the jail, the gates and the edit journal.

use crate::ToolBox;
use crate::files::read_regular;
use loop_protocol::Observation;
use loop_workspace::{Change, Intent, patch};
use std::collections::BTreeMap;
use std::path::PathBuf;

impl ToolBox {
    pub(crate) fn apply_patch(&self, id: &str, text: &str) -> Observation {
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
}
