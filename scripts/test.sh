#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need
# (Debian packages; the local model server, built once and cached), then
# runs every test. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
command -v git >/dev/null 2>&1 || need_apt+=(git)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
command -v make >/dev/null 2>&1 || need_apt+=(make)
# The C stack's check-integrity test builds with CMake and runs CTest.
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
# The Go stack's tests (detection, check integrity) run a real `go test`.
command -v go >/dev/null 2>&1 || need_apt+=(golang-go)
# The inline-approval test drives a real terminal.
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
# The receipt interop test and the local model server use venvs.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
# The check-integrity tests run a real pytest, the system interpreter's.
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || need_apt+=(python3-pytest)
# Every doc example is checked against the JSON Schemas (scripts/check-schemas.py).
/usr/bin/python3 -c 'import jsonschema' >/dev/null 2>&1 || need_apt+=(python3-jsonschema)
/usr/bin/python3 -c 'import yaml' >/dev/null 2>&1 || need_apt+=(python3-yaml)
# The console's browser test drives headless Chromium through chromedriver.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
# The store tests run against a real PostgreSQL; the queue tests start
# redis-server processes of their own.
command -v pg_ctlcluster >/dev/null 2>&1 || need_apt+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
# The TLS tests make their certificates with openssl.
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
# The MCP tool tests run real MCP servers from the npm registry on Node.js.
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}"
fi

# The real OpenAI-compatible server the provider tests run against.
LOOP_LLAMA_VENV=$(scripts/local-model.sh)
export LOOP_LLAMA_VENV
export LOOP_REQUIRE_LOCAL_MODEL=1
# Schemathesis, which the API test runs against `loop serve`.
LOOP_SCHEMATHESIS_VENV=$(scripts/schemathesis.sh)
export LOOP_SCHEMATHESIS_VENV
# The `mcp` package, whose client drives `loop mcp` (stdio and HTTP).
LOOP_MCP_VENV=$(scripts/mcp-venv.sh)
export LOOP_MCP_VENV
# The MCP servers a task's tests use (server-filesystem, server-everything).
LOOP_MCP_SERVERS=$(scripts/mcp-servers.sh)
export LOOP_MCP_SERVERS
# Selenium, which drives Chromium through the console.
LOOP_BROWSER_VENV=$(scripts/browser-venv.sh)
export LOOP_BROWSER_VENV

# actionlint and action-validator, for the GitHub Action (action.yml).
LOOP_ACTION_LINT=$(scripts/action-lint.sh)
export LOOP_ACTION_LINT

# check-jsonschema and kubernetes-validate, for the deployment files.
LOOP_DEPLOY_VENV=$(scripts/deploy-venv.sh)
export LOOP_DEPLOY_VENV
# PostgreSQL on 127.0.0.1, for the store conformance suite.
LOOP_TEST_POSTGRES_URL=$(scripts/services.sh)
export LOOP_TEST_POSTGRES_URL
# The CA its TLS certificate is signed by (made by services.sh).
LOOP_TEST_POSTGRES_CA=$(ls -d /etc/postgresql/*/main/loop-tests-tls | sort -V | tail -1)/ca.pem
export LOOP_TEST_POSTGRES_CA
export LOOP_REQUIRE_SERVICES=1

# The crash and gate-failure tests need the fault-injection switches.
cargo test --workspace --locked --features loop-cli/fault-injection "$@"

# scripts/bench.sh still runs end to end: a quick smoke run on the debug
# binary (small sizes, few repetitions; its figures are not the ones to
# quote — docs/benchmarks.md comes from a full run). Every section must be
# there and measured, the scale-out one included.
target_dir=${CARGO_TARGET_DIR:-target}
bash scripts/bench.sh --quick --loop "$target_dir/debug/loop" --out "$target_dir/bench-quick.md"
for section in "## Sandbox:" "## A flood of output" "## Verification snapshots" \
  "## The runtime's cost per step" "## Concurrent tasks" "## Receipts at" \
  "## Tasks through PostgreSQL"; do
  grep -qF "$section" "$target_dir/bench-quick.md" || { echo "bench smoke: no \"$section\" section" >&2; exit 1; }
done
if grep -q "Not measured" "$target_dir/bench-quick.md"; then
  echo "bench smoke: a section was not measured:" >&2
  grep "Not measured" "$target_dir/bench-quick.md" >&2
  exit 1
fi
