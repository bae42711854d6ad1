//! Ledger chains and their tampering.

use crate::*;
use loop_protocol::{Event, LedgerEntry, TaskState};

fn tmp(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("loop-receipt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn genesis() -> Event {
    let contract = loop_protocol::Contract::from_flags("x", &["true".into()], &[]).unwrap();
    Event::TaskStarted {
        task_id: "t-1".into(),
        contract_sha256: contract.sha256().unwrap(),
        limits: contract.limits.clone(),
        contract: Box::new(contract),
        model: loop_protocol::ModelInfo {
            provider: "scripted".into(),
            name: "s".into(),
            source_sha256: None,
            parameters: None,
        },
        checker: None,
        runtime: loop_protocol::RuntimeInfo::current(),
        baseline_root: "r".into(),
        setup: None,
        drafting: None,
        guidance: Vec::new(),
        project_checks: Vec::new(),
        trigger: None,
    }
}

fn write_ledger(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("t.ledger.jsonl");
    let mut l = FileLedger::create(&path).unwrap();
    l.append(&genesis(), 0).unwrap();
    for n in 1..=4 {
        l.append(
            &Event::Transition {
                n,
                from: TaskState::Planning,
                to: TaskState::Acting,
                reason: format!("r{n}"),
            },
            n as u64,
        )
        .unwrap();
    }
    assert_eq!(l.len(), 5);
    path
}

#[test]
fn an_intact_chain_verifies_entry_by_entry() {
    let dir = tmp("intact");
    let path = write_ledger(&dir);
    let r = verify_chain(&path).unwrap();
    assert!(r.intact(), "{:?}", r.broken);
    assert_eq!(r.intact_entries, 5);
    assert_eq!(r.entries[0].prev, GENESIS_PREV);
    assert_eq!(r.entries[1].prev, r.entries[0].hash);
    // Events round-trip through kind + payload.
    let e = Event::from_kind_payload(&r.entries[0].kind, &r.entries[0].payload).unwrap();
    assert_eq!(e, genesis());
}

#[test]
fn changing_any_byte_of_an_entry_breaks_the_chain_there() {
    let dir = tmp("tamper");
    let path = write_ledger(&dir);
    let original = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = original.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let tampered_line = line.replacen("\"r", "\"R", 1);
        if tampered_line == *line {
            continue;
        }
        let mut all = lines.clone();
        all[i] = &tampered_line;
        std::fs::write(&path, all.join("\n") + "\n").unwrap();
        let r = verify_chain(&path).unwrap();
        assert_eq!(
            r.broken.as_ref().map(|b| b.0),
            Some(i as u64),
            "entry {i}: {:?}",
            r.broken
        );
    }
}

#[test]
fn removing_or_reordering_entries_is_detected() {
    let dir = tmp("reorder");
    let path = write_ledger(&dir);
    let original = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = original.lines().collect();
    lines.remove(2);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let r = verify_chain(&path).unwrap();
    assert_eq!(r.broken.unwrap().0, 2);
    let mut lines: Vec<&str> = original.lines().collect();
    lines.swap(1, 2);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    assert_eq!(verify_chain(&path).unwrap().broken.unwrap().0, 1);
}

#[test]
fn a_recomputed_entry_still_breaks_the_next_link() {
    // An attacker who edits entry 2 and recomputes its hash breaks entry 3's `prev`.
    let dir = tmp("recompute");
    let path = write_ledger(&dir);
    let original = std::fs::read_to_string(&path).unwrap();
    let mut entries: Vec<LedgerEntry> = original
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    entries[2].payload["reason"] = "forged".into();
    let body = serde_json::json!({
        "seq": entries[2].seq, "prev": entries[2].prev, "kind": entries[2].kind,
        "payload": entries[2].payload, "at": entries[2].at
    });
    entries[2].hash = loop_protocol::hash::canonical_sha256(&body).unwrap();
    let text: String = entries
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    std::fs::write(&path, text).unwrap();
    let r = verify_chain(&path).unwrap();
    assert_eq!(
        r.broken.unwrap(),
        (
            3,
            "its `prev` does not match the previous entry's hash".to_string()
        )
    );
}

#[test]
fn canonical_json_matches_rfc8785_examples() {
    // RFC 8785 §3.2.2 / appendix examples: property order by UTF-16 code units and number forms.
    let v: serde_json::Value = serde_json::from_str(
        r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}"#,
    )
    .unwrap();
    let got = String::from_utf8(loop_protocol::hash::canonical_json(&v).unwrap()).unwrap();
    assert_eq!(
        got,
        r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
    );
    let sorted: serde_json::Value = serde_json::from_str(
        r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#,
    )
    .unwrap();
    let got = String::from_utf8(loop_protocol::hash::canonical_json(&sorted).unwrap()).unwrap();
    let order: Vec<&str> = [
        "\\r",
        "1",
        "\u{80}",
        "\u{f6}",
        "\u{20ac}",
        "\u{1f600}",
        "\u{fb33}",
    ]
    .to_vec();
    let mut last = 0;
    for k in order {
        let pos = got.find(&format!("\"{k}\":")).unwrap();
        assert!(pos >= last, "key {k:?} out of order in {got}");
        last = pos;
    }
}

#[test]
fn duplicated_and_truncated_ledgers_are_detected() {
    let dir = tmp("dup");
    let path = write_ledger(&dir);
    let original = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = original.lines().collect();
    let mut dup = lines.clone();
    dup.insert(3, lines[2]);
    std::fs::write(&path, dup.join("\n") + "\n").unwrap();
    assert_eq!(verify_chain(&path).unwrap().broken.unwrap().0, 3);
    // Truncation keeps a valid prefix: the chain holds, but it is shorter,
    // which the receipt's recorded length and head expose.
    std::fs::write(&path, lines[..3].join("\n") + "\n").unwrap();
    let r = verify_chain(&path).unwrap();
    assert!(r.intact());
    assert_eq!(r.intact_entries, 3);
    // A line cut in the middle is not an entry.
    let cut = &original[..original.len() - 20];
    std::fs::write(&path, cut).unwrap();
    let r = verify_chain(&path).unwrap();
    assert_eq!(r.broken.unwrap().0, 4);
}

#[test]
fn canonical_numbers_match_the_rfc8785_appendix_b_vectors() {
    // IEEE 754 bit patterns and their JCS serialisations, RFC 8785 Appendix B.
    let vectors: &[(u64, &str)] = &[
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
    ];
    for (bits, want) in vectors {
        let v = serde_json::Value::from(f64::from_bits(*bits));
        let got = String::from_utf8(loop_protocol::hash::canonical_json(&v).unwrap()).unwrap();
        assert_eq!(&got, want, "bits {bits:#018x}");
    }
}

#[test]
fn a_ledger_reads_back_what_it_wrote_and_refuses_a_file_changed_under_it() {
    let dir = tmp("written");
    let path = dir.join("t.ledger.jsonl");
    let mut l = FileLedger::create(&path).unwrap();
    l.defer_sync();
    let first = l.append(&genesis(), 0).unwrap();
    let second = l
        .append(
            &Event::Transition {
                n: 1,
                from: TaskState::Pending,
                to: TaskState::Planning,
                reason: "moved on".into(),
            },
            1,
        )
        .unwrap();
    assert_eq!(l.written().unwrap(), vec![first, second]);
    // One byte of a payload changed on disk: its hash no longer holds.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("moved on", "moved in", 1)).unwrap();
    let e = l.written().unwrap_err().to_string();
    assert!(e.contains("entry 1 does not continue the chain"), "{e}");
    // A file cut short is not the ledger's either.
    let first_line = text.lines().next().unwrap();
    std::fs::write(&path, format!("{first_line}\n")).unwrap();
    let e = l.written().unwrap_err().to_string();
    assert!(e.contains("holds 1 entries"), "{e}");
}
