//! The document checks, judged on a document's content: a cell or range
//! holds a value, a sheet has these columns, a table holds these rows, a
//! Word document has these headings in order, a PDF's text contains a
//! text. Each failure names what was found where.

use crate::{Block, Cell, DocError, Document, Sheet};
use loop_protocol::contract::Check;
use serde_json::Value;

/// Why `check` fails on `doc` (the file at `path`), or `None` when it holds.
pub fn judge(check: &Check, doc: &Document) -> Option<String> {
    match check {
        Check::CellEquals {
            path,
            sheet,
            cell,
            value,
        } => {
            let s = match pick_sheet(doc, sheet.as_deref(), path.as_str()) {
                Ok(s) => s,
                Err(e) => return Some(e.0),
            };
            cell_equals(s, path.as_str(), cell, value)
        }
        Check::SheetColumns {
            path,
            sheet,
            columns,
        } => {
            let s = match pick_sheet(doc, sheet.as_deref(), path.as_str()) {
                Ok(s) => s,
                Err(e) => return Some(e.0),
            };
            sheet_columns(s, path.as_str(), columns)
        }
        Check::TableRows { path, sheet, rows } => table_rows(doc, path.as_str(), sheet, rows),
        Check::DocHeadings { path, headings } => doc_headings(doc, path.as_str(), headings),
        Check::PdfText { path, page, text } => pdf_text(doc, path.as_str(), *page, text),
        other => Some(format!("{} is not a document check", other.kind())),
    }
}

/// The sheet named (the first when none is), or why there is none.
fn pick_sheet<'d>(
    doc: &'d Document,
    name: Option<&str>,
    path: &str,
) -> Result<&'d Sheet, DocError> {
    let Document::Sheets { sheets } = doc else {
        return Err(DocError::new(format!(
            "{path} is not a spreadsheet or CSV file"
        )));
    };
    match name {
        None => sheets
            .first()
            .ok_or_else(|| DocError::new(format!("{path} has no sheets"))),
        Some(n) => sheets.iter().find(|s| s.name == n).ok_or_else(|| {
            let names: Vec<&str> = sheets.iter().map(|s| s.name.as_str()).collect();
            DocError::new(format!("{path} has no sheet {n:?} (its sheets: {names:?})"))
        }),
    }
}

/// `A1`'s name of the cell at zero-based (`row`, `col`).
pub(crate) fn cell_name(row: usize, col: usize) -> String {
    let mut letters = Vec::new();
    let mut c = col + 1;
    while c > 0 {
        let rem = (c - 1) % 26;
        letters.push(b'A' + rem as u8);
        c = (c - 1) / 26;
    }
    letters.reverse();
    format!("{}{}", String::from_utf8_lossy(&letters), row + 1)
}

/// The zero-based (row, column) of a reference such as `B4` or `$B$4`.
pub fn cell_ref(r: &str) -> Option<(usize, usize)> {
    let r = r.trim().replace('$', "");
    let split = r.find(|c: char| c.is_ascii_digit())?;
    let (letters, digits) = r.split_at(split);
    if letters.is_empty() || letters.len() > 3 || !letters.chars().all(|c| c.is_ascii_alphabetic())
    {
        return None;
    }
    let mut col = 0usize;
    for c in letters.chars() {
        col = col * 26 + (c.to_ascii_uppercase() as usize - 'A' as usize + 1);
    }
    let row: usize = digits.parse().ok()?;
    if row == 0 || col > 16_384 || row > 1_048_576 {
        return None;
    }
    Some((row - 1, col - 1))
}

fn at(sheet: &Sheet, r: usize, c: usize) -> &Cell {
    sheet
        .rows
        .get(r)
        .and_then(|row| row.get(c))
        .unwrap_or(&Cell::Empty)
}

fn cell_equals(sheet: &Sheet, path: &str, cell: &str, want: &Value) -> Option<String> {
    let (from, to) = match cell.split_once(':') {
        Some((a, b)) => (cell_ref(a), cell_ref(b)),
        None => (cell_ref(cell), cell_ref(cell)),
    };
    let (Some(from), Some(to)) = (from, to) else {
        return Some(format!("{cell:?} is not a cell (B4) or a range (A1:C3)"));
    };
    let (r0, r1) = (from.0.min(to.0), from.0.max(to.0));
    let (c0, c1) = (from.1.min(to.1), from.1.max(to.1));
    let single = r0 == r1 && c0 == c1;
    for r in r0..=r1 {
        for c in c0..=c1 {
            let expected = if single {
                Some(want)
            } else {
                range_value(want, r - r0, c - c0, r0 == r1 || c0 == c1)
            };
            let Some(expected) = expected else {
                return Some(format!(
                    "the value for {cell} must be an array of rows (or one array for one row or column) of its shape"
                ));
            };
            let found = at(sheet, r, c);
            if !matches(found, expected) {
                let name = cell_name(r, c);
                // A formula stored without its value (as some writers
                // leave them) is said as such: nothing recalculates it.
                let formula = sheet
                    .formulas
                    .iter()
                    .find(|(at, _)| *at == name)
                    .map(|(_, f)| {
                        format!(" (it holds the formula ={f}; formulas are not recalculated: the value stored with it is what is judged)")
                    })
                    .unwrap_or_default();
                return Some(format!(
                    "{path}: sheet {:?} cell {name} is {}, expected {expected}{formula}",
                    sheet.name,
                    show(found)
                ));
            }
        }
    }
    None
}

/// The expected value of a range's cell: `[[row…]…]`, or a flat list for
/// a range of one row or one column.
fn range_value(want: &Value, i: usize, j: usize, line: bool) -> Option<&Value> {
    let rows = want.as_array()?;
    if line && rows.iter().all(|v| !v.is_array()) {
        return rows.get(i.max(j));
    }
    rows.get(i)?.as_array()?.get(j)
}

/// A cell's value for a person: its type and value.
fn show(c: &Cell) -> String {
    match c {
        Cell::Empty => "empty".into(),
        Cell::Number(n) => format!("the number {n}"),
        Cell::Text(t) => format!("the text {t:?}"),
        Cell::Bool(b) => if *b { "TRUE" } else { "FALSE" }.to_string(),
        Cell::Date(d) => format!("the date {d}"),
        Cell::Error(e) => format!("the error {e}"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn number_of(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok().filter(|n| n.is_finite())
}

/// Whether a cell holds the value a contract expects: numbers by value
/// (so 42, "42" and 42.0 agree), text exactly, TRUE/FALSE as booleans,
/// null as an empty cell.
pub(crate) fn matches(found: &Cell, want: &Value) -> bool {
    match (found, want) {
        (Cell::Empty, Value::Null) => true,
        (Cell::Empty, Value::String(s)) => s.is_empty(),
        (Cell::Text(t), Value::Null) => t.is_empty(),
        (Cell::Number(n), Value::Number(w)) => w.as_f64().is_some_and(|w| close(*n, w)),
        (Cell::Number(n), Value::String(s)) => number_of(s).is_some_and(|w| close(*n, w)),
        (Cell::Text(t), Value::Number(w)) => {
            number_of(t).is_some_and(|n| w.as_f64().is_some_and(|w| close(n, w)))
        }
        (Cell::Text(t), Value::String(s)) => t == s,
        (Cell::Bool(b), Value::Bool(w)) => b == w,
        (Cell::Bool(b), Value::String(s)) => {
            s.eq_ignore_ascii_case(if *b { "true" } else { "false" })
        }
        (Cell::Text(t), Value::Bool(w)) => {
            t.eq_ignore_ascii_case(if *w { "true" } else { "false" })
        }
        // A date as written in ISO 8601: the day alone matches a date
        // with no time.
        (Cell::Date(d), Value::String(s)) => d == s || d.strip_suffix("T00:00:00") == Some(s),
        (Cell::Error(e), Value::String(s)) => e == s,
        _ => false,
    }
}

/// The header row: the first with anything in it.
fn header(sheet: &Sheet) -> Vec<String> {
    sheet
        .rows
        .iter()
        .find(|r| r.iter().any(|c| *c != Cell::Empty))
        .map(|r| r.iter().map(text_of).collect())
        .unwrap_or_default()
}

fn text_of(c: &Cell) -> String {
    match c {
        Cell::Empty => String::new(),
        Cell::Number(n) => format!("{n}"),
        Cell::Text(t) | Cell::Date(t) | Cell::Error(t) => t.clone(),
        Cell::Bool(b) => if *b { "TRUE" } else { "FALSE" }.into(),
    }
}

/// Whether `want` appears in `have` in order (others may lie between).
fn in_order<'a>(have: impl IntoIterator<Item = &'a str>, want: &[String]) -> Result<(), usize> {
    let mut it = have.into_iter();
    for (i, w) in want.iter().enumerate() {
        if !it.any(|h| h.trim() == w.trim()) {
            return Err(i);
        }
    }
    Ok(())
}

fn sheet_columns(sheet: &Sheet, path: &str, columns: &[String]) -> Option<String> {
    let head = header(sheet);
    in_order(head.iter().map(String::as_str), columns)
        .err()
        .map(|i| {
            format!(
                "{path}: sheet {:?} has no column {:?} after the ones before it (its header row: {head:?})",
                sheet.name, columns[i]
            )
        })
}

/// Whether a table's row is the row wanted: the same cells from the first
/// column, nothing more beyond them.
fn row_is(row: &[Cell], want: &[Value]) -> bool {
    let mut len = row.len();
    while len > 0 && row[len - 1] == Cell::Empty {
        len -= 1;
    }
    let mut wlen = want.len();
    while wlen > 0 && (want[wlen - 1].is_null() || want[wlen - 1] == "") {
        wlen -= 1;
    }
    len == wlen && row.iter().zip(want).all(|(c, w)| matches(c, w))
}

fn table_rows(
    doc: &Document,
    path: &str,
    sheet: &Option<String>,
    rows: &[Vec<Value>],
) -> Option<String> {
    let tables: Vec<(String, Vec<Vec<Cell>>)> = match doc {
        Document::Sheets { .. } => {
            let s = match pick_sheet(doc, sheet.as_deref(), path) {
                Ok(s) => s,
                Err(e) => return Some(e.0),
            };
            vec![(format!("sheet {:?}", s.name), s.rows.clone())]
        }
        Document::Word { blocks } => blocks
            .iter()
            .filter_map(|b| match b {
                Block::Table { rows } => Some(rows),
                _ => None,
            })
            .enumerate()
            .map(|(i, rows)| {
                let cells = rows
                    .iter()
                    .map(|r| r.iter().map(|t| Cell::Text(t.clone())).collect())
                    .collect();
                (format!("table {}", i + 1), cells)
            })
            .collect(),
        Document::Pdf { .. } => return Some(format!("{path} is a PDF: it has no tables to read")),
    };
    if tables.is_empty() {
        return Some(format!("{path} has no tables"));
    }
    // One table must hold every row.
    let mut best: Option<(usize, &str)> = None;
    for (name, table) in &tables {
        let missing = rows
            .iter()
            .position(|want| !table.iter().any(|row| row_is(row, want)));
        match missing {
            None => return None,
            Some(i) => {
                if best.is_none_or(|(b, _)| i > b) {
                    best = Some((i, name.as_str()));
                }
            }
        }
    }
    let (i, name) = best.unwrap_or((0, "its table"));
    Some(format!(
        "{path}: {name} has no row {} (row {} of the check)",
        Value::Array(rows[i].clone()),
        i + 1
    ))
}

fn doc_headings(doc: &Document, path: &str, headings: &[String]) -> Option<String> {
    let Document::Word { blocks } = doc else {
        return Some(format!("{path} is not a Word document"));
    };
    let have: Vec<&str> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::Heading { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    in_order(have.iter().copied(), headings).err().map(|i| {
        format!(
            "{path} has no heading {:?} after the ones before it (its headings: {have:?})",
            headings[i]
        )
    })
}

/// Runs of white space as one space, so a PDF's line breaks and spacing
/// do not decide a check.
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn pdf_text(doc: &Document, path: &str, page: Option<u32>, text: &str) -> Option<String> {
    let Document::Pdf { pages } = doc else {
        return Some(format!("{path} is not a PDF"));
    };
    let want = squeeze(text);
    match page {
        Some(n) => {
            let Some(p) = pages.get((n as usize).wrapping_sub(1)) else {
                return Some(format!("{path} has no page {n} (it has {})", pages.len()));
            };
            (!squeeze(p).contains(&want))
                .then(|| format!("{path}: page {n} does not contain {text:?}"))
        }
        None => (!pages.iter().any(|p| squeeze(p).contains(&want)))
            .then(|| format!("{path}: no page of its {} contains {text:?}", pages.len())),
    }
}
