#!/usr/bin/env bash
# The runtime's cost per step: scripted `write_file` steps (each rewrites
# one file, so the change stays one line and no gate refuses it), SQLite
# store, in a fresh project each run. Per-step time is the difference
# between a LONG-step and a SHORT-step run divided by the extra steps, so
# start-up, baseline and verification cancel out; the syscalls per step
# are counted the same way with `strace -f -c`. Two builds side by side.
# Usage: scripts/bench-steps.sh OLD_LOOP NEW_LOOP [RUNS] [LONG] [SHORT]
#        (defaults 5, 400, 20)
set -euo pipefail
old=$(realpath "$1")
new=$(realpath "$2")
runs=${3:-5}
long=${4:-400}
short=${5:-20}
command -v strace >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

script() {
  local n=$1 out=$2
  echo "turns:" >"$out"
  for i in $(seq 1 "$n"); do
    printf '  - calls:\n      - {tool: write_file, args: {path: a.txt, content: "v%d\\n"}}\n' "$i" >>"$out"
  done
  printf '  - calls:\n      - {tool: finish, args: {summary: done}}\n' >>"$out"
}
script "$long" "$dir/long.yaml"
script "$short" "$dir/short.yaml"

# One run of BIN with SCRIPT in a fresh project; prints its wall seconds.
run_once() {
  local bin=$1 yaml=$2 p
  p=$(mktemp -d "$dir/p.XXXXXX")
  local t0 t1
  t0=$(date +%s.%N)
  "$bin" run "rewrite a.txt" --check "test -f a.txt" --model "scripted:$yaml" \
    --max-steps $((long + 10)) --max-tokens 100000000 --project "$p" >/dev/null 2>&1 || true
  t1=$(date +%s.%N)
  steps=$("$bin" status last --json --project "$p" 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["used"]["steps"])')
  rm -rf "$p"
  echo "$t0 $t1 $steps"
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# Syscalls of one run, by name: "name count" lines.
syscalls() {
  local bin=$1 yaml=$2 p
  p=$(mktemp -d "$dir/p.XXXXXX")
  strace -f -c -o "$dir/strace.txt" "$bin" run "rewrite a.txt" --check "test -f a.txt" \
    --model "scripted:$yaml" --max-steps $((long + 10)) --max-tokens 100000000 \
    --project "$p" >/dev/null 2>&1 || true
  rm -rf "$p"
  # Columns: % time, seconds, usecs/call, calls, [errors], syscall.
  awk 'NF >= 5 && $4 ~ /^[0-9]+$/ && $NF != "total" {print $NF, $4}' "$dir/strace.txt"
}

echo "- $(date -u +%Y-%m-%d), $(uname -sr), $(nproc) cores, $(id -un); $long vs $short write_file steps, median of $runs"
echo
echo "| build | ms per step | fsync+fdatasync per step | statx per step | openat per step | write/pwrite per step | syscalls per step |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for bin in "$old" "$new"; do
  per=()
  for _ in $(seq 1 "$runs"); do
    read -r a0 a1 as < <(run_once "$bin" "$dir/long.yaml")
    read -r b0 b1 bs < <(run_once "$bin" "$dir/short.yaml")
    if [ "$as" -le "$bs" ]; then
      echo "the long run took $as steps, the short $bs: no difference to measure" >&2
      exit 1
    fi
    per+=("$(echo "(($a1 - $a0) - ($b1 - $b0)) * 1000 / ($as - $bs)" | bc -l)")
  done
  ms=$(printf '%s\n' "${per[@]}" | median)
  syscalls "$bin" "$dir/long.yaml" >"$dir/long.sc"
  syscalls "$bin" "$dir/short.yaml" >"$dir/short.sc"
  extra=$((long - short))
  count() {
    local names=$1
    python3 - "$dir/long.sc" "$dir/short.sc" "$extra" "$names" <<'PY'
import sys
def load(p):
    d = {}
    for line in open(p):
        k, v = line.split()
        d[k] = int(v)
    return d
a, b, n, names = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
keys = set(a) | set(b) if names == "*" else names.split(",")
print(f"{sum(a.get(k, 0) - b.get(k, 0) for k in keys) / n:.1f}")
PY
  }
  printf '| %s | %.2f | %s | %s | %s | %s | %s |\n' "$bin" "$ms" \
    "$(count fsync,fdatasync)" "$(count statx,newfstatat,fstat,lstat,stat)" "$(count openat,open)" \
    "$(count write,pwrite64,writev)" "$(count '*')"
done
