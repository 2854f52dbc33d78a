# The two commands: `make test` (set up, lint, import layers, then every test, Python and R)
# and `make demo`.
SHELL := /bin/bash
PY := .venv/bin/python

LINT_PATHS := surveysynth r_bridge tests benchmarks vignettes

.PHONY: test demo setup lint layers bench smartnoise-venv

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

# smartnoise-synth's AIM and MST for vignettes/public_use_agency.py, in their own venv: smartnoise
# pins opendp < 0.15 and this project pins 0.16. Only what AIM and MST import is installed
# (smartnoise-synth without its deep-learning extras: no torch, opacus, pac-synth).
smartnoise-venv:
	python3 -m venv .venv-smartnoise
	.venv-smartnoise/bin/pip install --no-deps smartnoise-synth==1.0.8
	.venv-smartnoise/bin/pip install "smartnoise-sql==1.0.10" "mbi==1.1.0" "disjoint-set==0.9.0" \
		"networkx>=3" "Faker>=17"
