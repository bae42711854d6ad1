#!/usr/bin/env bash
# Build (once) the venv with Selenium, from PyPI, that the console's
# browser test drives headless Chromium with (Debian's `chromium` and
# `chromium-driver`, which scripts/test.sh installs). Cached under
# ${XDG_CACHE_HOME:-~/.cache}/loop-engine. Prints the venv path.
set -euo pipefail

version=4.51.0
cache="${XDG_CACHE_HOME:-$HOME/.cache}/loop-engine"
venv="$cache/selenium-$version"
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)

if [ ! -f "$venv/.loop-ready" ]; then
  echo "installing Selenium $version in $venv (once)" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --no-cache-dir "selenium==$version" >&2
  touch "$venv/.loop-ready"
fi
echo "$venv"
