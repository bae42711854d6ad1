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
        inputs: Vec::new(),
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
    // Decoded from the lines verification checked without decoding.
    let entries = r.entries.to_vec();
    assert_eq!(entries.len(), 5);
    assert_eq!(entries[0].prev, GENESIS_PREV);
    assert_eq!(entries[1].prev, entries[0].hash);
    // Events round-trip through kind + payload.
    let e = Event::from_kind_payload(&entries[0].kind, &entries[0].payload).unwrap();
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

mod tree {
    use super::tmp;
    use crate::*;
    use loop_protocol::ChildRun;
    use loop_protocol::delegation::{self, Authority, DelegatedFrom, Left, Proposal};
    use loop_protocol::{Contract, Event};
    use std::path::{Path, PathBuf};

    fn parent_contract(children: u32) -> Contract {
        let mut c = Contract::from_flags("split it", &["make test".into()], &[]).unwrap();
        c.limits.max_children = children;
        c.limits.max_depth = 1;
        c
    }

    fn model() -> loop_protocol::ModelInfo {
        loop_protocol::ModelInfo {
            provider: "scripted".into(),
            name: "s".into(),
            source_sha256: None,
            parameters: None,
        }
    }

    /// Write task `id`'s ledger (its start, `events`, its end) and its
    /// signed receipt beside it; the receipt's path and SHA-256.
    fn write_task(
        dir: &Path,
        id: &str,
        contract: &Contract,
        events: Vec<Event>,
        delegation: Option<DelegatedFrom>,
        key: &KeyPair,
    ) -> (PathBuf, String) {
        let ledger_name = format!("{id}.ledger.jsonl");
        let mut ledger = FileLedger::create(&dir.join(&ledger_name)).unwrap();
        let start = Event::TaskStarted {
            task_id: id.into(),
            contract_sha256: contract.sha256().unwrap(),
            limits: contract.limits.clone(),
            contract: Box::new(contract.clone()),
            model: model(),
            checker: None,
            runtime: loop_protocol::RuntimeInfo::current(),
            baseline_root: "r".into(),
            setup: None,
            drafting: None,
            guidance: Vec::new(),
            inputs: Vec::new(),
            project_checks: Vec::new(),
            trigger: None,
        };
        let end = Event::Finished {
            outcome: loop_protocol::Outcome::Lost.record("no progress"),
            used: Default::default(),
        };
        for (n, e) in std::iter::once(start)
            .chain(events)
            .chain(std::iter::once(end))
            .enumerate()
        {
            ledger.append(&e, n as u64).unwrap();
        }
        let mut b = ReceiptBuilder::new();
        b.file(
            &ledger_name,
            &std::fs::read(dir.join(&ledger_name)).unwrap(),
        );
        let predicate = Predicate {
            task_id: id.into(),
            contract_sha256: contract.sha256().unwrap(),
            contract: contract.clone(),
            outcome: loop_protocol::Outcome::Lost.record("no progress"),
            verification: None,
            baseline: None,
            check_integrity: Vec::new(),
            artifacts: vec![],
            environments: vec![],
            baseline_root: "r".into(),
            final_root: "r".into(),
            change_set: ChangeSetRecord {
                base_commit: None,
                files: vec![],
                patch: format!("{id}.changes.patch"),
                patch_sha256: String::new(),
                unredacted_patch_sha256: None,
            },
            budgets: Budgets {
                granted: contract.limits.clone(),
                used: Default::default(),
            },
            provenance: Provenance {
                checker: None,
                runtime: loop_protocol::RuntimeInfo::current(),
                model: model(),
            },
            isolation: None,
            network: None,
            setup: None,
            ledger: LedgerRef {
                name: ledger_name,
                head: ledger.head().to_string(),
                length: ledger.len(),
            },
            created_at: "now".into(),
            delegation,
            skills: Vec::new(),
        };
        let path = dir.join(format!("{id}.receipt.json"));
        b.write_signed(predicate, &path, key).unwrap();
        let sha = loop_protocol::hash::sha256_hex(&std::fs::read(&path).unwrap());
        (path, sha)
    }

    fn proposal(path: &str) -> Proposal {
        serde_json::from_value(serde_json::json!({
            "instruction": format!("do {path}"),
            "criteria": [{"id": "c", "text": "c", "checks": [{"run": format!("make -C {path} test")}]}],
            "paths": [path],
            "budget": {"max_steps": 5, "max_tokens": 1000, "timeout_secs": 60},
        }))
        .unwrap()
    }

    fn left() -> Left {
        Left {
            steps: 20,
            tokens: 100_000,
            usd: None,
            secs: 1000,
            children: 2,
        }
    }

    /// A parent with two children, `a` and `b`, each with its receipt.
    fn family(dir: &Path, key: &KeyPair, parent: &Contract) -> PathBuf {
        family_with(dir, key, parent, &|_, _, _| {})
    }

    /// [`family`], child `a`'s contract and own record of its grant
    /// changed by `tweak` before its receipt is signed (and the parent's
    /// record of what it used).
    fn family_with(
        dir: &Path,
        key: &KeyPair,
        parent: &Contract,
        tweak: &dyn Fn(&mut Contract, &mut Authority, &mut loop_protocol::BudgetUse),
    ) -> PathBuf {
        let own = Authority::of_contract(&parent_contract(2));
        let mut events = Vec::new();
        for (n, id) in ["a", "b"].into_iter().enumerate() {
            let p = proposal(&format!("pkg/{id}"));
            let granted = delegation::grant(&own, &left(), &p).unwrap();
            let mut contract =
                delegation::child_contract(&parent_contract(2), &granted, &p).unwrap();
            let mut recorded = granted.clone();
            let mut used = loop_protocol::BudgetUse::default();
            if id == "a" {
                tweak(&mut contract, &mut recorded, &mut used);
            }
            let from = DelegatedFrom {
                parent: "p".into(),
                authority: recorded,
            };
            let (_, sha) = write_task(dir, id, &contract, vec![], Some(from), key);
            events.push(Event::Delegated {
                step: n as u32 + 1,
                call_id: format!("c{n}"),
                child: ChildRun {
                    task_id: id.into(),
                    authority: granted,
                    outcome: "lost".into(),
                    receipt_sha256: Some(sha),
                    used,
                },
            });
        }
        write_task(dir, "p", parent, events, None, key).0
    }

    fn problems(path: &Path, key: &KeyPair) -> Vec<String> {
        let r = verify_receipt(path, None, &[key.public()]).unwrap();
        assert_eq!(
            r.ok(),
            r.tree_problems.is_empty() && r.ledger_problems.is_empty()
        );
        r.tree_problems
    }

    /// The digest a receipt names for its ledger is found in its envelope,
    /// and only the ledger's bytes in the form it was signed over hold.
    #[test]
    fn a_receipt_names_the_digest_of_its_ledgers_own_form() {
        let dir = super::tmp("named-form");
        let key = KeyPair::from_seed([3u8; 32]);
        let (receipt, _) = write_task(&dir, "p", &parent_contract(0), vec![], None, &key);
        let ledger = dir.join("p.ledger.jsonl");
        let bytes = std::fs::read(&ledger).unwrap();
        assert_eq!(
            ledger_digest_named(&std::fs::read(&receipt).unwrap()),
            Some(loop_protocol::hash::sha256_hex(&bytes))
        );
        assert_eq!(ledger_digest_named(b"{}"), None);
        let entries: Vec<loop_protocol::LedgerEntry> = String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ledger_problems = || {
            verify_receipt(&receipt, None, &[key.public()])
                .unwrap()
                .ledger_problems
        };
        FileLedger::continue_in_older_form(&ledger, &entries).unwrap();
        let found = ledger_problems();
        assert!(
            found.iter().any(|p| p.contains("the ledger file's sha256")),
            "{found:?}"
        );
        FileLedger::continue_from(&ledger, &entries).unwrap();
        assert_eq!(ledger_problems(), Vec::<String>::new());
    }

    #[test]
    fn one_turns_grants_beyond_what_the_parent_had_fail_the_tree() {
        // Two children granted 5 steps each in one turn of a parent that
        // had 8 (a runtime that carved wrongly, or a ledger rewritten).
        let dir = tmp("tree-carved");
        let key = KeyPair::from_seed([5u8; 32]);
        let mut parent = parent_contract(2);
        parent.limits.max_steps = 8;
        let own = Authority::of_contract(&parent_contract(2));
        let mut events = Vec::new();
        for (n, id) in ["a", "b"].into_iter().enumerate() {
            let p = proposal(&format!("pkg/{id}"));
            let granted = delegation::grant(&own, &left(), &p).unwrap();
            let contract = delegation::child_contract(&parent_contract(2), &granted, &p).unwrap();
            let from = DelegatedFrom {
                parent: "p".into(),
                authority: granted.clone(),
            };
            let (_, sha) = write_task(&dir, id, &contract, vec![], Some(from), &key);
            events.push(Event::Delegated {
                step: 1,
                call_id: format!("c{n}"),
                child: ChildRun {
                    task_id: id.into(),
                    authority: granted,
                    outcome: "lost".into(),
                    receipt_sha256: Some(sha),
                    used: Default::default(),
                },
            });
        }
        let path = write_task(&dir, "p", &parent, events, None, &key).0;
        let found = problems(&path, &key);
        assert!(
            found
                .iter()
                .any(|p| p == "its turn 1 granted its children 10 steps, more than the 8 it had (with what earlier children used)"),
            "{found:?}"
        );
        // (The same grants in different turns of a parent with room for
        // them hold: `a_receipt_tree_verifies_offline_child_by_child`.)
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_receipt_tree_verifies_offline_child_by_child() {
        let dir = tmp("tree-ok");
        let key = KeyPair::from_seed([3u8; 32]);
        let parent = family(&dir, &key, &parent_contract(2));
        let r = verify_receipt(&parent, None, &[key.public()]).unwrap();
        assert!(r.ok(), "{:?}", r.tree_problems);
        assert_eq!(
            r.children,
            vec![
                ChildCheck {
                    task_id: "a".into(),
                    outcome: "lost".into(),
                    holds: true
                },
                ChildCheck {
                    task_id: "b".into(),
                    outcome: "lost".into(),
                    holds: true
                }
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_byte_changed_in_a_childs_receipt_or_ledger_fails_the_parent_naming_the_child() {
        let key = KeyPair::from_seed([4u8; 32]);
        // The child's receipt.
        let dir = tmp("tree-receipt");
        let parent = family(&dir, &key, &parent_contract(2));
        let child = dir.join("a.receipt.json");
        let mut bytes = std::fs::read(&child).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 1;
        std::fs::write(&child, &bytes).unwrap();
        let p = problems(&parent, &key);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("child a: its receipt's sha256"), "{p:?}");
        let _ = std::fs::remove_dir_all(&dir);
        // The child's ledger.
        let dir = tmp("tree-ledger");
        let parent = family(&dir, &key, &parent_contract(2));
        let ledger = dir.join("b.ledger.jsonl");
        let text = std::fs::read_to_string(&ledger).unwrap();
        std::fs::write(&ledger, text.replacen("no progress", "no pr0gress", 1)).unwrap();
        let p = problems(&parent, &key);
        assert!(
            !p.is_empty() && p.iter().all(|l| l.starts_with("child b: ledger:")),
            "{p:?}"
        );
        // A child's receipt gone.
        std::fs::remove_file(dir.join("a.receipt.json")).unwrap();
        let p = problems(&parent, &key);
        assert!(
            p.iter().any(|l| l.starts_with("child a: cannot read")),
            "{p:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_child_granted_more_than_its_parent_held_fails_the_tree() {
        let key = KeyPair::from_seed([5u8; 32]);
        // The parent's own contract allows no child at all.
        let dir = tmp("tree-wider");
        let parent = family(&dir, &key, &parent_contract(0));
        let p = problems(&parent, &key);
        assert!(
            p.iter().any(|l| l.starts_with(
                "child a: granted more than its parent held: this task may not delegate"
            )),
            "{p:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        // A child whose own record of its grant is wider than its parent's.
        let dir = tmp("tree-record");
        let parent = family_with(&dir, &key, &parent_contract(2), &|_, a, _| {
            a.writable = vec![String::new()]
        });
        assert_eq!(
            problems(&parent, &key),
            vec!["child a: its record of the authority it was granted differs from its parent's"]
        );
        let _ = std::fs::remove_dir_all(&dir);
        // A child whose contract gives it more than it was granted.
        let dir = tmp("tree-contract");
        let parent = family_with(&dir, &key, &parent_contract(2), &|c, _, _| {
            c.limits.max_steps = 50
        });
        let p = problems(&parent, &key);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("child a: its contract claims more than it was granted: max_steps 50"),
            "{p:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        // A child whose steps may each change more lines than its parent's.
        let dir = tmp("tree-diff-lines");
        let parent = family_with(&dir, &key, &parent_contract(2), &|c, _, _| {
            c.limits.max_diff_lines = 10_000
        });
        assert_eq!(
            problems(&parent, &key),
            vec![
                "child a: its contract claims more than it was granted: limits.max_diff_lines `10000, over its parent's 250`: a child keeps every rule of its parent's and gains no exemption"
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_parent_charged_other_than_its_childs_receipt_says_fails_the_tree() {
        let key = KeyPair::from_seed([6u8; 32]);
        let dir = tmp("tree-used");
        // The parent recorded child a as using 3 steps and 900 tokens; a's
        // receipt says none, and the parent's own use (none) cannot hold it.
        let parent = family_with(&dir, &key, &parent_contract(2), &|_, _, u| {
            u.steps = 3;
            u.tokens = 900;
        });
        assert_eq!(
            problems(&parent, &key),
            vec![
                "child a: its receipt says it used 0 steps, 0 tokens, 0 model calls, $0.0000; its parent recorded 3 steps, 900 tokens, 0 model calls, $0.0000",
                "its children used 3 steps, 900 tokens, $0.0000, more than its own record of 0 steps, 0 tokens, $0.0000 holds",
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Each line of `path` rewritten by `f`.
fn rewrite_lines(path: &std::path::Path, f: impl Fn(usize, &str) -> String) {
    let text = std::fs::read_to_string(path).unwrap();
    let out: String = text
        .lines()
        .enumerate()
        .map(|(i, l)| f(i, l) + "\n")
        .collect();
    std::fs::write(path, out).unwrap();
}

/// `from` replaced by `to`, once, in line `at` of `path` (from 0).
fn replace_in_line(path: &std::path::Path, at: usize, from: &str, to: &str) {
    rewrite_lines(path, |i, l| {
        if i == at {
            l.replacen(from, to, 1)
        } else {
            l.to_string()
        }
    });
}

#[test]
fn the_ledgers_own_lines_are_checked_from_their_bytes_with_the_decoders_verdict() {
    let dir = tmp("stored");
    let path = write_ledger(&dir);
    let text = std::fs::read_to_string(&path).unwrap();
    for line in text.lines() {
        // Each line is the canonical form of the entry it holds, and its
        // body's hash read from its bytes is the hash decoding gives.
        let entry: LedgerEntry = serde_json::from_str(line).unwrap();
        let canonical = loop_protocol::hash::canonical_json(&entry).unwrap();
        assert_eq!(line.as_bytes(), &canonical[..]);
        let stored = crate::ledger::stored_for_tests(line.as_bytes()).expect("read from its bytes");
        assert_eq!(stored, entry.hash);
    }
    // The same entries as an older ledger wrote them (members in the
    // struct's order): decoded, they verify the same.
    rewrite_lines(&path, |_, l| {
        let e: LedgerEntry = serde_json::from_str(l).unwrap();
        serde_json::to_string(&e).unwrap()
    });
    let old = verify_chain(&path).unwrap();
    assert!(old.intact(), "{:?}", old.broken);
    assert_eq!((old.intact_entries, old.entries.len()), (5, 5));
    assert!(
        crate::ledger::stored_for_tests(
            std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .next()
                .unwrap()
                .as_bytes()
        )
        .is_none()
    );
    // A space after a colon: not canonical, decoded, still the same entry.
    std::fs::write(&path, &text).unwrap();
    replace_in_line(&path, 2, "\"kind\":", "\"kind\": ");
    assert!(verify_chain(&path).unwrap().intact());
}

#[test]
fn a_change_to_a_stored_line_is_found_whether_or_not_it_stays_canonical() {
    let dir = tmp("stored-tamper");
    let path = write_ledger(&dir);
    let text = std::fs::read_to_string(&path).unwrap();
    // Still canonical, so checked from its bytes: the reason changed.
    replace_in_line(&path, 2, "\"reason\":\"r2\"", "\"reason\":\"r9\"");
    let r = verify_chain(&path).unwrap();
    assert_eq!(
        r.broken.unwrap(),
        (2, "its content does not match its hash".to_string())
    );
    // The sequence number, the link, the kind: each is what the chain
    // checks, from the bytes as from a decoded entry.
    for (from, to, at, why) in [
        (
            "\"seq\":3}",
            "\"seq\":7}",
            3,
            "sequence number 7 where 3 was expected",
        ),
        (
            "\"prev\":\"",
            "\"prev\":\"f",
            1,
            "its `prev` does not match the previous entry's hash",
        ),
    ] {
        std::fs::write(&path, &text).unwrap();
        replace_in_line(&path, at, from, to);
        let r = verify_chain(&path).unwrap();
        assert_eq!(r.broken.unwrap(), (at as u64, why.to_string()), "{from}");
    }
    // A hash member moved out of its canonical place: decoded, and the
    // same entry (it verifies), not a different body.
    std::fs::write(&path, &text).unwrap();
    rewrite_lines(&path, |i, l| {
        if i != 1 {
            return l.to_string();
        }
        let e: LedgerEntry = serde_json::from_str(l).unwrap();
        let mut v = serde_json::to_value(&e).unwrap();
        let hash = v.as_object_mut().unwrap().shift_remove("hash").unwrap();
        v.as_object_mut().unwrap().insert("hash".into(), hash);
        serde_json::to_string(&v).unwrap()
    });
    assert!(verify_chain(&path).unwrap().intact());
}

#[test]
fn a_ledger_is_rewritten_in_the_form_a_receipt_names() {
    let dir = tmp("older-form");
    let path = write_ledger(&dir);
    let text = std::fs::read_to_string(&path).unwrap();
    let entries: Vec<LedgerEntry> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The older form: each entry as serde writes it, the same chain.
    let older = dir.join("older.ledger.jsonl");
    FileLedger::continue_in_older_form(&older, &entries).unwrap();
    let want: String = entries
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    assert_eq!(std::fs::read_to_string(&older).unwrap(), want);
    assert!(verify_chain(&older).unwrap().intact());
    // And the current form, byte for byte what was appended.
    let again = dir.join("again.ledger.jsonl");
    FileLedger::continue_from(&again, &entries).unwrap();
    assert_eq!(std::fs::read_to_string(&again).unwrap(), text);
}
