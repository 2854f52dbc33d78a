#!/usr/bin/env bash
# Set up everything `make test` and `make demo` need, idempotently:
# Debian's R packages (apt-get, as root), a .venv with the package and its dev extras.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: tests/test_report.py renders the confidential report headless to a PNG;
# r-cran-roxygen2: the R package's help pages (man/*.Rd) are generated from R/*.R (tests/test_rpkg_check.py)
APT_PKGS=(r-base-core r-base-dev r-cran-survey r-cran-sampling r-cran-mitools r-cran-reticulate r-cran-testthat r-cran-roxygen2 chromium)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = "0" ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${APT_PKGS[@]}" >/dev/null
  else
    echo "setup: missing Debian packages. Run as root:" >&2
    echo "  apt-get update && apt-get install -y ${APT_PKGS[*]}" >&2
    exit 1
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.surveysynth-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing surveysynth with dev extras into .venv"
  .venv/bin/python -m pip install -q --upgrade pip "setuptools<81" wheel
  .venv/bin/python -m pip install -q -e ".[dev]"
  # an in-tree *.egg-info from an older build shadows the installed metadata (and with it the
  # surveysynth.engines entry points) whenever Python runs from the project folder
  rm -rf ./*.egg-info
  touch "$stamp"
fi

# Every Stan program (the package's and the tests'), compiled once per machine into httpstan's
# cache, two at a time, with a line per program: no test compiles, a half-written cache entry is
# rebuilt, and a slow build is waited for (no HTTP client timeout). Seconds when all are cached.
.venv/bin/python -m surveysynth.synth.stan_build --jobs 2 tests/stan/*.stan tests/reference/*.stan
