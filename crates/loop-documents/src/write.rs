//! Writing XLSX (rust_xlsxwriter) and DOCX (docx-rs) from a structured
//! request a model makes: cells with their types, formulas with the value
//! they are stored with, several sheets; headings, paragraphs and tables.

use crate::judge::cell_ref;
use crate::{Block, DocError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Cells one written document may have.
const MAX_WRITTEN_CELLS: usize = 200_000;

/// A workbook to write.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XlsxSpec {
    /// Its sheets, in order.
    pub sheets: Vec<SheetSpec>,
}

/// One sheet to write.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SheetSpec {
    /// Its name.
    pub name: String,
    /// Rows from A1: numbers, text, booleans, null for an empty cell
    /// (text is never read as a formula).
    #[serde(default)]
    pub rows: Vec<Vec<Value>>,
    /// Formula cells, written after the rows.
    #[serde(default)]
    pub formulas: Vec<FormulaSpec>,
}

/// A formula cell: where, the formula (with or without its `=`), and the
/// value stored with it (what a reader shows before it recalculates;
/// nothing here computes formulas).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormulaSpec {
    /// The cell, such as `B5`.
    pub cell: String,
    /// The formula, such as `SUM(B2:B4)`.
    pub formula: String,
    /// The value stored as its result.
    #[serde(default)]
    pub value: Value,
}

/// A Word document to write: its blocks in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocxSpec {
    /// Headings, paragraphs and tables.
    pub blocks: Vec<Block>,
}

fn bad(e: impl std::fmt::Display) -> DocError {
    DocError::new(format!("cannot write the workbook: {e}"))
}

/// The bytes of an XLSX file made from `spec`.
pub fn write_xlsx(spec: &XlsxSpec) -> Result<Vec<u8>, DocError> {
    if spec.sheets.is_empty() || spec.sheets.len() > 64 {
        return Err(DocError::new("a workbook has 1 to 64 sheets"));
    }
    let cells: usize = spec
        .sheets
        .iter()
        .map(|s| s.rows.iter().map(Vec::len).sum::<usize>() + s.formulas.len())
        .sum();
    if cells > MAX_WRITTEN_CELLS {
        return Err(DocError::new(format!(
            "{cells} cells: a written workbook has at most {MAX_WRITTEN_CELLS}"
        )));
    }
    let mut book = rust_xlsxwriter::Workbook::new();
    for s in &spec.sheets {
        let sheet = book.add_worksheet();
        sheet.set_name(&s.name).map_err(bad)?;
        for (r, row) in s.rows.iter().enumerate() {
            let r = u32::try_from(r).map_err(bad)?;
            for (c, v) in row.iter().enumerate() {
                let c = u16::try_from(c).map_err(bad)?;
                match v {
                    Value::Null => {}
                    Value::Bool(b) => {
                        sheet.write_boolean(r, c, *b).map_err(bad)?;
                    }
                    Value::Number(n) => {
                        sheet
                            .write_number(r, c, n.as_f64().unwrap_or(0.0))
                            .map_err(bad)?;
                    }
                    Value::String(t) => {
                        sheet.write_string(r, c, t).map_err(bad)?;
                    }
                    other => {
                        return Err(DocError::new(format!(
                            "sheet {:?} row {} column {}: a cell is a number, text, a boolean or null, not {other}",
                            s.name,
                            r + 1,
                            c + 1
                        )));
                    }
                }
            }
        }
        for f in &s.formulas {
            let (r, c) = cell_ref(&f.cell)
                .ok_or_else(|| DocError::new(format!("{:?} is not a cell such as B5", f.cell)))?;
            let text = f.formula.strip_prefix('=').unwrap_or(&f.formula);
            let result = match &f.value {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let formula = rust_xlsxwriter::Formula::new(text).set_result(result);
            sheet
                .write_formula(r as u32, c as u16, formula)
                .map_err(bad)?;
        }
    }
    book.save_to_buffer().map_err(bad)
}

/// The bytes of a DOCX file made from `spec`.
pub fn write_docx(spec: &DocxSpec) -> Result<Vec<u8>, DocError> {
    use docx_rs::{Docx, Paragraph, Run, Style, StyleType, Table, TableCell, TableRow};
    if spec.blocks.len() > 100_000 {
        return Err(DocError::new(
            "a written document has at most 100000 blocks",
        ));
    }
    let mut doc = Docx::new().add_style(Style::new("Title", StyleType::Paragraph).name("Title"));
    for n in 1..=9 {
        doc = doc.add_style(
            Style::new(format!("Heading{n}"), StyleType::Paragraph)
                .name(format!("Heading {n}"))
                .outline_lvl(n - 1),
        );
    }
    let text = |t: &str| Paragraph::new().add_run(Run::new().add_text(t));
    for b in &spec.blocks {
        doc = match b {
            Block::Heading { level, text: t } => {
                let style = match level {
                    0 => "Title".to_string(),
                    n => format!("Heading{}", n.min(&9)),
                };
                doc.add_paragraph(text(t).style(&style))
            }
            Block::Paragraph { text: t } => doc.add_paragraph(text(t)),
            Block::Table { rows } => doc.add_table(Table::new(
                rows.iter()
                    .map(|r| {
                        TableRow::new(
                            r.iter()
                                .map(|c| TableCell::new().add_paragraph(text(c)))
                                .collect(),
                        )
                    })
                    .collect(),
            )),
        };
    }
    let mut out = std::io::Cursor::new(Vec::new());
    doc.build()
        .pack(&mut out)
        .map_err(|e| DocError::new(format!("cannot write the document: {e}")))?;
    Ok(out.into_inner())
}

/// The bytes of a CSV (or, with `sep` a tab, TSV) file of `sheet`'s rows
/// (its formulas, which a CSV file cannot hold, refused).
pub fn write_csv(sheet: &SheetSpec, sep: u8) -> Result<Vec<u8>, DocError> {
    if !sheet.formulas.is_empty() {
        return Err(DocError::new(
            "a CSV file holds no formulas: write their values as cells",
        ));
    }
    let cells: usize = sheet.rows.iter().map(Vec::len).sum();
    if cells > MAX_WRITTEN_CELLS {
        return Err(DocError::new(format!(
            "{cells} cells: a written file has at most {MAX_WRITTEN_CELLS}"
        )));
    }
    let mut w = csv::WriterBuilder::new()
        .delimiter(sep)
        .flexible(true)
        .from_writer(Vec::new());
    for row in &sheet.rows {
        let fields: Vec<String> = row
            .iter()
            .map(|v| match v {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        w.write_record(&fields)
            .map_err(|e| DocError::new(format!("cannot write the CSV file: {e}")))?;
    }
    w.into_inner()
        .map_err(|e| DocError::new(format!("cannot write the CSV file: {e}")))
}
