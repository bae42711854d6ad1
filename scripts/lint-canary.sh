#!/usr/bin/env bash
# The lint's own test: clippy, run with the project's clippy.toml over
# scripts/lint-canary, must refuse every read and write marked `// banned`
# there (and nothing else). Run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
want=$(grep -c '; // banned$' scripts/lint-canary/src/lib.rs)
out=$(CLIPPY_CONF_DIR="$root" CARGO_TARGET_DIR="$root/target/lint-canary" \
  cargo clippy --quiet --manifest-path scripts/lint-canary/Cargo.toml --message-format=short 2>&1 || true)
got=$(grep -c 'use of a disallowed method' <<<"$out" || true)
lines=$(grep 'use of a disallowed method' <<<"$out" | sed -E 's/^[^:]+:([0-9]+):.*/\1/' | sort -n | uniq)
marked=$(grep -n '; // banned$' scripts/lint-canary/src/lib.rs | cut -d: -f1 | sort -n)
if [[ "$got" != "$want" || "$lines" != "$marked" ]]; then
  echo "lint canary: clippy refused $got of the $want banned uses" >&2
  diff <(echo "$marked") <(echo "$lines") >&2 || true
  echo "$out" >&2
  exit 1
fi
echo "lint canary: clippy refused all $want banned reads and writes, and allowed the one with a reason"
