"""Brewer's, Sampford's and Poisson PPS selection, Sampford's joint inclusion probabilities,
stratified SRS, sample sizes and stratum allocation (issue 42).

Random selections are checked by their defining properties over many draws (fixed size per
stratum; inclusion probabilities equal to pik within 4.5 Monte Carlo SEs; Sampford's joint
inclusion probabilities equal to R ``sampling::UPsampfordpi2``'s within MC error; Poisson's
independence), and each check is shown to reject a plausible wrong sampler (the mutants
below). Deterministic pieces are compared with R: ``UPsampfordpi2`` and
``inclusionprobabilities`` live (R sampling 2.9 through rpy2), PracTools 1.7.5's ``nCont``,
``nProp`` and ``strAlloc`` from tests/reference/practools/allocation.R's stored output.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from r_bridge import r_session
from surveysynth.sampling import (
    inclusion_probabilities,
    pps_brewer,
    pps_poisson,
    pps_sampford,
    sampford_joint_probabilities,
    sample_size_mean,
    sample_size_proportion,
    strata_allocation,
    stratsample,
)
from tests.conftest import assert_rel

TOL = 1e-8
REF = json.loads((Path(__file__).parent / "reference" / "practools" / "allocation.json")
                 .read_text())
SIZES = [2, 5, 1, 8, 3, 4, 6, 9]
PIK = inclusion_probabilities(SIZES, 4)
REPS = 20000


def _r_sampling(code: str) -> np.ndarray:
    with r_session() as (ro, _):
        ro.r("suppressMessages(library(sampling))")
        return np.array(ro.r(code), dtype=float)


def _draws(fn, reps=REPS, seed=7):
    rng = np.random.default_rng(seed)
    return np.array([fn(PIK, seed=rng) for _ in range(reps)], dtype=float)


def _pi_ok(S: np.ndarray, pik: np.ndarray, k: float = 4.5) -> bool:
    se = np.sqrt(pik * (1 - pik) / S.shape[0])
    return bool(np.all(np.abs(S.mean(0) - pik) <= k * se + 1e-12))


def _pi2_ok(S: np.ndarray, pi2: np.ndarray, k: float = 4.5) -> bool:
    emp = S.T @ S / S.shape[0]
    se = np.sqrt(pi2 * (1 - pi2) / S.shape[0])
    return bool(np.all(np.abs(emp - pi2) <= k * se + 1e-12))


def test_inclusion_probabilities_and_sampford_pi2_equal_R_live():
    assert_rel(PIK, _r_sampling("inclusionprobabilities(c(2,5,1,8,3,4,6,9), 4)"), 1e-12, "pik")
    for sizes, n in ((SIZES, 4), ([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], 5)):
        pik = inclusion_probabilities(sizes, n)
        code = f"UPsampfordpi2(inclusionprobabilities(c({','.join(map(str, sizes))}), {n}))"
        assert_rel(sampford_joint_probabilities(pik), _r_sampling(code), 1e-12, "pi2")


# --- mutants: plausible wrong samplers each check must reject ---
def _mutant_successive_pps(pik, seed):
    """n successive draws proportional to pik among units not yet drawn (no Brewer factor)."""
    rng = np.random.default_rng(seed)
    n = int(round(pik.sum()))
    return np.isin(np.arange(pik.size), rng.choice(pik.size, n, replace=False, p=pik / pik.sum()))


def _mutant_sampford_pik(pik, seed):
    """Sampford's rejection with the n - 1 later draws proportional to pik (not pik/(1-pik))."""
    rng = np.random.default_rng(seed)
    n = int(round(pik.sum()))
    while True:
        c = rng.multinomial(1, pik / pik.sum()) + rng.multinomial(n - 1, pik / pik.sum())
        if (c <= 1).all():
            return c.astype(bool)


def test_brewer_fixed_size_and_inclusion_probabilities():
    S = _draws(pps_brewer)
    assert (S.sum(1) == 4).all()
    assert _pi_ok(S, PIK)
    assert not _pi_ok(_draws(_mutant_successive_pps, 5000), PIK)


def test_sampford_inclusion_and_joint_probabilities():
    S = _draws(pps_sampford)
    assert (S.sum(1) == 4).all()
    assert _pi_ok(S, PIK)
    pi2 = sampford_joint_probabilities(PIK)
    assert _pi2_ok(S, pi2)
    M = _draws(_mutant_sampford_pik, 5000)
    assert not _pi_ok(M, PIK)
    # Brewer has the same first-order but other joint probabilities: the pi2 check tells them
    # apart only with large samples, so it is not used as a mutant here.


def test_poisson_probabilities_and_independence():
    S = _draws(pps_poisson)
    assert _pi_ok(S, PIK)
    assert S.sum(1).std() > 0.5  # random sample size
    assert _pi2_ok(S, np.outer(PIK, PIK) + np.diag(PIK - PIK**2))
    # a fixed-size design is not Poisson: its joint probabilities fail the independence check
    assert not _pi2_ok(_draws(pps_sampford, 5000), np.outer(PIK, PIK) + np.diag(PIK - PIK**2))


def test_stratified_selection_fixed_size_per_stratum_and_certainty():
    strata = np.repeat(["a", "b"], [8, 6])
    pik_b = inclusion_probabilities([1, 1, 2, 30, 3, 3], 3)  # unit 4 of b is a certainty unit
    pik = np.r_[PIK, pik_b]
    for fn in (pps_brewer, pps_sampford):
        rng = np.random.default_rng(3)
        S = np.array([fn(pik, strata=strata, seed=rng) for _ in range(2000)], dtype=float)
        assert (S[:, :8].sum(1) == 4).all() and (S[:, 8:].sum(1) == 3).all()
        assert (S[:, 11] == 1).all()
        assert _pi_ok(S, pik)
    with pytest.raises(ValueError, match="not a whole number"):
        pps_brewer(np.r_[PIK[:-1], 0.5])


def test_stratsample():
    strata = np.repeat(["E", "H", "M"], [50, 20, 30])
    rows = stratsample(strata, {"E": 5, "H": 2, "M": 3}, seed=1)
    assert len(set(rows)) == 10
    assert list(pd.Series(strata[rows]).value_counts().sort_index()) == [5, 2, 3]
    with pytest.raises(ValueError, match="stratum 'H' has 20 units"):
        stratsample(strata, {"H": 21})


def test_sample_sizes_equal_practools():
    r = REF["nCont"]
    assert_rel(sample_size_mean(cv=0.05, cv_pop=2), r["a"], TOL)
    assert_rel(sample_size_mean(cv=0.05, cv_pop=2, N=500), r["b"], TOL)
    assert_rel(sample_size_mean(cv=0.10 / 1.645, cv_pop=1), r["c"], TOL)
    assert_rel(sample_size_mean(cv=0.15, S2=800, ybar=100, N=2000), r["d"], TOL)
    assert_rel(sample_size_mean(variance=4, S2=800, N=2000), r["e"], TOL)
    r = REF["nProp"]
    assert_rel(sample_size_proportion(0.01, variance=0.0005**2), r["a"], TOL)
    assert_rel(sample_size_proportion(0.01, cv=0.05), r["b"], TOL)
    assert_rel(sample_size_proportion(0.01, variance=(0.005 / 1.96) ** 2), r["c"], TOL)
    assert_rel(sample_size_proportion(0.2, cv=0.05, N=5000), r["d"], TOL)
    assert_rel(sample_size_proportion(0.2, variance=1e-4, N=5000), r["e"], TOL)
    with pytest.raises(ValueError, match="exactly one of cv= or variance="):
        sample_size_mean(cv=0.1, variance=1.0, S2=2.0)


NH = [215, 65, 252, 50, 149, 144]
SH = [26787207, 10645109, 6909676, 11085034, 9817762, 44553355]
CH = [1400, 200, 300, 600, 450, 1000]


@pytest.mark.parametrize("case,kw", [
    ("neyman", dict(Sh=SH, n=100, alloc="neyman")),
    ("prop", dict(n=100, alloc="prop")),
    ("totcost", dict(Sh=SH, cost=100000, ch=CH, alloc="totcost")),
    ("totvar", dict(Sh=SH, cv=0.05, ybar=11664181, ch=CH, alloc="totvar")),
    ("totvar_V0", dict(Sh=SH, variance=1e12, ch=CH, alloc="totvar")),
])
def test_allocation_equals_practools_examples(case, kw):
    r = REF["strAlloc"][case]
    out = strata_allocation(NH, **kw)
    assert_rel(out["nh"], r["nh"], TOL, case)
    assert_rel(out["share"], r["share"], TOL, case)
    if "se" in r:
        assert_rel(out.attrs["se"], r["se"], TOL, case + " se")
    else:
        assert "se" not in out.attrs


def test_allocation_api_strata():
    a = REF["api"]
    Nh = pd.Series(a["Nh"], index=["E", "H", "M"])
    out = strata_allocation(Nh, a["Sh"], n=200)
    assert_rel(out["nh"], REF["strAlloc"]["api_neyman"]["nh"], TOL)
    assert list(out.index) == ["E", "H", "M"]
    out = strata_allocation(Nh, a["Sh"], alloc="totcost", cost=5000, ch=[10, 30, 20])
    assert_rel(out["nh"], REF["strAlloc"]["api_totcost"]["nh"], TOL)
    # the optimal cost allocation spends exactly the budget
    assert_rel(np.dot(out["nh"], [10, 30, 20]), 5000, 1e-12)
    with pytest.warns(UserWarning, match="n_h > N_h"):
        strata_allocation([10, 1000], [100, 1], n=50)
    with pytest.raises(ValueError, match="needs the stratum SDs"):
        strata_allocation(NH, n=100, alloc="neyman")


def _brewer_exact(pik: np.ndarray) -> np.ndarray:
    """Exact first- and second-order inclusion probabilities of R's UPbrewer, by enumerating
    every draw sequence of its draw-by-draw probabilities (small N only)."""
    n = int(round(pik.sum()))
    pi2 = np.zeros((pik.size, pik.size))

    def walk(sb: np.ndarray, i: int, prob: float) -> None:
        if i > n:
            pi2[np.ix_(sb > 0, sb > 0)] += prob
            return
        a = np.sum(pik * sb)
        w = (1 - sb) * pik * ((n - a) - pik) / ((n - a) - pik * (n - i + 1))
        w = w / w.sum()
        for j in np.flatnonzero(w > 0):
            nxt = sb.copy()
            nxt[j] = 1
            walk(nxt, i + 1, prob * w[j])

    walk(np.zeros(pik.size), 1, 1.0)
    return pi2


def test_brewer_exact_probabilities_ours_and_R_draws():
    """Enumerated over all 1,680 draw sequences, Brewer's probabilities give pik exactly; our
    draws and R's own UPbrewer draws both match the enumerated joint probabilities (so the two
    samplers are the same design, not just the same first-order probabilities)."""
    pi2 = _brewer_exact(PIK)
    assert_rel(np.diag(pi2), PIK, 1e-12, "Brewer pi")
    assert_rel(pi2.sum(1), 4 * PIK, 1e-12, "sum_j pi_ij = n pi_i")
    assert _pi2_ok(_draws(pps_brewer), pi2)
    S_r = _r_sampling("set.seed(1); pik <- inclusionprobabilities(c(2,5,1,8,3,4,6,9), 4); "
                      "t(replicate(4000, UPbrewer(pik)))")
    assert (S_r.sum(1) == 4).all()
    assert _pi2_ok(S_r, pi2)
    # Sampford's design has other joint probabilities; its exact pi2 is not Brewer's
    assert np.abs(sampford_joint_probabilities(PIK) - pi2).max() > 1e-3
