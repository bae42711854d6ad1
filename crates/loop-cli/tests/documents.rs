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

const SUMMARY_TASK: &str = "instruction: Combine inputs/*.csv into out/summary.xlsx with a Summary sheet\ncriteria:\n  - id: summary\n    text: the Summary sheet totals the three regions\n    checks:\n      - {sheet_columns: out/summary.xlsx, sheet: Summary, columns: [Region, Total]}\n      - {table_rows: out/summary.xlsx, sheet: Summary, rows: [[North, 120], [South, 80.5], [East, 42]]}\n      - {cell_equals: out/summary.xlsx, sheet: Summary, cell: B5, value: 242.5}\nlimits:\n  max_verifications: 1\n";

/// A model that reads one input, then writes the workbook with `total`
/// stored as the total's value.
fn summary_script(total: f64) -> String {
    format!(
        "turns:\n  - calls:\n      - {{tool: read_document, args: {{path: inputs/north.csv}}}}\n  - calls:\n      - tool: write_spreadsheet\n        args:\n          path: out/summary.xlsx\n          sheets:\n            - name: Summary\n              rows: [[Region, Total], [North, 120], [South, 80.5], [East, 42], [All]]\n              formulas: [{{cell: B5, formula: 'SUM(B2:B4)', value: {total}}}]\n  - calls:\n      - {{tool: finish, args: {{summary: done}}}}\n"
    )
}

/// `loop run --task TASK --input FILE…` with `script`, in `project`.
fn run_with_inputs(
    base: &Path,
    project: &Path,
    name: &str,
    script: &str,
    inputs: &[PathBuf],
) -> std::process::Output {
    std::fs::write(base.join(format!("{name}.task.yaml")), SUMMARY_TASK).unwrap();
    std::fs::write(base.join(format!("{name}.script.yaml")), script).unwrap();
    let mut c = shared::loop_in(base);
    c.args(["run", "--json", "--task"])
        .arg(base.join(format!("{name}.task.yaml")))
        .arg("--model")
        .arg(format!(
            "scripted:{}",
            base.join(format!("{name}.script.yaml")).display()
        ))
        .arg("--project")
        .arg(project);
    for i in inputs {
        c.arg("--input").arg(i);
    }
    c.output().unwrap()
}

fn receipt_of(out: &std::process::Output) -> serde_json::Value {
    let lines = shared::json_lines(out);
    let r = lines
        .iter()
        .find(|e| e["kind"] == "receipt")
        .unwrap_or_else(|| panic!("no receipt: {}", shared::text(out)));
    shared::payload_of(Path::new(r["path"].as_str().unwrap()))
}

#[test]
fn a_model_writes_a_summary_workbook_from_three_csv_inputs_and_only_the_right_total_verifies() {
    let base = tmpdir("summary");
    let p = base.join("project");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("README.md"), "sales\n").unwrap();
    shared::commit_all(&p);
    let given = base.join("exports");
    std::fs::create_dir_all(&given).unwrap();
    let mut inputs = Vec::new();
    for (name, amount) in [("north", "120"), ("south", "80.5"), ("east", "42")] {
        let f = given.join(format!("{name}.csv"));
        std::fs::write(&f, format!("region,amount\n{name},{amount}\n")).unwrap();
        inputs.push(f);
    }

    let right = run_with_inputs(&base, &p, "right", &summary_script(242.5), &inputs);
    let statement = receipt_of(&right);
    assert_eq!(
        statement["predicate"]["outcome"]["kind"],
        "verified",
        "{}",
        shared::text(&right)
    );
    let said = shared::text(&right);
    assert!(
        said.contains("A2=\\\"north\\\" | B2=120"),
        "the model read the given CSV as typed cells: {said}"
    );
    // Each input is in the ledger's first entry with its digest, and is
    // where the task started, not what it changed.
    let id = statement["predicate"]["task_id"].as_str().unwrap();
    let ledger = std::fs::read_to_string(
        Path::new(
            shared::json_lines(&right)
                .iter()
                .find(|e| e["kind"] == "receipt")
                .unwrap()["path"]
                .as_str()
                .unwrap(),
        )
        .with_file_name(format!("{id}.ledger.jsonl")),
    )
    .unwrap();
    let first: serde_json::Value = serde_json::from_str(ledger.lines().next().unwrap()).unwrap();
    let recorded = first["payload"]["inputs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(recorded.len(), 3, "{first}");
    let north = recorded
        .iter()
        .find(|f| f["path"] == "inputs/north.csv")
        .unwrap();
    assert_eq!(
        north["sha256"].as_str().unwrap(),
        loop_protocol::hash::sha256_hex(b"region,amount\nnorth,120\n")
    );
    let changed: Vec<String> = statement["predicate"]["change_set"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(changed, ["out/summary.xlsx"], "{statement}");

    let wrong = run_with_inputs(&base, &p, "wrong", &summary_script(240.0), &inputs);
    assert_ne!(
        receipt_of(&wrong)["predicate"]["outcome"]["kind"],
        "verified"
    );
    assert!(
        shared::text(&wrong).contains("cell B5 is the number 240, expected 242.5"),
        "{}",
        shared::text(&wrong)
    );

    // What was given stays as given: the model's writes to it are refused
    // (a file tool's and a command's), naming the protection.
    let tamper = "turns:\n  - calls:\n      - {tool: write_file, args: {path: inputs/north.csv, content: \"region,amount\\nnorth,122.5\\n\"}}\n      - {tool: run_command, args: {command: 'echo x > inputs/east.csv'}}\n  - calls:\n      - {tool: finish, args: {summary: done}}\n";
    let out = run_with_inputs(&base, &p, "tamper", tamper, &inputs);
    let said = shared::text(&out);
    let refused: Vec<serde_json::Value> = shared::json_lines(&out)
        .into_iter()
        .filter(|e| e["kind"] == "observed" && e["observation"]["tool"] != "finish")
        .map(|e| e["observation"].clone())
        .collect();
    assert_eq!(refused.len(), 2, "{said}");
    assert_eq!(refused[0]["status"], "refused", "{said}");
    assert_eq!(refused[0]["rule"], "protected: inputs/north.csv", "{said}");
    let content = refused[1]["content"].as_str().unwrap_or_default();
    assert!(
        content.contains("cannot create inputs/east.csv: Read-only file system"),
        "{said}"
    );
    let kept = receipt_of(&out);
    assert!(
        kept["predicate"]["contract"]["protected"]
            .to_string()
            .contains("inputs/east.csv"),
        "{kept}"
    );

    // A name the project already has under inputs/ is refused, naming it,
    // and so is a hidden name.
    std::fs::create_dir_all(p.join("inputs")).unwrap();
    std::fs::write(p.join("inputs/north.csv"), "region,amount\n").unwrap();
    shared::commit_all(&p);
    let clash = run_with_inputs(&base, &p, "clash", &summary_script(242.5), &inputs);
    assert_eq!(clash.status.code(), Some(2), "{}", shared::text(&clash));
    assert!(
        shared::text(&clash).contains("the project already has inputs/north.csv"),
        "{}",
        shared::text(&clash)
    );
    let hidden = given.join(".env");
    std::fs::write(&hidden, "X=1\n").unwrap();
    let out = run_with_inputs(&base, &p, "hidden", &summary_script(242.5), &[hidden]);
    assert_eq!(out.status.code(), Some(2), "{}", shared::text(&out));
    assert!(
        shared::text(&out).contains("a plain file name is needed"),
        "{}",
        shared::text(&out)
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// The stand-in provider's answers: `view_image` of the given image,
/// then writing `out.txt`, then `finish` (and `finish` after).
fn provider() -> (
    u16,
    std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
) {
    shared::openai_stand_in(vec![
        json!({"name": "view_image", "arguments": "{\"path\": \"inputs/shot.png\"}"}),
        json!({"name": "write_file", "arguments": "{\"path\": \"out.txt\", \"content\": \"seen\\n\"}"}),
    ])
}

/// `loop run` of a task given a PNG, driven by the stand-in provider
/// configured with `images: images`: its JSON lines and the requests the
/// provider saw.
fn run_with_image(
    base: &Path,
    name: &str,
    images: bool,
) -> (std::process::Output, Vec<serde_json::Value>) {
    let p = base.join(name);
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("README.md"), "a page\n").unwrap();
    let (port, seen) = provider();
    std::fs::write(
        p.join("Loopfile.yaml"),
        format!("models:\n  maker:\n    spec: openai:fake-vision\n    base_url: http://127.0.0.1:{port}/v1\n    stream: false\n    images: {images}\n"),
    )
    .unwrap();
    shared::commit_all(&p);
    std::fs::create_dir_all(base.join(format!("{name}-given"))).unwrap();
    let shot = base.join(format!("{name}-given/shot.png"));
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend_from_slice(b"\0\0\0\rIHDR-not-a-real-picture");
    std::fs::write(&shot, &png).unwrap();
    let out = shared::loop_in(base)
        .args([
            "run",
            "look at the screenshot and write out.txt",
            "--json",
            "--check",
            "grep -q seen out.txt",
            "--project",
        ])
        .arg(&p)
        .arg("--input")
        .arg(&shot)
        .output()
        .unwrap();
    let seen = seen.lock().unwrap().clone();
    (out, seen)
}

#[test]
fn an_image_reaches_a_model_that_takes_images_and_one_that_does_not_is_told() {
    let base = tmpdir("images");
    let url = format!("data:image/png;base64,{}", {
        use base64::Engine;
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.extend_from_slice(b"\0\0\0\rIHDR-not-a-real-picture");
        base64::engine::general_purpose::STANDARD.encode(png)
    });
    let (out, seen) = run_with_image(&base, "vision", true);
    assert_eq!(out.status.code(), Some(0), "{}", shared::text(&out));
    // The given image went with the instruction, and view_image's with
    // its result, as image parts.
    let first = seen[0].to_string();
    assert!(first.contains(&url), "the instruction's image: {first}");
    let second = &seen[1]["messages"];
    let shown = second
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["role"] == "user" && m["content"][1]["image_url"]["url"] == url.as_str());
    assert!(shown, "view_image's image: {second}");
    // The record keeps its digest, not its bytes.
    let said = shared::text(&out);
    assert!(
        said.contains("\"image\":{\"path\":\"inputs/shot.png\",\"media_type\":\"image/png\""),
        "{said}"
    );
    assert!(!said.contains(&url), "the bytes stay out of the record");

    let (out, seen) = run_with_image(&base, "text-only", false);
    assert_eq!(out.status.code(), Some(0), "{}", shared::text(&out));
    let all = serde_json::Value::Array(seen).to_string();
    assert!(
        !all.contains("image_url"),
        "no image to a text-only model: {all}"
    );
    assert!(
        all.contains("The model driving this task takes no images"),
        "{all}"
    );
    let said = shared::text(&out);
    assert!(said.contains("model: takes no images"), "{said}");
    let _ = std::fs::remove_dir_all(&base);
}

/// A page check's contract: the site served from `site/` on port 8000
/// must show the price table.
const PAGE_TASK: &str = "instruction: Make the landing page show the price table\ncriteria:\n  - id: prices\n    text: the landing page shows the price table in a browser\n    checks:\n      - page: /index.html\n        serve: python3 -m http.server 8000 --bind 127.0.0.1 --directory site\n        port: 8000\n        title: Prices\n        text: 9 EUR\n        element: '#prices'\n        timeout_secs: 60\nlimits:\n  max_verifications: 1\n";

fn site_script(price: &str) -> String {
    format!(
        "turns:\n  - calls:\n      - {{tool: write_file, args: {{path: site/index.html, content: \"<html><head><title>Prices</title></head><body><table id=prices><tr><td>Basic</td><td id=p></td></tr></table><script>document.getElementById('p').textContent = '{price}'</script></body></html>\\n\"}}}}\n  - calls:\n      - {{tool: finish, args: {{summary: done}}}}\n"
    )
}

#[test]
fn a_page_check_opens_the_served_site_in_chromium_inside_the_sandbox() {
    if std::env::var_os("LOOP_BROWSER_VENV").is_none() {
        // (scripts/test.sh sets it, with Chromium installed.)
        eprintln!("skipped: LOOP_BROWSER_VENV is not set");
        return;
    }
    assert!(shared::have("chromium"), "Chromium is not installed");
    let base = tmpdir("page");
    let p = base.join("project");
    std::fs::create_dir_all(p.join("site")).unwrap();
    std::fs::write(p.join("site/README"), "the site\n").unwrap();
    shared::commit_all(&p);

    // The price, set by the page's script, is seen in the browser.
    let right = shared::run_scripted(&base, &p, "right", (PAGE_TASK, &site_script("9 EUR")));
    assert_eq!(right.outcome(), "verified", "{}", shared::text(&right.out));
    // Without it the page check fails, saying what the page lacks.
    let wrong = shared::run_scripted(&base, &p, "wrong", (PAGE_TASK, &site_script("ask us")));
    assert_ne!(wrong.outcome(), "verified");
    let said = shared::text(&wrong.out);
    assert!(
        said.contains("the page /index.html it does not show \\\"9 EUR\\\""),
        "{said}"
    );

    // A service of the host on 127.0.0.1 is not what the browser sees:
    // the check's network is its own.
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::Write;
        for s in host.incoming().take(8) {
            let Ok(mut s) = s else { continue };
            let body =
                "<html><head><title>HOST SECRET</title></head><body>HOST SECRET</body></html>";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let probe = format!(
        "instruction: Show the host's page\ncriteria:\n  - id: host\n    checks:\n      - page: /\n        serve: 'sleep 30'\n        port: {port}\n        text: HOST SECRET\n        timeout_secs: 15\nlimits:\n  max_verifications: 1\n"
    );
    let script = "turns:\n  - calls:\n      - {tool: write_file, args: {path: x.txt, content: \"x\\n\"}}\n  - calls:\n      - {tool: finish, args: {summary: done}}\n";
    let reach = shared::run_scripted(&base, &p, "host", (&probe, script));
    assert_ne!(reach.outcome(), "verified", "{}", shared::text(&reach.out));
    let said = shared::text(&reach.out);
    assert!(
        said.contains("could not be opened: net::ERR_CONNECTION_REFUSED"),
        "{said}"
    );

    // A page check whose server makes the page it is to show cannot fail:
    // refused before the task starts.
    let made = "instruction: Show the price\ncriteria:\n  - id: made\n    checks:\n      - page: /index.html\n        serve: mkdir -p s && echo '<p>9 EUR</p>' > s/index.html && python3 -m http.server 8000 --bind 127.0.0.1 --directory s\n        port: 8000\n        text: 9 EUR\n        timeout_secs: 30\n";
    std::fs::write(base.join("made.task.yaml"), made).unwrap();
    std::fs::write(base.join("made.script.yaml"), script).unwrap();
    let out = shared::loop_in(&base)
        .args(["run", "--json", "--task"])
        .arg(base.join("made.task.yaml"))
        .arg("--model")
        .arg(format!(
            "scripted:{}",
            base.join("made.script.yaml").display()
        ))
        .arg("--project")
        .arg(&p)
        .output()
        .unwrap();
    let said = shared::text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("passes on an empty workspace"), "{said}");
    let _ = std::fs::remove_dir_all(&base);
}
