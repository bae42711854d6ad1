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
    let mut cells = 0usize;
    for sheet in names {
        let read = match &mut book {
            Sheets::Xlsx(x) => xlsx_sheet(name, x, &sheet, &mut cells)?,
            other => {
                let range = other.worksheet_range(&sheet).map_err(|e| {
                    DocError::new(format!("{name}: sheet {sheet:?} is unreadable: {e}"))
                })?;
                let (h, w) = range.get_size();
                if h > MAX_ROWS {
                    return Err(too_many_rows(name, &sheet));
                }
                cells += h * w;
                if cells > MAX_CELLS {
                    return Err(too_many_cells(name));
                }
                let (r0, c0) = range.start().unwrap_or((0, 0));
                let mut rows = Vec::new();
                for (i, row) in range.rows().enumerate() {
                    for (j, v) in row.iter().enumerate() {
                        if !matches!(v, Data::Empty) {
                            put(&mut rows, r0 as usize + i, c0 as usize + j, data(v));
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
    cells: &mut usize,
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
        *cells += 1;
        if *cells > MAX_CELLS || col >= 16_384 {
            return Err(too_many_cells(name));
        }
        if let Some(f) = c.formula.filter(|f| !f.is_empty()) {
            formulas.push((crate::judge::cell_name(r, col), f));
        }
        let v = data_ref(&c.value);
        if v != Cell::Empty {
            put(&mut rows, r, col, v);
        }
    }
    Ok(Sheet {
        name: sheet.to_string(),
        rows,
        formulas,
    })
}

/// Set the cell at (`r`, `c`), growing the rows as needed.
fn put(rows: &mut Vec<Vec<Cell>>, r: usize, c: usize, v: Cell) {
    if rows.len() <= r {
        rows.resize(r + 1, Vec::new());
    }
    let row = &mut rows[r];
    if row.len() <= c {
        row.resize(c + 1, Cell::Empty);
    }
    row[c] = v;
}

fn data(v: &Data) -> Cell {
    match v {
        Data::Int(i) => Cell::Number(*i as f64),
        Data::Float(f) => Cell::Number(*f),
        Data::String(s) => Cell::Text(s.clone()),
        Data::Bool(b) => Cell::Bool(*b),
        Data::DateTime(d) => Cell::Date(d.to_string()),
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
        DataRef::DateTime(d) => Cell::Date(d.to_string()),
        DataRef::DateTimeIso(s) | DataRef::DurationIso(s) => Cell::Date(s.clone()),
        DataRef::Error(e) => Cell::Error(e.to_string()),
        DataRef::Empty => Cell::Empty,
    }
}
