"""Formulas wherever a column list is taken (issue 37 item 7): ``d.mean("~api00+api99")`` and
``by="~stype"`` give exactly what the lists give, as R survey's ``svymean(~api00+api99, d)``
does; a formula with an interaction is refused with the fix."""

from __future__ import annotations

import pandas as pd
import pytest

import surveysynth as ss


@pytest.fixture(scope="module")
def design(api):
    return ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")


def test_estimators_take_formulas(design):
    pd.testing.assert_frame_equal(design.mean("~api00+api99"), design.mean(["api00", "api99"]))
    pd.testing.assert_frame_equal(design.total("~enroll", na_rm=True),
                                  design.total("enroll", na_rm=True))
    pd.testing.assert_frame_equal(design.mean("~api00", by="~stype+`sch.wide`"),
                                  design.mean("api00", by=["stype", "sch.wide"]))
    pd.testing.assert_frame_equal(design.quantile("~api00", [0.5]),
                                  design.quantile("api00", [0.5]))


def test_tables_take_formulas(design):
    a = ss.tabulate(design, rows="~stype", value="~api00", stat="mean")
    b = ss.tabulate(design, rows="stype", value="api00", stat="mean")
    pd.testing.assert_frame_equal(a.long, b.long)
    assert a.rows == ["stype"] and a.value == "api00"


def test_interaction_formula_refused_with_the_fix(design):
    with pytest.raises(ValueError, match="only sums of column names.*list of column names"):
        design.mean("~api00*api99")


def test_quantile_synthesizer_variables_take_a_formula(design):
    """KNG's ``variables="~api00+api99"`` synthesizes the two columns, as the list does."""
    kw = dict(bounds={"api00": (200, 1000), "api99": (200, 1000)}, C_X={"api99": 1000}, epsilon=5, m=1,
              random_state=3, progress=False)
    a = ss.synth.QuantileSynthesizer(variables="~api00+api99", **kw).fit(design).release()
    b = ss.synth.QuantileSynthesizer(variables=["api00", "api99"], **kw).fit(design).release()
    pd.testing.assert_frame_equal(a.designs[0].data, b.designs[0].data)
    assert {"api00", "api99"} <= set(a.columns)


@pytest.mark.parametrize("make", [
    lambda: ss.synth.FBS("api00", "~stype+api00"),
    lambda: ss.synth.NBSynthesizer("api00", predictors="~stype+api00"),
    lambda: ss.synth.MixtureSynthesizer("api00", "~stype+api00"),
], ids=["FBS", "NB", "mixture"])
def test_synthesizer_predictors_take_a_formula(design, make):
    """A predictors formula is read as its columns before any MCMC: listing the outcome among
    them is refused as for a list (read as one column named '~stype+api00' it was not)."""
    with pytest.raises(ValueError, match="outcome 'api00' is also listed in predictors"):
        make().fit(design)


def test_sequential_public_and_known_take_formulas(design):
    """Sequential's ``public`` formula is read as columns: an unknown one is named alone."""
    syn = ss.synth.Sequential(variables=[{"name": "api00", "type": "continuous"}],
                              public="~stype+no_such_column", progress=False)
    with pytest.raises(ValueError, match="no_such_column") as err:
        syn.fit(design)
    assert "~" not in str(err.value)


def test_identification_known_columns_take_a_formula():
    from surveysynth.privacy.identification import known_columns

    assert known_columns("~age+sex") == ["age", "sex"]
    assert known_columns("age") == ["age"]
    assert known_columns("~1") == []
    with pytest.raises(ValueError, match="release_columns=.*only sums of column names"):
        known_columns("~a*b", "release_columns")
