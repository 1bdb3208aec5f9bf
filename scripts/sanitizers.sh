#!/usr/bin/env bash
# Runs the Rust core's tests under ThreadSanitizer and Miri, and a test binary under valgrind
# (docs/reliability.md says what each covers). Not part of CI: it needs the nightly toolchain with
# rust-src and miri (installed here with rustup if missing) and takes several minutes.
#   bash scripts/sanitizers.sh [tsan|miri|valgrind]...   (default: all three)
set -uo pipefail
cd "$(dirname "$0")/.."
want=("${@:-tsan miri valgrind}")
want=" ${want[*]} "
status=0
target=x86_64-unknown-linux-gnu

if [[ $want == *" tsan "* ]]; then
  rustup component add rust-src --toolchain nightly >/dev/null
  echo "== ThreadSanitizer: unit tests, fuzz suite and threaded ring test of crates/framebus (std rebuilt with TSan)"
  for what in --lib "--test fuzz_header" "--test threads_ring"; do
    # shellcheck disable=SC2086
    RUSTFLAGS="-Zsanitizer=thread" TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0" FRAMEBUS_FUZZ_CASES=16 \
      CARGO_TARGET_DIR=target/tsan cargo +nightly test -q -Zbuild-std --target $target -p framebus $what || status=1
  done
fi

if [[ $want == *" miri "* ]]; then
  rustup component add miri rust-src --toolchain nightly >/dev/null
  # The lock test that times a 50 ms wait against a 150 ms sleep is skipped: Miri runs it too
  # slowly to keep that order.
  echo "== Miri: unit tests without shared memory (Miri cannot shm_open or mmap a file)"
  MIRIFLAGS="-Zmiri-disable-isolation" CARGO_TARGET_DIR=target/miri cargo +nightly miri test -q -p framebus --lib -- \
    ring::layout ring::spec shm::name sync:: process pipe::queue --skip other_thread_times_out_then_gets_it || status=1
fi

if [[ $want == *" valgrind "* ]]; then
  if command -v valgrind >/dev/null; then
    echo "== valgrind memcheck: unit tests, fuzz suite and threaded ring test of the core (debug build)"
    CARGO_TARGET_DIR=target/valgrind cargo test -q -p framebus --lib --tests --no-run 2>/dev/null
    for bin in $(find target/valgrind/debug/deps -maxdepth 1 -type f -executable \( -name 'framebus-*' -o -name 'fuzz_header-*' -o -name 'threads_ring-*' \)); do
      FRAMEBUS_FUZZ_CASES=8 FRAMEBUS_THREAD_FRAMES=50 valgrind -q --error-exitcode=99 --leak-check=no "$bin" --test-threads=1 -q || status=1
    done
  else
    echo "valgrind not installed: apt-get install valgrind"
  fi
fi
exit $status
