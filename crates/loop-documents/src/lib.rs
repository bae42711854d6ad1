//! Documents a task takes in and hands back: spreadsheets (CSV, XLSX,
//! XLS, ODS), Word documents (DOCX) and PDFs, read as structured content
//! within fixed bounds; XLSX and DOCX written from a structured request;
//! and the document checks judged on that content.
//!
//! Every byte read here comes from a workspace a model wrote: a hostile
//! input. Each format is read by a well-kept crate (calamine, docx-rs,
//! lopdf, csv), never by a parser of our own; the archive a spreadsheet or
//! document is stored in is looked at first (entries, their declared sizes
//! and ratios, macros and external links refused by name); and in the
//! `loop` binary the reading itself runs in a child process with its own
//! memory, CPU and wall-clock limits and no file system (see
//! [`bounded`]), so a bomb, a hang or a parser's panic fails that one read
//! with its reason, never the runtime.

pub mod bounded;
mod judge;
mod pdf;
mod render;
mod sheets;
mod word;
pub mod write;

pub use judge::{cell_ref, judge};
pub use render::render;
pub use write::{DocxSpec, XlsxSpec, write_docx, write_xlsx};

use serde::{Deserialize, Serialize};

/// The largest document read, in bytes.
pub const MAX_BYTES: u64 = 32 * 1024 * 1024;
/// Entries an archive (XLSX, ODS, DOCX) may have.
pub const MAX_ENTRIES: usize = 10_000;
/// What an archive's entries may add up to once inflated.
pub const MAX_INFLATED: u64 = 256 * 1024 * 1024;
/// The most an entry of more than 1 MiB may grow when inflated.
pub const MAX_RATIO: u64 = 200;
/// Rows a sheet may have.
pub const MAX_ROWS: usize = 100_000;
/// Cells a document may have, all sheets together.
pub const MAX_CELLS: usize = 1_000_000;
/// Pages of a PDF read.
pub const MAX_PAGES: usize = 2_000;

/// A document's format, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Comma- (or tab-, for `.tsv`) separated values.
    Csv,
    /// Tab-separated values.
    Tsv,
    /// A workbook calamine reads (XLSX, XLSM, XLS, XLSB, ODS).
    Workbook,
    /// A Word document.
    Docx,
    /// A PDF.
    Pdf,
}

impl Format {
    /// The format of a file named `name`, by its extension.
    pub fn of(name: &str) -> Option<Format> {
        let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
        Some(match ext.as_str() {
            "csv" => Format::Csv,
            "tsv" | "tab" => Format::Tsv,
            "xlsx" | "xlsm" | "xls" | "xlsb" | "ods" => Format::Workbook,
            "docx" => Format::Docx,
            "pdf" => Format::Pdf,
            _ => return None,
        })
    }
}

/// One cell's value, typed as the file stores it (a formula's cached value
/// for a formula cell).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", content = "v", rename_all = "lowercase")]
pub enum Cell {
    /// Nothing.
    Empty,
    /// A number (integers too).
    Number(f64),
    /// Text.
    Text(String),
    /// TRUE or FALSE.
    Bool(bool),
    /// A date or time, as the file shows it (ISO 8601 where it can).
    Date(String),
    /// An error value (`#DIV/0!`).
    Error(String),
}

/// One sheet: its rows from the first (row 1, column A) on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sheet {
    /// The sheet's name (a CSV file's is its file name).
    pub name: String,
    /// Rows, each its cells from column A.
    pub rows: Vec<Vec<Cell>>,
    /// Formula cells: (reference such as `B4`, formula text).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub formulas: Vec<(String, String)>,
}

/// A block of a Word document, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Block {
    /// A heading (level 0 for the title, 1–9 for headings).
    Heading {
        /// Its level.
        level: u8,
        /// Its text.
        text: String,
    },
    /// A paragraph.
    Paragraph {
        /// Its text.
        text: String,
    },
    /// A table: rows of cells' text.
    Table {
        /// Its rows.
        rows: Vec<Vec<String>>,
    },
}

/// A document's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Document {
    /// A spreadsheet, or a CSV file as one sheet.
    Sheets {
        /// Its sheets, in the workbook's order.
        sheets: Vec<Sheet>,
    },
    /// A Word document's blocks.
    Word {
        /// Its blocks, in order.
        blocks: Vec<Block>,
    },
    /// A PDF's text, page by page.
    Pdf {
        /// Each page's text.
        pages: Vec<String>,
    },
}

/// Why a document could not be read: each names what was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("{0}")]
pub struct DocError(pub String);

impl DocError {
    pub(crate) fn new(msg: impl Into<String>) -> DocError {
        DocError(msg.into())
    }
}

/// Read `bytes`, a file named `name`, in this process (the `loop` binary
/// reads through [`bounded::read`], which runs this in a child process).
pub fn read(name: &str, bytes: &[u8]) -> Result<Document, DocError> {
    let format = Format::of(name).ok_or_else(|| {
        DocError::new(format!(
            "{name}: not a document this reads (csv, tsv, xlsx, xlsm, xls, xlsb, ods, docx, pdf)"
        ))
    })?;
    read_as(format, name, bytes)
}

/// Read `bytes` as `format`.
pub fn read_as(format: Format, name: &str, bytes: &[u8]) -> Result<Document, DocError> {
    if bytes.len() as u64 > MAX_BYTES {
        return Err(DocError::new(format!(
            "{name} is {} bytes, more than the {MAX_BYTES} a document may have",
            bytes.len()
        )));
    }
    match format {
        Format::Csv => sheets::csv(name, bytes, b','),
        Format::Tsv => sheets::csv(name, bytes, b'\t'),
        Format::Workbook => {
            if bytes.starts_with(b"PK") {
                archive_guard(name, bytes)?;
            } else if has_vba_stream(bytes) {
                // A binary (XLS) workbook's macros live in its compound
                // file as the `_VBA_PROJECT_CUR` storage.
                return Err(DocError::new(format!(
                    "{name} contains macros (_VBA_PROJECT_CUR): such documents are not read"
                )));
            }
            sheets::workbook(name, bytes)
        }
        Format::Docx => {
            archive_guard(name, bytes)?;
            word::read(name, bytes)
        }
        Format::Pdf => pdf::read(name, bytes),
    }
}

/// Whether a compound (OLE) file names a VBA project storage (its
/// directory entries are UTF-16 names).
fn has_vba_stream(bytes: &[u8]) -> bool {
    let needle: Vec<u8> = "_VBA_PROJECT_CUR"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    bytes.windows(needle.len()).any(|w| w == needle.as_slice())
}

/// Look at an archive before any reader inflates it: how many entries,
/// what they declare they inflate to, alone and together, and the parts
/// that make a document run something or reach elsewhere (macros,
/// external links, embedded objects): refused by name.
fn archive_guard(name: &str, bytes: &[u8]) -> Result<(), DocError> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| DocError::new(format!("{name} is not a readable archive: {e}")))?;
    if zip.len() > MAX_ENTRIES {
        return Err(DocError::new(format!(
            "{name} holds {} parts, more than the {MAX_ENTRIES} a document may have",
            zip.len()
        )));
    }
    let mut total: u64 = 0;
    for i in 0..zip.len() {
        let entry = zip
            .by_index_raw(i)
            .map_err(|e| DocError::new(format!("{name}: part {i} is unreadable: {e}")))?;
        let part = entry
            .name()
            .map(|n| n.into_owned())
            .unwrap_or_else(|_| format!("part {i}"));
        let lower = part.to_ascii_lowercase();
        // Macros: Office's VBA project and ActiveX controls, and an
        // OpenDocument's Basic and script libraries.
        if lower.ends_with("vbaproject.bin")
            || lower.contains("/activex/")
            || lower.starts_with("basic/")
            || lower.starts_with("scripts/")
        {
            return Err(DocError::new(format!(
                "{name} contains macros or controls ({part}): such documents are not read"
            )));
        }
        if lower.contains("externallinks/") {
            return Err(DocError::new(format!(
                "{name} links to other workbooks ({part}): such documents are not read"
            )));
        }
        let size = entry.size();
        let packed = entry.compressed_size().max(1);
        if size > 1024 * 1024 && size / packed > MAX_RATIO {
            return Err(DocError::new(format!(
                "{name}: part {part} inflates {packed} bytes to {size} (more than {MAX_RATIO}×): a compression bomb is not read"
            )));
        }
        total = total.saturating_add(size);
        if total > MAX_INFLATED {
            return Err(DocError::new(format!(
                "{name} inflates to more than {MAX_INFLATED} bytes: not read"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
