#!/usr/bin/env bash
# Installs framebus with its test extra into ./.venv and runs the whole test suite:
# the Rust core's tests (unit + multi-process) and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
cargo test -p framebus --release -q
.venv/bin/python -m pytest -q "$@"
