"""``stratsample`` (R survey's stratified simple random sample): random, so checked for R's
structure on ?stratsample's example (R live: the same strata in the same order, the same
counts) and in distribution (every unit of a stratum equally likely; no unit twice)."""

from __future__ import annotations

import numpy as np
import pytest

import surveysynth as ss
from r_bridge import r_session


@pytest.fixture(scope="module")
def stype():
    with r_session("survey") as (ro, _):
        ro.r("suppressMessages(library(survey)); data(api)")
        return np.array(ro.r("as.character(apipop$stype)"), dtype=object)


def test_man_example_structure_equals_r(stype):
    counts = {"E": 5, "H": 4, "M": 2}
    with r_session("survey") as (ro, _):
        r_labels = list(ro.r('s <- stratsample(apipop$stype, c("E"=5,"H"=4,"M"=2)); '
                             "as.character(apipop$stype[s])"))
    s = ss.stratsample(stype, counts)
    assert list(stype[s]) == r_labels  # stratum by stratum, in the order of counts
    assert len(set(s.tolist())) == 11


def test_each_unit_equally_likely_and_none_twice():
    strata = np.array(["a"] * 10 + ["b"] * 4 + ["c"] * 3)
    rng = np.random.default_rng(20261127)
    hits = np.zeros(strata.size)
    reps = 4000
    for _ in range(reps):
        s = ss.stratsample(strata, {"a": 3, "b": 2}, seed=rng)
        assert len(set(s.tolist())) == 5
        hits[s] += 1
    # inclusion probability 3/10 in a, 2/4 in b, 0 in c (not named, not sampled, as R)
    expected = np.r_[np.full(10, 0.3), np.full(4, 0.5), np.zeros(3)]
    sd = np.sqrt(expected * (1 - expected) / reps)
    assert np.all(np.abs(hits / reps - expected) <= 5 * sd + 1e-12)


def test_seeded_draws_repeat_and_errors():
    strata = ["x", "y", "x", "y", "x"]
    assert np.array_equal(ss.stratsample(strata, {"x": 2}, seed=3),
                          ss.stratsample(strata, {"x": 2}, seed=3))
    with pytest.raises(ValueError, match="fewer than"):
        ss.stratsample(strata, {"y": 3})
    with pytest.raises(ValueError, match="mapping"):
        ss.stratsample(strata, [2, 1])
