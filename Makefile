# Reliability suites (docs/reliability.md). The short versions also run in the normal pytest suite.
PYTHON ?= .venv/bin/python

.PHONY: stress stress-short wheels check-wheels test-wheels

stress:        ## the long run: 200 kills per crash scenario, 10-minute soak, thousands of fuzz cases
	$(PYTHON) scripts/stress.py --long

stress-short:  ## about the CI lengths
	$(PYTHON) scripts/stress.py --short

# Wheels without Rust on the user's side (docs/install.md).
wheels:        ## dist/: abi3 wheel for CPython 3.11+, cp39/cp310 wheels, sdist (manylinux2014 x86_64, zig, no Docker)
	bash scripts/build-wheels.sh

check-wheels:  ## glibc symbol versions, NEEDED libraries and CPU features of dist/*.whl
	.venv-build/bin/python scripts/check-wheels.py

test-wheels:   ## check, then install each wheel in a fresh venv per fitting Python and run the smoke suite
	bash scripts/test-wheels.sh
