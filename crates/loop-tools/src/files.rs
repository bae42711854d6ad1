//! The file tools: `read_file`, `write_file`, `edit_file`, `list_files`.

use crate::{EditArgs, ToolBox};
use loop_protocol::Observation;
use loop_protocol::observation::head_tail;
use loop_sandbox::redact::redact;
use loop_workspace::fsutil::write_atomic_with;
use loop_workspace::{Intent, Manifest};

impl ToolBox {
    pub(crate) fn read_file(&self, id: &str, path: &str) -> Observation {
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

    #[allow(clippy::disallowed_methods)] // a path the jail resolved beneath the workspace (content read by read_regular: no link, no FIFO)
    pub(crate) fn write_file(&self, id: &str, path: &str, content: &str) -> Observation {
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
        if let Some(o) = self.fenced(id, "write_file") {
            return o;
        }
        match write_atomic_with(&full, content.as_bytes(), self.sync) {
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

    pub(crate) fn edit_file(&self, id: &str, a: &EditArgs) -> Observation {
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
        if let Some(o) = self.fenced(id, "edit_file") {
            return o;
        }
        match write_atomic_with(&full, updated.as_bytes(), self.sync) {
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

    pub(crate) fn list_files(&self, id: &str, path: &str) -> Observation {
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
}

/// Read a workspace file the way every tool must: opened without blocking
/// (a FIFO the model made would hang the runtime forever) and refused
/// unless it is a regular file. Links were resolved inside the workspace
/// by the jail before this.
#[allow(clippy::disallowed_methods)] // a path the jail resolved beneath the workspace, opened O_NOFOLLOW|O_NONBLOCK
pub(crate) fn read_regular(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
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
