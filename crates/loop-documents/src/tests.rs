use super::*;
use loop_protocol::contract::Check;
use loop_protocol::path::RelPath;
use serde_json::json;

fn p(s: &str) -> RelPath {
    RelPath::parse(s).unwrap()
}

fn workbook(total: f64) -> Vec<u8> {
    let spec: XlsxSpec = serde_json::from_value(json!({
        "sheets": [
            {"name": "Data", "rows": [["Region", "Sales"], ["North", 120], ["South", 80.5]]},
            {"name": "Summary", "rows": [["Region", "Total", "Ok"], ["All", null, true]],
             "formulas": [{"cell": "B2", "formula": "=SUM(Data!B2:B3)", "value": total}]}
        ]
    }))
    .unwrap();
    write_xlsx(&spec).unwrap()
}

fn cell_equals(sheet: Option<&str>, cell: &str, value: serde_json::Value) -> Check {
    Check::CellEquals {
        path: p("out/report.xlsx"),
        sheet: sheet.map(str::to_string),
        cell: cell.into(),
        value,
    }
}

#[test]
fn a_written_workbook_is_read_back_with_types_and_formulas() {
    let doc = read("out/report.xlsx", &workbook(200.5)).unwrap();
    let Document::Sheets { sheets } = &doc else {
        panic!("not sheets: {doc:?}")
    };
    assert_eq!(sheets.len(), 2);
    assert_eq!(sheets[1].name, "Summary");
    assert_eq!(sheets[1].rows[1][1], Cell::Number(200.5));
    assert_eq!(sheets[1].rows[1][2], Cell::Bool(true));
    assert_eq!(
        sheets[1].formulas,
        vec![("B2".to_string(), "SUM(Data!B2:B3)".to_string())]
    );
    let text = render(&doc, 10_000);
    assert!(text.contains("B2=200.5"), "{text}");
    assert!(text.contains("formula B2: =SUM(Data!B2:B3)"), "{text}");
}

#[test]
fn cell_checks_hold_on_the_right_total_and_name_the_wrong_one() {
    let good = read("out/report.xlsx", &workbook(200.5)).unwrap();
    let bad = read("out/report.xlsx", &workbook(190.0)).unwrap();
    let total = cell_equals(Some("Summary"), "B2", json!(200.5));
    assert_eq!(judge(&total, &good), None);
    let why = judge(&total, &bad).expect("a wrong total must fail");
    assert!(
        why.contains("sheet \"Summary\" cell B2 is the number 190, expected 200.5"),
        "{why}"
    );
    // Numbers as text agree; a range; the first sheet by default.
    assert_eq!(
        judge(&cell_equals(Some("Summary"), "B2", json!("200.5")), &good),
        None
    );
    assert_eq!(
        judge(
            &cell_equals(
                None,
                "A1:B3",
                json!([["Region", "Sales"], ["North", 120], ["South", 80.5]])
            ),
            &good
        ),
        None
    );
    let missing = judge(&cell_equals(Some("Totals"), "B2", json!(1)), &good).unwrap();
    assert!(missing.contains("has no sheet \"Totals\""), "{missing}");
    let empty = judge(&cell_equals(None, "Z9", json!(0)), &good).unwrap();
    assert!(empty.contains("cell Z9 is empty"), "{empty}");
}

#[test]
fn columns_and_rows_are_judged_on_sheets_and_csv() {
    let good = read("out/report.xlsx", &workbook(200.5)).unwrap();
    let cols = |c: &[&str]| Check::SheetColumns {
        path: p("out/report.xlsx"),
        sheet: Some("Summary".into()),
        columns: c.iter().map(|s| s.to_string()).collect(),
    };
    assert_eq!(judge(&cols(&["Region", "Ok"]), &good), None);
    let why = judge(&cols(&["Ok", "Region"]), &good).unwrap();
    assert!(why.contains("no column \"Region\""), "{why}");

    let csv = read("in/north.csv", b"region,amount\nNorth,120\nSouth,80.5\n").unwrap();
    let rows = |r: serde_json::Value| Check::TableRows {
        path: p("in/north.csv"),
        sheet: None,
        rows: serde_json::from_value(r).unwrap(),
    };
    assert_eq!(
        judge(&rows(json!([["South", 80.5], ["North", "120"]])), &csv),
        None
    );
    let why = judge(&rows(json!([["South", 81]])), &csv).unwrap();
    assert!(why.contains("has no row [\"South\",81]"), "{why}");
    // A row with more cells than asked is not the row asked for.
    assert!(judge(&rows(json!([["South"]])), &csv).is_some());
}

#[test]
fn word_documents_have_headings_in_order_and_tables() {
    let spec: DocxSpec = serde_json::from_value(json!({"blocks": [
        {"kind": "heading", "level": 0, "text": "Quarterly report"},
        {"kind": "heading", "level": 1, "text": "Summary"},
        {"kind": "paragraph", "text": "Sales rose."},
        {"kind": "table", "rows": [["Region", "Total"], ["North", "120"]]},
        {"kind": "heading", "level": 1, "text": "Outlook"}
    ]}))
    .unwrap();
    let doc = read("report.docx", &write_docx(&spec).unwrap()).unwrap();
    let heads = |h: &[&str]| Check::DocHeadings {
        path: p("report.docx"),
        headings: h.iter().map(|s| s.to_string()).collect(),
    };
    assert_eq!(
        judge(&heads(&["Quarterly report", "Summary", "Outlook"]), &doc),
        None
    );
    let why = judge(&heads(&["Outlook", "Summary"]), &doc).unwrap();
    assert!(why.contains("no heading \"Summary\" after"), "{why}");
    // A paragraph is not a heading.
    assert!(judge(&heads(&["Sales rose."]), &doc).is_some());
    let table = Check::TableRows {
        path: p("report.docx"),
        sheet: None,
        rows: vec![vec![json!("North"), json!(120)]],
    };
    assert_eq!(judge(&table, &doc), None);
    let text = render(&doc, 10_000);
    assert!(
        text.contains("## Summary") && text.contains("| North | 120 |"),
        "{text}"
    );
}

/// A one-page PDF showing `text` (Helvetica, uncompressed), its cross
/// reference table offsets computed.
fn pdf(text: &str) -> Vec<u8> {
    let stream = format!("BT /F1 12 Tf 72 720 Td ({text}) Tj ET");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_string(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>".to_string(),
        format!("<< /Length {} >>\nstream\n{stream}\nendstream", stream.len()),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_string(),
    ];
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{o}\nendobj\n", i + 1).as_bytes());
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for off in offsets {
        out.extend_from_slice(format!("{off:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

#[test]
fn a_pdf_page_holds_its_text() {
    let doc = read("invoice.pdf", &pdf("Total due: 42 EUR")).unwrap();
    let check = |page: Option<u32>, text: &str| Check::PdfText {
        path: p("invoice.pdf"),
        page,
        text: text.into(),
    };
    assert_eq!(judge(&check(Some(1), "Total due: 42 EUR"), &doc), None);
    assert_eq!(judge(&check(None, "Total   due:"), &doc), None);
    let why = judge(&check(None, "Total due: 43 EUR"), &doc).unwrap();
    assert!(why.contains("no page of its 1 contains"), "{why}");
    let why = judge(&check(Some(2), "Total"), &doc).unwrap();
    assert!(why.contains("has no page 2 (it has 1)"), "{why}");
}

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in entries {
        w.start_file(*name, opts).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

#[test]
fn hostile_documents_fail_within_the_bounds_with_the_reason() {
    // A compression bomb: 64 MiB of zeros in a few kilobytes.
    let zeros = vec![0u8; 64 << 20];
    let bomb = zip_of(&[("xl/worksheets/sheet1.xml", &zeros)]);
    assert!(bomb.len() < 1 << 20);
    let why = read("bomb.xlsx", &bomb).unwrap_err().to_string();
    assert!(why.contains("a compression bomb is not read"), "{why}");
    let why = read("bomb.docx", &bomb).unwrap_err().to_string();
    assert!(why.contains("a compression bomb is not read"), "{why}");
    // Macros and external links are refused by name.
    let macro_book = zip_of(&[
        ("xl/vbaProject.bin", b"x"),
        ("[Content_Types].xml", b"<x/>"),
    ]);
    let why = read("m.xlsm", &macro_book).unwrap_err().to_string();
    assert!(
        why.contains("contains macros or controls (xl/vbaProject.bin)"),
        "{why}"
    );
    let linked = zip_of(&[("xl/externalLinks/externalLink1.xml", b"<x/>")]);
    let why = read("l.xlsx", &linked).unwrap_err().to_string();
    assert!(
        why.contains("links to other workbooks (xl/externalLinks/externalLink1.xml)"),
        "{why}"
    );
    // A million rows stop at the bound, CSV and XLSX alike.
    let rows = "1\n".repeat(1_000_000);
    let why = read("big.csv", rows.as_bytes()).unwrap_err().to_string();
    assert!(why.contains("has more than 100000 rows"), "{why}");
    let spec = XlsxSpec {
        sheets: vec![write::SheetSpec {
            name: "Big".into(),
            rows: vec![vec![json!(1)]; MAX_ROWS + 1],
            formulas: Vec::new(),
        }],
    };
    let big = write_xlsx(&spec).unwrap();
    let why = read("big.xlsx", &big).unwrap_err().to_string();
    assert!(
        why.contains("sheet \"Big\" has more than 100000 rows"),
        "{why}"
    );
    // Garbage is named as what it failed to be.
    let why = read("x.docx", b"not a zip").unwrap_err().to_string();
    assert!(why.contains("x.docx is not a readable archive"), "{why}");
    let why = read("x.pdf", b"%PDF-1.4 garbage").unwrap_err().to_string();
    assert!(why.contains("x.pdf is not a readable PDF"), "{why}");
    let why = read("x.txt", b"").unwrap_err().to_string();
    assert!(why.contains("not a document this reads"), "{why}");
}

#[test]
fn cell_references_read_as_excel_names_them() {
    assert_eq!(cell_ref("A1"), Some((0, 0)));
    assert_eq!(cell_ref("$B$4"), Some((3, 1)));
    assert_eq!(cell_ref("AA10"), Some((9, 26)));
    assert_eq!(judge::cell_name(9, 26), "AA10");
    assert_eq!(cell_ref("A0"), None);
    assert_eq!(cell_ref("4B"), None);
}

#[test]
fn far_apart_cells_and_dates_are_read_as_they_are_stored() {
    // 1,500 cells in the last column would be 24 million stored cells:
    // refused at the bound, not made.
    let mut book = rust_xlsxwriter::Workbook::new();
    let sheet = book.add_worksheet();
    for r in 0..1500u32 {
        sheet.write_number(r, 16_383, 1.0).unwrap();
    }
    let sparse = book.save_to_buffer().unwrap();
    assert!(sparse.len() < 100_000);
    let why = read("far.xlsx", &sparse).unwrap_err().to_string();
    assert!(why.contains("more than 1000000 cells"), "{why}");

    // A date reads as ISO 8601 and is judged so; a formula stored with no
    // value is said as such.
    let mut book = rust_xlsxwriter::Workbook::new();
    let sheet = book.add_worksheet();
    let day = rust_xlsxwriter::ExcelDateTime::from_ymd(2024, 3, 15).unwrap();
    let fmt = rust_xlsxwriter::Format::new().set_num_format("yyyy-mm-dd");
    sheet.write_datetime_with_format(0, 0, &day, &fmt).unwrap();
    sheet
        .write_formula(
            0,
            1,
            rust_xlsxwriter::Formula::new("SUM(1,2)").set_result(""),
        )
        .unwrap();
    let doc = read("dates.xlsx", &book.save_to_buffer().unwrap()).unwrap();
    assert_eq!(
        judge(&cell_equals(None, "A1", json!("2024-03-15")), &doc),
        None
    );
    let why = judge(&cell_equals(None, "B1", json!(3)), &doc).unwrap();
    assert!(
        why.contains("it holds the formula =SUM(1,2); formulas are not recalculated"),
        "{why}"
    );
}

#[test]
fn macros_of_every_kind_are_refused_by_name() {
    let ods = zip_of(&[
        ("Basic/Standard/Module1.xml", b"<x/>"),
        ("content.xml", b"<x/>"),
    ]);
    let why = read("m.ods", &ods).unwrap_err().to_string();
    assert!(
        why.contains("contains macros or controls (Basic/Standard/Module1.xml)"),
        "{why}"
    );
    // A binary workbook's VBA storage, named in UTF-16 in its directory.
    let mut xls = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1".to_vec();
    xls.extend("_VBA_PROJECT_CUR".encode_utf16().flat_map(u16::to_le_bytes));
    let why = read("m.xls", &xls).unwrap_err().to_string();
    assert!(why.contains("contains macros (_VBA_PROJECT_CUR)"), "{why}");
    // A Word document with an embedded chart's data is read.
    let spec: DocxSpec =
        serde_json::from_value(json!({"blocks": [{"kind": "paragraph", "text": "x"}]})).unwrap();
    let plain = write_docx(&spec).unwrap();
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(plain)).unwrap();
    let mut out = Vec::new();
    {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(&mut out));
        for i in 0..zip.len() {
            w.raw_copy_file(zip.by_index_raw(i).unwrap()).unwrap();
        }
        w.start_file(
            "word/embeddings/Microsoft_Excel_Worksheet.xlsx",
            zip::write::SimpleFileOptions::default(),
        )
        .unwrap();
        std::io::Write::write_all(&mut w, b"chart data").unwrap();
        w.finish().unwrap();
    }
    assert!(read("chart.docx", &out).is_ok());
}
