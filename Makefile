# The two commands: `make test` (set up, then every test, Python and R) and `make demo`.
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: test demo setup lint bench

setup:
	@bash scripts/setup.sh

test: setup
	$(PY) -m pytest -q -p no:cacheprovider

demo: setup
	.venv/bin/surveysynth demo --out release-demo

lint: setup
	.venv/bin/ruff check surveysynth r_bridge tests benchmarks vignettes

bench: setup
	$(PY) benchmarks/taylor.py
