#!/usr/bin/env bash
# Build (once) the venv with the validators of the deployment files, from
# PyPI: check-jsonschema (its bundled Compose Specification schema) and
# kubernetes-validate (the Kubernetes API's schemas, bundled). Cached under
# ${XDG_CACHE_HOME:-~/.cache}/loop-engine; a finished build leaves a
# marker. Prints the venv path.
set -euo pipefail

cj=0.39.0
kv=1.37.0
cache="${XDG_CACHE_HOME:-$HOME/.cache}/loop-engine"
venv="$cache/deploy-check-$cj-$kv"
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)

if [ ! -f "$venv/.loop-ready" ]; then
  echo "installing check-jsonschema $cj and kubernetes-validate $kv in $venv (once)" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --no-cache-dir "check-jsonschema==$cj" "kubernetes-validate==$kv" >&2
  touch "$venv/.loop-ready"
fi
echo "$venv"
