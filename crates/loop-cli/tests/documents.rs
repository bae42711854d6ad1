//! Document checks through the `loop` binary: a task that leaves a
//! workbook in the workspace is verified by its cells and columns, read
//! on the fresh snapshot by a bounded reader process; a wrong total is
//! not verified, naming the cell and what it held; a compression bomb in
//! the workbook's place fails the check with its reason, and the task
//! ends unverified instead of the runtime running out of memory.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use serde_json::json;
use std::path::{Path, PathBuf};

fn tmpdir(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("loop-documents-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn workbook(total: f64) -> Vec<u8> {
    let spec: loop_documents::XlsxSpec = serde_json::from_value(json!({"sheets": [
        {"name": "Data", "rows": [["Region", "Sales"], ["North", 120], ["South", 80.5]]},
        {"name": "Summary", "rows": [["Region", "Total"], ["All"]],
         "formulas": [{"cell": "B2", "formula": "SUM(Data!B2:B3)", "value": total}]}
    ]}))
    .unwrap();
    loop_documents::write_xlsx(&spec).unwrap()
}

/// A zip whose one sheet inflates 64 MiB of zeros from a few kilobytes.
fn bomb() -> Vec<u8> {
    let mut out = Vec::new();
    let zeros = vec![0u8; 64 << 20];
    let spec = loop_documents::XlsxSpec {
        sheets: vec![loop_documents::write::SheetSpec {
            name: "S".into(),
            rows: vec![vec![json!("x")]],
            formulas: Vec::new(),
        }],
    };
    // A real workbook's shape, then a part no reader should inflate.
    let book = loop_documents::write_xlsx(&spec).unwrap();
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(book)).unwrap();
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(&mut out));
    for i in 0..zip.len() {
        let f = zip.by_index_raw(i).unwrap();
        w.raw_copy_file(f).unwrap();
    }
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    w.start_file("xl/worksheets/sheet2.xml", opts).unwrap();
    std::io::Write::write_all(&mut w, &zeros).unwrap();
    w.finish().unwrap();
    out
}

fn project(base: &Path) -> PathBuf {
    let p = base.join("project");
    std::fs::create_dir_all(p.join("fixtures")).unwrap();
    std::fs::write(p.join("README.md"), "regional sales\n").unwrap();
    std::fs::write(p.join("fixtures/right.xlsx"), workbook(200.5)).unwrap();
    std::fs::write(p.join("fixtures/wrong.xlsx"), workbook(190.0)).unwrap();
    std::fs::write(p.join("fixtures/bomb.xlsx"), bomb()).unwrap();
    shared::commit_all(&p);
    p
}

const TASK: &str = "instruction: Put the summary workbook at out/summary.xlsx\ncriteria:\n  - id: total\n    text: the summary sheet holds the regions' total\n    checks:\n      - {cell_equals: out/summary.xlsx, sheet: Summary, cell: B2, value: 200.5}\n      - {sheet_columns: out/summary.xlsx, sheet: Summary, columns: [Region, Total]}\nlimits:\n  max_verifications: 1\n";

fn script(fixture: &str) -> String {
    format!(
        "turns:\n  - calls:\n      - {{tool: run_command, args: {{command: 'mkdir -p out && cp fixtures/{fixture} out/summary.xlsx'}}}}\n  - calls:\n      - {{tool: finish, args: {{summary: done}}}}\n"
    )
}

#[test]
fn a_workbook_is_verified_by_its_cells_and_a_wrong_one_or_a_bomb_is_not() {
    let base = tmpdir("cells");
    let p = project(&base);

    let right = shared::run_scripted(&base, &p, "right", (TASK, &script("right.xlsx")));
    assert_eq!(right.outcome(), "verified", "{}", shared::text(&right.out));

    let wrong = shared::run_scripted(&base, &p, "wrong", (TASK, &script("wrong.xlsx")));
    assert_ne!(wrong.outcome(), "verified", "{}", shared::text(&wrong.out));
    let said = shared::text(&wrong.out);
    assert!(
        said.contains("sheet \\\"Summary\\\" cell B2 is the number 190, expected 200.5")
            || said.contains("sheet \"Summary\" cell B2 is the number 190, expected 200.5"),
        "the failure names the cell and what it held: {said}"
    );

    let bombed = shared::run_scripted(&base, &p, "bomb", (TASK, &script("bomb.xlsx")));
    assert_ne!(
        bombed.outcome(),
        "verified",
        "{}",
        shared::text(&bombed.out)
    );
    let said = shared::text(&bombed.out);
    assert!(
        said.contains("a compression bomb is not read"),
        "the failure names the bomb: {said}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

const SUMMARY_TASK: &str = "instruction: Combine regions/*.csv into out/summary.xlsx with a Summary sheet\ncriteria:\n  - id: summary\n    text: the Summary sheet totals the three regions\n    checks:\n      - {sheet_columns: out/summary.xlsx, sheet: Summary, columns: [Region, Total]}\n      - {table_rows: out/summary.xlsx, sheet: Summary, rows: [[North, 120], [South, 80.5], [East, 42]]}\n      - {cell_equals: out/summary.xlsx, sheet: Summary, cell: B5, value: 242.5}\nlimits:\n  max_verifications: 1\n";

/// A model that reads one input, then writes the workbook with `total`
/// stored as the total's value.
fn summary_script(total: f64) -> String {
    format!(
        "turns:\n  - calls:\n      - {{tool: read_document, args: {{path: regions/north.csv}}}}\n  - calls:\n      - tool: write_spreadsheet\n        args:\n          path: out/summary.xlsx\n          sheets:\n            - name: Summary\n              rows: [[Region, Total], [North, 120], [South, 80.5], [East, 42], [All]]\n              formulas: [{{cell: B5, formula: 'SUM(B2:B4)', value: {total}}}]\n  - calls:\n      - {{tool: finish, args: {{summary: done}}}}\n"
    )
}

#[test]
fn a_model_writes_a_summary_workbook_from_three_csv_files_and_only_the_right_total_verifies() {
    let base = tmpdir("summary");
    let p = base.join("project");
    std::fs::create_dir_all(p.join("regions")).unwrap();
    for (name, amount) in [("north", "120"), ("south", "80.5"), ("east", "42")] {
        std::fs::write(
            p.join(format!("regions/{name}.csv")),
            format!("region,amount\n{name},{amount}\n"),
        )
        .unwrap();
    }
    shared::commit_all(&p);

    let right = shared::run_scripted(&base, &p, "right", (SUMMARY_TASK, &summary_script(242.5)));
    assert_eq!(right.outcome(), "verified", "{}", shared::text(&right.out));
    let said = shared::text(&right.out);
    assert!(
        said.contains("A2=\\\"north\\\" | B2=120"),
        "the model read the CSV as typed cells: {said}"
    );

    let wrong = shared::run_scripted(&base, &p, "wrong", (SUMMARY_TASK, &summary_script(240.0)));
    assert_ne!(wrong.outcome(), "verified", "{}", shared::text(&wrong.out));
    assert!(
        shared::text(&wrong.out).contains("cell B5 is the number 240, expected 242.5"),
        "{}",
        shared::text(&wrong.out)
    );
    let _ = std::fs::remove_dir_all(&base);
}
