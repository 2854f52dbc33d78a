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
