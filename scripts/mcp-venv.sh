#!/usr/bin/env bash
# Build (once) the venv with the `mcp` package from PyPI, whose client the
# MCP tests drive `loop mcp` with (over stdio and streamable HTTP). Cached
# under ${XDG_CACHE_HOME:-~/.cache}/loop-engine. Prints the venv path.
set -euo pipefail

version=2.3.0
cache="${XDG_CACHE_HOME:-$HOME/.cache}/loop-engine"
venv="$cache/mcp-$version"
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)

if [ ! -f "$venv/.loop-ready" ]; then
  echo "installing mcp $version in $venv (once)" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --no-cache-dir "mcp==$version" >&2
  touch "$venv/.loop-ready"
fi
echo "$venv"
