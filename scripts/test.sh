#!/usr/bin/env bash
# Installs framebus with its test extra into ./.venv and runs the whole test suite:
# lints, the Rust core's tests (unit, loom models, multi-process) and pytest; then builds the
# abi3 manylinux2014 wheel, checks it and smoke-tests it installed in a fresh venv without Rust.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n== %s (%s)\n' "$1" "$(date +%H:%M:%S)"; }
# The hiroz test peer of tests/test_ros2_interop.py (tests/ros2_peer, its own cargo workspace)
# builds in the background, niced, while the steps below run; pytest waits for it. If it does
# not build, those tests skip and show the build log's last lines.
peer_out=$(mktemp)
bash scripts/build-ros2-peer.sh >"$peer_out" 2>&1 &
peer_pid=$!
step "installing framebus and its test extra into .venv (builds the Rust extension)"
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
# The benchmark suite is a package of its own (kept out of framebus's runtime wheel).
.venv/bin/python -m pip install -q --no-deps -e ./benches
# The wheel installs framebus-openfilter.pth (FRAMEBUS_OPENFILTER=1 start-up hook); an editable
# install does not, so put it where the wheel would.
cp python/framebus-openfilter.pth "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
step "installing optional peers from PyPI (openfilter, pyshmem; their tests skip if they do not install)"
.venv/bin/python -m pip install -q "openfilter>=1.5.1" || echo "openfilter did not install: tests/test_openfilter.py will skip"
.venv/bin/python -m pip install -q "pyshmem==1.4.0" || echo "pyshmem did not install: the tests comparing with it will skip"
step "formatting and Python lints (cargo fmt --check, ruff check)"
cargo fmt --all --check
.venv/bin/ruff check .
step "cargo clippy (lints of the core and the bindings)"
cargo clippy -q -p framebus -p framebus-python --all-targets -- -D warnings
step "the core without GPU doors (cargo features cuda and fake-cuda off): builds, and refuses device streams clearly"
cargo check -q -p framebus --no-default-features
cargo test -q -p framebus --no-default-features --test gpu_not_built
step "cargo test: the Rust core's unit, multi-process and property tests"
cargo test -p framebus --release -q
step "loom models of the ring protocol"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p framebus --release -q --lib loom
step "waiting for the ROS 2 test peer (scripts/build-ros2-peer.sh)"
if wait "$peer_pid"; then
    FRAMEBUS_ROS2_PEER="$(tail -n 1 "$peer_out")"
    export FRAMEBUS_ROS2_PEER
    echo "ROS 2 test peer: $FRAMEBUS_ROS2_PEER"
else
    cat "$peer_out"
fi
rm -f "$peer_out"
step "pytest"
.venv/bin/python -m pytest -q "$@"
step "wheel: build the abi3 manylinux2014 wheel (zig from PyPI), check it, smoke-test it installed without Rust"
bash scripts/test-wheels.sh --abi3
