//! A document as text a model reads: sheets as rows with their cell
//! names and types, a Word document's headings, paragraphs and tables,
//! a PDF page by page; cut at `max_chars` with the cut said.

use crate::judge::cell_name;
use crate::{Block, Cell, Document};
use std::fmt::Write;

/// `doc` as text, at most about `max_chars` characters.
pub fn render(doc: &Document, max_chars: usize) -> String {
    let mut out = String::new();
    match doc {
        Document::Sheets { sheets } => {
            for s in sheets {
                let _ = writeln!(out, "## sheet {:?} ({} rows)", s.name, s.rows.len());
                for (r, row) in s.rows.iter().enumerate() {
                    if row.iter().all(|c| *c == Cell::Empty) {
                        continue;
                    }
                    let cells: Vec<String> = row
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| **c != Cell::Empty)
                        .map(|(c, v)| format!("{}={}", cell_name(r, c), typed(v)))
                        .collect();
                    let _ = writeln!(out, "{}", cells.join(" | "));
                    if out.len() > max_chars {
                        break;
                    }
                }
                for (at, f) in &s.formulas {
                    let _ = writeln!(out, "formula {at}: ={f}");
                    if out.len() > max_chars {
                        break;
                    }
                }
            }
        }
        Document::Word { blocks } => {
            for b in blocks {
                match b {
                    Block::Heading { level, text } => {
                        let _ = writeln!(out, "{} {text}", "#".repeat(*level as usize + 1));
                    }
                    Block::Paragraph { text } => {
                        let _ = writeln!(out, "{text}");
                    }
                    Block::Table { rows } => {
                        for row in rows {
                            let _ = writeln!(out, "| {} |", row.join(" | "));
                        }
                    }
                }
                if out.len() > max_chars {
                    break;
                }
            }
        }
        Document::Pdf { pages } => {
            for (i, p) in pages.iter().enumerate() {
                let _ = writeln!(out, "--- page {} ---\n{}", i + 1, p.trim_end());
                if out.len() > max_chars {
                    break;
                }
            }
        }
    }
    if out.len() > max_chars {
        let mut cut = max_chars;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        let _ = write!(out, "\n… (cut at {max_chars} characters)");
    }
    out
}

fn typed(c: &Cell) -> String {
    match c {
        Cell::Empty => String::new(),
        Cell::Number(n) => format!("{n}"),
        Cell::Text(t) => format!("{t:?}"),
        Cell::Bool(b) => if *b { "TRUE" } else { "FALSE" }.into(),
        Cell::Date(d) => format!("date {d}"),
        Cell::Error(e) => format!("error {e}"),
    }
}
