# Reliability suites (docs/reliability.md). The short versions also run in the normal pytest suite.
PYTHON ?= .venv/bin/python

.PHONY: stress stress-short

stress:        ## the long run: 200 kills per crash scenario, 10-minute soak, thousands of fuzz cases
	$(PYTHON) scripts/stress.py --long

stress-short:  ## about the CI lengths
	$(PYTHON) scripts/stress.py --short
