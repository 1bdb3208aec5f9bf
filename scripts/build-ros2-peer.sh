#!/usr/bin/env bash
# Builds the hiroz test peer of tests/test_ros2_interop.py (tests/ros2_peer, a crate outside the
# framebus workspace) into ${FRAMEBUS_PEER_TARGET:-~/.cache/framebus/ros2-peer}, a target folder
# outside the checkout that reruns reuse, and prints the binary's path. The first build compiles
# hiroz and Zenoh (minutes); a rerun with nothing changed takes about a second. The cargo output
# goes to build.log in that folder, whose last lines the tests show when they skip.
# FRAMEBUS_PEER_NICE (default 15): the niceness of the build, so it yields to other work.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${FRAMEBUS_PEER_TARGET:-$HOME/.cache/framebus/ros2-peer}"
mkdir -p "$target"
log="$target/build.log"
if ! command -v cargo >/dev/null; then
    echo "cargo is not installed: the ROS 2 interop tests will skip" | tee "$log" >&2
    exit 1
fi
start=$(date +%s)
if CARGO_TARGET_DIR="$target" nice -n "${FRAMEBUS_PEER_NICE:-15}" \
    cargo build --locked --manifest-path tests/ros2_peer/Cargo.toml --bin ros2-peer >"$log" 2>&1; then
    echo "built in $(( $(date +%s) - start )) s" >>"$log"
    echo "$target/debug/ros2-peer"
else
    echo "the ROS 2 test peer did not build (the interop tests will skip); last lines of $log:" >&2
    tail -n 15 "$log" >&2
    exit 1
fi
