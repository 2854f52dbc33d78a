"""r_bridge: data.frame conversion, designs to and from R, R sampling, threads, R errors, no-R.

Every reference number is computed live by R (survey 4.1, sampling 2.9) through rpy2.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

# R is installed by `make test`: without it these tests must fail, not skip
import r_bridge  # noqa: E402
import surveysynth as ss

assert r_bridge.r_available(), "R and rpy2 are required (make test installs them)"

from r_bridge import RError, r_session  # noqa: E402
from r_bridge.convert import pandas_to_r, r_to_pandas  # noqa: E402
from r_bridge.designs import from_r, to_r  # noqa: E402
from r_bridge.sampling import inclusion_probabilities_r, pps_sample_r  # noqa: E402
from surveysynth.datasets import load_api  # noqa: E402


def mixed_frame() -> pd.DataFrame:
    return pd.DataFrame({
        "f": [1.5, np.nan, 3.0, -0.0, 1e300],
        "i": np.array([1, 2, 3, -4, 0], dtype=np.int64),
        "I": pd.array([1, None, 3, 2**31 - 1, -(2**31) + 1], dtype="Int64"),
        "I_full": pd.array([1, 2, 3, 4, 5], dtype="Int64"),
        "b": [True, False, True, False, True],
        "B": pd.array([True, None, False, True, None], dtype="boolean"),
        "s": ["a", None, "c", "é", ""],
        "o": pd.Series(["x", None, "y", "z", "x"], dtype=object),
        "c": pd.Categorical(["lo", None, "hi", "lo", "hi"], categories=["lo", "mid", "hi"]),
        "co": pd.Categorical(["b", "a", None, "a", "b"], categories=["b", "a"], ordered=True),
        "d": pd.to_datetime(["2020-01-01", None, "1969-12-31", "2300-05-06", "1900-02-28"]),
        "t": pd.to_datetime(["2020-01-01 10:00:01.5", None, "1969-12-31 23:59:59",
                             "2021-01-01", "2021-01-01"], format="ISO8601"),
        "tz": pd.to_datetime(["2020-01-01 10:00", None, "2020-06-01", "2021-01-01",
                              "2021-01-01 23:00"], format="ISO8601").tz_localize("Europe/Paris"),
        "big": np.array([1, 2**40, -3, 4, 2**53], dtype=np.int64),
        "F": pd.array([1.5, None, 2, 3, 4], dtype="Float64"),
    })


# ----------------------------------------------------------------------------- conversion
def test_pandas_round_trip_every_column_unchanged():
    df = mixed_frame()
    before = df.copy(deep=True)
    back = r_to_pandas(pandas_to_r(df))
    pd.testing.assert_frame_equal(df, before)  # caller's frame untouched
    assert list(back.columns) == list(df.columns)
    for c in df.columns:
        pd.testing.assert_series_equal(back[c], df[c], check_exact=True, obj=f"column {c}")


def test_pandas_to_r_types_seen_from_r():
    rdf = pandas_to_r(mixed_frame())
    with r_session() as (ro, _):
        info = ro.r("""function(x) sapply(x, function(v) paste(class(v), collapse = "/"))""")(rdf)
        classes = dict(zip(list(info.names), list(info), strict=True))
        nas = ro.r("function(x) sapply(x, function(v) sum(is.na(v)))")(rdf)
        nas = dict(zip(list(nas.names), [int(v) for v in nas], strict=True))
        lev = list(ro.r("function(x) levels(x$c)")(rdf))
        ordered = bool(ro.r("function(x) is.ordered(x$co)")(rdf)[0])
        dates = [str(v) for v in ro.r("function(x) ifelse(is.na(x$d), 'missing', format(x$d))")(rdf)]
        paris = list(ro.r("function(x) format(x$tz, '%Y-%m-%d %H:%M %Z')")(rdf))
        I_vals = list(ro.r("function(x) x$I")(rdf))
    assert classes == {
        "f": "numeric", "i": "integer", "I": "integer", "I_full": "integer", "b": "logical",
        "B": "logical", "s": "character", "o": "character", "c": "factor",
        "co": "ordered/factor", "d": "Date", "t": "POSIXct/POSIXt", "tz": "POSIXct/POSIXt",
        "big": "numeric", "F": "numeric",
    }
    df = mixed_frame()
    assert nas == {c: int(df[c].isna().sum()) for c in df.columns}
    assert lev == ["lo", "mid", "hi"] and ordered
    assert dates[0] == "2020-01-01" and dates[3] == "2300-05-06" and dates[1] == "missing"
    assert paris[0] == "2020-01-01 10:00 CET" and paris[2] == "2020-06-01 00:00 CEST"
    assert I_vals[3] == 2**31 - 1


def test_r_data_frame_round_trip_identical_in_r():
    """An R data.frame with factors and NA -> pandas -> R: identical() column by column."""
    with r_session() as (ro, _):
        rdf = ro.r("""data.frame(
            x = c(1.5, NA, -2, NaN), n = c(1L, NA, 3L, 4L), l = c(TRUE, NA, FALSE, TRUE),
            s = c("a", NA, "b", "a"), f = factor(c("z", NA, "y", "z"), levels = c("z", "y", "w")),
            o = factor(c("lo", "hi", "hi", NA), levels = c("lo", "hi"), ordered = TRUE),
            d = as.Date(c("2001-02-03", NA, "1960-01-01", "2024-02-29")),
            stringsAsFactors = FALSE)""")
        back = pandas_to_r(r_to_pandas(rdf))
        same = ro.r("""function(a, b) sapply(names(a), function(n) {
            x <- a[[n]]; y <- b[[n]]
            if (is.double(x) && !inherits(x, "Date")) x[is.nan(x)] <- NA  # pandas has one NaN
            identical(x, y) })""")(rdf, back)
        result = dict(zip(list(same.names), [bool(v) for v in same], strict=True))
    assert result == dict.fromkeys(["x", "n", "l", "s", "f", "o", "d"], True)


def test_api_tables_factor_levels_match_r():
    df = load_api("apistrat")
    with r_session("survey") as (ro, _):
        lev = ro.r("function() { e <- new.env(); data(api, package = 'survey', envir = e); "
                   "list(levels(e$apistrat$stype), sum(is.na(e$apistrat$acs.k3))) }")()
    assert list(df["stype"].cat.categories) == list(lev[0])
    assert int(df["acs.k3"].isna().sum()) == int(lev[1][0])


@pytest.mark.parametrize(
    "col, match",
    [
        (pd.Series(pd.to_timedelta([1, 2], unit="D")), "no R data.frame counterpart"),
        (pd.Series(["a", 1], dtype=object), "holds mixed"),
        (pd.Series(np.array([1, 2**60], dtype=np.int64)), "beyond 2\\^53"),
    ],
)
def test_pandas_to_r_refuses_what_r_cannot_hold(col, match):
    with pytest.raises(ValueError, match=match) as err:
        pandas_to_r(pd.DataFrame({"bad_col": col}))
    assert "bad_col" in str(err.value)


# ----------------------------------------------------------------------------- designs
R_DESIGNS = {
    "apistrat": "svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)",
    "apiclus1": "svydesign(id = ~dnum, weights = ~pw, fpc = ~fpc, data = apiclus1)",
    "apiclus2": "svydesign(id = ~dnum + snum, fpc = ~fpc1 + fpc2, data = apiclus2)",
    "apiclus2_nofpc": "svydesign(id = ~dnum + snum, weights = ~pw, data = apiclus2)",
    "apistrat_nest": "svydesign(id = ~dnum, strata = ~stype, weights = ~pw, data = apistrat, "
                     "nest = TRUE)",
    "apisrs_probs": "svydesign(id = ~1, probs = 1/apisrs$pw, data = apisrs)",
}

_R_EST = """function(d) {
  m <- svymean(~api00 + api99 + stype, d); t <- svytotal(~api00 + api99, d)
  c(coef(m), SE(m), coef(t), SE(t))
}"""


def _r_design(code: str):
    with r_session("survey") as (ro, _):
        return ro.r(f"local({{ data(api, package = 'survey'); {code} }})")


def _r_estimates(rd) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(_R_EST)(rd), dtype=float)


@pytest.mark.parametrize("name", list(R_DESIGNS))
def test_r_design_to_python_and_back_gives_identical_estimates(name):
    rd = _r_design(R_DESIGNS[name])
    ref = _r_estimates(rd)
    design = from_r(rd)
    assert isinstance(design, ss.SurveyDesign)
    again = _r_estimates(to_r(design))
    np.testing.assert_allclose(again, ref, rtol=1e-12, atol=0)
    # the Python design itself gives R's numbers
    m = design.mean(["api00", "api99"])
    np.testing.assert_allclose(m["estimate"], ref[:2], rtol=1e-9)
    np.testing.assert_allclose(m["se"], ref[5:7], rtol=1e-9)


def test_from_r_reads_design_variables_by_name():
    d = from_r(_r_design(R_DESIGNS["apiclus2"]))
    assert d.ids_vars == ["dnum", "snum"] and d.fpc_vars == ["fpc1", "fpc2"]
    assert d.strata_vars is None and not d.nest
    d = from_r(_r_design(R_DESIGNS["apistrat_nest"]))
    assert d.ids_vars == ["dnum"] and d.strata_vars == ["stype"] and d.nest
    assert d.weights_var == "pw"


def test_from_r_copies_lonely_psu_option():
    with r_session("survey") as (ro, _):
        ro.r("options(survey.lonely.psu = 'adjust')")
        try:
            d = from_r(_r_design(R_DESIGNS["apistrat"]))
        finally:
            ro.r("options(survey.lonely.psu = NULL)")
    assert d.lonely_psu == "adjust"


def test_python_design_to_r_call_and_subset():
    df = load_api("apistrat")
    before = df.copy(deep=True)
    d = ss.SurveyDesign(df, strata="stype", weights="pw", fpc="fpc")
    sub = d.subset(d.data["sch.wide"] == "Yes")
    rd = to_r(sub)
    with r_session("survey") as (ro, _):
        call = "".join(ro.r("function(d) deparse(d$call)")(to_r(d)))
        est = np.array(ro.r("function(d) { m <- svymean(~api00, d); c(coef(m), SE(m)) }")(rd))
        ref = np.array(ro.r("""function() { data(api, package = 'survey')
            d <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
            m <- svymean(~api00, subset(d, sch.wide == 'Yes')); c(coef(m), SE(m)) }""")())
    assert call.replace("    ", "") == (
        "svydesign(ids = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = data)"
    )
    np.testing.assert_allclose(est, ref, rtol=1e-12)
    pd.testing.assert_frame_equal(df, before)


@pytest.mark.parametrize(
    "code, match",
    [
        ("subset(svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, "
         "data = apistrat), sch.wide == 'Yes')", "subset whose dropped rows"),
        ("svydesign(id = apisrs$dnum, weights = ~pw, data = apisrs)", "formulas of column"),
    ],
)
def test_from_r_refuses_designs_it_cannot_rebuild(code, match):
    with pytest.raises(ValueError, match=match):
        from_r(_r_design(code))


R_REP_DESIGNS = {
    "JK1": "as.svrepdesign(svydesign(id = ~dnum, weights = ~pw, data = apiclus1), type = 'JK1')",
    "mrbbootstrap": "as.svrepdesign(svydesign(id = ~dnum + snum, fpc = ~fpc1 + fpc2, "
                    "data = apiclus2), type = 'mrbbootstrap', replicates = 40)",
    "Fay_mse": "as.svrepdesign(svydesign(id = ~1, strata = ~stype, weights = ~pw, data = apistrat), "
               "type = 'Fay', fay.rho = 0.3, mse = TRUE)",
    "user_JKn": """{
        jk <- as.svrepdesign(svydesign(id = ~1, strata = ~stype, weights = ~pw, data = apistrat),
                             type = 'JKn', compress = FALSE)
        df <- cbind(apistrat, as.data.frame(unclass(weights(jk, 'analysis'))))
        svrepdesign(data = df, repweights = 'V[0-9]+', weights = ~pw, type = 'JKn',
                    rscales = jk$rscales, scale = 1, combined.weights = TRUE)
    }""",
}


@pytest.mark.parametrize("name", list(R_REP_DESIGNS))
def test_r_replicate_design_to_python_and_back(name):
    with r_session("survey") as (ro, _):
        rd = ro.r(f"local({{ set.seed(7); data(api, package = 'survey'); {R_REP_DESIGNS[name]} }})")
    ref = _r_estimates(rd)
    design = from_r(rd)
    assert type(design).__name__ == "ReplicateDesign"
    with r_session("survey") as (ro, _):
        scale, mse, rtype = ro.r("function(d) list(d$scale, d$mse, d$type)")(rd)
    assert design.scale == pytest.approx(float(scale[0]), rel=1e-15)
    assert design.mse == bool(mse[0]) and design.type == str(rtype[0])
    again = _r_estimates(to_r(design))
    np.testing.assert_allclose(again, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    m = design.mean(["api00", "api99"])
    np.testing.assert_allclose(m["estimate"], ref[:2], rtol=1e-9)
    np.testing.assert_allclose(m["se"], ref[5:7], rtol=1e-9)


def test_python_replicate_design_in_r_matches_python():
    d = ss.SurveyDesign(load_api("apiclus2"), ids="~dnum+snum", fpc="~fpc1+fpc2")
    rd = d.bootstrap(replicates=30, seed=3)
    sub = rd.subset(rd.data["stype"] != "H")
    with r_session("survey") as (ro, _):
        r_est = np.array(ro.r(
            "function(d) { m <- svymean(~api00, d); t <- svytotal(~enroll, d, na.rm = TRUE); "
            "c(coef(m), SE(m), coef(t), SE(t)) }")(to_r(sub)))
    m, t = sub.mean("api00"), sub.total("enroll", na_rm=True)
    ours = np.array([m.estimate[0], m.se[0], t.estimate[0], t.se[0]])
    np.testing.assert_allclose(r_est, ours, rtol=1e-9)


# ----------------------------------------------------------------------------- errors, threads
def test_r_errors_carry_r_message():
    with pytest.raises(RError, match="my very own R failure"):
        with r_session() as (ro, _):
            ro.r('stop("my very own R failure")')
    df = load_api("apiclus1")
    # a stratum holding a single PSU: R's own message comes through
    df["part"] = np.where(df["dnum"] == df["dnum"].iloc[0], "alone", "rest")
    d = ss.SurveyDesign(df, ids="dnum", strata="part", weights="pw")
    with pytest.raises(RError, match="has only one PSU"):
        d.mean("api00", engine="r")


def test_four_threads_same_estimate_identical():
    d = ss.SurveyDesign(load_api("apiclus1"), ids="dnum", weights="pw", fpc="fpc")
    barrier = threading.Barrier(4)

    def job(_):
        barrier.wait()
        return d.mean("api00", engine="r")

    with ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(job, range(4)))
    for o in outs[1:]:
        pd.testing.assert_frame_equal(o, outs[0], check_exact=True)
    np.testing.assert_allclose(outs[0]["se"], d.mean("api00")["se"], rtol=1e-9)


def test_without_r_pure_python_works_and_r_features_name_debian_packages():
    code = textwrap.dedent("""
        import sys
        sys.modules["rpy2"] = None  # as if rpy2 (or R under it) were not installed
        import numpy as np, pandas as pd
        import surveysynth as ss
        from r_bridge import RNotAvailableError, r_available
        assert not r_available()
        df = pd.DataFrame({"y": np.arange(10.0), "s": list("ab") * 5, "w": np.full(10, 2.0)})
        d = ss.SurveyDesign(df, strata="s", weights="w")
        assert abs(d.mean("y")["estimate"].iloc[0] - 4.5) < 1e-12
        from surveysynth.engines import EngineNotAvailableError, list_engines
        assert "r" not in list_engines() and "native" in list_engines()
        # engine="r": the registry's "known but not installed", naming what to install
        for f, err in ((lambda: d.mean("y", engine="r"), EngineNotAvailableError),
                       (lambda: __import__("r_bridge.sampling", fromlist=["x"]).pps_sample_r(
                           np.full(4, .5), seed=1), RNotAvailableError)):
            try:
                f()
            except err as e:
                assert "r-cran-survey" in str(e) and "apt-get install" in str(e), str(e)
            else:
                raise AssertionError("no error without R")
        print("OK")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr


# ----------------------------------------------------------------------------- sampling
def test_inclusion_probabilities_native_equals_r():
    a = np.arange(1, 21, dtype=float)
    np.testing.assert_allclose(inclusion_probabilities_r(a, 12), ss.inclusion_probabilities(a, 12),
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(inclusion_probabilities_r(a, 12)[:16], np.arange(1, 17) / 17,
                               atol=1e-12)
    rng = np.random.default_rng(5)
    size = rng.lognormal(0, 1.5, 2000) * (rng.random(2000) > 0.05)  # zeros too
    strata = rng.choice(["north", "south", "east", "west"], 2000)
    n = {"north": 40, "south": 120, "east": 7, "west": 300}
    r = inclusion_probabilities_r(size, n, strata)
    p = ss.inclusion_probabilities(size, n, strata)
    np.testing.assert_allclose(r, p, rtol=0, atol=1e-12)
    assert (r == 1).sum() > 0  # certainty units were exercised
    for h, nh in n.items():
        assert abs(r[strata == h].sum() - nh) < 1e-9


@pytest.mark.parametrize("method", ["systematic", "tille"])
def test_pps_sample_r_seeded_sizes_and_inclusion_rates(method):
    rng = np.random.default_rng(2)
    size = rng.lognormal(size=60)
    strata = np.repeat(["a", "b", "c"], 20)
    n = {"a": 3, "b": 6, "c": 9}
    pik = ss.inclusion_probabilities(size, n, strata)
    s1 = pps_sample_r(pik, strata, method, seed=11)
    s2 = pps_sample_r(pik, strata, method, seed=11)
    g1 = pps_sample_r(pik, strata, method, seed=np.random.default_rng(4))
    g2 = pps_sample_r(pik, strata, method, seed=np.random.default_rng(4))
    assert np.array_equal(s1, s2) and np.array_equal(g1, g2)
    assert not all(np.array_equal(s1, pps_sample_r(pik, strata, method, seed=k))
                   for k in range(12, 16))
    for h, nh in n.items():
        assert s1[strata == h].sum() == nh
    # inclusion frequencies over repeated draws approach pik (binomial 5-sigma band)
    reps = 300
    freq = np.mean([pps_sample_r(pik, strata, method, seed=k) for k in range(reps)], axis=0)
    band = 5 * np.sqrt(pik * (1 - pik) / reps) + 1e-9
    assert np.all(np.abs(freq - pik) <= band)


def test_pps_sample_r_leaves_r_random_state_alone():
    with r_session() as (ro, _):
        ro.r("set.seed(99)")
        pps_sample_r(np.full(10, 0.3), seed=1)
        a = ro.r("runif(1)")[0]
        ro.r("set.seed(99)")
        b = ro.r("runif(1)")[0]
    assert a == b


def test_sampling_bad_input():
    with pytest.raises(ValueError, match="seed"):
        pps_sample_r(np.full(4, 0.5))
    with pytest.raises(ValueError, match="method"):
        pps_sample_r(np.full(4, 0.5), method="poisson", seed=1)
    with pytest.raises(ValueError, match="rows \\[1\\]"):
        pps_sample_r(np.array([0.5, 1.5]), seed=1)
    with pytest.raises(ValueError, match="negative"):
        inclusion_probabilities_r(np.array([1.0, -1.0, 2.0]), 1)
