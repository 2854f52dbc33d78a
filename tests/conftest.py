"""Shared fixtures: R through rpy2 (live, never mocked) and R's api example data."""

from __future__ import annotations

import numpy as np
import pytest

from r_bridge import r_session


def pytest_configure(config: pytest.Config) -> None:
    """Every Stan program the tests sample (the package's, tests/stan/, tests/reference/) is in
    httpstan's cache before any test runs: ``make setup`` compiles them; a bare ``pytest`` on a
    machine without them compiles here, once, in the main process (not in an xdist worker, not
    inside a test), two at a time with a line per program. Seconds when all are cached."""
    if hasattr(config, "workerinput"):
        return
    from pathlib import Path

    from surveysynth.synth import stan_build

    here = Path(__file__).resolve().parent
    files = sorted((here / "stan").glob("*.stan")) + sorted((here / "reference").glob("*.stan"))
    codes = [*stan_build.package_programs().values(), *(f.read_text() for f in files)]
    if any(stan_build.cache_status(c) != "ok" for c in codes):
        rc = stan_build.main(["--jobs", "2", *map(str, files)])
        if rc:
            raise pytest.UsageError("a Stan program failed to compile (lines above)")


def r_eval(code: str) -> np.ndarray:
    """Evaluate R code (survey loaded, data(api) attached) and return a float vector."""
    with r_session("survey") as (ro, _):
        # np.array copies: an asarray view would point into memory R may free
        return np.array(ro.r(code), dtype=float)


def replicate_design_from_r(data, name: str):
    """The ReplicateDesign of R's replicate design object ``name`` (built in the R session):
    its analysis weights, full-sample weights, scale, rscales and mse, on ``data``."""
    from surveysynth import ReplicateDesign

    return ReplicateDesign(
        data, repweights=r_eval(f"as.matrix(weights({name}, 'analysis'))"),
        weights=r_eval(f"as.numeric({name}$pweights)"), type="other",
        scale=float(r_eval(f"{name}$scale")[0]), rscales=r_eval(f"{name}$rscales"),
        mse=bool(r_eval(f"as.numeric({name}$mse)")[0]), combined_weights=True)


@pytest.fixture(scope="session")
def R():
    """Run R code with library(survey) and data(api) loaded; returns numeric vectors."""
    with r_session("survey") as (ro, _):
        ro.r("suppressMessages(library(survey)); data(api)")
    return r_eval


@pytest.fixture(scope="session")
def api():
    """R's api tables as pandas DataFrames (read from R itself)."""
    from surveysynth.datasets import load_api

    return {name: load_api(name) for name in ("apistrat", "apiclus1", "apiclus2", "apisrs")}


def assert_rel(actual, expected, tol: float = 1e-9, what: str = "", atol: float = 0.0) -> None:
    """Relative agreement to ``tol`` (absolute where the expected value is 0), plus ``atol``
    for quantities that are zero up to rounding (an SE of a one-PSU domain, say)."""
    a = np.asarray(actual, dtype=float).ravel()
    e = np.asarray(expected, dtype=float).ravel()
    assert a.shape == e.shape, f"{what}: shape {a.shape} vs {e.shape}"
    scale = np.where(e == 0, 1.0, np.abs(e))
    err = np.maximum(np.abs(a - e) - atol, 0.0) / scale
    assert np.all(np.isfinite(a) == np.isfinite(e)), f"{what}: finiteness differs {a} vs {e}"
    fin = np.isfinite(e)
    assert np.all(err[fin] <= tol), f"{what}: max rel err {err[fin].max():.3g}\n ours {a}\n R    {e}"


@pytest.fixture(scope="module")
def client():
    """An in-process Dask LocalCluster (2 workers x 1 thread) and its client, for the Dask
    engine's tests (module scope: each test module starts and closes its own)."""
    import distributed

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       dashboard_address=None)
    cl = distributed.Client(cluster)
    yield cl
    cl.close()
    cluster.close()
