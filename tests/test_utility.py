"""Tests for surveysynth.utility against brute-force and independent references."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from surveysynth.utility import ecdf_utility


def _brute_ecdf(orig, syn):
    orig = np.atleast_2d(np.asarray(orig, float).T).T
    syn = np.atleast_2d(np.asarray(syn, float).T).T
    pooled = np.vstack([orig, syn])
    diffs = []
    for z in pooled:
        fo = sum(all(r <= z) for r in orig) / len(orig)
        fs = sum(all(r <= z) for r in syn) / len(syn)
        diffs.append(fo - fs)
    diffs = np.array(diffs)
    return np.abs(diffs).max(), np.mean(diffs**2)


def test_ecdf_hand_case():
    # original {1,2,3}, synthetic {2,4}; pooled 1,2,3,2,4
    # F_o: 1/3, 2/3, 1, 2/3, 1 ; F_s: 0, 1/2, 1/2, 1/2, 1
    d = np.array([1 / 3, 1 / 6, 1 / 2, 1 / 6, 0.0])
    out = ecdf_utility([1, 2, 3], np.array([2, 4]))
    assert out["U_m"] == pytest.approx(0.5)
    assert out["U_a"] == pytest.approx(np.mean(d**2))


def test_ecdf_matches_brute_force_and_ks_with_ties():
    rng = np.random.default_rng(1)
    orig = rng.integers(0, 6, 40).astype(float)  # many ties
    syns = [rng.integers(0, 7, 30).astype(float) for _ in range(3)]
    out = ecdf_utility(orig, syns)
    ref = [_brute_ecdf(orig, s) for s in syns]
    assert out["U_m_each"] == pytest.approx([r[0] for r in ref])
    assert out["U_a_each"] == pytest.approx([r[1] for r in ref])
    assert out["U_m"] == pytest.approx(np.mean([r[0] for r in ref]))
    assert out["U_a"] == pytest.approx(np.mean([r[1] for r in ref]))
    ks = [stats.ks_2samp(orig, s).statistic for s in syns]
    assert out["U_m_each"] == pytest.approx(ks)


def test_ecdf_multivariate_brute_force():
    rng = np.random.default_rng(2)
    orig = rng.normal(size=(25, 2)).round(1)
    syn = rng.normal(0.3, 1, size=(20, 2)).round(1)
    out = ecdf_utility(pd.DataFrame(orig, columns=["a", "b"]), syn)
    um, ua = _brute_ecdf(orig, syn)
    assert out["U_m"] == pytest.approx(um)
    assert out["U_a"] == pytest.approx(ua)


def test_ecdf_identical_is_zero_and_shift_is_positive():
    x = np.random.default_rng(3).normal(size=200)
    assert ecdf_utility(x, x.copy())["U_m"] == 0.0
    assert ecdf_utility(x, x + 1.0)["U_m"] > 0.3


def test_ecdf_errors_and_no_mutation():
    df = pd.DataFrame({"a": [1.0, 2.0, np.nan]})
    with pytest.raises(ValueError, match=r"original .*rows \[2\]"):
        ecdf_utility(df, [1.0, 2.0])
    with pytest.raises(ValueError, match="columns"):
        ecdf_utility(np.zeros((3, 2)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match="empty"):
        ecdf_utility([1.0], [])
    orig = pd.DataFrame({"a": [3.0, 1.0, 2.0]})
    before = orig.copy()
    ecdf_utility(orig, [orig.to_numpy()[:, 0] + 1])
    pd.testing.assert_frame_equal(orig, before)
