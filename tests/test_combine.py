"""combine(): METHODS section 4 fixture, hand (loop) computations, mitools live, fallback."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from surveysynth.combine import NOTE_FALLBACK, NOTE_M1, combine


def _hand(q: list[float], u: list[float], kind: str, n=None, n_syn=None, nu_com=None):
    """Scalar textbook formulas with explicit loops (independent of the vectorized code)."""
    m = len(q)
    qbar = sum(q) / m
    ubar = sum(u) / m
    if m == 1:
        return dict(estimate=qbar, variance=ubar, df=math.inf, between=math.nan, within=ubar)
    b = sum((x - qbar) ** 2 for x in q) / (m - 1)
    if kind == "partial":
        T = ubar + b / m
        df = (m - 1) * (1 + ubar / (b / m)) ** 2
    elif kind == "full":
        T = (1 + 1 / m) * b - ubar
        df = (m - 1) * (1 - m * ubar / ((m + 1) * b)) ** 2
        if T <= 0:
            T, df = n_syn / n * ubar, math.inf
    else:
        T = ubar + (1 + 1 / m) * b
        r = (1 + 1 / m) * b / ubar
        df = (m - 1) * (1 + 1 / r) ** 2
        if nu_com is not None:
            gamma = (1 + 1 / m) * b / T
            nu_obs = (nu_com + 1) / (nu_com + 3) * nu_com * (1 - gamma)
            df = 1 / (1 / df + 1 / nu_obs)
    return dict(estimate=qbar, variance=T, df=df, between=b, within=ubar)


def test_methods_fixture():
    q = [0.12182, 0.13209]
    u = [0.02121**2, 0.02516**2]
    out = combine(q, u, kind="partial").iloc[0]
    assert out.estimate == pytest.approx(0.126955, rel=1e-9)
    assert out.within == pytest.approx(5.414448e-4, rel=1e-6)
    assert out["between"] == pytest.approx(5.273645e-5, rel=1e-6)
    assert out.variance == pytest.approx(5.678131e-4, rel=1e-6)
    assert out.note == ""
    crit = stats.t.ppf(0.975, out.df)
    assert out.ci_low == pytest.approx(out.estimate - crit * math.sqrt(out.variance), rel=1e-12)
    full = combine(q, u, kind="full", n=1000, n_syn=500).iloc[0]
    assert (1 + 1 / 2) * out["between"] - out.within < 0  # T_f negative: fallback applies
    assert full.note == NOTE_FALLBACK
    assert full.variance == pytest.approx(0.5 * 5.414448e-4, rel=1e-6)
    assert full.df == np.inf
    assert full.ci_high == pytest.approx(full.estimate + 1.959963984540054 * full.se, rel=1e-12)


@pytest.mark.parametrize("m", [1, 2, 3, 10])
@pytest.mark.parametrize("kind", ["partial", "full", "mi"])
def test_against_hand_loops(m, kind):
    rng = np.random.default_rng(100 * m + len(kind))
    k = 7
    q = rng.normal(5, 1, size=(m, k))
    u = rng.uniform(0.05, 2.0, size=(m, k))
    out = combine(q, u, kind=kind, n=400, n_syn=300)
    assert list(out.columns) == [
        "estimate", "variance", "se", "df", "ci_low", "ci_high", "between", "within", "m", "note"
    ]
    for j in range(k):
        h = _hand(q[:, j].tolist(), u[:, j].tolist(), kind, n=400, n_syn=300)
        row = out.iloc[j]
        for key in ("estimate", "variance", "df", "within"):
            assert row[key] == pytest.approx(h[key], rel=1e-12), (key, j)
        if m == 1:
            assert np.isnan(float(row["between"])) and row.note == NOTE_M1
        else:
            assert row["between"] == pytest.approx(h["between"], rel=1e-12)
        crit = stats.t.ppf(0.975, h["df"]) if math.isfinite(h["df"]) else stats.norm.ppf(0.975)
        assert row.ci_low == pytest.approx(h["estimate"] - crit * math.sqrt(h["variance"]), rel=1e-10)
        assert row.ci_high == pytest.approx(h["estimate"] + crit * math.sqrt(h["variance"]), rel=1e-10)
        # column j alone gives the same answer as inside the (m, k) call
        alone = combine(q[:, j], u[:, j], kind=kind, n=400, n_syn=300).iloc[0]
        assert alone["variance"] == pytest.approx(row["variance"], rel=1e-14)


def test_full_fallback_triggers_exactly_when_tf_nonpositive():
    # m = 2, q = (0, 2): b = 2, (1 + 1/2) b = 3 -> T_f = 3 - ubar, zero at ubar = 3 exactly
    q = np.array([[0.0] * 3, [2.0] * 3])
    u = np.array([[3.0, 3.0 - 1e-9, 3.0 + 1e-9]] * 2)
    out = combine(q, u, kind="full", n=10, n_syn=20)
    assert out.note.tolist() == [NOTE_FALLBACK, "", NOTE_FALLBACK]
    assert out.variance.tolist()[0] == pytest.approx(6.0)
    assert out.variance.tolist()[1] == pytest.approx(1e-9, rel=1e-6)
    # random sweep: note set iff the hand T_f <= 0
    rng = np.random.default_rng(7)
    m = 5
    q = rng.normal(size=(m, 400))
    u = rng.uniform(0, 2.5, size=(m, 400))
    res = combine(q, u, kind="full", n=100, n_syn=100)
    tf = (1 + 1 / m) * q.var(axis=0, ddof=1) - u.mean(axis=0)
    assert ((res.note == NOTE_FALLBACK).to_numpy() == (tf <= 0)).all()
    assert 0 < (tf <= 0).sum() < 400
    assert np.allclose(res.variance[tf > 0], tf[tf > 0])


def test_zero_between_partial():
    out = combine([1.0, 1.0, 1.0], [0.2, 0.3, 0.4]).iloc[0]
    assert out["between"] == 0 and out.variance == pytest.approx(0.3) and out.df == np.inf


def test_mi_against_mitools_live():
    import rpy2  # noqa: F401  (installed by make test: must import)

    from r_bridge import r_session

    rng = np.random.default_rng(3)
    m, k = 5, 3
    q = rng.normal(size=(m, k))
    u = rng.uniform(0.1, 1.0, size=(m, k))
    with r_session("mitools") as (ro, pk):
        res = ro.ListVector({f"r{i}": ro.FloatVector(q[i]) for i in range(m)})
        var = ro.ListVector(
            {f"v{i}": ro.r["diag"](ro.FloatVector(u[i]), nrow=k) for i in range(m)}
        )
        fit = pk["mitools"].MIcombine(ro.r["unname"](res), ro.r["unname"](var))
        coef = np.asarray(fit.rx2("coefficients"))
        V = np.array(ro.r["diag"](fit.rx2("variance")))
        df = np.asarray(fit.rx2("df"))
    out = combine(q, u, kind="mi")
    np.testing.assert_allclose(out.estimate, coef, rtol=1e-12)
    np.testing.assert_allclose(out.variance, V, rtol=1e-12)
    np.testing.assert_allclose(out.df, df, rtol=1e-10)


def test_mi_barnard_rubin_df():
    q = np.array([1.0, 1.4, 0.7, 1.1])
    u = np.array([0.3, 0.25, 0.35, 0.3])
    out = combine(q, u, kind="mi", df_complete=20).iloc[0]
    h = _hand(q.tolist(), u.tolist(), "mi", nu_com=20)
    assert out.df == pytest.approx(h["df"], rel=1e-12)
    big = combine(q, u, kind="mi").iloc[0]
    assert out.df < big.df  # finite complete-data df shrinks the df


def test_errors():
    with pytest.raises(ValueError, match="kind"):
        combine([1, 2], [1, 1], kind="imputation")
    with pytest.raises(ValueError, match="shape"):
        combine([[1, 2]], [1, 1])
    with pytest.raises(ValueError, match="negative value -1"):
        combine([1, 2], [1, -1])
    with pytest.raises(ValueError, match="pass n"):
        combine([0.0, 2.0], [5.0, 5.0], kind="full")
    # no fallback needed: n not required
    assert combine([0.0, 2.0], [1.0, 1.0], kind="full").note[0] == ""


def test_package_attribute_stays_callable():
    import surveysynth
    import surveysynth.release  # noqa: F401  (imports the surveysynth.combine module)

    out = surveysynth.combine([1.0, 3.0], [1.0, 1.0])
    assert out.estimate[0] == 2.0 and out["between"][0] == 2.0
