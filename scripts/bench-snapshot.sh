#!/usr/bin/env bash
# Snapshot cost for verification: a fresh, writable view of the workspace
# plus the start of the first check, for 1k, 10k and 100k files (~10 KB
# each, up to ~1 GB), against `cp -a` and `git worktree add`, in one run.
# Also the seal's manifest (SHA-256 of every file), which verification
# computes once per attempt. Output is Markdown for docs/benchmarks.md.
#
# Usage: scripts/bench-snapshot.sh [SIZES...]   (default: 1000 10000 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000 10000 100000)
command -v hyperfine >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null
cargo build --release --locked -q -p loop-cli
loop_bin="$PWD/target/release/loop"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

echo "- $(date -u +%Y-%m-%d), $(uname -sr), $(nproc) cores, filesystem $(df -T "$root" | awk 'NR==2 {print $2}'), user $(id -un)"
echo
echo "| files (size) | loop exec --overlay -- true (one process) | per check inside the runtime | cp -a | git worktree add | seal manifest (SHA-256 of all files) |"
echo "|---|---|---|---|---|---|"
for n in "${sizes[@]}"; do
  ws="$root/ws-$n"
  mkdir -p "$ws"
  python3 scripts/make-tree.py "$ws" "$n"
  repo="$root/repo-$n"
  cp -a "$ws" "$repo"
  git -C "$repo" init -q && git -C "$repo" add -A && git -C "$repo" -c user.email=b@b -c user.name=b commit -qm base
  size=$(du -sh "$ws" | cut -f1)
  hyperfine -N --warmup 2 --runs 10 --export-json "$root/o.json" \
    "$loop_bin exec --overlay --workspace $ws -- true" >/dev/null
  hyperfine -N --warmup 1 --runs 5 --export-json "$root/r.json" \
    "$loop_bin exec --overlay --workspace $ws --repeat 1 -- true" \
    "$loop_bin exec --overlay --workspace $ws --repeat 21 -- true" >/dev/null
  per_check=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print("%.1f ms" % ((r[1]["median"]-r[0]["median"])/20*1000))' "$root/r.json")
  hyperfine --warmup 1 --runs 3 --prepare "rm -rf $root/copy" --export-json "$root/c.json" \
    "cp -a $ws $root/copy" >/dev/null
  hyperfine --warmup 1 --runs 3 --prepare "git -C $repo worktree remove --force $root/wt 2>/dev/null; git -C $repo worktree prune; rm -rf $root/wt" \
    --export-json "$root/g.json" "git -C $repo worktree add -q --detach $root/wt" >/dev/null
  hyperfine -N --warmup 1 --runs 3 --export-json "$root/m.json" "$loop_bin manifest $ws" >/dev/null
  med() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("%.1f ms" % (r["median"]*1000))' "$1"; }
  echo "| $n ($size) | $(med "$root/o.json") | $per_check | $(med "$root/c.json") | $(med "$root/g.json") | $(med "$root/m.json") |"
  git -C "$repo" worktree remove --force "$root/wt" 2>/dev/null || true
  rm -rf "$ws" "$repo" "$root/copy" "$root/wt"
done
