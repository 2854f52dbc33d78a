"""Inclusion probabilities and systematic PPS selection (METHODS section 3)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from surveysynth.sampling import inclusion_probabilities, pps_systematic, proportional_allocation


def test_methods_example():
    # METHODS 3: a = 1..20, n = 12 -> i/17 for i <= 16 and 1 for i = 17..20
    pik = inclusion_probabilities(np.arange(1, 21), 12)
    expected = np.r_[np.arange(1, 17) / 17, np.ones(4)]
    np.testing.assert_allclose(pik, expected, rtol=1e-14)
    assert pik.sum() == pytest.approx(12)


def _brute_force(a, n):
    """Independent reference: fix the largest size as a certainty while n a / sum a >= 1."""
    a = np.asarray(a, float)
    order = np.argsort(-a, kind="stable")
    pik = np.zeros_like(a)
    k = 0
    while True:
        rest = order[k:]
        p = (n - k) * a[rest] / a[rest].sum()
        if p.max() < 1 or k == len(a):
            pik[rest] = p
            break
        pik[order[k]] = 1.0
        k += 1
    return pik


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force_and_strata(seed):
    rng = np.random.default_rng(seed)
    a = rng.lognormal(0, 1.5, size=60)
    st = np.repeat(["a", "b", "c"], [15, 20, 25])
    n_h = {"a": 5, "b": 12, "c": 9}
    pik = inclusion_probabilities(a, n_h, strata=st)
    for h, nh in n_h.items():
        np.testing.assert_allclose(pik[st == h], _brute_force(a[st == h], nh), rtol=1e-12)
        assert pik[st == h].sum() == pytest.approx(nh)
    assert pik.max() <= 1.0


def test_zero_sizes_and_errors():
    pik = inclusion_probabilities([0, 1, 1, 2], 2)
    np.testing.assert_allclose(pik, [0, 0.5, 0.5, 1.0])
    with pytest.raises(ValueError, match="negative"):
        inclusion_probabilities([1, -1, 2], 1)
    with pytest.raises(ValueError, match="missing"):
        inclusion_probabilities([1, np.nan, 2], 1)
    with pytest.raises(ValueError, match="not between"):
        inclusion_probabilities([1, 2], 3)
    with pytest.raises(ValueError, match="mapping"):
        inclusion_probabilities([1, 2], 1, strata=["a", "b"])
    with pytest.raises(ValueError, match="no sample size"):
        inclusion_probabilities([1, 2], {"a": 1}, strata=["a", "b"])


def test_proportional_allocation_sums_exactly():
    st = np.repeat(np.arange(1, 9), [27963, 2734, 4035, 18109, 11197, 12842, 18131, 4989])
    alloc = proportional_allocation(st, 1000)
    assert alloc.sum() == 1000
    quota = 1000 * pd.Series(st).value_counts().sort_index() / len(st)
    assert (np.abs(alloc - quota) < 1).all()
    assert alloc.tolist() == [280, 27, 40, 181, 112, 129, 181, 50]


def test_systematic_exact_sizes_and_frequencies():
    rng = np.random.default_rng(11)
    a = rng.lognormal(0, 1, size=40)
    st = np.repeat([1, 2], [15, 25])
    pik = inclusion_probabilities(a, {1: 4, 2: 10}, strata=st)
    R = 3000
    counts = np.zeros(a.size)
    for _ in range(R):
        s = pps_systematic(pik, strata=st, seed=rng, shuffle=True)
        assert s[st == 1].sum() == 4 and s[st == 2].sum() == 10
        counts += s
    freq = counts / R
    se = np.sqrt(pik * (1 - pik) / R)
    z = np.abs(freq - pik) / np.where(se > 0, se, 1)
    assert z.max() < 4.5  # 40 units: a 4.5-sigma excursion has probability < 3e-4
    assert np.all(freq[pik == 1] == 1)


def test_systematic_given_order_matches_r_rule():
    # fixed start u: unit k selected when floor(cum_k - u) > floor(cum_{k-1} - u)
    pik = np.array([0.2, 0.5, 0.3, 0.6, 0.4])
    rng = np.random.default_rng(3)
    u = np.random.default_rng(3).uniform()
    s = pps_systematic(pik, seed=rng)
    cum = np.r_[0, np.cumsum(pik)]
    a = (cum - u) % 1
    expected = a[:-1] > a[1:]
    np.testing.assert_array_equal(s, expected)


def test_seed_reproducible():
    pik = inclusion_probabilities(np.arange(1, 101), 20)
    assert (pps_systematic(pik, seed=5, shuffle=True) == pps_systematic(pik, seed=5, shuffle=True)).all()
    assert not (pps_systematic(pik, seed=5, shuffle=True) == pps_systematic(pik, seed=6, shuffle=True)).all()


def test_r_sampling_parity():
    # R and its sampling package are installed by `make test`: their absence is a failure
    from r_bridge import r_session

    a = np.random.default_rng(4).lognormal(0, 1.2, size=30)
    with r_session("sampling") as (ro, _):
        r_pik = np.array(ro.r["inclusionprobabilities"](ro.FloatVector(a), 9))
    np.testing.assert_allclose(inclusion_probabilities(a, 9), r_pik, rtol=1e-12)
