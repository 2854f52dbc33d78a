# The two commands: `make test` (set up, lint, import layers, then every test, Python and R)
# and `make demo`.
SHELL := /bin/bash
PY := .venv/bin/python

LINT_PATHS := surveysynth r_bridge tests benchmarks vignettes

.PHONY: test demo setup lint layers bench

setup:
	@bash scripts/setup.sh

test: setup lint layers
	$(PY) -m pytest -q -p no:cacheprovider

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
