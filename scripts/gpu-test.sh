#!/usr/bin/env bash
# The GPU checks, run from the repository root on a machine with a CUDA GPU, Python 3.12,
# torch, CuPy and pytest (no Rust, no network): framebus comes from the wheels in .whl/ that
# scripts/gpu-wheels.sh made elsewhere. Steps, each with its own time limit (8 minutes in all):
#   1. install the wheels into /tmp/site          5. pyshmem 1.4's GPU tests through framebus.pyshmem
#   2. the environment (nvidia-smi, versions,     6. framebus bench W10 --json (with the bare floor
#      framebus.gpu_info(); framebus doctor)         and the phase-timed hop: FRAMEBUS_TRACE_HOP=1)
#   3. the real-door tests (tests/test_gpu_real.py) 7. W10 again with NVIDIA's MPS, which the
#   4. the torch <-> CuPy exchange                     script starts and stops itself (see below)
# A failed step does not stop the others; the exit status is 1 when any failed (also when there is
# no GPU here: the environment step fails then, and the others skip). The log, W10's JSON and the
# MPS logs go to $OUT when it is set (else gpu-test-out/): gpu-test.log, w10.json, w10-mps.json,
# mps-control.log, mps-server.log.
#
# MPS: step 7 runs when this script runs as root and nvidia-cuda-mps-control is on PATH
# (GPU_TEST_MPS=1 asks for it as another user, GPU_TEST_MPS=0 skips it). It starts a control
# daemon of its own, on pipe and log directories of its own (so no other process on the GPU goes
# through it), runs W10 with CUDA_MPS_PIPE_DIRECTORY pointing there, and stops the daemon, also
# when the run is interrupted. Where MPS already runs for this environment, W10 of step 6 runs
# with it (its notes say so) and step 7 is skipped.
#
#   bash scripts/gpu-test.sh            GPU_TEST_QUICK=1 bash scripts/gpu-test.sh  (W10 --quick)
set -uo pipefail

TOTAL=480  # seconds for the whole run
MPS_DIR=/tmp/framebus-gpu-test-mps  # the pipe directory of the daemon this script starts
MPS_LOG_DIR=/tmp/framebus-gpu-test-mps-log
MPS_PIDS=""  # pids of the control daemon this script started

say() { echo "$*" | tee -a "$LOG"; }

# step NAME SECONDS COMMAND...: runs COMMAND with a time limit, its output into the log.
step() {
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s) rc
  say ""
  say "=== $name (limit ${limit} s): $*"
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    say "=== $name: TIMED OUT after ${limit} s"
    failed+=("$name (timed out)")
  elif [ "$rc" -ne 0 ]; then
    say "=== $name: FAILED (exit status $rc)"
    failed+=("$name")
  else
    say "=== $name: ok ($(( $(date +%s) - t0 )) s)"
  fi
}

install() {
  ls .whl/*.whl >/dev/null 2>&1 || { echo "no wheels in .whl/: run scripts/gpu-wheels.sh first (and carry .whl)"; return 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
}

environment() {
  nvidia-smi || echo "(nvidia-smi failed)"
  "$PY" - <<'EOF'
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
for m in ("torch", "cupy", "numpy", "pytest", "pyshmem", "framebus"):
    try:
        mod = importlib.import_module(m)
        print(f"{m} {getattr(mod, '__version__', '?')} ({getattr(mod, '__file__', '?')})")
    except Exception as exc:
        print(f"{m}: not importable ({type(exc).__name__}: {exc})")
try:
    import torch
    print("torch CUDA", torch.version.cuda, "available:", torch.cuda.is_available(), "devices:", torch.cuda.device_count())
except Exception as exc:
    print("torch CUDA: ?", exc)
EOF
  "$PY" -c 'import framebus; print(framebus.gpu_info())'
  # The steps below skip themselves without a GPU; this step fails then, so the run does too.
  "$PY" - <<'EOF'
import sys
import framebus
info = framebus.gpu_info()
if info["door"] != "cuda" or not info["devices"]:
    sys.exit(f"no GPU for framebus here ({info['error'] or 'door ' + str(info['door'])}): the GPU steps below will skip")
try:
    import torch
except ImportError:
    sys.exit("torch is not installed: the GPU steps below will skip")
if not torch.cuda.is_available():
    sys.exit("torch sees no CUDA device: the GPU steps below will skip")
EOF
}

# framebus doctor's view of this machine (CUDA, CUDA IPC, MPS): for the log; never fails the run.
doctor() {
  timeout --kill-after=5 50 "$PY" -m framebus doctor
  echo "(framebus doctor: exit status $?; for the log only)"
}

real_door() {
  if [ ! -f tests/test_gpu_real.py ]; then echo "tests/test_gpu_real.py is not in this checkout"; return 1; fi
  "$PY" -m pytest -q -p no:cacheprovider tests/test_gpu_real.py
}

# Whether step 7 runs: "yes", or why not.
mps_plan() {
  local want=${GPU_TEST_MPS:-auto}
  if [ "$want" = 0 ]; then echo "GPU_TEST_MPS=0"; return; fi
  if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then echo "nvidia-cuda-mps-control is not on PATH"; return; fi
  if [ "$want" != 1 ] && [ "$(id -u)" != 0 ]; then echo "not root (GPU_TEST_MPS=1 asks for MPS as this user)"; return; fi
  if "$PY" -c 'import sys; from framebus._mps import mps_status; sys.exit(0 if mps_status().control_pipe else 1)' 2>/dev/null; then
    echo "MPS already runs for this environment (W10 above ran with it)"; return
  fi
  echo yes
}

mps_daemons() { pgrep -f nvidia-cuda-mps-control 2>/dev/null | sort; }

# Starts a control daemon on MPS_DIR and waits (10 s at most) for its control pipe.
mps_start() {
  local before after i
  rm -rf "$MPS_DIR" "$MPS_LOG_DIR"
  mkdir -p "$MPS_DIR" "$MPS_LOG_DIR" || return 1
  before=$(mps_daemons)
  CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR CUDA_MPS_LOG_DIRECTORY=$MPS_LOG_DIR nvidia-cuda-mps-control -d || return 1
  for i in $(seq 100); do
    [ -p "$MPS_DIR/control" ] && break
    sleep 0.1
  done
  after=$(mps_daemons)
  MPS_PIDS=$(comm -13 <(echo "$before") <(echo "$after") | xargs)
  say "MPS control daemon started (pid ${MPS_PIDS:-unknown}), pipe directory $MPS_DIR, logs in $MPS_LOG_DIR"
  [ -p "$MPS_DIR/control" ] || { say "no control pipe in $MPS_DIR after 10 s"; return 1; }
}

# Asks the daemon this script started to quit, waits for it (15 s at most, then ends it by its
# pid) and copies the MPS logs to OUTDIR. Safe to call twice.
mps_stop() {
  local pid i alive
  [ -n "$MPS_PIDS" ] || [ -p "$MPS_DIR/control" ] || return 0
  if [ -p "$MPS_DIR/control" ]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR timeout 10 nvidia-cuda-mps-control
  fi
  for i in $(seq 150); do
    alive=""
    for pid in $MPS_PIDS; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
    [ -z "$alive" ] && break
    sleep 0.1
  done
  for pid in $alive; do say "MPS control daemon $pid did not quit within 15 s: ending it"; kill "$pid" 2>/dev/null; done
  [ -f "$MPS_LOG_DIR/control.log" ] && cp "$MPS_LOG_DIR/control.log" "$OUTDIR/mps-control.log"
  [ -f "$MPS_LOG_DIR/server.log" ] && cp "$MPS_LOG_DIR/server.log" "$OUTDIR/mps-server.log"
  say "MPS control daemon stopped"
  MPS_PIDS=""
  rm -rf "$MPS_DIR" "$MPS_LOG_DIR"
}

# W10 through the daemon this script started; the servers it ran are logged afterwards.
w10_mps() {
  CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR CUDA_MPS_LOG_DIRECTORY=$MPS_LOG_DIR "$PY" -m framebus bench W10 --json "$OUTDIR/w10-mps.json" $W10_QUICK
  local rc=$?
  echo "MPS servers (get_server_list): $(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR timeout 5 nvidia-cuda-mps-control | tr '\n' ' ')"
  return $rc
}

main() {
  cd "$(dirname "$0")/.."
  PY=${PYTHON:-python3}
  OUTDIR=${OUT:-gpu-test-out}
  mkdir -p "$OUTDIR"
  LOG="$OUTDIR/gpu-test.log"
  : >"$LOG"
  export PYTHONUNBUFFERED=1
  failed=()
  local t_start=$(date +%s)

  # framebus from /tmp/site, the benchmark suite from the checkout, pyshmem's sdist from .whl/.
  export PYTHONPATH="/tmp/site:$PWD/benches${PYTHONPATH:+:$PYTHONPATH}"
  export FRAMEBUS_PYSHMEM_SDIST_CACHE="$PWD/.whl"
  export FRAMEBUS_TRACE_HOP=1
  unset FRAMEBUS_CUDA

  W10_QUICK=""
  if [ "${GPU_TEST_QUICK:-0}" = 1 ]; then W10_QUICK=--quick; fi

  # The shell functions above run under timeout in a child bash.
  export PY OUTDIR LOG MPS_DIR MPS_LOG_DIR W10_QUICK
  export -f install environment doctor real_door w10_mps
  step install 25 bash -c install
  step environment 15 bash -c environment
  step "framebus doctor" 60 bash -c doctor
  step "real-door tests" 80 bash -c real_door
  step "torch <-> CuPy exchange" 50 "$PY" scripts/gpu_exchange.py
  step "pyshmem GPU tests via framebus.pyshmem" 110 "$PY" tests/pyshmem_upstream.py --gpu

  # W10 gets what is left of the 8 minutes, less a margin for MPS and the summary: all of it
  # (at most 3 minutes) alone, half of it (at most 3 minutes each) when the MPS run follows.
  local plan left per
  plan=$(mps_plan)
  left=$(( TOTAL - ($(date +%s) - t_start) - 40 ))
  per=$left
  if [ "$plan" = yes ]; then per=$(( left / 2 )); fi
  if [ "$per" -gt 180 ]; then per=180; fi
  if [ "$per" -lt 30 ]; then per=30; fi
  step "bench W10" "$per" "$PY" -m framebus bench W10 --json "$OUTDIR/w10.json" $W10_QUICK

  say ""
  if [ "$plan" = yes ]; then
    trap 'mps_stop' EXIT
    trap 'mps_stop; exit 130' INT TERM
    if mps_start; then
      step "bench W10 with MPS" "$per" bash -c w10_mps
    else
      say "=== bench W10 with MPS: FAILED (the MPS control daemon did not start)"
      failed+=("bench W10 with MPS (MPS did not start)")
    fi
    mps_stop
  else
    say "=== bench W10 with MPS: skipped ($plan)"
  fi

  say ""
  say "=== done in $(( $(date +%s) - t_start )) s; log: $LOG"
  if [ ${#failed[@]} -gt 0 ]; then
    say "=== FAILED: ${failed[*]}"
    exit 1
  fi
  say "=== all steps passed"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
