#!/usr/bin/env bash
# Build (once) the venv with Schemathesis, from PyPI, that the API test
# runs against `loop serve`'s /openapi.json. Cached under
# ${XDG_CACHE_HOME:-~/.cache}/loop-engine; a finished build leaves a
# marker. Prints the venv path.
set -euo pipefail

version=4.32.5
cache="${XDG_CACHE_HOME:-$HOME/.cache}/loop-engine"
venv="$cache/schemathesis-$version"
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)

if [ ! -f "$venv/.loop-ready" ]; then
  echo "installing Schemathesis $version in $venv (once)" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --no-cache-dir "schemathesis==$version" >&2
  touch "$venv/.loop-ready"
fi
echo "$venv"
