#!/usr/bin/env bash
# Builds (or reuses) the wheels in dist/, checks them with scripts/check-wheels.py, then installs
# each wheel into a fresh venv for every Python here that it fits and runs tests/wheel_smoke.py
# there with a PATH that holds no Rust toolchain (the venv's bin, /usr/bin, /bin).
#
#   bash scripts/test-wheels.sh                  reuse dist/*.whl if there are any, else build all
#   bash scripts/test-wheels.sh --rebuild        build all first (scripts/build-wheels.sh)
#   bash scripts/test-wheels.sh --abi3           the abi3 wheel only: built fresh, tested with
#                                                python3 if 3.11+ (what scripts/test.sh runs)
#   --python PY (repeatable)                     test with these only: a version (3.12) or an
#                                                interpreter (python3, /path/to/python)
set -euo pipefail
cd "$(dirname "$0")/.."
rebuild=0 abi3=0 pythons=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rebuild) rebuild=1 ;;
    --abi3) abi3=1 ;;
    --python) pythons+=("$2"); shift ;;
    -h|--help) sed -n "2,11p" "$0"; exit 0 ;;
    *) echo "test-wheels.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
step() { printf '\n== %s (%s)\n' "$1" "$(date +%H:%M:%S)"; }

if [ "$abi3" = 1 ]; then
  step "building the abi3 wheel"
  rm -f dist/framebus-*-abi3-*.whl
  bash scripts/build-wheels.sh --abi3
  wheels=(dist/framebus-*-abi3-*.whl)
  # python3 if it is 3.11 or later, else the first CPython 3.11+ found
  if [ ${#pythons[@]} = 0 ]; then
    if python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then pythons=(python3); else pythons=(3.11 3.12 3.13); fi
  fi
else
  if [ "$rebuild" = 1 ] || ! ls dist/framebus-*.whl >/dev/null 2>&1; then
    step "building the wheels and the sdist"
    rm -f dist/framebus-*
    bash scripts/build-wheels.sh
  else
    step "reusing the wheels in dist/ (--rebuild builds them again)"
  fi
  wheels=(dist/framebus-*.whl)
  [ ${#pythons[@]} -gt 0 ] || pythons=(3.9 3.10 3.11 3.12 3.13)
fi

step "checking the wheels (glibc symbol versions, NEEDED libraries, CPU features)"
[ -x .venv-build/bin/python ] || python3 -m venv .venv-build
.venv-build/bin/python -m pip install -q auditwheel pyelftools
.venv-build/bin/python scripts/check-wheels.py "${wheels[@]}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ran=0
. scripts/find-python.sh
for py in "${pythons[@]}"; do
  # a version (3.12) or an interpreter (python3, /path/to/python)
  case "$py" in
    3.*) real=$(find_python "$py") || { echo "(no Python $py here)"; continue; } ;;
    *) real=$("$py" -c 'import sys; print(sys.executable)' 2>/dev/null) || { echo "(no working $py here)"; continue; } ;;
  esac
  py=$real
  tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  minor=$("$py" -c 'import sys; print(sys.version_info[1])')
  for whl in "${wheels[@]}"; do
    case "$(basename "$whl")" in
      *-"$tag"-"$tag"-*) ;;
      *-cp3*-abi3-*) [ "$minor" -ge 11 ] || continue ;;
      *) continue ;;
    esac
    step "$(basename "$whl") on $("$py" -V 2>&1) ($real)"
    venv="$tmp/venv-$tag"
    rm -rf "$venv"
    "$real" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q "$whl" "rich>=13"
    "$venv/bin/python" -m pip install -q "imageio-ffmpeg>=0.5" || echo "imageio-ffmpeg did not install: the FFmpeg check will skip"
    env -u VIRTUAL_ENV PATH="$venv/bin:/usr/bin:/bin" "$venv/bin/python" tests/wheel_smoke.py
    ran=$((ran + 1))
  done
done
if [ "$ran" = 0 ]; then
  echo "test-wheels.sh: no wheel in dist/ fits any of: ${pythons[*]}" >&2; exit 1
fi
step "$ran wheel installation(s) passed the smoke suite"
