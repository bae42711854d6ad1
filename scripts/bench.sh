#!/usr/bin/env bash
# Regenerates every table of docs/benchmarks.md in one run on this machine,
# each figure beside its anchor from the same run and its goal (see
# scripts/bench.py for what each section measures).
#
#   scripts/bench.sh                 release build, full sizes, writes docs/benchmarks.md
#   scripts/bench.sh --quick --out F a smoke run with small sizes (used by scripts/test.sh)
#   scripts/bench.sh --loop BIN ...  measure BIN instead of building
#   scripts/bench.sh --only sandbox,receipts ...
#
# Installs what it needs from Debian's packages when missing (hyperfine,
# bubblewrap, GNU time, strace), and where PostgreSQL and redis-server are
# installed it starts PostgreSQL on 127.0.0.1 (scripts/services.sh) for the
# queue section; without them that section says it was not measured.
set -euo pipefail
cd "$(dirname "$0")/.."

loop_bin=""
quick=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --loop) loop_bin=$2; shift 2 ;;
    --quick) quick=1; args+=(--quick); shift ;;
    --out|--only) args+=("$1" "$2"); shift 2 ;;
    *) echo "bench.sh: unknown argument $1 (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done

need=()
command -v hyperfine >/dev/null || need+=(hyperfine)
command -v bwrap >/dev/null || need+=(bubblewrap)
[ -x /usr/bin/time ] || need+=(time)
command -v strace >/dev/null || need+=(strace)
command -v git >/dev/null || need+=(git)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "bench.sh: missing ${need[*]}; install them (apt-get install ${need[*]}) or run as root" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ -z "$loop_bin" ]; then
  cargo build --release --locked -q -p loop-cli
  cargo build --release --locked -q -p loop-receipt --example bench_receipt
  loop_bin=target/release/loop
  receipt_bin=target/release/examples/bench_receipt
else
  # The receipt example from the same profile as the binary given.
  profile=$(basename "$(dirname "$(realpath "$loop_bin")")")
  if [ "$profile" = release ]; then
    cargo build --release --locked -q -p loop-receipt --example bench_receipt
  else
    cargo build --locked -q -p loop-receipt --example bench_receipt
  fi
  receipt_bin=$(dirname "$(realpath "$loop_bin")")/examples/bench_receipt
fi

if [ -z "${LOOP_TEST_POSTGRES_URL:-}" ] && [ "$(id -u)" = 0 ] && [ -d /usr/lib/postgresql ] \
   && command -v redis-server >/dev/null; then
  LOOP_TEST_POSTGRES_URL=$(bash scripts/services.sh)
  export LOOP_TEST_POSTGRES_URL
fi

cmd="scripts/bench.sh"
[ $quick = 1 ] && cmd="scripts/bench.sh --quick"
exec python3 scripts/bench.py --loop "$loop_bin" --receipt-bench "$receipt_bin" --command "$cmd" "${args[@]}"
