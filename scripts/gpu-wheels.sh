#!/usr/bin/env bash
# Prepares .whl/ for scripts/gpu-test.sh on a GPU machine that has Python 3.12, torch, CuPy and
# pytest but no Rust, no network and no framebus. Run it here, from anywhere in the checkout:
#   * the framebus wheel for CPython 3.12, built from this checkout (maturin build --release),
#   * pyshmem 1.4.0's wheel and its pure-Python dependency portalocker (NumPy is there already),
#   * pyshmem 1.4.0's sdist (its GPU tests, for tests/pyshmem_upstream.py --gpu).
# .whl/ is ignored by git (the script adds it to .git/info/exclude); name it in the device
# tool's carry list. Needs a Rust toolchain, a CPython 3.12 here and network access to PyPI.
#
#   bash scripts/gpu-wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.whl
PYSHMEM=pyshmem==1.4.0

# Keep .whl/ out of git (the exclude file is shared by every worktree of the repository).
exclude="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"

. scripts/find-python.sh
if ! py312=$(find_python 3.12); then
  echo "gpu-wheels.sh: no CPython 3.12 here (python3.12 on PATH or under pyenv); install one, or build the abi3 wheel (bash scripts/build-wheels.sh --abi3) and copy dist/*abi3*.whl into $OUT/" >&2
  exit 1
fi
PY=${PYTHON:-python3}
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
if ! "$PY" -m maturin --version >/dev/null 2>&1; then
  "$PY" -m pip install -q "maturin>=1.7,<2"
fi

rm -rf "$OUT"
mkdir -p "$OUT"
echo "== framebus wheel for CPython 3.12 ($py312)"
"$PY" -m maturin build --release -i "$py312" -o "$OUT"

echo "== pure-Python wheels for the GPU machine (Python 3.12, manylinux x86_64)"
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d "$OUT" "$PYSHMEM" "portalocker>=3.1"

echo "== pyshmem's sdist (its GPU tests)"
cache="${FRAMEBUS_PYSHMEM_SDIST_CACHE:-$HOME/.cache/framebus/pyshmem-sdist}/pyshmem-1.4.0.tar.gz"
if [ -f "$cache" ]; then
  cp "$cache" "$OUT/"
else
  "$PY" -m pip download -q --no-deps --no-binary=:all: -d "$OUT" "$PYSHMEM"
fi

echo "== $OUT/"
ls -l "$OUT"
du -sh "$OUT"
