#!/usr/bin/env bash
# What a command's own root costs (issue 12): `loop exec -- true` and
# `loop exec -- python3 -c pass` with two builds side by side in one
# hyperfine run: OLD (the host's root behind Landlock) and NEW (a fresh
# root of overlaid trees, private /tmp, /run and /dev).
# Usage: scripts/bench-root.sh OLD_LOOP NEW_LOOP [RUNS]   (default 200)
# e.g.   git worktree add /tmp/old b8348a1 && (cd /tmp/old && cargo build --release -p loop-cli)
#        cargo build --release -p loop-cli
#        scripts/bench-root.sh /tmp/old/target/release/loop target/release/loop
set -euo pipefail
old=$(realpath "$1")
new=$(realpath "$2")
runs=${3:-200}
command -v hyperfine >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null
ws=$(mktemp -d)
trap 'rm -rf "$ws"' EXIT
echo "- $(date -u +%Y-%m-%d), $(uname -sr), $(nproc) cores, user $(id -un), $(hyperfine --version)"
echo
hyperfine -N -w 20 -r "$runs" --export-markdown "$ws.md" --style none \
  -n "before: host root + Landlock, true" "$old exec --workspace $ws -- true" \
  -n "after: own root, true" "$new exec --workspace $ws -- true" \
  -n "before: python3 -c pass" "$old exec --workspace $ws -- python3 -c pass" \
  -n "after: python3 -c pass" "$new exec --workspace $ws -- python3 -c pass" >/dev/null 2>&1
cat "$ws.md"
rm -f "$ws.md"
