#!/usr/bin/env bash
# Installs framebus with its test extra into ./.venv and runs the whole test suite:
# lints, the Rust core's tests (unit, loom models, multi-process) and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
cargo clippy -q -p framebus -p framebus-python --all-targets -- -D warnings
cargo test -p framebus --release -q
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p framebus --release -q --lib loom
.venv/bin/python -m pytest -q "$@"
