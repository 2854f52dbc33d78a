"""Bad input gets a clear error naming the column, the rows and the fix; data never mutated."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss


@pytest.fixture()
def df():
    rng = np.random.default_rng(3)
    n = 40
    return pd.DataFrame({
        "st": np.repeat(["a", "b", "c", "d"], 10),
        "psu": np.repeat(np.arange(8), 5),
        "w": rng.uniform(1, 5, n),
        "N": np.repeat([20.0, 30.0, 25.0, 40.0], 10),
        "y": rng.normal(10, 2, n),
        "g": rng.choice(["x", "y"], n),
    }, index=[f"r{i}" for i in range(n)])


def test_missing_column(df):
    with pytest.raises(ValueError, match=r"strata: column\(s\) \['stratum'\] not in the data"):
        ss.SurveyDesign(df, strata="stratum", weights="w")
    d = ss.SurveyDesign(df, strata="st", weights="w")
    with pytest.raises(ValueError, match=r"\['income'\] not in the data"):
        d.mean("income")


def test_na_in_design_variables(df):
    bad = df.copy()
    bad.loc["r3", "st"] = None
    with pytest.raises(ValueError, match=r"column 'st' has missing values in rows 'r3'.*fill or drop"):
        ss.SurveyDesign(bad, strata="st", weights="w")


@pytest.mark.parametrize("value", [0.0, -1.0, np.nan, np.inf])
def test_bad_weights(df, value):
    bad = df.copy()
    bad.loc[["r5", "r7"], "w"] = value
    with pytest.raises(ValueError, match=r"weights: column 'w' must be positive and finite; offending rows 'r5', 'r7'"):
        ss.SurveyDesign(bad, strata="st", weights="w")


def test_fpc_smaller_than_sample(df):
    bad = df.assign(N=np.repeat([1.5, 30.0, 25.0, 40.0], 10))
    with pytest.raises(ValueError, match=r"fpc column 'N' is smaller than the sample size.*rows 'r0'"):
        ss.SurveyDesign(bad, ids="psu", strata="st", weights="w", fpc="N")


def test_fpc_mixed_kinds_and_varying(df):
    with pytest.raises(ValueError, match="all population sizes"):
        ss.SurveyDesign(df.assign(N=np.r_[np.full(20, 0.5), np.full(20, 30.0)]), ids="psu",
                        strata="st", fpc="N")
    with pytest.raises(ValueError, match="varies within a stage-1 stratum"):
        ss.SurveyDesign(df.assign(N=np.arange(40) + 50.0), ids="psu", strata="st", fpc="N")
    with pytest.raises(ValueError, match="one fpc column per stage"):
        ss.SurveyDesign(df, ids="~psu+y", strata="st", fpc="N")


def test_psus_not_nested(df):
    bad = df.assign(psu=np.tile(np.arange(4), 10))  # psu ids reused across strata
    with pytest.raises(ValueError, match="Clusters not nested in strata.*nest=True"):
        ss.SurveyDesign(bad, ids="psu", strata="st", weights="w")
    d = ss.SurveyDesign(bad, ids="psu", strata="st", weights="w", nest=True)
    assert d.stages[0].n_clusters == 16


def test_lonely_psu_fail_names_stratum(df):
    one = df.assign(psu=np.where(df["st"] == "d", 99, df["psu"]))
    d = ss.SurveyDesign(one, ids="psu", strata="st", weights="w")
    with pytest.raises(ValueError, match=r"Stratum \(d\) has only one PSU at stage 1.*lonely_psu="):
        d.mean("y")


def test_lonely_psu_fail_names_each_stratum_once_with_domains(df):
    """By-domain estimates have one (stratum, domain) cell per domain: the message still names
    the lonely stratum once (it was listed once per domain)."""
    one = df.assign(psu=np.where(df["st"] == "d", 99, df["psu"]),
                    grp=np.tile(["a", "b", "c"], 14)[: len(df)])
    d = ss.SurveyDesign(one, ids="psu", strata="st", weights="w")
    with pytest.raises(ValueError, match=r"Stratum \(d\) has only one PSU at stage 1\. "):
        d.mean("y", by="grp")


def test_na_in_variable_needs_na_rm(df):
    bad = df.copy()
    bad.loc["r2", "y"] = np.nan
    d = ss.SurveyDesign(bad, strata="st", weights="w")
    with pytest.raises(ValueError, match=r"column 'y' has missing values in rows 'r2'.*na_rm=True"):
        d.total("y")
    assert np.isfinite(d.total("y", na_rm=True).se[0])


def test_other_argument_errors(df):
    with pytest.raises(ValueError, match="lonely_psu"):
        ss.SurveyDesign(df, strata="st", lonely_psu="drop")
    with pytest.raises(ValueError, match="weights= or probs=, not both"):
        ss.SurveyDesign(df, weights="w", probs="w")
    with pytest.raises(ValueError, match="only one primary sampling unit"):
        ss.SurveyDesign(df.assign(psu=1), ids="psu", weights="w")
    d = ss.SurveyDesign(df, strata="st", weights="w")
    with pytest.raises(ValueError, match="not numeric"):
        d.ratio("g", "y")
    with pytest.raises(ValueError, match="engine="):
        d.mean("y", engine="stata")
    with pytest.raises(ValueError, match="each must be in"):
        d.quantile("y", 1.5)
    with pytest.raises(ValueError, match="formulas"):
        ss.SurveyDesign(df, strata="~st*g")


def test_caller_data_never_mutated(df):
    before = df.copy(deep=True)
    d = ss.SurveyDesign(df, ids="psu", strata="st", weights="w", fpc="N")
    d.mean("y", by="g")
    d.subset(d.data["g"] == "x").total("y")
    d.proportion("g")
    d.quantile("y", [0.5])
    pd.testing.assert_frame_equal(df, before)
    # and the design does not see later edits to the caller's frame
    est = d.mean("y").estimate[0]
    df.loc["r0", "y"] = 1e6
    assert d.mean("y").estimate[0] == est
    # nor edits through .data
    view = d.data
    view.loc["r1", "y"] = -1e6
    assert d.mean("y").estimate[0] == est
    with pytest.raises(ValueError):
        d.weights[0] = 3.0


def test_weights_from_fpc_and_probs(df):
    d = ss.SurveyDesign(df, ids="psu", strata="st", fpc="N")
    # R: weights = N_h / n_h (2 PSUs per stratum)
    assert np.allclose(d.weights, df["N"].to_numpy() / 2)
    p = ss.SurveyDesign(df.assign(p=1 / df["w"]), strata="st", probs="p")
    q = ss.SurveyDesign(df, strata="st", weights="w")
    assert np.allclose(p.weights, q.weights, rtol=1e-15)
    with pytest.warns(UserWarning, match="equal probability"):
        ss.SurveyDesign(df, strata="st")
