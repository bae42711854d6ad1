//! The JSON Schemas in docs/schema/ are what `loop schema` prints, and
//! every YAML example in the docs is accepted by both the schema and the
//! parser (`loop validate`); known-bad documents are refused by both.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures

use std::path::Path;
use std::process::Command;

#[test]
fn every_doc_example_validates_under_the_schema_and_the_parser() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("/usr/bin/python3")
        .arg(root.join("scripts/check-schemas.py"))
        .arg(env!("CARGO_BIN_EXE_loop"))
        .arg(&root)
        .output()
        .expect("python3 runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("doc examples"), "{said}");
}
