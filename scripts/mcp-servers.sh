#!/usr/bin/env bash
# Install (once) the MCP servers from the npm registry that the MCP tool
# tests give a task: @modelcontextprotocol/server-filesystem and
# @modelcontextprotocol/server-everything, at pinned versions, with the
# machine's Node.js (Debian's `nodejs`, which scripts/test.sh installs).
# Cached under ${XDG_CACHE_HOME:-~/.cache}/loop-engine. Prints the
# directory whose node_modules holds them.
set -euo pipefail

filesystem=2026.8.31
everything=2026.8.31
cache="${XDG_CACHE_HOME:-$HOME/.cache}/loop-engine"
dir="$cache/mcp-servers-$filesystem-$everything"

if [ ! -f "$dir/.loop-ready" ]; then
  echo "installing the MCP servers in $dir (once)" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  (cd "$dir" && npm install --no-audit --no-fund --no-save --loglevel=error \
    "@modelcontextprotocol/server-filesystem@$filesystem" \
    "@modelcontextprotocol/server-everything@$everything" >&2)
  touch "$dir/.loop-ready"
fi
echo "$dir"
