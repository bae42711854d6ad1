//! Benchmark: write a 10,000-entry ledger, then sign and write a receipt
//! over it, then verify it offline (chain entry by entry, digests,
//! signature). Prints the median of 15 runs of each. Used by
//! docs/benchmarks.md: `cargo run --release -p loop-receipt --example bench_receipt`.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loop_protocol::{Event, TaskState};
use loop_receipt::*;
use std::time::Instant;

fn main() {
    let entries: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().unwrap())
        .unwrap_or(10_000);
    let dir = std::env::temp_dir().join(format!("loop-bench-receipt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let contract = loop_protocol::Contract::from_flags("bench", &["true".into()], &[]).unwrap();
    let ledger_path = dir.join("t.ledger.jsonl");
    let mut ledger = FileLedger::create(&ledger_path).unwrap();
    let t = Instant::now();
    ledger
        .append(
            &Event::TaskStarted {
                task_id: "t".into(),
                contract_sha256: contract.sha256().unwrap(),
                limits: contract.limits.clone(),
                contract: Box::new(contract.clone()),
                model: loop_protocol::ModelInfo {
                    provider: "bench".into(),
                    name: "bench".into(),
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
            },
            0,
        )
        .unwrap();
    for n in 1..entries {
        let e = Event::Transition {
            n: n as u32,
            from: TaskState::Planning,
            to: TaskState::Acting,
            reason: format!("step {n}: the model proposed a call"),
        };
        ledger.append(&e, n as u64).unwrap();
    }
    let ledger_ms = t.elapsed().as_secs_f64() * 1000.0;
    let finished = Event::Finished {
        outcome: loop_protocol::Outcome::Lost.record("bench"),
        used: Default::default(),
    };
    ledger.append(&finished, entries as u64).unwrap();
    let key = KeyPair::from_seed([9u8; 32]);
    let receipt = dir.join("t.receipt.json");
    let mut sign_runs = Vec::new();
    let mut verify_runs = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        let bytes = std::fs::read(&ledger_path).unwrap();
        let statement = Statement {
            statement_type: STATEMENT_TYPE.into(),
            subject: vec![subject("t.ledger.jsonl", &bytes)],
            predicate_type: PREDICATE_TYPE.into(),
            predicate: Predicate {
                task_id: "t".into(),
                contract_sha256: contract.sha256().unwrap(),
                contract: contract.clone(),
                outcome: loop_protocol::Outcome::Lost.record("bench"),
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
                    patch: "t.changes.patch".into(),
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
                    model: loop_protocol::ModelInfo {
                        provider: "bench".into(),
                        name: "bench".into(),
                        source_sha256: None,
                        parameters: None,
                    },
                },
                isolation: None,
                network: None,
                setup: None,
                ledger: LedgerRef {
                    name: "t.ledger.jsonl".into(),
                    head: ledger.head().to_string(),
                    length: ledger.len(),
                },
                created_at: "now".into(),
                delegation: None,
                skills: Vec::new(),
            },
        };
        write_envelope(&receipt, &statement, Some(&key)).unwrap();
        sign_runs.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        let report = verify_receipt(&receipt, None, &[key.public()]).unwrap();
        verify_runs.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(
            report.ok(),
            "{:?} {:?} {:?}",
            report.signature,
            report.ledger_problems,
            report.statement_problems
        );
        assert_eq!(report.ledger_entries, entries as u64 + 1);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    println!("ledger entries: {}", entries + 1);
    println!(
        "ledger file: {} bytes; appending all entries (fsync each): {ledger_ms:.0} ms",
        std::fs::metadata(&ledger_path).unwrap().len()
    );
    println!(
        "hash ledger + sign + write receipt: median {:.1} ms",
        median(&mut sign_runs)
    );
    println!(
        "verify (signature, statement, chain entry by entry, digests): median {:.1} ms",
        median(&mut verify_runs)
    );
    // The chain alone, as written and as an older version wrote the same
    // entries (members in the struct's order, so not canonical: each is
    // decoded and canonicalised), side by side.
    let text = std::fs::read_to_string(&ledger_path).unwrap();
    let older_path = dir.join("older.ledger.jsonl");
    let older: String = text
        .lines()
        .map(|l| {
            let e: loop_protocol::LedgerEntry = serde_json::from_str(l).unwrap();
            serde_json::to_string(&e).unwrap() + "\n"
        })
        .collect();
    std::fs::write(&older_path, older).unwrap();
    let (mut stored, mut decoded) = (Vec::new(), Vec::new());
    for _ in 0..15 {
        for (path, runs) in [(&ledger_path, &mut stored), (&older_path, &mut decoded)] {
            let t = Instant::now();
            let chain = verify_chain(path).unwrap();
            runs.push(t.elapsed().as_secs_f64() * 1000.0);
            assert!(chain.intact() && chain.intact_entries == entries as u64 + 1);
        }
    }
    println!(
        "chain alone: stored canonical lines median {:.1} ms; the same entries as older ledgers wrote them (decoded) median {:.1} ms",
        median(&mut stored),
        median(&mut decoded)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
