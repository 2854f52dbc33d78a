"""Inputs (issue 21, item 7): Stata/SAS/SPSS files with value labels, polars frames, and the
confidential design's fpc carried into partial-synthesis releases.

* A Stata file with value labels, written with pyreadstat, is released end to end through
  ``surveysynth release`` (FBS, short chains): the published XLSX table shows the labels in the
  order of their codes (not the codes, not alphabetical order); an unlabelled code is kept.
* A polars DataFrame gives the same design and estimates as its pandas twin, in SurveyDesign
  and in the pipeline reader; a LazyFrame and a non-frame are refused with the fix.
* An apistrat FBS release (strata released as collected) keeps the fpc: each synthetic design's
  SE equals R's ``svymean`` with the fpc on the same synthetic data, and differs from R's
  with-replacement SE by the fpc factor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from surveysynth.design import SurveyDesign
from surveysynth.pipeline import read_input, run_release
from surveysynth.release_config import example_data

pyreadstat = pytest.importorskip("pyreadstat")  # a declared dependency: a skip is a failure

# labels whose alphabetical order differs from the code order; code 8 has no label
FIELD_LABELS = {1: "Physics", 2: "Biology", 3: "Mathematics", 4: "Chemistry", 5: "Engineering",
                6: "Agriculture", 7: "Zoology"}
GENDER_LABELS = {1: "male", 2: "female"}


def _stata_file(path: Path) -> pd.DataFrame:
    data = example_data(n=400, seed=1)[["field", "gender", "salary", "weight"]].copy()
    data["field"] = data["field"].astype(float)
    data["gender"] = data["gender"].map({"male": 1.0, "female": 2.0})
    pyreadstat.write_dta(data, str(path), variable_value_labels={
        "field": FIELD_LABELS, "gender": GENDER_LABELS})
    return data


def test_value_labels_become_categoricals_in_code_order(tmp_path):
    data = _stata_file(tmp_path / "conf.dta")
    got = read_input(tmp_path / "conf.dta")
    assert isinstance(got["field"].dtype, pd.CategoricalDtype)
    # code order 1..8, unlabelled code 8 kept as its code: nothing dropped
    assert list(got["field"].cat.categories) == [*FIELD_LABELS.values(), "8"]
    expected = data["field"].map(lambda c: FIELD_LABELS.get(int(c), str(int(c))))
    assert (got["field"].astype(str) == expected).all()
    assert list(got["gender"].cat.categories) == ["male", "female"]
    np.testing.assert_array_equal(got["salary"], data["salary"])
    # SPSS the same way, with a missing value kept as missing
    spss = data.copy()
    spss.loc[3, "field"] = np.nan
    pyreadstat.write_sav(spss, str(tmp_path / "conf.sav"),
                         variable_value_labels={"field": FIELD_LABELS})
    sav = read_input(tmp_path / "conf.sav")
    assert sav["field"].isna().sum() == 1 and pd.isna(sav.loc[3, "field"])
    assert list(sav["field"].cat.categories)[:3] == ["Physics", "Biology", "Mathematics"]
    with pytest.raises(ValueError, match=r"unknown file type '\.xls'.*\.dta"):
        read_input(tmp_path / "conf.xls")


def test_stata_file_with_labels_released_end_to_end(tmp_path):
    openpyxl = pytest.importorskip("openpyxl")
    _stata_file(tmp_path / "conf.dta")
    cfg = tmp_path / "release.toml"
    cfg.write_text("""
[input]
path = "conf.dta"
[design]
strata = "field"
weights = "weight"
[synthesizer]
method = "FBS"
outcome = "salary"
predictors = ["field", "gender"]
log = true
target_lipschitz = 4.0
m = 2
seed = 5
population_size = 100000
init = { chains = 2, draws = 250, warmup = 250, allow_unconverged = true, effects = "main", coding = "intercept" }
[[tables]]
name = "salary"
title = "Mean salary by field and gender"
rows = "field"
cols = "gender"
value = "salary"
stat = "mean"
[output]
folder = "release"
""")
    # in-process: the command line itself is tested once, in tests/test_pipeline.py
    run_release(cfg, quiet=True)
    xlsx = tmp_path / "release" / "public" / "tables" / "salary.xlsx"
    wb = openpyxl.load_workbook(xlsx)
    cells = [str(c.value) for ws in wb.worksheets for row in ws.iter_rows() for c in row
             if c.value is not None]
    text = " | ".join(cells)
    for label in [*FIELD_LABELS.values(), "male", "female"]:
        assert label in cells, f"label {label!r} not in the XLSX: {text[:500]}"
    # rows in code order (Physics before Biology before Mathematics), not alphabetical
    first = wb.worksheets[0]
    col = [str(c.value) for row in first.iter_rows() for c in row if str(c.value) in FIELD_LABELS.values()]
    assert col[:7] == list(FIELD_LABELS.values()), col
    # the synthetic data keep the labels too
    syn = pd.read_parquet(next((tmp_path / "release" / "public" / "synthetic").glob("*.parquet")))
    assert set(syn["field"].astype(str)) <= {*FIELD_LABELS.values(), "8"}


def test_polars_frames_accepted():
    pl = pytest.importorskip("polars")
    data = example_data(n=200, seed=3)
    order = ["male", "female"]  # an Enum's order is kept through to_pandas()
    pdf = data.assign(gender=pd.Categorical(data["gender"], categories=order))
    plf = pl.from_pandas(data).with_columns(pl.col("gender").cast(pl.Enum(order)))
    a = SurveyDesign(pdf, strata="field", weights="weight")
    b = SurveyDesign(plf, strata="field", weights="weight")
    pd.testing.assert_frame_equal(a.mean("salary", by="gender"), b.mean("salary", by="gender"))
    pd.testing.assert_frame_equal(a.total("salary"), b.total("salary"))
    got = read_input(plf)
    assert isinstance(got, pd.DataFrame) and list(got["gender"].cat.categories) == order
    np.testing.assert_array_equal(got["salary"], data["salary"])
    with pytest.raises(TypeError, match=r"LazyFrame.*collect\(\)"):
        SurveyDesign(plf.lazy(), weights="weight")
    with pytest.raises(TypeError, match="data must be a pandas or polars DataFrame, got dict"):
        SurveyDesign({"a": [1, 2]}, weights="a")


@pytest.fixture(scope="module")
def apistrat_release(api):
    from surveysynth.synth import FBS

    d = api["apistrat"]
    design = SurveyDesign(d, strata="stype", weights="pw", fpc="fpc")
    syn = FBS("api00", ["stype"], target_lipschitz=6.0, m=2, random_state=7, chains=2,
              draws=400, warmup=400, progress=False, allow_unconverged=True,
              population_size=float(d["pw"].sum()))
    with pytest.warns(UserWarning):
        return syn.fit(design).release()


def test_partial_release_keeps_fpc_as_r(apistrat_release, api, tmp_path):
    from r_bridge import r_session
    from r_bridge.convert import pandas_to_r
    from surveysynth.release import load_release

    fpc_of = api["apistrat"].groupby("stype", observed=True)["fpc"].first()
    for k, des in enumerate(apistrat_release.designs):
        assert des.fpc_vars == ["fpc"] and des.strata_vars == ["stype"]
        f = des.data
        # looked up by stratum: each synthetic row has its stratum's population size
        np.testing.assert_array_equal(f["fpc"].to_numpy(), f["stype"].map(fpc_of).to_numpy())
        ours = des.mean("api00")["se"].iloc[0]
        ours_t = des.total("api00")["se"].iloc[0]
        with r_session("survey") as (ro, _):
            ro.globalenv["syn"] = pandas_to_r(f[["stype", "api00", "pw", "fpc"]])
            ro.r("d1 <- svydesign(id=~1, strata=~stype, weights=~pw, fpc=~fpc, data=syn)")
            ro.r("d0 <- svydesign(id=~1, strata=~stype, weights=~pw, data=syn)")
            r_fpc = float(ro.r("SE(svymean(~api00, d1))")[0])
            r_fpc_t = float(ro.r("SE(svytotal(~api00, d1))")[0])
            r_wr = float(ro.r("SE(svymean(~api00, d0))")[0])
        assert abs(ours - r_fpc) <= 1e-9 * r_fpc, (k, ours, r_fpc)
        assert abs(ours_t - r_fpc_t) <= 1e-9 * r_fpc_t, (k, ours_t, r_fpc_t)
        # apistrat samples 100/50/50 of 4421/1018/755 schools: the fpc shrinks the SE visibly
        assert ours < 0.99 * r_wr, (k, ours, r_wr)
    # the public folder keeps it: an analyst's design is the same
    apistrat_release.save(tmp_path / "rel", report=False)  # the public part is read back
    back = load_release(tmp_path / "rel")
    for a, b in zip(apistrat_release.designs, back.designs, strict=True):
        assert b.fpc_vars == ["fpc"]
        assert b.mean("api00")["se"].iloc[0] == pytest.approx(a.mean("api00")["se"].iloc[0], rel=1e-12)
