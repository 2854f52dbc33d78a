"""Laplace baseline: OpenDP sampler law, per-margin sensitivities, budget, variance, record.

Every test names the wrong version it kills. The noise comes from OpenDP's CSPRNG and cannot be
seeded, so the noiseless part of the mechanism is tested exactly (``_noiseless``) and the noise
by its law over many draws (KS tests).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from surveysynth import SurveyDesign
from surveysynth.privacy import laplace as lap_mod
from surveysynth.privacy import laplace_tables
from surveysynth.privacy.guarantees import NOT_DP
from surveysynth.privacy.laplace import (
    _add_noise,
    _noiseless,
    _scales,
    _variance,
    budget_split,
)
from surveysynth.privacy.noise import SAMPLER, add_laplace, laplace_epsilon
from surveysynth.privacy.randomness import secret_rng
from surveysynth.tables import tabulate

ROWS, COLS, VALUE = "stype", "sch.wide", "api00"
KS_ALPHA = 1e-3  # a correct sampler fails a KS test with this probability


@pytest.fixture(scope="module")
def design(api):
    rng = np.random.default_rng(2024)
    df = api["apistrat"]
    # unequal weights within cells, so that the count sensitivity max w - min w is positive
    df = df.assign(pw=df["pw"] * rng.uniform(0.5, 1.5, len(df)))
    return SurveyDesign(df, strata="stype", weights="pw")


@pytest.fixture(scope="module")
def core(design):
    return _noiseless(design, [ROWS], [COLS], VALUE, 10, secret_rng(3), False, "All")


def _own(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Local sensitivities (seed 001 eqs. 12-13) of each group, by pandas, from the records."""
    df = df.assign(k=0) if not by else df
    g = df.groupby(by or ["k"], observed=True)
    rw = g.w.max() - g.w.min()
    return pd.DataFrame({"count": rw, "mean": (g.wy.max() - g.wy.min()) / (g.w.sum() - rw)})


# ------------------------------------------------------------------------------ the sampler

def test_sampler_law_ks_and_wrong_scale_rejected():
    """Kills: a sampler at the wrong scale (scale/eps confusion, sd instead of b), an uncentred
    one, or one that ignores the values it is given. N is set by the power against a 10% wrong
    scale: the two cdfs differ by at most D = 0.0175, and the KS test rejects at p < 1e-6 once
    D > sqrt(ln(2e6) / (2 N)), 0.019 at N = 20,000 (right at the edge: the test failed with
    p = 1.7e-6 and 2.4e-6 in two runs) and 0.0085 at N = 100,000, where p is ~1e-25 on average."""
    scale, N = 37.5, 100_000
    values = np.linspace(-5e4, 5e4, N)
    noise = add_laplace(values, scale) - values
    law = stats.laplace(scale=scale).cdf
    assert stats.kstest(noise, law).pvalue > KS_ALPHA
    # the same draws against 10% wrong scales and a shifted centre: rejected
    for wrong in (stats.laplace(scale=1.1 * scale).cdf, stats.laplace(scale=0.9 * scale).cdf,
                  stats.laplace(loc=0.1 * scale, scale=scale).cdf):
        assert stats.kstest(noise, wrong).pvalue < 1e-6


def test_sampler_edges_and_name():
    """NaN cells stay NaN without a draw (OpenDP itself would replace a NaN by noise), infinite
    values are refused, scale 0 is the identity, the input is not mutated, and the draws never
    replay (OpenDP's CSPRNG)."""
    x = np.array([1.0, np.nan, 3.0])
    before = x.copy()
    out = add_laplace(x, 2.0)
    assert np.isnan(out[1]) and np.isfinite(out[[0, 2]]).all()
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(add_laplace(x, 0.0), x)
    with pytest.raises(ValueError, match="infinite"):
        add_laplace(np.array([1.0, np.inf]), 1.0)
    with pytest.raises(ValueError, match="scale"):
        add_laplace(x, -1.0)
    z = np.zeros(50)
    assert not np.array_equal(add_laplace(z, 1.0), add_laplace(z, 1.0))
    assert SAMPLER.startswith("OpenDP ") and "make_laplace" in SAMPLER


# ------------------------------------------------------------------------------ budget

def test_budget_arithmetic_and_ledger(design):
    """Kills: a split that forgets the variance half, the replicates or the margins; a ledger that
    does not add up to epsilon; a scale that is not D / eps of its release (checked against
    OpenDP's own privacy map)."""
    b = budget_split(80, replicates=10)
    assert b["eps_point"] == 5 and b["eps_replicate"] == 0.5 and b["eps_variance"] == 5
    assert 8 * b["eps_point"] + 8 * b["eps_variance"] == 80
    b2 = budget_split(80, replicates=10, cells_per_record=2)  # no column variable
    assert b2["eps_point"] == 10 and b2["eps_replicate"] == 1
    with pytest.raises(ValueError, match="epsilon"):
        budget_split(0)
    with pytest.raises(ValueError, match="replicates"):
        budget_split(1, replicates=1)
    out = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80, seed=1)
    led = out.privacy.ledger
    assert sum(e["epsilon"] for e in led) == pytest.approx(80, rel=1e-12)
    assert [e["epsilon_each"] for e in led] == [5, 0.5]
    assert [e["releases_per_record"] for e in led] == [8, 80]
    assert out.budget == b
    # without cols a record sits in 2 cells: epsilon / 8 per point release
    one = laplace_tables(design, ROWS, None, VALUE, epsilon=80, seed=1)
    assert one.budget["eps_point"] == 10
    assert set(one.counts.long.cell) == {"interior", "grand total"}
    # the scales used are D / eps; OpenDP's privacy map reads each release's epsilon back
    core = _noiseless(design, [ROWS], [COLS], VALUE, 10, secret_rng(0), False, "All")
    sc = _scales(core, b)
    for stat in ("count", "mean"):
        D = core["sensitivity"][stat]
        np.testing.assert_allclose(sc[stat][:, 0], D / 5, rtol=1e-15)
        np.testing.assert_allclose(sc[stat][:, 1:], np.repeat(D[:, None] / 0.5, 10, 1),
                                   rtol=1e-15)
        k = int(np.argmax(D))
        assert laplace_epsilon(D[k], sc[stat][k, 0]) == pytest.approx(5, rel=1e-12)
        assert laplace_epsilon(D[k], sc[stat][k, 1]) == pytest.approx(0.5, rel=1e-12)


# ------------------------------------------------------------------------------ sensitivities

def test_margins_use_their_own_sensitivities(design, core):
    """Sensitivities recomputed by pandas from the records. Kills: every cell at the interior
    maximum (the old rule, margins 8.5-38x too noisy); column margins at the maximum over column
    margins; row margins at their own values or at the maximum over row margins; the grand
    total at the interior maximum."""
    df = design.data.assign(w=np.asarray(design.weights, float))
    df["wy"] = df.w * df[VALUE]
    inner = _own(df, [ROWS, COLS])
    rows_own, cols_own, tot_own = _own(df, [ROWS]), _own(df, [COLS]), _own(df, [])
    out = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80, seed=1)
    s = out.sensitivity
    assert list(s[ROWS]) == list(out.counts.long[ROWS]) and list(s.cell) == list(out.counts.long.cell)
    for stat in ("count", "mean"):
        dstar = inner[stat].max()
        got = s.set_index([ROWS, COLS])[stat]
        for key in inner.index:  # interior: the interior maximum
            assert got[key] == pytest.approx(dstar, rel=1e-12)
        for r in rows_own.index:  # row margins: the interior maximum too (seed 001 Table 4)
            assert got[(r, "All")] == pytest.approx(dstar, rel=1e-12)
        for c in cols_own.index:  # column margins: each its own records
            assert got[("All", c)] == pytest.approx(cols_own[stat][c], rel=1e-12)
        assert got[("All", "All")] == pytest.approx(tot_own[stat].iloc[0], rel=1e-12)
        # the wrong rules give other numbers on this design (each mutant fails above)
        assert (np.abs(cols_own[stat] / dstar - 1) > 0.05).any()
        assert abs(tot_own[stat].iloc[0] / dstar - 1) > 0.05
        assert abs(cols_own[stat].iloc[0] / cols_own[stat].iloc[1] - 1) > 0.05
        assert (np.abs(rows_own[stat] / dstar - 1) > 0.01).any()
    assert abs(rows_own["mean"].max() / inner["mean"].max() - 1) > 0.05
    # the same numbers drive the noise of the noiseless core
    for stat in ("count", "mean"):
        np.testing.assert_allclose(core["sensitivity"][stat], s[stat], rtol=1e-15)


def test_table_noise_law_per_kind_of_cell(design, core):
    """The tables' noise, over many draws through the sampler, has the law Laplace(D/eps) of
    each cell's own kind. Kills: margins noised at the interior scale (or the reverse), the
    replicate scale used for points, or noise added outside the sampler."""
    b = budget_split(80, 10)
    sc = _scales(core, b)
    z = {stat: [] for stat in ("count", "mean")}
    for _ in range(40):
        noisy = _add_noise(core, b)
        for stat, true in (("count", core["cnt"]), ("mean", core["mean"])):
            z[stat].append((noisy[stat] - true) / sc[stat])
    blk = core["block"]
    for stat in ("count", "mean"):
        Z = np.stack(z[stat])  # (draws, K_all, 1 + R) noise in units of its stated scale
        for kind in ("interior", "row margin", "column margin", "grand total"):
            x = Z[:, blk == kind, :].ravel()
            x = x[np.isfinite(x)]
            assert stats.kstest(x, stats.laplace().cdf).pvalue > KS_ALPHA / 8, (stat, kind)
    # column margins noised at the interior scale would be this much wider (means): rejected
    Z = np.stack(z["mean"])
    D = core["sensitivity"]["mean"]
    ratio = D[blk == "interior"][0] / D[blk == "column margin"]
    assert (ratio > 1.5).all(), ratio
    col = Z[:, blk == "column margin", :] / ratio[None, :, None]
    assert stats.kstest(col[np.isfinite(col)], stats.laplace().cdf).pvalue < 1e-6


# ------------------------------------------------------------------------------ the mechanism

def test_noiseless_part_and_half_samples(design, core):
    """Exact checks of the deterministic part. Kills: wrong cell sums or means, half-samples
    that are not halves, replicates computed with the full weights."""
    truth_c = tabulate(design, ROWS, COLS).long.estimate.to_numpy()
    truth_a = tabulate(design, ROWS, COLS, value=VALUE, stat="mean").long.estimate.to_numpy()
    np.testing.assert_allclose(core["cnt"][:, 0], truth_c, rtol=1e-12)
    np.testing.assert_allclose(core["mean"][:, 0], truth_a, rtol=1e-12)
    F = core["factors"]
    assert set(np.unique(F)) <= {0.0, 2.0}  # strata of 100, 50, 50 PSUs: exact half-samples
    strata = design.data[ROWS].to_numpy()
    for h in ("E", "H", "M"):
        kept = (F[strata == h] == 2).sum(axis=0)
        assert (kept == (strata == h).sum() // 2).all()
    # replicate estimates of the grand total and one interior cell, by hand
    w = np.asarray(design.weights, float)
    y = design.data[VALUE].to_numpy(float)
    np.testing.assert_allclose(core["cnt"][-1, 1:], (w[:, None] * F).sum(0), rtol=1e-12)
    np.testing.assert_allclose(core["mean"][-1, 1:], (w[:, None] * F * y[:, None]).sum(0)
                               / (w[:, None] * F).sum(0), rtol=1e-12)
    # the seed fixes the half-samples (and only them)
    again = _noiseless(design, [ROWS], [COLS], VALUE, 10, secret_rng(3), False, "All")
    np.testing.assert_array_equal(again["factors"], F)


def test_variance_formula():
    """V = sum_r (theta_r - theta_noisy)^2 / R, over replicates with an estimate. Kills: deviations
    from the replicate mean, R - 1 in the denominator, NaN replicates counted as zeros."""
    rng = np.random.default_rng(0)
    noisy = rng.normal(size=(6, 11))
    v = [sum((noisy[k, r] - noisy[k, 0]) ** 2 for r in range(1, 11)) / 10 for k in range(6)]
    np.testing.assert_allclose(_variance(noisy), v, rtol=1e-14)
    noisy[2, 4] = np.nan
    dev = [(noisy[2, r] - noisy[2, 0]) ** 2 for r in range(1, 11) if r != 4]
    assert _variance(noisy)[2] == pytest.approx(sum(dev) / 9, rel=1e-14)


def test_tables_are_the_noiseless_core_plus_sampler_noise(design, monkeypatch):
    """With the sampler replaced by the identity, the released tables are exactly the noiseless
    tables (point estimates and the replicate variance): no other noise source exists, and every
    value was handed to the sampler at its stated scale. Kills a numpy draw left anywhere."""
    seen = []

    def identity(values, scale):
        seen.append((np.asarray(values).size, float(scale)))
        return np.array(values, dtype=float)

    monkeypatch.setattr(lap_mod, "add_laplace", identity)
    out = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80, seed=7)
    core = _noiseless(design, [ROWS], [COLS], VALUE, 10, secret_rng(7), False, "All")
    np.testing.assert_array_equal(out.counts.long.estimate, core["cnt"][:, 0])
    np.testing.assert_array_equal(out.means.long.estimate, core["mean"][:, 0])
    np.testing.assert_allclose(out.counts.long.se ** 2, _variance(core["cnt"]), rtol=1e-14)
    np.testing.assert_allclose(out.means.long.se ** 2, _variance(core["mean"]), rtol=1e-14)
    K = core["cnt"].size
    assert sum(n for n, _ in seen) == 2 * K  # every count and mean cell, once
    sc = _scales(core, budget_split(80, 10))
    assert {s for _, s in seen} == set(np.unique(sc["count"])) | set(np.unique(sc["mean"]))


def test_seed_fixes_half_samples_only_noise_never_replays(design):
    """Kills: a seed that replays the noise (the published-seed reconstruction of issue 15)."""
    a = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80, seed=11)
    b = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80, seed=11)
    assert not np.allclose(a.counts.long.estimate, b.counts.long.estimate)
    assert not np.allclose(a.means.long.estimate, b.means.long.estimate)
    assert a.privacy.seeded is False and "not reproducible" in a.privacy.reproducibility


# ------------------------------------------------------------------------------ the record

def test_record_guarantee_names_sampler_not_dp(design):
    """Kills: a hand-written or stale guarantee, a label that claims DP for local sensitivity,
    a text that does not name the sampler."""
    out = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80)
    p = out.privacy
    assert p.family == "laplace" and p.m == 1 and p.epsilon == 80
    assert p.guarantee.startswith(NOT_DP) and p.differentially_private is False
    assert SAMPLER in p.guarantee_text and p.facts["sampler"] == SAMPLER
    assert p.facts["sensitivity"] == "local"
    assert "local" in p.guarantee


def test_record_holds_no_seed_and_no_sensitivity(design):
    """Kills: the seed or any confidential sensitivity / noise scale written to the public record."""
    seed = 918_273_645
    out = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80, seed=seed)
    d = out.privacy.to_dict()
    text = json.dumps(d)
    assert str(seed) not in text

    def keys(o):
        if isinstance(o, dict):
            for k, v in o.items():
                yield k
                yield from keys(v)
        elif isinstance(o, list):
            for v in o:
                yield from keys(v)

    # only the record's boolean "seeded" (False here: the noise never replays) may say "seed"
    assert [k for k in keys(d) if "seed" in k.lower() or "random" in k.lower()] == ["seeded"]
    assert d["seeded"] is False
    assert d["facts"]["sensitivity"] == "local"  # the rule's name, not a number

    def numbers(o):
        if isinstance(o, dict):
            for v in o.values():
                yield from numbers(v)
        elif isinstance(o, list):
            for v in o:
                yield from numbers(v)
        elif isinstance(o, (int, float)) and not isinstance(o, bool):
            yield float(o)

    nums = np.array(list(numbers(d)))
    secrets = np.r_[out.sensitivity["count"], out.sensitivity["mean"]]
    b = out.budget
    secrets = np.r_[secrets, secrets / b["eps_point"], secrets / b["eps_replicate"]]
    close = np.isclose(nums[:, None], secrets[None, :], rtol=1e-6, atol=0)
    assert not close.any(), nums[close.any(axis=1)]
    # no sensitivity digits in any string either (6 significant digits)
    for v in secrets:
        assert f"{v:.6g}" not in text


def test_shape_not_additive(design):
    a = laplace_tables(design, ROWS, COLS, VALUE, epsilon=80, seed=11)
    ref = tabulate(design, ROWS, COLS).long
    lg = a.counts.long
    assert list(lg.columns[: len(ref.columns)]) == list(ref.columns[: len(lg.columns)])
    assert (lg[[ROWS, COLS, "cell"]].to_numpy() == ref[[ROWS, COLS, "cell"]].to_numpy()).all()
    np.testing.assert_array_equal(lg.n_unweighted, ref.n_unweighted)
    inner = lg[lg.cell == "interior"].groupby(ROWS).estimate.sum()
    margin = lg[lg.cell == "row margin"].set_index(ROWS).estimate
    assert not np.allclose(inner[margin.index], margin, rtol=1e-9)  # deliberately not additive
    assert "sensitivity" not in a.counts.long.columns
    assert a.means.wide().shape == (4, 3)
    pwb = a.privacy.published_without_budget
    assert len(pwb) == 1 and "unweighted" in pwb[0]["item"]


def test_errors(design, api):
    with pytest.raises(ValueError, match="SurveyDesign"):
        laplace_tables(api["apistrat"], ROWS, COLS, VALUE, epsilon=1)
    with pytest.raises(ValueError, match="epsilon"):
        laplace_tables(design, ROWS, COLS, VALUE, epsilon=-1)
    with pytest.raises(ValueError, match="column"):
        laplace_tables(design, ROWS, COLS, "nope", epsilon=1)
    with pytest.raises(ValueError, match="random_state"):
        laplace_tables(design, ROWS, COLS, VALUE, epsilon=1, seed="abc")


def test_zero_local_sensitivity_is_refused(apistrat_design_for_zero):
    """Cells whose records share one weight (strata of a self-weighting stratum) have local
    count sensitivity 0: Laplace noise would be zero and the cell published exactly."""
    from surveysynth.privacy import laplace_tables

    with pytest.raises(ValueError, match="sensitivity is 0 .* published exactly"):
        laplace_tables(apistrat_design_for_zero, rows="stype", cols=None, value="api00",
                       epsilon=2.0, seed=1)


@pytest.fixture(scope="module")
def apistrat_design_for_zero():
    from surveysynth import SurveyDesign
    from surveysynth.datasets import load_api

    data = load_api("apistrat")
    return SurveyDesign(data, strata="stype", weights="pw", fpc="fpc")
