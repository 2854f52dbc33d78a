# The two commands: `make test` (set up, lint, import layers, then the default test tier, Python
# and R) and `make demo`. `make test-all` adds the slow tier (whole studies, full-size audits,
# subprocess runs that re-check what faster tests check): docs/testing.md.
SHELL := /bin/bash
PY := .venv/bin/python

LINT_PATHS := surveysynth r_bridge tests benchmarks vignettes

.PHONY: test test-all demo setup lint layers bench

setup:
	@bash scripts/setup.sh

# pytest: the 25 slowest tests printed at the end; xdist workers (one R and one httpstan per
# worker process), whole files per worker so that module fixtures are fitted once
PYTEST := $(PY) -m pytest -q -p no:cacheprovider --durations=25 -n 2 --dist loadfile

test: setup lint layers
	$(PYTEST) -m "not slow"

test-all: setup lint layers
	$(PYTEST)

demo: setup
	.venv/bin/surveysynth demo --out release-demo

# ruff: pyproject's rules, complexity (C901, max in pyproject) and private access (SLF001, PLC2701)
lint: setup
	.venv/bin/ruff check $(LINT_PATHS)

# import-linter: the layer contracts of pyproject's [tool.importlinter] (docs/architecture.md)
layers: setup
	.venv/bin/lint-imports

bench: setup
	$(PY) benchmarks/taylor.py
