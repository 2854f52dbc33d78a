"""Parallel step fits of Sequential (issue 39 item 3): each step's fits are a picklable job with
its own seed spawned up front from the release seed, so a seeded release is the same bytes
whether its fits ran serially, in worker processes (``n_jobs=2``) or on a Dask cluster.

Fast tier: the jobs pickled and run in REVERSED order give the release of the serial run (what
makes any executor give the same bytes), and the collection of warnings and errors. Slow tier:
the real executors (spawned processes, a Dask LocalCluster of two worker processes).
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pandas as pd
import pytest

from surveysynth.design import SurveyDesign
from surveysynth.synth import Sequential
from surveysynth.synth._stan import ConvergenceWarning  # noqa: PLC2701
from surveysynth.synth.sequential import run_step_jobs

SHORT = dict(chains=2, draws=40, warmup=60, allow_unconverged=True, progress=False)
#: a budget the unweighted bounds fit in: each step is its unweighted fit and one final fit
#: (alpha = 1, fresh draws), the fewest fits that still draw from each step's seed twice
EPS = 200.0
VARS = [{"name": "b", "type": "binary"}, {"name": "k", "type": "count", "bounds": (0, 12)}]


def _design() -> SurveyDesign:
    rng = np.random.default_rng(39)
    n = 90
    g = rng.choice(["a", "b", "c"], n)
    df = pd.DataFrame({"g": g, "b": rng.integers(0, 2, n),
                       "k": np.minimum(rng.poisson(3 + (g == "a"), n), 12), "w": 5.0})
    return SurveyDesign(df, weights="w")   # equal weights: released as collected, no weights step


def _release_bytes(syn: Sequential) -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = syn.fit(_design()).release()
    return [d.data.to_csv(index=False) for d in rel.designs]


def _seq(**kw) -> Sequential:
    return Sequential(variables=VARS, public=["g"], target_epsilon=EPS, m=2, random_state=7,
                      **{**SHORT, **kw})


class _Reversed(Sequential):
    """Runs the step jobs after a pickle round trip, last step first."""

    def _run_jobs(self, jobs):
        copies = [pickle.loads(pickle.dumps(j)) for j in jobs]
        out = [None] * len(jobs)
        for i in reversed(range(len(jobs))):
            out[i] = copies[i]()
        return run_step_jobs([_Done(r) for r in out])


class _Done:
    """A finished job (its result handed back through run_step_jobs' collection)."""

    def __init__(self, res):
        self.res = res

    def __call__(self):
        return self.res


def test_step_jobs_pickled_and_run_in_reverse_give_the_serial_release():
    """Kills: seeds drawn from one shared stream as the fits run (the order would change every
    step's draws), and jobs that do not survive pickling (processes, Dask)."""
    serial = _seq()
    a = _release_bytes(serial)
    b = _release_bytes(_Reversed(variables=VARS, public=["g"], target_epsilon=EPS, m=2,
                                 random_state=7, **SHORT))
    assert a == b
    assert len(serial.step_fits_) == 2
    # each step's final fit is at its own target (the job carries it)
    assert all(r["delta_alpha"] <= r["target"] + 1e-12 for r in serial.step_fits_)


class _Job:
    def __init__(self, i, fail=False):
        self.i, self.fail = i, fail

    def __call__(self):
        if self.fail:
            return {"error": ValueError(f"step {self.i} refused"),
                    "warnings": [(ConvergenceWarning, f"step {self.i} warned")]}
        return {"i": self.i, "warnings": [(UserWarning, f"step {self.i} note")]}


def test_run_step_jobs_reissues_warnings_in_step_order_and_raises_the_first_error():
    with pytest.warns(UserWarning) as rec:
        out = run_step_jobs([_Job(0), _Job(1)])
    assert [r["i"] for r in out] == [0, 1] and "warnings" not in out[0]
    assert [str(w.message) for w in rec] == ["step 0 note", "step 1 note"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="step 1 refused"):
            run_step_jobs([_Job(0), _Job(1, fail=True), _Job(2, fail=True)])
    msgs = [str(w.message) for w in caught]
    # serially the run stops at the first refused step (step 2 never runs)
    assert msgs == ["step 0 note", "step 1 warned"]


def test_n_jobs_is_checked():
    with pytest.raises(ValueError, match="n_jobs must be an integer >= 1"):
        _seq(n_jobs=0).fit(_design())


@pytest.mark.slow
def test_serial_processes_and_dask_give_the_same_release():
    """The same seeded release serially, with n_jobs=2 (spawned worker processes) and on a
    Dask LocalCluster of two worker processes."""
    distributed = pytest.importorskip("distributed")
    import dask

    a = _release_bytes(_seq())
    b = _release_bytes(_seq(n_jobs=2))
    # pystan samples each chain in a child process: the workers must not be daemonic
    with dask.config.set({"distributed.worker.daemon": False}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=None)
    try:
        with distributed.Client(cluster) as client:
            c = _release_bytes(_seq(client=client))
    finally:
        cluster.close()
    assert a == b
    assert a == c


@pytest.mark.slow
def test_daemonic_dask_workers_are_refused_before_any_fit():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client, \
            pytest.raises(ValueError, match="distributed.worker.daemon"):
        run_step_jobs([_Job(0)], client=client)
