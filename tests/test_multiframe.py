"""multiframe (dual-frame designs, R survey 4.4+) against R survey 4.5's ?multiframe example,
stored with its data and script in tests/reference/r_survey45/multiframe.{R,json} (survey
4.1.1 has no multiframe): Hartley's constant estimator with theta = 0.74 and R's default
theta, the expected (Kalton-Anderson) estimator, domains by Size, and SRS frames with an fpc.
Estimates and SEs to 1e-8 relative."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.multiframe_design import multiframe
from surveysynth.variance.pps import ppsmat
from tests.conftest import assert_rel

TOL = 1e-8
REF = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "multiframe.json")
                 .read_text())


def _frame(rows):
    df = pd.DataFrame(rows)
    return df.astype({"Size": "float64"}) if "Size" in df else df


@pytest.fixture(scope="module")
def frames():
    A, B = _frame(REF["DatA"]), _frame(REF["DatB"])
    dA = ss.SurveyDesign(A, fpc="ProbA", pps=ppsmat(np.array(REF["PiklA"])))
    dB = ss.SurveyDesign(B, fpc="ProbB", pps=ppsmat(np.array(REF["PiklB"])))
    ovA = np.column_stack([np.ones(len(A)), A["Domain"] == "ab"])
    ovB = np.column_stack([B["Domain"] == "ba", np.ones(len(B))])
    return {"A": A, "B": B, "dA": dA, "dB": dB, "ovA": ovA, "ovB": ovB}


def _check(ours, ref, what):
    assert_rel(ours["estimate"], ref["estimate"], TOL, f"{what} estimate")
    assert_rel(ours["se"], ref["se"], TOL, f"{what} se")


@pytest.mark.parametrize("key,theta", [("constant_074", 0.74), ("constant_default", None)])
def test_constant_estimator(frames, key, theta):
    ref = REF["results"][key]
    mf = multiframe([frames["dA"], frames["dB"]], [frames["ovA"], frames["ovB"]], theta=theta)
    assert_rel(mf.frame_weights, ref["frame_weights"], 1e-12, "frame weights")
    _check(mf.total("Lei"), ref["total_Lei"], "total")
    _check(mf.mean("Lei"), ref["mean_Lei"], "mean")
    _check(mf.total(["Feed", "Clo"]), ref["total_Feed_Clo"], "two totals")
    by = mf.mean("Lei", by="Size")
    assert [str(int(s)) for s in by["Size"]] == ref["mean_Lei_by_Size"]["level"]
    _check(by, ref["mean_Lei_by_Size"], "svyby mean")
    _check(mf.total("Lei", by="Size"), ref["total_Lei_by_Size"], "svyby total")
    assert mf.degf == ref["degf"]
    assert (mf.mean("Lei")["df"] == ref["degf"]).all()


def test_expected_estimator(frames):
    ref = REF["results"]["expected"]
    A, B = frames["A"], frames["B"]
    mf = multiframe([frames["dA"], frames["dB"]],
                    [A[["ProbA", "ProbB"]].to_numpy(), B[["ProbA", "ProbB"]].to_numpy()],
                    estimator="expected")
    assert_rel(mf.frame_weights, ref["frame_weights"], 1e-12, "frame weights")
    _check(mf.total("Lei"), ref["total_Lei"], "total")
    _check(mf.mean("Lei"), ref["mean_Lei"], "mean")
    # the same estimator with weights (1/p) in place of probabilities
    with np.errstate(divide="ignore"):
        inv = [np.where(o > 0, 1 / o, 0.0) for o in (A[["ProbA", "ProbB"]].to_numpy(),
                                                      B[["ProbA", "ProbB"]].to_numpy())]
    _check(multiframe([frames["dA"], frames["dB"]], inv, estimator="expected").total("Lei"),
           ref["total_Lei"], "weights form")


def test_srs_frames_with_fpc(frames):
    ref = REF["results"]["srs"]
    A = frames["A"].assign(fpcA=(1 / frames["A"]["ProbA"]).sum())
    B = frames["B"].assign(fpcB=(1 / frames["B"]["ProbB"]).sum())
    mf = multiframe([ss.SurveyDesign(A, fpc="fpcA"), ss.SurveyDesign(B, fpc="fpcB")],
                    [frames["ovA"], frames["ovB"]], theta=0.5)
    _check(mf.total("Lei"), ref["total_Lei"], "srs total")
    _check(mf.mean("Lei"), ref["mean_Lei"], "srs mean")


def test_errors(frames):
    with pytest.raises(ValueError, match="only two frames"):
        multiframe([frames["dA"]], [frames["ovA"]])
    with pytest.raises(ValueError, match="shape"):
        multiframe([frames["dA"], frames["dB"]], [frames["ovA"][:5], frames["ovB"]])
    with pytest.raises(ValueError, match="estimator"):
        multiframe([frames["dA"], frames["dB"]], [frames["ovA"], frames["ovB"]],
                   estimator="optimal")
    mf = multiframe([frames["dA"], frames["dB"]], [frames["ovA"], frames["ovB"]])
    with pytest.raises(ValueError, match="missing values"):
        mf.mean("M2")
