#!/usr/bin/env bash
# Regenerates every table of docs/benchmarks.md in one run on this machine,
# each figure beside its anchor from the same run and its goal (see
# scripts/bench.py for what each section measures).
#
#   scripts/bench.sh                 release build, full sizes, writes docs/benchmarks.md
#   scripts/bench.sh --quick --out F a smoke run with small sizes (used by scripts/test.sh)
#   scripts/bench.sh --loop BIN ...  measure BIN instead of building one
#   scripts/bench.sh --only sandbox,receipts --out F
#
# Installs what it needs from Debian's packages when missing (hyperfine,
# bubblewrap, GNU time, strace, git, python3). The queue section runs where
# PostgreSQL and redis-server are installed (bench.py starts PostgreSQL on
# 127.0.0.1 with scripts/services.sh for it) or LOOP_TEST_POSTGRES_URL is
# set; elsewhere it says it was not measured. Exits non-zero when a section
# failed (the report still says what the others measured).
set -euo pipefail
command_line="scripts/bench.sh${*:+ $*}"
loop_bin=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --loop) loop_bin=$(realpath "$2"); shift 2 ;;
    --quick) args+=(--quick); shift ;;
    --out) args+=(--out "$(realpath -m "$2")"); shift 2 ;;
    --only) args+=(--only "$2"); shift 2 ;;
    *) echo "bench.sh: unknown argument $1 (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."

need=()
command -v hyperfine >/dev/null || need+=(hyperfine)
command -v bwrap >/dev/null || need+=(bubblewrap)
[ -x /usr/bin/time ] || need+=(time)
command -v strace >/dev/null || need+=(strace)
command -v git >/dev/null || need+=(git)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "bench.sh: missing ${need[*]}: install them (apt-get install ${need[*]}) or run as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "bench.sh: cargo is not on PATH (the Rust toolchain builds what is measured)" >&2; exit 1; }

target_dir=${CARGO_TARGET_DIR:-target}
if [ -z "$loop_bin" ]; then
  cargo build --release --locked -q -p loop-cli
  loop_bin=$(realpath "$target_dir/release/loop")
fi
# The receipt example, from the same profile as the binary measured.
case "$loop_bin" in
  */release/*) profile=release; cargo build --release --locked -q -p loop-receipt --example bench_receipt ;;
  *) profile=debug; cargo build --locked -q -p loop-receipt --example bench_receipt ;;
esac
receipt_bin="$target_dir/$profile/examples/bench_receipt"

exec python3 scripts/bench.py --loop "$loop_bin" --receipt-bench "$receipt_bin" --command "$command_line" "${args[@]}"
