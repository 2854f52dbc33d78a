"""The R package (r_bridge/rpkg): installed into a temporary R library, its testthat tests and
the R-session vignette run with Rscript. A failing, erroring or skipped R test fails here, and
R's output is printed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RPKG = ROOT / "r_bridge" / "rpkg"

pytestmark = pytest.mark.skipif(shutil.which("Rscript") is None, reason="R is not installed")


def _run(cmd: list[str], env: dict, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def r_env(tmp_path_factory):
    lib = tmp_path_factory.mktemp("rlib")
    env = dict(os.environ)
    env["RETICULATE_PYTHON"] = sys.executable
    env["R_LIBS"] = str(lib) + os.pathsep + env.get("R_LIBS", "")
    out = _run(["R", "CMD", "INSTALL", "--no-test-load", "-l", str(lib), str(RPKG)], env,
               cwd=lib)
    assert out.returncode == 0, f"R CMD INSTALL failed:\n{out.stdout}\n{out.stderr}"
    return env


TESTTHAT = r"""
suppressMessages(library(testthat))
library(surveysynth)
res <- as.data.frame(test_dir("{path}", reporter = "summary", stop_on_failure = FALSE))
print(res[, c("test", "nb", "failed", "skipped", "error")])
bad <- res$failed > 0 | res$error | res$skipped
if (any(bad) || nrow(res) == 0) quit(status = 1)
cat("ALL R TESTS PASSED\n")
"""


def test_rpkg_testthat_suite(r_env):
    code = TESTTHAT.format(path=str(RPKG / "tests" / "testthat"))
    out = _run(["Rscript", "-e", code], r_env, cwd=RPKG)
    assert out.returncode == 0 and "ALL R TESTS PASSED" in out.stdout, (
        f"R package tests failed (exit {out.returncode}):\n{out.stdout}\n{out.stderr}"
    )


def test_r_session_vignette_runs(r_env):
    out = _run(["Rscript", str(ROOT / "vignettes" / "r_session.R")], r_env, cwd=ROOT)
    assert out.returncode == 0 and "r_session vignette: done" in out.stdout, (
        f"vignettes/r_session.R failed (exit {out.returncode}):\n{out.stdout}\n{out.stderr}"
    )
    assert "Stratified Independent Sampling design" in out.stdout
    # the release section ran, and a plain reticulate call returned a data.frame
    assert "surveysynth synthetic release" in out.stdout and "guarantee:" in out.stdout
    assert '[1] "data.frame"' in out.stdout


def test_harness_fails_when_an_r_test_fails(r_env, tmp_path):
    """The harness above really turns a failing testthat expectation into a pytest failure."""
    (tmp_path / "test-broken.R").write_text(
        'test_that("broken", expect_equal(1, 2))\ntest_that("fine", expect_true(TRUE))\n'
    )
    out = _run(["Rscript", "-e", TESTTHAT.format(path=str(tmp_path))], r_env, cwd=tmp_path)
    assert out.returncode != 0 and "ALL R TESTS PASSED" not in out.stdout, out.stdout
