#!/usr/bin/env bash
# `loop serve` under load, two builds side by side in one run (see
# scripts/bench-serve.py for what each phase does and measures).
# Usage: scripts/bench-serve.sh OLD_LOOP NEW_LOOP [SUBMISSIONS]   (default 10000)
# The submissions phase runs on NEW only: OLD started a thread per task at
# once, with no queue, so 10,000 submissions would be 10,000 threads.
set -euo pipefail
old=$(realpath "$1")
new=$(realpath "$2")
n=${3:-10000}
here=$(dirname "$0")
echo "- $(date -u +%Y-%m-%d), $(uname -sr), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, user $(id -un), $(python3 --version)"
echo
echo "| build | streams | errors | stream open p50 / p99 | events delivered | latency p50 | p99 | max | wall | server / client CPU | server RSS |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for b in "$old" "$new"; do
  printf '| %s ' "$(basename "$b")"
  python3 "$here/bench-serve.py" "$b" --phase watch --clients 1000 --tasks 10 --steps 8
done
echo
echo "| build | running tasks | RSS, 1 task | RSS, all | per task beyond the first | threads |"
echo "|---|---|---|---|---|---|"
for b in "$old" "$new"; do
  printf '| %s ' "$(basename "$b")"
  python3 "$here/bench-serve.py" "$b" --phase memory --held 200
done
echo
echo "| build | submissions | errors | accepted/s | POST p50 | POST p99 | all accepted | all ended | outcomes | server RSS |"
echo "|---|---|---|---|---|---|---|---|---|---|"
printf '| %s ' "$(basename "$new")"
python3 "$here/bench-serve.py" "$new" --phase submit --submissions "$n" --concurrency 32
