#!/usr/bin/env bash
# Regenerate crates/loop-cli/link-order.txt: the functions `loop` runs on
# its everyday paths (a task with a scripted model, its status, logs and
# receipt verified offline, the help), in the order it first runs them.
# The release build hands the list to the linker (crates/loop-cli/build.rs),
# which places those functions together: a run then touches a few
# megabytes of the binary's code instead of pages scattered over all of it
# (the kernel maps 64 KiB around each page a process touches). Names the
# linker no longer finds are skipped, so a stale list costs memory, never
# correctness; re-run this after larger changes and commit the file.
#
# Needs valgrind (callgrind lists every function a run executes).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
if ! command -v valgrind >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
  else
    echo "link-order.sh: needs valgrind (apt-get install valgrind)" >&2
    exit 1
  fi
fi
cargo build --release -q -p loop-cli
loop="$root/target/release/loop"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The peer's three-step loop of the benchmarks (step 2 wrong once).
python3 - "$work" <<'EOF'
import sys
sys.path.insert(0, "scripts")
import bench
open(f"{sys.argv[1]}/task.yaml", "w").write(bench.PEER_TASK)
open(f"{sys.argv[1]}/script.yaml", "w").write(bench.PEER_SCRIPT)
EOF
mkdir "$work/project"
n=0
traced() {
  n=$((n + 1))
  (cd "$work/project" && valgrind -q --tool=callgrind --demangle=no \
    --callgrind-out-file="$work/cg.$n" "$loop" "$@" >/dev/null 2>"$work/err.$n") || {
    echo "link-order.sh: \`loop $*\` failed:" >&2
    cat "$work/err.$n" >&2
    exit 1
  }
}
traced run --task "$work/task.yaml" --model "scripted:$work/script.yaml"
traced status last
traced logs last
traced verify last
traced --help
# A one-shot command in the sandbox: under valgrind its child cannot set
# its limits and stops there, so only the way to it is traced (and a
# failure is expected); that way is what every `loop exec` runs first.
n=$((n + 1))
(cd "$work/project" && valgrind -q --tool=callgrind --demangle=no \
  --callgrind-out-file="$work/cg.$n" "$loop" exec -- true >/dev/null 2>&1) || true
nm --defined-only "$loop" | awk '$2 ~ /[tTwW]/ {print $3}' > "$work/defined"
python3 - "$work" "$root/crates/loop-cli/link-order.txt" <<'EOF'
import glob, re, sys
work, out = sys.argv[1], sys.argv[2]
defined = set(open(f"{work}/defined").read().split())
order, seen = [], set()
# cg.N for each traced command, in order (a forked child writes cg.N too,
# but the parent ends after it and its trace is the one kept).
for path in sorted(glob.glob(f"{work}/cg.*"), key=lambda p: int(p.rsplit(".", 1)[1])):
    for line in open(path):
        m = re.match(r"^c?fn=\(\d+\) (.+)$", line.rstrip("\n"))
        if m and m.group(1) in defined and m.group(1) not in seen:
            seen.add(m.group(1))
            order.append(m.group(1))
open(out, "w").write("\n".join(order) + "\n")
print(f"link-order.sh: {len(order)} functions written to {out}")
EOF
