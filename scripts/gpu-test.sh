#!/usr/bin/env bash
# The GPU checks, run from the repository root on a machine with a CUDA GPU, Python 3.12,
# torch, CuPy and pytest (no Rust, no network): framebus comes from the wheels in .whl/ that
# scripts/gpu-wheels.sh made elsewhere. Steps, each with its own time limit (7 minutes in all):
#   1. install the wheels into /tmp/site          4. pyshmem 1.4's GPU tests through framebus.pyshmem
#   2. the environment (nvidia-smi, versions,     5. framebus bench W10 --json
#      framebus.gpu_info())
#   3. the real-door tests (tests/test_gpu_real.py) and the torch <-> CuPy exchange
# A failed step does not stop the others; the exit status is 1 when any failed (also when there is
# no GPU here: the environment step fails then, and the others skip). The log and
# W10's JSON go to $OUT when it is set (else gpu-test-out/): gpu-test.log, w10.json.
#
#   bash scripts/gpu-test.sh            GPU_TEST_QUICK=1 bash scripts/gpu-test.sh  (W10 --quick)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUTDIR=${OUT:-gpu-test-out}
mkdir -p "$OUTDIR"
LOG="$OUTDIR/gpu-test.log"
: >"$LOG"
export PYTHONUNBUFFERED=1
failed=()
t_start=$(date +%s)
TOTAL=420  # seconds for the whole run

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

real_door() {
  if [ ! -f tests/test_gpu_real.py ]; then echo "tests/test_gpu_real.py is not in this checkout"; return 1; fi
  "$PY" -m pytest -q -p no:cacheprovider tests/test_gpu_real.py
}

# framebus from /tmp/site, the benchmark suite from the checkout, pyshmem's sdist from .whl/.
export PYTHONPATH="/tmp/site:$PWD/benches${PYTHONPATH:+:$PYTHONPATH}"
export FRAMEBUS_PYSHMEM_SDIST_CACHE="$PWD/.whl"
unset FRAMEBUS_CUDA

w10_args=(--json "$OUTDIR/w10.json")
if [ "${GPU_TEST_QUICK:-0}" = 1 ]; then w10_args+=(--quick); fi

# The shell functions above run under timeout in a child bash.
export PY
export -f install environment real_door
step install 25 bash -c install
step environment 15 bash -c environment
step "real-door tests" 80 bash -c real_door
step "torch <-> CuPy exchange" 50 "$PY" scripts/gpu_exchange.py
step "pyshmem GPU tests via framebus.pyshmem" 110 "$PY" tests/pyshmem_upstream.py --gpu
# W10 gets what is left of the 7 minutes (at most 3), less a margin for its kill and the summary.
left=$(( TOTAL - ($(date +%s) - t_start) - 15 ))
if [ "$left" -gt 180 ]; then left=180; fi
if [ "$left" -lt 30 ]; then left=30; fi
step "bench W10" "$left" "$PY" -m framebus bench W10 "${w10_args[@]}"

say ""
say "=== done in $(( $(date +%s) - t_start )) s; log: $LOG"
if [ ${#failed[@]} -gt 0 ]; then
  say "=== FAILED: ${failed[*]}"
  exit 1
fi
say "=== all steps passed"
