#!/usr/bin/env bash
# From the start of a verification attempt to the first check's command
# running, inside `loop run`, for workspaces of 1k, 10k and 100k files
# (~10 KB each): the check is `date +%s%N`, compared with the verifier's
# own start time (LOOP_LOG=loop_verifier=debug). Three runs per size, median printed.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q -p loop-cli
loop_bin="$PWD/target/release/loop"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
printf 'turns:\n  - calls: [{tool: finish, args: {summary: go}}]\n' > "$root/s.yaml"
echo "| files (size) | verification start → first check running (median of 3) | cp -a of the same tree |"
echo "|---|---|---|"
for n in "${@:-1000 10000 100000}"; do
  p="$root/p-$n"
  python3 scripts/make-tree.py "$p" "$n"
  size=$(du -sh "$p" | cut -f1)
  lat=()
  for _ in 1 2 3; do
    out=$(LOOP_LOG=loop_verifier=debug "$loop_bin" run "time the first check" --check 'date +%s%N' \
          --model "scripted:$root/s.yaml" --project "$p" --json 2>"$root/err")
    began=$(grep -o 'began at [0-9]*' "$root/err" | head -1 | awk '{print $3}')
    ran=$(printf '%s\n' "$out" | python3 -c 'import json,sys
for l in sys.stdin:
    e = json.loads(l)
    if e.get("kind") == "verified":
        print(e["report"]["criteria"][0]["checks"][0]["stdout"]["excerpt"].strip()); break')
    lat+=("$(( (ran - began) / 1000 ))")
    rm -rf "$p/.loop"
  done
  med=$(printf '%s\n' "${lat[@]}" | sort -n | sed -n 2p)
  cp_ms=$( { /usr/bin/time -f '%e' cp -a "$p" "$root/copy" >/dev/null; } 2>&1 | tail -1)
  rm -rf "$root/copy" "$p"
  echo "| $n ($size) | $(python3 -c "print('%.1f ms' % ($med / 1000))") | $(python3 -c "print('%.0f ms' % ($cp_ms * 1000))") |"
done
