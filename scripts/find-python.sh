# Sourced by build-wheels.sh and test-wheels.sh. find_python X.Y prints the path of a working
# CPython X.Y interpreter (pythonX.Y on PATH, else a pyenv installation), or fails. A pyenv shim
# that is on PATH but not enabled for the directory does not count.
find_python() {
  local v=$1 c out
  for c in "python$v" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v"; do
    if out=$("$c" -c 'import sys; print(sys.executable)' 2>/dev/null) && [ -n "$out" ]; then
      echo "$out"
      return 0
    fi
  done
  return 1
}
