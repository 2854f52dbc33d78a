"""Laplace baseline: budget arithmetic, sensitivities, noise scale over seeds, variance, shape."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from surveysynth import SurveyDesign
from surveysynth.privacy import GUARANTEES, laplace_tables
from surveysynth.privacy.laplace import _core, budget_split
from surveysynth.tables import tabulate

ROWS, COLS, VALUE = "stype", "sch.wide", "api00"


@pytest.fixture(scope="module")
def design(api):
    rng = np.random.default_rng(2024)
    df = api["apistrat"]
    # unequal weights within cells, so that the count sensitivity max w - min w is positive
    df = df.assign(pw=df["pw"] * rng.uniform(0.5, 1.5, len(df)))
    return SurveyDesign(df, strata="stype", weights="pw")


def test_budget_arithmetic():
    b = budget_split(80, replicates=10)
    assert b["eps_point"] == 5 and b["eps_replicate"] == 0.5 and b["eps_variance"] == 5
    assert 8 * b["eps_point"] + 8 * b["eps_variance"] == 80
    b2 = budget_split(80, replicates=10, cells_per_record=2)  # no column variable
    assert b2["eps_point"] == 10 and b2["eps_replicate"] == 1
    with pytest.raises(ValueError, match="epsilon"):
        budget_split(0)
    with pytest.raises(ValueError, match="replicates"):
        budget_split(1, replicates=1)


def test_sensitivity_brute_force(design):
    df = design.data.assign(w=design.weights)
    df["wy"] = df.w * df[VALUE]
    g = df.groupby([ROWS, COLS], observed=True)
    d_c = (g.w.max() - g.w.min()).max()
    d_a = ((g.wy.max() - g.wy.min()) / (g.w.sum() - (g.w.max() - g.w.min()))).max()
    out = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80, seed=1)
    assert out.sensitivity["count"] == pytest.approx(d_c, rel=1e-12)
    assert out.sensitivity["mean"] == pytest.approx(d_a, rel=1e-12)
    assert d_c > 0


def test_noise_scale_over_seeds(design):
    eps, R = 80.0, 10
    b = budget_split(eps, R)
    truth_c = tabulate(design, ROWS, COLS).long.estimate.to_numpy()
    truth_a = tabulate(design, ROWS, COLS, value=VALUE, stat="mean").long.estimate.to_numpy()
    pts_c, pts_a, reps_c, reps_a = [], [], [], []
    n_seeds = 120
    for s in range(n_seeds):
        c = _core(design, [ROWS], [COLS], VALUE, eps, R, np.random.default_rng(s), False, "All")
        np.testing.assert_allclose(c["cnt"][:, 0], truth_c, rtol=1e-12)
        np.testing.assert_allclose(c["mean"][:, 0], truth_a, rtol=1e-12)
        pts_c.append(c["noisy_c"][:, 0] - truth_c)
        pts_a.append(c["noisy_a"][:, 0] - truth_a)
        reps_c.append((c["noisy_c"] - c["cnt"])[:, 1:].ravel())
        reps_a.append((c["noisy_a"] - c["mean"])[:, 1:].ravel())
    sens = c["sensitivity"]
    for draws, scale in ((pts_c, sens["count"] / b["eps_point"]),
                         (pts_a, sens["mean"] / b["eps_point"]),
                         (reps_c, sens["count"] / b["eps_replicate"]),
                         (reps_a, sens["mean"] / b["eps_replicate"])):
        x = np.concatenate(draws)
        x = x[np.isfinite(x)]
        # |Laplace(0, b)| is exponential with mean b and sd b: MC error b / sqrt(N)
        mc = scale / np.sqrt(x.size)
        assert abs(np.abs(x).mean() - scale) < 4.5 * mc, (np.abs(x).mean(), scale, mc)
        assert abs(np.median(x)) < 0.15 * scale  # centred


def test_half_samples_and_variance(design):
    c = _core(design, [ROWS], [COLS], VALUE, 80.0, 10, np.random.default_rng(3), False, "All")
    F = c["factors"]
    assert set(np.unique(F)) <= {0.0, 2.0}  # strata of 100, 50, 50 PSUs: exact half-samples
    strata = design.data[ROWS].to_numpy()
    for h in ("E", "H", "M"):
        kept = (F[strata == h] == 2).sum(axis=0)
        assert (kept == (strata == h).sum() // 2).all()
    out = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80, seed=3)
    for tab, noisy in ((out.counts, c["noisy_c"]), (out.means, c["noisy_a"])):
        assert np.array_equal(tab.long.estimate.to_numpy(), noisy[:, 0])
        v = [sum((noisy[k, r] - noisy[k, 0]) ** 2 for r in range(1, 11)) / 10
             for k in range(noisy.shape[0])]
        np.testing.assert_allclose(tab.long.se ** 2, v, rtol=1e-12)


def test_shape_reproducible_not_additive(design):
    a = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80, seed=11)
    b = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80, seed=11)
    c = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80, seed=np.random.default_rng(12))
    pd.testing.assert_frame_equal(a.counts.long, b.counts.long)
    pd.testing.assert_frame_equal(a.means.long, b.means.long)
    assert not np.allclose(a.counts.long.estimate, c.counts.long.estimate)
    ref = tabulate(design, ROWS, COLS).long
    lg = a.counts.long
    assert list(lg.columns[: len(ref.columns)]) == list(ref.columns[: len(lg.columns)])
    assert (lg[[ROWS, COLS, "cell"]].to_numpy() == ref[[ROWS, COLS, "cell"]].to_numpy()).all()
    np.testing.assert_array_equal(lg.n_unweighted, ref.n_unweighted)
    inner = lg[lg.cell == "interior"].groupby(ROWS).estimate.sum()
    margin = lg[lg.cell == "row margin"].set_index(ROWS).estimate
    assert not np.allclose(inner[margin.index], margin, rtol=1e-9)  # deliberately not additive
    assert a.privacy["guarantee"] == "laplace_local"
    assert a.privacy["guarantee_text"] == GUARANTEES["laplace_local"]
    assert "sensitivity" not in a.counts.long.columns
    assert a.means.wide().shape == (4, 3)


def test_errors(design, api):
    with pytest.raises(ValueError, match="SurveyDesign"):
        laplace_tables(api["apistrat"], ROWS, COLS, VALUE, epsilon=1)
    with pytest.raises(ValueError, match="epsilon"):
        laplace_tables(design, ROWS, COLS, VALUE, epsilon=-1)
    with pytest.raises(ValueError, match="column"):
        laplace_tables(design, ROWS, COLS, "nope", epsilon=1)
