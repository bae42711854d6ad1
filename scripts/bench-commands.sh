#!/usr/bin/env bash
# What one run_command costs inside `loop run`, from its intent entry to its
# observation entry in the ledger (millisecond timestamps): the sandbox
# start, the command (`echo I > out.txt`, a one-file effect), and the
# runtime's bookkeeping around it. 20 commands per run, median printed, for
# workspaces of 1k and 10k files (~10 KB each).
# Usage: scripts/bench-commands.sh [LOOP_BINARY...]  (default: this tree's release build)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  cargo build --release --locked -q -p loop-cli
  set -- "$PWD/target/release/loop"
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
{
  echo "turns:"
  for i in $(seq 1 20); do
    echo "  - calls: [{tool: run_command, args: {command: \"echo $i > out.txt\"}}]"
  done
  echo "  - calls: [{tool: finish, args: {summary: done}}]"
} > "$root/s.yaml"
for n in 1000 10000; do
  python3 scripts/make-tree.py "$root/p-$n" "$n"
done
echo "| binary | files | run_command, intent → observed (median of 20) |"
echo "|---|---|---|"
for bin in "$@"; do
  for n in 1000 10000; do
    p="$root/p-$n"
    rm -rf "$p/.loop"
    "$bin" run "bench" --check true --allow-vacuous --max-steps 30 --model "scripted:$root/s.yaml" --project "$p" --json > "$root/out.jsonl"
    ledger=$(ls "$p"/.loop/receipts/*.ledger.jsonl)
    ms=$(python3 - "$ledger" <<'PY'
import json, sys, datetime
def t(s): return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() * 1000
start, d = None, []
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["kind"] == "intent" and e["payload"]["tool"] == "run_command":
        start = t(e["at"])
    elif e["kind"] == "observed" and start is not None:
        d.append(t(e["at"]) - start); start = None
d.sort()
print(f"{d[len(d)//2]:.0f} ms")
PY
)
    echo "| $bin | $n | $ms |"
  done
done
