//! The document tools: `read_document` (a spreadsheet, Word document or
//! PDF as structured text, read by the bounded reader of
//! `loop-documents`), `write_spreadsheet` (XLSX, or CSV, from rows and
//! formulas) and `write_document` (DOCX from headings, paragraphs and
//! tables). Offered to a task that works with documents (see
//! [`ToolBox::with_documents`]).
//!
//! A written document passes the same gates as a written text file, on
//! its content as text: the protected paths (the jail), the secret gate,
//! and the changed-lines limit counted over the rendered content before
//! and after.

use crate::ToolBox;
use loop_documents::{Document, DocxSpec, Format, XlsxSpec};
use loop_protocol::Observation;
use loop_sandbox::redact::redact;
use loop_workspace::Intent;
use loop_workspace::fsutil::write_atomic_with;
use serde::Deserialize;

/// The tools' names.
pub const READ: &str = "read_document";
/// See the module's documentation.
pub const WRITE_SHEET: &str = "write_spreadsheet";
/// See the module's documentation.
pub const WRITE_DOC: &str = "write_document";
/// See the module's documentation.
pub const VIEW_IMAGE: &str = "view_image";

/// The document tools, as offered together.
pub const NAMES: [&str; 4] = [READ, VIEW_IMAGE, WRITE_SHEET, WRITE_DOC];

/// The largest image shown to a model, in bytes: 3.75 MiB, whose base64
/// (5 MiB) is within what providers take for one image.
pub const MAX_IMAGE_BYTES: u64 = 3_932_160;

/// The media type of an image by its first bytes (PNG, JPEG, GIF, WebP),
/// never by its name.
pub fn image_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() > 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// An image for a model: the bytes of `path`, typed by their first bytes,
/// with their digest; or why they are not one.
pub fn image_of(
    path: &str,
    bytes: Vec<u8>,
) -> Result<loop_protocol::observation::Image, loop_documents::DocError> {
    use base64::Engine;
    let Some(media_type) = image_type(&bytes) else {
        return Err(loop_documents::DocError(format!(
            "{path} is not an image this shows (PNG, JPEG, GIF or WebP, by its content)"
        )));
    };
    Ok(loop_protocol::observation::Image {
        path: path.to_string(),
        media_type: media_type.to_string(),
        bytes: bytes.len() as u64,
        sha256: loop_protocol::hash::sha256_hex(&bytes),
        data_base64: base64::engine::general_purpose::STANDARD.encode(&bytes),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadArgs {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SheetArgs {
    path: String,
    sheets: Vec<loop_documents::write::SheetSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DocArgs {
    path: String,
    blocks: Vec<loop_documents::Block>,
}

impl ToolBox {
    /// The document at `path`, read within the bounds, or why not.
    fn document_at(
        &self,
        id: &str,
        tool: &str,
        path: &str,
    ) -> Result<(String, Option<Document>), Observation> {
        let (rel, full) = self.resolve(id, tool, path, Intent::Read)?;
        let Some(format) = Format::of(&rel) else {
            return Err(Observation::error(
                id,
                tool,
                format!(
                    "{rel} is not a document this reads (csv, tsv, xlsx, xlsm, xls, xlsb, ods, docx, pdf)"
                ),
            ));
        };
        // Through the door: no link, no FIFO, at most the documents' bound.
        let bytes = match loop_workspace::door::read(
            self.jail.root(),
            self.resolved_rel(&full),
            loop_documents::MAX_BYTES,
        ) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok((rel, None)),
            Err(e) => {
                return Err(Observation::error(
                    id,
                    tool,
                    format!("cannot read {rel}: {e}"),
                ));
            }
        };
        let doc = loop_documents::bounded::read(format, &rel, &bytes)
            .map_err(|e| Observation::error(id, tool, e.to_string()))?;
        Ok((rel, Some(doc)))
    }

    /// `view_image`: the image at `path`, shown to a model that takes
    /// images (by content type, at most [`MAX_IMAGE_BYTES`], recorded by its
    /// digest), refused with the reason to one that does not.
    pub(crate) fn view_image(&self, id: &str, a: &ReadArgs) -> Observation {
        if !self.images {
            return Observation::refused(
                id,
                VIEW_IMAGE,
                "model: takes no images",
                "Refused: the model driving this task takes no images (its configuration does not say `images: true`); learn what you need from the file another way.".to_string(),
            );
        }
        let (rel, full) = match self.resolve(id, VIEW_IMAGE, &a.path, Intent::Read) {
            Ok(p) => p,
            Err(o) => return o,
        };
        let bytes = match loop_workspace::door::read(
            self.jail.root(),
            self.resolved_rel(&full),
            MAX_IMAGE_BYTES,
        ) {
            Ok(Some(b)) => b,
            Ok(None) => return Observation::error(id, VIEW_IMAGE, format!("{rel} does not exist")),
            Err(e) => {
                return Observation::error(
                    id,
                    VIEW_IMAGE,
                    format!("cannot show {rel} (at most {MAX_IMAGE_BYTES} bytes): {e}"),
                );
            }
        };
        match image_of(&rel, bytes) {
            Ok(image) => {
                let mut o = Observation::ok(
                    id,
                    VIEW_IMAGE,
                    format!(
                        "image {rel}: {}, {} bytes, SHA-256 {} (shown with this result)",
                        image.media_type, image.bytes, image.sha256
                    ),
                    false,
                );
                o.image = Some(Box::new(image));
                o
            }
            Err(why) => Observation::error(id, VIEW_IMAGE, why.0),
        }
    }

    pub(crate) fn read_document(&self, id: &str, a: &ReadArgs) -> Observation {
        match self.document_at(id, READ, &a.path) {
            Ok((rel, Some(doc))) => {
                let text = loop_documents::render(&doc, self.limits.max_shown_bytes);
                // Secrets in documents are not shown or recorded either.
                Observation::ok(id, READ, format!("{rel}:\n{}", redact(&text)), false)
            }
            Ok((rel, None)) => Observation::error(id, READ, format!("{rel} does not exist")),
            Err(o) => o,
        }
    }

    pub(crate) fn write_spreadsheet(&self, id: &str, a: SheetArgs) -> Observation {
        let spec = XlsxSpec { sheets: a.sheets };
        let format = Format::of(&a.path);
        let bytes = match format {
            Some(Format::Csv) | Some(Format::Tsv) => {
                if spec.sheets.len() != 1 {
                    return Observation::error(
                        id,
                        WRITE_SHEET,
                        "a CSV file holds one sheet: give exactly one".to_string(),
                    );
                }
                let sep = if format == Some(Format::Tsv) {
                    b'\t'
                } else {
                    b','
                };
                loop_documents::write::write_csv(&spec.sheets[0], sep)
            }
            _ if a.path.to_ascii_lowercase().ends_with(".xlsx") => {
                loop_documents::write_xlsx(&spec)
            }
            _ => {
                return Observation::error(
                    id,
                    WRITE_SHEET,
                    format!("{} must end in .xlsx, .csv or .tsv", a.path),
                );
            }
        };
        match bytes {
            Ok(b) => self.write_document_bytes(id, WRITE_SHEET, &a.path, &b, format),
            Err(e) => Observation::error(id, WRITE_SHEET, e.to_string()),
        }
    }

    pub(crate) fn write_word(&self, id: &str, a: DocArgs) -> Observation {
        if !a.path.to_ascii_lowercase().ends_with(".docx") {
            return Observation::error(id, WRITE_DOC, format!("{} must end in .docx", a.path));
        }
        match loop_documents::write_docx(&DocxSpec { blocks: a.blocks }) {
            Ok(b) => self.write_document_bytes(id, WRITE_DOC, &a.path, &b, Some(Format::Docx)),
            Err(e) => Observation::error(id, WRITE_DOC, e.to_string()),
        }
    }

    /// Write a made document through the gates, judged on its content as
    /// text (before: the document there now, read; after: the one made).
    fn write_document_bytes(
        &self,
        id: &str,
        tool: &str,
        path: &str,
        bytes: &[u8],
        format: Option<Format>,
    ) -> Observation {
        let (rel, full) = match self.resolve(id, tool, path, Intent::Write) {
            Ok(p) => p,
            Err(o) => return o,
        };
        if bytes.len() > self.limits.max_write_bytes {
            return Observation::refused(
                id,
                tool,
                "limit: max_write_bytes",
                format!(
                    "Refused: {} bytes exceeds the {}-byte file limit.",
                    bytes.len(),
                    self.limits.max_write_bytes
                ),
            );
        }
        let at = self.resolved_rel(&full);
        if loop_workspace::door::is_dir(self.jail.root(), &at) {
            return Observation::error(id, tool, format!("{rel} is a directory"));
        }
        let shown = |d: &Document| loop_documents::render(d, usize::MAX);
        let before = match self.document_at(id, tool, path) {
            Ok((_, d)) => d.map(|d| shown(&d)),
            // What is there cannot be read as a document: judged as empty.
            Err(_) => Some(String::new()),
        };
        let after = format
            .and_then(|f| loop_documents::read_as(f, &rel, bytes).ok())
            .map(|d| shown(&d))
            .unwrap_or_default();
        if let Err(o) = self.admit(id, tool, &[(at.clone(), before.as_deref(), Some(&after))]) {
            return o;
        }
        if let Some(o) = self.fenced(id, tool) {
            return o;
        }
        let existed = !matches!(
            loop_workspace::door::node(self.jail.root(), &at),
            Ok(loop_workspace::Node::Missing)
        );
        match write_atomic_with(&full, bytes, self.sync) {
            Ok(()) => Observation::ok(
                id,
                tool,
                format!(
                    "{} {rel}: {} bytes ({} lines of content)",
                    if existed { "replaced" } else { "created" },
                    bytes.len(),
                    after.lines().count()
                ),
                true,
            ),
            Err(e) => Observation::error(id, tool, format!("cannot write {rel}: {e}")),
        }
    }
}
