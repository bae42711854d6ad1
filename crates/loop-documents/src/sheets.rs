//! Spreadsheets: CSV with the `csv` crate, workbooks with calamine, each
//! bounded in rows and cells as it is read (an XLSX sheet cell by cell, so
//! a million-row sheet stops at the bound instead of filling memory).

use crate::{Cell, DocError, Document, MAX_CELLS, MAX_ROWS, Sheet};
use calamine::{Data, DataRef, Reader, Sheets};
use std::io::Cursor;

/// A CSV (or TSV) file as one sheet, its cells typed: a number where the
/// text is one, else text.
pub(crate) fn csv(name: &str, bytes: &[u8], delimiter: u8) -> Result<Document, DocError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delimiter)
        .from_reader(bytes);
    let mut rows = Vec::new();
    let mut cells = 0usize;
    for (i, record) in reader.byte_records().enumerate() {
        let record = record
            .map_err(|e| DocError::new(format!("{name}: row {} is unreadable: {e}", i + 1)))?;
        if rows.len() >= MAX_ROWS {
            return Err(too_many_rows(name, name));
        }
        cells += record.len();
        if cells > MAX_CELLS {
            return Err(too_many_cells(name));
        }
        rows.push(
            record
                .iter()
                .map(|f| typed(&String::from_utf8_lossy(f)))
                .collect(),
        );
    }
    let sheet_name = name.rsplit('/').next().unwrap_or(name).to_string();
    Ok(Document::Sheets {
        sheets: vec![Sheet {
            name: sheet_name,
            rows,
            formulas: Vec::new(),
        }],
    })
}

/// A CSV field: a number where it reads as a finite one, else its text.
fn typed(field: &str) -> Cell {
    let t = field.trim();
    if t.is_empty() {
        return Cell::Empty;
    }
    match t.parse::<f64>() {
        Ok(n) if n.is_finite() && !t.starts_with('+') => Cell::Number(n),
        _ => Cell::Text(field.to_string()),
    }
}

pub(crate) fn too_many_rows(name: &str, sheet: &str) -> DocError {
    DocError::new(format!(
        "{name}: sheet {sheet:?} has more than {MAX_ROWS} rows, the most a sheet read may have"
    ))
}

fn too_many_cells(name: &str) -> DocError {
    DocError::new(format!(
        "{name} has more than {MAX_CELLS} cells, the most a document read may have"
    ))
}

/// A workbook: every sheet, in order, with each formula's cached value
/// (and, for XLSX, its formula text).
pub(crate) fn workbook(name: &str, bytes: &[u8]) -> Result<Document, DocError> {
    let mut book = calamine::open_workbook_auto_from_rs(Cursor::new(bytes))
        .map_err(|e| DocError::new(format!("{name} is not a readable workbook: {e}")))?;
    let names = book.sheet_names();
    let mut sheets = Vec::new();
    let mut held = Held::default();
    for sheet in names {
        let read = match &mut book {
            Sheets::Xlsx(x) => xlsx_sheet(name, x, &sheet, &mut held)?,
            other => {
                let range = other.worksheet_range(&sheet).map_err(|e| {
                    DocError::new(format!("{name}: sheet {sheet:?} is unreadable: {e}"))
                })?;
                let (h, w) = range.get_size();
                if h > MAX_ROWS {
                    return Err(too_many_rows(name, &sheet));
                }
                if h.saturating_mul(w) > MAX_CELLS {
                    return Err(too_many_cells(name));
                }
                let (r0, c0) = range.start().unwrap_or((0, 0));
                let mut rows = Vec::new();
                for (i, row) in range.rows().enumerate() {
                    for (j, v) in row.iter().enumerate() {
                        if !matches!(v, Data::Empty) {
                            let at = (r0 as usize + i, c0 as usize + j);
                            put(name, &mut held, &mut rows, at, data(v))?;
                        }
                    }
                }
                Sheet {
                    name: sheet.clone(),
                    rows,
                    formulas: Vec::new(),
                }
            }
        };
        sheets.push(read);
    }
    Ok(Document::Sheets { sheets })
}

/// One XLSX sheet, cell by cell, stopping at the bounds.
fn xlsx_sheet(
    name: &str,
    book: &mut calamine::Xlsx<Cursor<&[u8]>>,
    sheet: &str,
    held: &mut Held,
) -> Result<Sheet, DocError> {
    let mut reader = book
        .worksheet_cells_reader(sheet)
        .map_err(|e| DocError::new(format!("{name}: sheet {sheet:?} is unreadable: {e}")))?;
    let mut rows = Vec::new();
    let mut formulas = Vec::new();
    loop {
        let next = reader
            .next_cell_with_formula()
            .map_err(|e| DocError::new(format!("{name}: sheet {sheet:?} is unreadable: {e}")))?;
        let Some(c) = next else { break };
        let (r, col) = (c.pos.0 as usize, c.pos.1 as usize);
        if r >= MAX_ROWS {
            return Err(too_many_rows(name, sheet));
        }
        if col >= 16_384 {
            return Err(too_many_cells(name));
        }
        if let Some(f) = c.formula.filter(|f| !f.is_empty()) {
            formulas.push((crate::judge::cell_name(r, col), f));
        }
        let v = data_ref(&c.value);
        if v != Cell::Empty {
            put(name, held, &mut rows, (r, col), v)?;
        }
    }
    Ok(Sheet {
        name: sheet.to_string(),
        rows,
        formulas,
    })
}

/// What a document's cells take, counted as they are stored: every cell
/// a row holds up to its last (the empty ones before it too), and the
/// bytes of their text.
#[derive(Default)]
pub(crate) struct Held {
    cells: usize,
    text: usize,
}

/// The text a document read may hold, all cells together.
const MAX_TEXT: usize = 64 * 1024 * 1024;

/// Set the cell at (`r`, `c`), growing the rows as needed, within the
/// bounds (a few far-apart cells must not make a million empty ones).
fn put(
    name: &str,
    held: &mut Held,
    rows: &mut Vec<Vec<Cell>>,
    (r, c): (usize, usize),
    v: Cell,
) -> Result<(), DocError> {
    if rows.len() <= r {
        rows.resize(r + 1, Vec::new());
    }
    let row = &mut rows[r];
    if row.len() <= c {
        held.cells += c + 1 - row.len();
        if held.cells > MAX_CELLS {
            return Err(too_many_cells(name));
        }
        row.resize(c + 1, Cell::Empty);
    }
    if let Cell::Text(t) | Cell::Date(t) | Cell::Error(t) = &v {
        held.text += t.len();
        if held.text > MAX_TEXT {
            return Err(DocError::new(format!(
                "{name} holds more than {MAX_TEXT} bytes of text, the most a document read may have"
            )));
        }
    }
    row[c] = v;
    Ok(())
}

fn data(v: &Data) -> Cell {
    match v {
        Data::Int(i) => Cell::Number(*i as f64),
        Data::Float(f) => Cell::Number(*f),
        Data::String(s) => Cell::Text(s.clone()),
        Data::Bool(b) => Cell::Bool(*b),
        Data::DateTime(d) => date(d),
        Data::DateTimeIso(s) | Data::DurationIso(s) => Cell::Date(s.clone()),
        Data::Error(e) => Cell::Error(e.to_string()),
        Data::Empty => Cell::Empty,
    }
}

fn data_ref(v: &DataRef<'_>) -> Cell {
    match v {
        DataRef::Int(i) => Cell::Number(*i as f64),
        DataRef::Float(f) => Cell::Number(*f),
        DataRef::String(s) => Cell::Text(s.clone()),
        DataRef::SharedString(s) => Cell::Text((*s).to_string()),
        DataRef::Bool(b) => Cell::Bool(*b),
        DataRef::DateTime(d) => date(d),
        DataRef::DateTimeIso(s) | DataRef::DurationIso(s) => Cell::Date(s.clone()),
        DataRef::Error(e) => Cell::Error(e.to_string()),
        DataRef::Empty => Cell::Empty,
    }
}

/// A date cell in ISO 8601 (`2024-03-15`, with `T10:30:00` when it has a
/// time), in the workbook's own epoch (1900 or 1904); a duration as its
/// number of days.
fn date(d: &calamine::ExcelDateTime) -> Cell {
    if d.is_duration() {
        return Cell::Number(d.as_f64());
    }
    let (y, mo, da, h, mi, s, ms) = d.to_ymd_hms_milli();
    if (h, mi, s, ms) == (0, 0, 0, 0) {
        Cell::Date(format!("{y:04}-{mo:02}-{da:02}"))
    } else {
        Cell::Date(format!("{y:04}-{mo:02}-{da:02}T{h:02}:{mi:02}:{s:02}"))
    }
}
