#!/usr/bin/env bash
# Builds framebus's Linux x86_64 wheels and its sdist into dist/, without Docker:
#   * one abi3 wheel for CPython 3.11 and later (the buffer protocol entered the stable ABI in 3.11),
#   * one wheel per older CPython (3.9, 3.10) for each interpreter found here,
#   * the sdist (maturin sdist),
# all wheels manylinux2014 (glibc 2.17), cross-linked with zig from PyPI (the ziglang package).
# The build tools go into .venv-build (maturin, ziglang, plus auditwheel and pyelftools for
# scripts/check-wheels.py). Needs a Rust toolchain and network access to PyPI.
#
#   bash scripts/build-wheels.sh            everything above
#   bash scripts/build-wheels.sh --abi3     the abi3 wheel only (what scripts/test.sh builds)
set -euo pipefail
cd "$(dirname "$0")/.."
only_abi3=0
for arg in "$@"; do
  case "$arg" in
    --abi3) only_abi3=1 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "build-wheels.sh: unknown option $arg (use --abi3 or nothing)" >&2; exit 2 ;;
  esac
done

if [ "$(uname -m)" != x86_64 ]; then
  echo "build-wheels.sh: builds x86_64 wheels on an x86_64 machine; other architectures come from .github/workflows/wheels.yml" >&2; exit 1
fi
PY=${PYTHON:-python3}
if [ ! -x .venv-build/bin/python ]; then
  "$PY" -m venv .venv-build
fi
.venv-build/bin/python -m pip install -q --upgrade pip
.venv-build/bin/python -m pip install -q "maturin>=1.7,<2" ziglang auditwheel pyelftools
mkdir -p dist
build() { maturin build --release --zig --compatibility manylinux2014 --out dist "$@"; }

# The abi3 wheel needs a CPython >= 3.11 to build with (any one: the wheel serves them all).
. scripts/find-python.sh
abi3_py=""
if "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  abi3_py=$("$PY" -c 'import sys; print(sys.executable)')
else
  abi3_py=$(find_python 3.11 || find_python 3.12 || find_python 3.13 || true)
fi
if [ -z "$abi3_py" ]; then
  echo "build-wheels.sh: no CPython 3.11+ found to build the abi3 wheel with" >&2; exit 1
fi
# maturin finds zig (the ziglang package) and itself here
export PATH="$PWD/.venv-build/bin:$PATH"
echo "== abi3 wheel (CPython 3.11+), built with $abi3_py"
build --features pyo3/abi3-py311 -i "$abi3_py"

if [ "$only_abi3" = 0 ]; then
  for v in 3.9 3.10; do
    if py=$(find_python "$v"); then
      echo "== CPython $v wheel, built with $py"
      build -i "$py"
    else
      echo "== no python$v here: no cp${v/./} wheel (pip builds one from the sdist there)"
    fi
  done
  echo "== sdist"
  maturin sdist --out dist
fi
echo "== dist/"
ls -l dist/
