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


WRONG_PYTHON = r"""
library(surveysynth)
calls <- list(
  ss_design = quote(ss_design(data.frame(x = 1:3))),
  ss_estimate = quote(ss_estimate(data.frame(x = 1:3), "mean", ~x)),
  ss_replicate = quote(ss_replicate(data.frame(x = 1:3), "jackknife")),
  ss_tabulate = quote(ss_tabulate(data.frame(x = 1:3), rows = ~x)),
  ss_laplace_tables = quote(ss_laplace_tables(data.frame(x = 1:3), rows = ~x, value = ~x,
                                              epsilon = 1)),
  ss_synthesizer = quote(ss_synthesizer("quantile", variables = "x")),
  ss_to_pandas = quote(ss_to_pandas(data.frame(x = 1:3))),
  ss_load_release = quote(ss_load_release(tempdir())),
  ss_release_pipeline = quote(ss_release_pipeline("{config}")),
  ss_python = quote(ss_python()))
for (nm in names(calls)) {{
  msg <- tryCatch({{ eval(calls[[nm]]); "no error" }}, error = conditionMessage)
  cat(nm, ": ", gsub("\n", " ", msg), "\n", sep = "")
}}
"""


def test_every_entry_point_gives_the_python_fix(r_env, tmp_path):
    """With a Python that lacks surveysynth, each entry point stops with the fix (issue 37)."""
    py = tmp_path / "py"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(py)], check=True,
                   capture_output=True, timeout=120)
    config = tmp_path / "release.toml"
    config.write_text("")
    env = {k: v for k, v in r_env.items() if k != "PYTHONPATH"}
    env["RETICULATE_PYTHON"] = str(py / "bin" / "python")
    out = _run(["Rscript", "-e", WRONG_PYTHON.format(config=config)], env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    assert len(lines) == 10, out.stdout
    for name, msg in lines.items():
        assert "Python module 'surveysynth' is not available to reticulate" in msg, (name, msg)
        assert f"Python: {py}" in msg and "Fix: pip install surveysynth" in msg, (name, msg)
        assert "RETICULATE_PYTHON" in msg and "ModuleNotFoundError" not in msg, (name, msg)
