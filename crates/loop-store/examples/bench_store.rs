//! Benchmark: what durability costs per ledger entry. Appends N entries of
//! a typical size (~600 bytes of payload) to the SQLite store (one
//! transaction each, WAL, synchronous=FULL), and for comparison to a plain
//! file with an fsync per line; then reads them all back, as a resume does.
//! Prints per-entry medians over 5 runs.
//! `cargo run --release -p loop-store --example bench_store [N]`.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loop_protocol::LedgerEntry;
use loop_store::{SqliteStore, Store};
use std::io::Write;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().unwrap())
        .unwrap_or(500);
    let dir = std::env::temp_dir().join(format!("loop-bench-store-{}", std::process::id()));
    let payload = serde_json::json!({
        "step": 3,
        "observation": {"call_id": "t3-c1", "tool": "run_command", "status": "ok",
            "content": "x".repeat(480), "changed": true},
        "workspace_root": "9c352c3af5ade016d7be44091bd22cb37378da6ed609cc82bce0a9dd33dcaec8"
    });
    let (mut store_us, mut file_us, mut read_ms) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..5 {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = SqliteStore::open(&dir.join("loop.db")).unwrap();
        store
            .create_task("t", "c", &serde_json::json!({}), 0)
            .unwrap();
        let t = Instant::now();
        for seq in 0..n {
            let e = LedgerEntry {
                seq,
                prev: format!("{seq:064}"),
                kind: "observed".into(),
                payload: payload.clone(),
                at: "2026-11-29T00:00:00.000Z".into(),
                hash: format!("{:064}", seq + 1),
            };
            store
                .append(
                    "t",
                    &e,
                    Some(loop_store::StoredState::Task(
                        loop_protocol::TaskState::Acting,
                    )),
                    seq,
                )
                .unwrap();
        }
        store_us.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);

        let line = serde_json::to_vec(&payload).unwrap();
        let mut f = std::fs::File::create(dir.join(format!("ledger-{run}.jsonl"))).unwrap();
        let t = Instant::now();
        for _ in 0..n {
            f.write_all(&line).unwrap();
            f.write_all(b"\n").unwrap();
            f.sync_data().unwrap();
        }
        file_us.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);

        let t = Instant::now();
        let all = store.entries("t", 0).unwrap();
        assert_eq!(all.len() as u64, n);
        read_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("entries per run                 {n}");
    println!(
        "store append (commit, fsync)    {:.0} µs/entry",
        median(store_us)
    );
    println!(
        "file append + fsync             {:.0} µs/entry",
        median(file_us)
    );
    println!("read all back (resume)          {:.1} ms", median(read_ms));
}
