#!/usr/bin/env bash
# Measures the sandbox's cost per command, layer by layer, against a bare
# spawn and against bubblewrap with equivalent flags, all in one hyperfine
# run; then the runtime's peak RSS during a 1 GiB output flood and the
# kill-to-reap latency after a timeout. Results go to stdout as Markdown
# (paste them into docs/benchmarks.md with the date and machine).
#
# Usage: scripts/bench-sandbox.sh [RUNS]   (default 300)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-300}

need=()
command -v hyperfine >/dev/null || need+=(hyperfine)
command -v bwrap >/dev/null || need+=(bubblewrap)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

cargo build --release --locked -q -p loop-cli
loop_bin="$PWD/target/release/loop"
ws=$(mktemp -d)
trap 'rm -rf "$ws"' EXIT
cd "$ws"

echo "## Machine"
echo
echo "- $(date -u +%Y-%m-%d), $(uname -sr), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), user $(id -un)"
echo "- $("$loop_bin" --version), $(bwrap --version), $(hyperfine --version)"
echo

echo "## Spawn cost, layer by layer (hyperfine, $runs runs each, warm)"
echo
off_all="--without namespaces --without landlock --without seccomp --without cgroups"
hyperfine -N --warmup 30 --runs "$runs" --export-markdown "$ws/spawn.md" \
  -n 'bare spawn: true' 'true' \
  -n 'loop exec: process group + rlimits + env scrub' "$loop_bin exec $off_all -- true" \
  -n '+ namespaces (user, pid, mount, net; fresh /proc; lo)' "$loop_bin exec --without landlock --without seccomp --without cgroups -- true" \
  -n '+ Landlock' "$loop_bin exec --without seccomp --without cgroups -- true" \
  -n '+ seccomp (= bwrap-equivalent isolation)' "$loop_bin exec --without cgroups -- true" \
  -n '+ memory/pids cgroups (full isolation)' "$loop_bin exec -- true" \
  -n 'bwrap --unshare-pid --unshare-net --die-with-parent, ro root, rw bind' \
     "bwrap --unshare-user --unshare-pid --unshare-net --die-with-parent --ro-bind / / --bind $ws $ws --proc /proc --dev /dev true" \
  >/dev/null
cat "$ws/spawn.md"
echo

echo "## Marginal cost per command inside one runtime (--repeat 201 minus --repeat 1, /200)"
echo
echo "| layers | per command |"
echo "|---|---|"
per_cmd() {
  local one many
  one=$(hyperfine -N --warmup 3 --runs 10 --export-json "$ws/r1.json" "$loop_bin exec $1 --repeat 1 -- true" >/dev/null; python3 -c 'import json; print(json.load(open("'"$ws"'/r1.json"))["results"][0]["median"])')
  many=$(hyperfine -N --warmup 1 --runs 5 --export-json "$ws/r2.json" "$loop_bin exec $1 --repeat 201 -- true" >/dev/null; python3 -c 'import json; print(json.load(open("'"$ws"'/r2.json"))["results"][0]["median"])')
  python3 -c "print('%.2f ms' % ((float('$many') - float('$one')) / 200 * 1000))"
}
echo "| process group + rlimits + env scrub | $(per_cmd "$off_all") |"
echo "| + namespaces | $(per_cmd "--without landlock --without seccomp --without cgroups") |"
echo "| + Landlock | $(per_cmd "--without seccomp --without cgroups") |"
echo "| + seccomp | $(per_cmd "--without cgroups") |"
echo "| + cgroups (full) | $(per_cmd "") |"
echo

echo "## Where the time goes in one \`loop exec -- true\` (LOOP_LOG=loop_sandbox::phases=debug, median of 50)"
echo
for _ in $(seq 50); do LOOP_LOG=loop_sandbox::phases=debug "$loop_bin" exec -- true 2>&1 >/dev/null; done | python3 -c '
import sys, collections, statistics
t = collections.defaultdict(list)
for line in sys.stdin:
    p = line.split()
    if "sandbox:" in p:
        i = p.index("sandbox:")
        t[p[i + 1]].append(float(p[i + 3]))
print("| phase reached | at (ms, cumulative) |")
print("|---|---|")
for k in ["view", "landlock", "cgroups", "plan", "spawned", "exited", "cleaned"]:
    print("| %s | %.2f |" % (k, statistics.median(t[k])))
'
echo

echo "## Runtime memory during a 1 GiB output flood"
echo
rss=$(/usr/bin/time -f '%M' "$loop_bin" exec --json -- head -c 1073741824 /dev/zero 2>&1 >/dev/null | tail -1)
secs=$( { /usr/bin/time -f '%e' "$loop_bin" exec -- head -c 1073741824 /dev/zero >/dev/null; } 2>&1 | tail -1)
echo "| measure | value |"
echo "|---|---|"
echo "| peak RSS of \`loop exec\` (GNU time %M) | $rss KiB |"
echo "| wall time for 1 GiB through capture + SHA-256 | $secs s |"
echo

echo "## Kill-to-reap after the deadline (\`--timeout 1 -- sleep 30\`, 20 runs)"
echo
for _ in $(seq 20); do
  "$loop_bin" exec --timeout 1 --json -- sleep 30 | python3 -c 'import json,sys; print(json.load(sys.stdin)["duration_ms"] - 1000)'
done | sort -n | awk '{a[NR]=$1} END {printf "| min | median | max |\n|---|---|---|\n| %d ms | %d ms | %d ms |\n", a[1], a[int((NR+1)/2)], a[NR]}'
