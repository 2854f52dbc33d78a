"""Weighting-class cells (R survey's ``nonresponse``, ``sparseCells``, ``neighbours``,
``joinCells``, ``weights.nonresponse``) against R live on ?nonresponse's example, step by
step: the same cells flagged, the same neighbours in the same order, the same joins and the
final weights (1e-12)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from surveysynth.nonresponse_cells import (
    join_cells,
    joinCells,
    neighbours,
    nonresponse,
    nonresponse_weights,
    sparseCells,
)

R_SETUP = """
suppressMessages(library(survey)); data(api)
nr_pop <- xtabs(~sch.wide+comp.imp+stype, data=apipop)
nr_cnt <- xtabs(~sch.wide+comp.imp+stype, data=apiclus1)
nr_wt <- xtabs(pw~sch.wide+comp.imp+stype, data=apiclus1)
nr <- nonresponse(nr_wt, nr_cnt, nr_pop)
nr1 <- joinCells(nr, 3, 5, 7)
nr2 <- joinCells(nr1, 3, 11, 8)
"""
VARS = ["sch.wide", "comp.imp", "stype"]


def _r(code: str):
    with r_session("survey") as (ro, _):
        return ro.r(code)


def _subset_r(expr: str) -> dict:
    """R's nonresponseSubset: group numbers, labels, totals, ratios, counts."""
    with r_session("survey") as (ro, _):
        ro.r(f"s_ <- {expr}")
        if bool(ro.r("is.null(s_)")[0]):
            return {}
        names = np.array(ro.r("as.vector(s_$names)"), dtype=object).reshape(-1, 3, order="F")
        return {"group": np.array(ro.r("s_$index"), float),
                "names": [tuple(r) for r in names],
                "stats": np.array(ro.r("c(s_$ratios, s_$totals, s_$counts)"), float)}


def _same(ours: pd.DataFrame | None, r: dict) -> None:
    if not r:
        assert ours is None
        return
    assert ours is not None
    np.testing.assert_array_equal(ours["group"].to_numpy(float), r["group"])
    assert [tuple(map(str, row)) for row in ours[VARS].to_numpy()] == r["names"]
    np.testing.assert_allclose(
        np.r_[ours["nr_weight"], ours["total_weight"], ours["n"]], r["stats"], rtol=1e-12)


def _table(code: str) -> np.ndarray:
    return np.array(_r(f"as.vector({code})"), float).reshape((2, 2, 3), order="F")


@pytest.fixture(scope="module")
def nr():
    _r(R_SETUP)
    dn = [(v, tuple(_r(f"dimnames(nr_pop)[[{k + 1}]]"))) for k, v in enumerate(VARS)]
    return nonresponse(_table("nr_wt"), _table("nr_cnt"), _table("nr_pop"), dimnames=dn)


def test_man_example_step_by_step(nr):
    _same(sparseCells(nr), _subset_r("sparseCells(nr)"))
    _same(neighbours(3, nr), _subset_r("neighbours(3, nr)"))
    _same(neighbours(11, nr), _subset_r("neighbours(11, nr)"))
    nr1 = joinCells(nr, 3, 5, 7)
    _same(sparseCells(nr1), _subset_r("sparseCells(nr1)"))
    nr2 = joinCells(nr1, 3, 11, 8)
    np.testing.assert_array_equal(nr2.index, _table("nr2$index"))
    _same(sparseCells(nr2), _subset_r("sparseCells(nr2)"))
    _same(neighbours(3, nr2), _subset_r("neighbours(3, nr2)"))
    np.testing.assert_allclose(nonresponse_weights(nr2), _table("weights(nr2)"), rtol=1e-12)
    assert nr.joins == () and len(nr2.joins) == 2  # the original object is not modified


def test_thresholds_and_subscripts(nr):
    _same(sparseCells(nr, count=10, totalweight=40, nrweight=1.2),
          _subset_r("sparseCells(nr, count=10, totalweight=40, nrweight=1.2)"))
    # a cell given by its subscripts (R: joinCells(nr, c(1,2,1), c(1,1,2)) is cells 3 and 5)
    a = join_cells(nr, (1, 2, 1), (1, 1, 2))
    b = join_cells(nr, 3, 5)
    np.testing.assert_array_equal(a.index, b.index)
    np.testing.assert_array_equal(a.index, _table("joinCells(nr, list(c(1,2,1), c(1,1,2)))$index"))
    _same(neighbours((1, 2, 1), nr), _subset_r("neighbours(3, nr)"))


def test_from_pandas_tables_equals_xtabs(nr, api):
    pop = api["apiclus1"]  # the sample; the population from R's apipop
    with r_session("survey") as (ro, _):
        from r_bridge.convert import r_to_pandas
        apipop = r_to_pandas(ro.r("apipop[, c('sch.wide', 'comp.imp', 'stype')]"))
    t = nonresponse(pop.groupby(VARS)["pw"].sum(), pop.groupby(VARS).size(),
                    apipop.groupby(VARS).size())
    np.testing.assert_allclose(t.weights, nr.weights, rtol=1e-12)
    np.testing.assert_array_equal(t.counts, nr.counts)
    np.testing.assert_array_equal(t.population, nr.population)


def test_warnings_and_errors(nr):
    with pytest.warns(UserWarning, match="single cell"):
        assert join_cells(nr, 3) is nr
    nr1 = join_cells(nr, 3, 5)
    with pytest.warns(UserWarning, match="already joined"):
        assert join_cells(nr1, 3, 5) is nr1
    with pytest.raises(ValueError, match="1 to 12"):
        nr.cells([13])
    with pytest.raises(ValueError, match="shape"):
        nonresponse(nr.weights, nr.counts, nr.population[:, :, :2],
                    dimnames=nr.dimnames)
    assert "12 original cells, 11 distinct" in repr(nr1)
    assert ss.sparseCells is sparseCells
