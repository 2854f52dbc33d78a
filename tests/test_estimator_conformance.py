"""One estimator protocol, checked on every design kind (issue 38, item 4), in the manner of
scikit-learn's ``check_estimator``: the same checks run on ``SurveyDesign``,
``ReplicateDesign``, ``SyntheticRelease``, ``DaskSurveyDesign`` and ``DaskReplicateDesign``.

For each estimator of :data:`surveysynth.results.ESTIMATOR_OPTIONS`:

* signature: every protocol option is a named parameter (not swallowed by ``**kwargs``) with
  the common default (``by=None``, ``na_rm=False``, ``level=0.95``, ``df=None``);
* return type: an :class:`~surveysynth.results.Estimate` with the output columns, whose
  ``.estimate`` / ``.se`` are those columns;
* ``vcov()``: square over the rows, labelled by ``names`` (unique), symmetric, diagonal se^2
  (the full matrix with ``covmat=True`` where the kind offers it);
* ``conf_int(level)``: the stored limits at the estimate's level; for Wald intervals
  ``estimate -+ crit * se`` with crit the normal or the t on the ``df`` column (on a release:
  the combining rule's df), and the same limits the estimator gives when called with that level;
* ``covmat=True`` (totals, means, proportions, ratios): the full covariance stored, symmetric,
  its diagonal se^2, the columns unchanged;
* ``ci="t"`` / ``ci="normal"`` and a numeric ``df`` honoured (a release never reports more df
  than the complete-data df it is given: the rule's df are capped by it);
* a statistic a kind cannot compute is declared (``unsupported_estimators``) and refused with
  ``NotImplementedError``.

Mutants these checks kill (each kept below and asserted to fail): a release estimator
missing ``ci`` (the state before issue 38), an estimator returning a plain DataFrame, a release
whose intervals ignore the rule's df (normal quantiles labelled t), and an Estimate whose
``vcov`` diagonal is not se^2.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.privacy.record import build_record
from surveysynth.release import SyntheticRelease
from surveysynth.results import (
    COMMON_DEFAULTS,
    ESTIMATOR_OPTIONS,
    WALD_KINDS,
    Covariance,
    Estimate,
    EstimatorProtocol,
    t_critical,
)

KINDS = ("taylor", "replicate", "release", "dask", "dask_replicate")
#: one call per estimator, every one by domain
CALLS = {
    "total": (("y",), {}),
    "mean": ((["y", "cat"],), {}),
    "proportion": (("cat",), {}),
    "ratio": (("y", "x"), {}),
    "quantile": (("y", [0.25, 0.5]), {}),
}
VALUE_COLUMNS = ("estimate", "se", "ci_low", "ci_high", "df")


def make_frame(seed: int = 7, n: int = 240) -> pd.DataFrame:
    """A small stratified two-stage-cluster sample: 4 strata x 5 PSUs, a domain variable g."""
    rng = np.random.default_rng(seed)
    st = np.repeat(np.arange(4), n // 4)
    psu = st * 5 + rng.integers(0, 5, n)
    return pd.DataFrame({
        "st": st, "psu": psu, "w": rng.uniform(10, 30, n),
        "y": rng.lognormal(3, 0.4, n) + st, "x": rng.uniform(1, 2, n),
        "cat": pd.Categorical(rng.choice(["lo", "hi"], n), categories=["lo", "hi"]),
        "g": rng.choice(["a", "b"], n),
    })


def _release(frame: pd.DataFrame, m: int = 3) -> SyntheticRelease:
    """A hand-built partial-synthesis release: m perturbed copies of the sample."""
    rng = np.random.default_rng(3)
    designs = [ss.SurveyDesign(frame.assign(y=frame["y"] + rng.normal(0, 2, len(frame))),
                               ids="psu", strata="st", weights="w") for _ in range(m)]
    record = build_record("none", "test copy", m=m, epsilon=None, seeded=True, notes=["test"])
    return SyntheticRelease(designs, "partial", record)


@pytest.fixture(scope="module")
def designs(request):
    """Every design kind over the same sample (the Dask kinds on the module's LocalCluster)."""
    frame = make_frame()
    taylor = ss.SurveyDesign(frame, ids="psu", strata="st", weights="w")
    rep = taylor.jackknife()
    out = {"taylor": taylor, "replicate": rep, "release": _release(frame)}
    import dask.dataframe as dd

    from surveysynth.engines.dask_engine import DaskReplicateDesign, DaskSurveyDesign

    request.getfixturevalue("client")
    out["dask"] = DaskSurveyDesign(dd.from_pandas(frame, npartitions=2), ids="psu",
                                   strata="st", weights="w")
    A = rep.replicate_weights("analysis")
    names = [f"rw{i}" for i in range(A.shape[1])]
    wide = pd.concat([frame, pd.DataFrame(A, columns=names)], axis=1)
    out["dask_replicate"] = DaskReplicateDesign(
        dd.from_pandas(wide, npartitions=2), repweights=names, weights="w", type="JKn",
        scale=rep.scale, rscales=rep.rscales)
    return out


# ---------------------------------------------------------------------- the checks
def check_signature(design, method: str) -> None:
    """Every protocol option of ``method`` is a named parameter with the common default."""
    fn = getattr(design, method, None)
    assert callable(fn), f"{type(design).__name__} has no {method}()"
    params = inspect.signature(fn).parameters
    missing = [o for o in ESTIMATOR_OPTIONS[method] if o not in params]
    assert not missing, f"{type(design).__name__}.{method}() lacks options {missing}"
    for opt in (o for o in ESTIMATOR_OPTIONS[method] if o in COMMON_DEFAULTS):
        got, default = params[opt].default, COMMON_DEFAULTS[opt]
        assert got == default, (f"{type(design).__name__}.{method}({opt}=) defaults to "
                                f"{got!r}, the protocol's is {default!r}")
    if "ci" in params:
        assert params["ci"].default in WALD_KINDS


def _call(design, method: str, **kw):
    args, base = CALLS[method]
    return getattr(design, method)(*args, by="g", **{**base, **kw})


def check_wald(res: Estimate, what: str) -> None:
    """Wald intervals are estimate -+ crit * se with crit from the level, the kind and df."""
    assert res.ci_kind in WALD_KINDS, what
    est, se = res["estimate"].to_numpy(float), res["se"].to_numpy(float)
    lo, hi = res["ci_low"].to_numpy(float), res["ci_high"].to_numpy(float)
    if res.ci_kind == "t":
        crit = t_critical(res["df"].to_numpy(float), res.conf_level)
    else:
        crit = np.full(est.shape, float(t_critical(np.inf, res.conf_level)))
    np.testing.assert_allclose((hi - lo) / 2, crit * se, rtol=1e-9, err_msg=what)
    np.testing.assert_allclose((hi + lo) / 2, est, rtol=1e-12, err_msg=what)


def check_result(design, method: str) -> None:
    """Return type, vcov, conf_int and the ci/df options of one estimator."""
    kind = type(design).__name__
    if method in getattr(design, "unsupported_estimators", ()):
        with pytest.raises(NotImplementedError):
            _call(design, method)
        return
    res = _call(design, method)
    what = f"{kind}.{method}"
    assert isinstance(res, Estimate), f"{what} returned {type(res).__name__}, not an Estimate"
    for c in VALUE_COLUMNS:
        assert c in res.columns, f"{what}: no {c!r} column"
    assert res.estimate.equals(res["estimate"]) and res.se.equals(res["se"]), what
    k = len(res)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # only the diagonal is known
        V = res.vcov()
    assert V.shape == (k, k), what
    assert list(V.index) == list(V.columns) == res.names and len(set(res.names)) == k, what
    np.testing.assert_array_equal(V.to_numpy(), V.to_numpy().T, err_msg=what)
    np.testing.assert_allclose(np.diag(V.to_numpy()), res["se"].to_numpy(float) ** 2,
                               rtol=1e-12, err_msg=what)
    ci = res.conf_int(res.conf_level)
    np.testing.assert_array_equal(ci["ci_low"], res["ci_low"], err_msg=what)
    np.testing.assert_array_equal(ci["ci_high"], res["ci_high"], err_msg=what)
    if res.ci_kind in WALD_KINDS:
        check_wald(res, what)
        other = res.conf_int(level=0.9)
        again = Estimate.wrap(res.assign(ci_low=other["ci_low"], ci_high=other["ci_high"]),
                              0.9, res.ci_kind)
        check_wald(again, f"{what} conf_int(0.9)")
        if method != "quantile":  # a quantile's SE depends on the level (Woodruff)
            rerun = _call(design, method, level=0.9)
            np.testing.assert_allclose(other.to_numpy(), rerun[["ci_low", "ci_high"]].to_numpy(),
                                       rtol=1e-12, err_msg=what)
    else:
        with pytest.raises(ValueError, match="level="):
            res.conf_int(level=0.9)
    if "ci" in ESTIMATOR_OPTIONS[method]:
        for ci_kind in WALD_KINDS:
            r = _call(design, method, ci=ci_kind)
            assert r.ci_kind == ci_kind, what
            check_wald(r, f"{what} ci={ci_kind}")
    if "covmat" in ESTIMATOR_OPTIONS[method]:
        rc = _call(design, method, covmat=True)
        assert rc.has_covariance, f"{what}: covmat=True stored no covariance"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            C = rc.vcov().to_numpy()
        assert C.shape == (k, k), what
        np.testing.assert_allclose(C, C.T, rtol=1e-12, atol=1e-12 * np.abs(C).max(),
                                   err_msg=what)
        np.testing.assert_allclose(np.diag(C), rc["se"].to_numpy(float) ** 2, rtol=1e-12,
                                   err_msg=what)
        for c in ("estimate", "se"):  # covmat adds the matrix, it changes no column
            np.testing.assert_allclose(rc[c], res[c], rtol=1e-12, err_msg=f"{what} {c}")
    r5 = _call(design, method, df=5)
    d5 = r5["df"].to_numpy(float)
    assert (d5 <= 5 + 1e-12).all() and (d5 > 0).all(), f"{what}: df={d5} with df=5"


# ---------------------------------------------------------------------- the tests
@pytest.mark.parametrize("kind", KINDS)
def test_estimators_conform(designs, kind):
    design = designs[kind]
    assert isinstance(design, EstimatorProtocol)
    for method in ESTIMATOR_OPTIONS:
        check_signature(design, method)
        check_result(design, method)


@pytest.mark.parametrize("kind", ("taylor", "replicate"))
def test_covmat_gives_the_full_covariance(designs, kind):
    """With ``covmat=True`` vcov() is the full matrix (off-diagonal entries non-zero: the
    two variables share PSUs), the one :func:`surveysynth.vcov` reads, and no warning."""
    res = designs[kind].mean(["y", "x"], by="g", covmat=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        V = res.vcov()
    pd.testing.assert_frame_equal(V, ss.vcov(res))
    off = V.to_numpy()[~np.eye(len(res), dtype=bool)]
    assert (off != 0).any()
    np.testing.assert_allclose(np.diag(V), res["se"] ** 2, rtol=1e-12)


@pytest.mark.parametrize(("dask", "native"), [("dask", "taylor"),
                                              ("dask_replicate", "replicate")])
def test_dask_covmat_is_the_native_one(designs, dask, native):
    """The Dask designs' covariance (group sums' design; svrVar of the replicate matrix)
    equals the in-memory design's to rounding, off-diagonal entries included."""
    got = designs[dask].ratio(["y", "x"], "x", by="g", covmat=True).vcov()
    ref = designs[native].ratio(["y", "x"], "x", by="g", covmat=True).vcov()
    assert list(got.index) == list(ref.index)
    scale = np.abs(ref.to_numpy()).max()
    np.testing.assert_allclose(got.to_numpy(), ref.to_numpy(), rtol=1e-10, atol=1e-13 * scale)


def test_release_covmat_is_the_rule_on_the_sets_matrices(designs):
    """Partial synthesis: T = Ubar + B/m from the sets' own covmat results (by hand), its
    diagonal the combined variance; full synthesis (1 + 1/m) B - Ubar; a row floored at T_s
    (copies of one design: b = 0, T_f < 0) has no matrix version and is refused."""
    rel = designs["release"]
    got = rel.mean(["y", "x"], by="g", covmat=True)
    per = [d.mean(["y", "x"], by="g", covmat=True) for d in rel.designs]
    Q = np.vstack([p["estimate"].to_numpy() for p in per])
    Ubar = sum(p.vcov().to_numpy() for p in per) / rel.m
    B = np.cov(Q, rowvar=False, ddof=1)
    np.testing.assert_allclose(got.vcov().to_numpy(), Ubar + B / rel.m, rtol=1e-10)
    np.testing.assert_allclose(np.diag(got.vcov()), got["variance"], rtol=0)
    # full synthesis needs sets that differ more than their own SEs (else T_f <= 0)
    frame, rng = make_frame(), np.random.default_rng(8)
    sets = [ss.SurveyDesign(frame.assign(y=frame["y"] + shift + rng.normal(0, 2, len(frame))),
                            ids="psu", strata="st", weights="w") for shift in (0.0, 4.0, 9.0)]
    full = SyntheticRelease(sets, "full", rel.privacy, n_original=240)
    fgot = full.mean("y", by="g", covmat=True)
    assert not fgot["note"].astype(bool).any()  # no fallback row
    per = [d.mean("y", by="g", covmat=True) for d in sets]
    Q = np.vstack([p["estimate"].to_numpy() for p in per])
    Ubar = sum(p.vcov().to_numpy() for p in per) / 3
    np.testing.assert_allclose(fgot.vcov().to_numpy(),
                               (1 + 1 / 3) * np.cov(Q, rowvar=False, ddof=1) - Ubar, rtol=1e-10)
    d0 = rel.designs[0]
    copies = SyntheticRelease([d0, d0], "full", build_record(
        "none", "test copy", m=2, epsilon=None, seeded=True, notes=["test"]), n_original=240)
    with pytest.raises(ValueError, match=r"floored at T_s"):
        copies.mean("y", covmat=True)
    assert np.isfinite(copies.mean("y")["se"]).all()  # without covmat the floor applies


def test_diagonal_vcov_warns_and_derived_frames_are_plain(designs):
    res = designs["taylor"].mean(["y", "x"], by="g")
    with pytest.warns(UserWarning, match="covmat=True"):
        res.vcov()
    with pytest.raises(ValueError, match="covmat=True"):
        ss.vcov(res)  # a contrast needs the covariances: still an error
    sub = res[res["g"] == "a"]
    assert type(sub) is pd.DataFrame and type(res.copy()) is pd.DataFrame
    full = designs["taylor"].mean(["y", "x"], by="g", covmat=True)
    full.loc[0, "estimate"] += 1.0  # edited in place: the covariance no longer applies
    with pytest.raises(ValueError, match="reordered/edited"):
        full.vcov()


@pytest.mark.parametrize("kind", ("taylor", "release"))
def test_conf_int_default_level_is_95_as_r_confint(designs, kind):
    """conf_int() is at 0.95 whatever level the estimate was made at (R ``confint``); a
    Woodruff quantile made at 0.9 cannot give it (its limits are not estimate -+ crit se)."""
    d = designs[kind]
    at90 = d.mean("y", by="g", level=0.9)
    assert at90.conf_level == 0.9
    np.testing.assert_allclose(at90.conf_int().to_numpy(),
                               d.mean("y", by="g")[["ci_low", "ci_high"]].to_numpy(), rtol=1e-12)
    if kind == "taylor":
        with pytest.raises(ValueError, match="woodruff"):
            d.quantile("y", 0.5, level=0.9).conf_int()


def test_release_ci_df_level_follow_the_rule(designs):
    """A release takes ci, df, level: "t" is the rule's t on its df (default), "normal" the
    normal quantile; df=np.inf lifts the design-df cap (larger rule df), a number caps it."""
    rel = designs["release"]
    base = rel.mean("y", by="g")
    assert base.ci_kind == "t" and base.conf_level == 0.95
    np.testing.assert_array_equal(base["ci_low"], rel.mean("y", by="g", ci="t")["ci_low"])
    free = rel.mean("y", by="g", df=np.inf)
    assert (free["df"].to_numpy() > base["df"].to_numpy()).all()
    capped = rel.mean("y", by="g", df=3)
    assert (capped["df"].to_numpy() < 3).all()
    np.testing.assert_array_equal(capped["estimate"], base["estimate"])
    with pytest.raises(ValueError, match="ci='z'"):
        rel.mean("y", ci="z")


def test_glm_conf_int_takes_level_and_alpha_is_deprecated(designs):
    fit = ss.svyglm("y ~ x", designs["taylor"])
    new = fit.conf_int(level=0.9)
    with pytest.warns(DeprecationWarning, match="level=0.9"):
        old = fit.conf_int(0.1)
    pd.testing.assert_frame_equal(new, old)
    with pytest.warns(DeprecationWarning):
        pd.testing.assert_frame_equal(fit.conf_int(alpha=0.05), fit.conf_int())
    with pytest.raises(ValueError, match="level= only"):
        fit.conf_int(0.1, level=0.9)
    assert fit.summary(level=0.9).text == fit.summary(level=0.9).text


# ---------------------------------------------------------------------- mutants
class _NoCiRelease(SyntheticRelease):
    """Mutant: the release estimator of before issue 38 (no ci, df, engine, covmat)."""

    def mean(self, variables, by=None, na_rm=False, level=0.95):
        return super().mean(variables, by=by, na_rm=na_rm, level=level)


class _PlainFrameDesign(ss.SurveyDesign):
    """Mutant: an estimator that returns a bare DataFrame."""

    def total(self, variables, by=None, na_rm=False, deff=False, engine="native",
              level=0.95, ci="normal", df=None, covmat=False):
        return pd.DataFrame(super().total(variables, by=by, na_rm=na_rm, level=level, ci=ci,
                                          df=df))


class _NormalLabelledT(SyntheticRelease):
    """Mutant: a release whose intervals ignore the rule's df (normal quantiles) but claim
    the rule's t."""

    def _combine_frames(self, frames, additive, level, ci="t"):
        out = super()._combine_frames(frames, additive, level, "normal")
        return Estimate.wrap(out, level, "t")


class _WrongDiagonal(ss.SurveyDesign):
    """Mutant: a covariance whose diagonal is not the reported se^2 (e.g. one computed before a
    calibration, or of another level's SEs)."""

    def ratio(self, *args, **kw):
        res = super().ratio(*args, **kw)
        res.set_covariance(Covariance(tuple(res.names), res["estimate"].to_numpy(float),
                                      np.diag(res["se"].to_numpy(float) ** 2 * 1.01)))
        return res


def test_mutants_fail_the_checks(designs):
    rel = designs["release"]
    frame = make_frame()
    no_ci = _NoCiRelease(rel.designs, "partial", rel.privacy)
    with pytest.raises(AssertionError, match=r"lacks options \['ci', 'df', 'engine', 'covmat'\]"):
        check_signature(no_ci, "mean")
    plain = _PlainFrameDesign(frame, ids="psu", strata="st", weights="w")
    check_signature(plain, "total")  # the signature is right ...
    with pytest.raises(AssertionError, match="not an Estimate"):
        check_result(plain, "total")  # ... the result type is not
    normal = _NormalLabelledT(rel.designs, "partial", rel.privacy)
    with pytest.raises(AssertionError):
        check_result(normal, "mean")
    wrong = _WrongDiagonal(frame, ids="psu", strata="st", weights="w")
    with pytest.raises(AssertionError):
        check_result(wrong, "ratio")
    # and the unmutated classes pass the same checks
    check_result(rel, "mean")
    check_result(designs["taylor"], "ratio")
