//! Word documents with docx-rs: headings (by their style, the style's
//! own name or id: `Heading 1`, `Title`), paragraphs and tables, in order.

use crate::{Block, DocError, Document, MAX_CELLS};
use docx_rs::{DocumentChild, Docx, TableCellContent, TableChild, TableRowChild};

/// Blocks a document read may have.
const MAX_BLOCKS: usize = 100_000;

pub(crate) fn read(name: &str, bytes: &[u8]) -> Result<Document, DocError> {
    let docx = docx_rs::read_docx(bytes)
        .map_err(|e| DocError::new(format!("{name} is not a readable Word document: {e}")))?;
    let mut blocks = Vec::new();
    let mut cells = 0usize;
    for child in &docx.document.children {
        if blocks.len() >= MAX_BLOCKS {
            return Err(DocError::new(format!(
                "{name} has more than {MAX_BLOCKS} paragraphs and tables, the most a document read may have"
            )));
        }
        match child {
            DocumentChild::Paragraph(p) => {
                let text = p.raw_text();
                let level = p
                    .property
                    .style
                    .as_ref()
                    .and_then(|s| heading_level(&docx, &s.val));
                blocks.push(match level {
                    Some(level) => Block::Heading { level, text },
                    None => Block::Paragraph { text },
                });
            }
            DocumentChild::Table(t) => {
                let rows = table_rows(t);
                cells += rows.iter().map(Vec::len).sum::<usize>();
                if cells > MAX_CELLS {
                    return Err(DocError::new(format!(
                        "{name} has more than {MAX_CELLS} table cells, the most a document read may have"
                    )));
                }
                blocks.push(Block::Table { rows });
            }
            _ => {}
        }
    }
    Ok(Document::Word { blocks })
}

/// The heading level of a paragraph style: 0 for a title, N for a
/// heading N, by the style's name where the document defines it (a
/// translated Word names its ids in its own language), else by its id.
fn heading_level(docx: &Docx, style_id: &str) -> Option<u8> {
    if let Some(style) = docx.styles.styles.iter().find(|s| s.style_id == style_id) {
        if style.name.starts_with("Title") || style.name.starts_with("title") {
            return Some(0);
        }
        if style.name.is_heading() {
            return style.name.get_heading_number().map(|n| n.min(9) as u8);
        }
    }
    let id = style_id.to_ascii_lowercase();
    if id == "title" {
        return Some(0);
    }
    let n = id.strip_prefix("heading")?.trim();
    n.parse::<u8>().ok().filter(|n| (1..=9).contains(n))
}

/// A table's rows, each cell's paragraphs joined by new lines.
fn table_rows(t: &docx_rs::Table) -> Vec<Vec<String>> {
    t.rows
        .iter()
        .map(|TableChild::TableRow(row)| {
            row.cells
                .iter()
                .map(|TableRowChild::TableCell(cell)| {
                    cell.children
                        .iter()
                        .filter_map(|c| match c {
                            TableCellContent::Paragraph(p) => Some(p.raw_text()),
                            _ => None,
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .collect()
        })
        .collect()
}
