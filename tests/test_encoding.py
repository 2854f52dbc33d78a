"""The one encoder of categorical predictors (surveysynth.encoding, issue 38 item 2).

R's ``model.matrix`` is the reference, called live through rpy2: the same levels in the same
order, the same reference level, the same names and the same 0/1 columns. And every place that
codes a categorical predictor (calibration, svyglm's formulas, the pseudo posterior's cells,
the risk-weighted synthesizers, Sequential's public predictors and steps, the report's joint
utility) gives the same codes for the same data. Mutants (another reference level, the order of
first appearance that Sequential's public predictors used before) are kept here and killed.
"""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from r_bridge import r_session
from surveysynth.calibration import model_matrix
from surveysynth.encoding import NA_LEVEL, Factor, is_factor, r_label, r_levels

# ----------------------------------------------------------------------------- R live
# (R expression of the column, the same column in pandas)
FRAMES = {
    # mixed case, digits, punctuation: R's order in the C collation is the code-point order
    "character": ('c("b", "B", "a", "10", "9", "_x", "b", "a")',
                  pd.Series(["b", "B", "a", "10", "9", "_x", "b", "a"])),
    "factor_unused": ('factor(c("lo", "hi", "lo", "hi", "lo"), levels = c("mid", "lo", "hi", "zz"))',
                      pd.Series(pd.Categorical(["lo", "hi", "lo", "hi", "lo"],
                                               categories=["mid", "lo", "hi", "zz"]))),
    "logical": ("c(TRUE, FALSE, TRUE, TRUE)", pd.Series([True, False, True, True])),
    # numbers as a factor sort numerically (9 < 10 < 100), not as text
    "numeric_factor": ("factor(c(10L, 9L, 100L, 9L))",
                       pd.Series(pd.Categorical([10, 9, 100, 9]))),
}


def r_model_matrix(expr: str, intercept: bool, na_level: bool = False) -> tuple[list[str], np.ndarray]:
    """R's model.matrix(~x) (or ~0+x) of the column ``expr``: names and matrix (C collation;
    ``na_level``: R's addNA, missing values as the last level)."""
    with r_session() as (ro, _):
        ro.r('invisible(Sys.setlocale("LC_COLLATE", "C"))')
        x = f"addNA({expr})" if na_level else expr
        ro.r(f"df <- data.frame(x = {x}, stringsAsFactors = TRUE)")
        ro.r(f"mm <- model.matrix(~{'' if intercept else '0+'}x, df)")
        names = [str(s) for s in ro.r("colnames(mm)")]
        mat = np.array(ro.r("as.vector(mm)"), dtype=float).reshape(len(names), -1).T
    return names, mat


def ours(col: pd.Series, intercept: bool) -> tuple[list[str], np.ndarray]:
    mat, names = model_matrix(pd.DataFrame({"x": col}), "~x" if intercept else "~0+x")
    return names, mat


@pytest.mark.parametrize("case", sorted(FRAMES))
@pytest.mark.parametrize("intercept", [True, False])
def test_model_matrix_is_rs(case, intercept):
    """Names, column order, reference level and values of R's model.matrix, live."""
    expr, col = FRAMES[case]
    r_names, r_mat = r_model_matrix(expr, intercept)
    names, mat = ours(col, intercept)
    assert names == r_names
    np.testing.assert_array_equal(mat, r_mat)


@pytest.mark.parametrize("case", sorted(FRAMES))
def test_levels_are_rs(case):
    expr, col = FRAMES[case]
    with r_session() as (ro, _):
        ro.r('invisible(Sys.setlocale("LC_COLLATE", "C"))')
        r_lev = [str(s) for s in ro.r(f"levels(as.factor({expr}))")]
    assert [r_label(v) for v in r_levels(col)] == r_lev
    # droplevels (the synthesizers' used_only)
    with r_session() as (ro, _):
        ro.r('invisible(Sys.setlocale("LC_COLLATE", "C"))')
        r_used = [str(s) for s in ro.r(f"levels(droplevels(as.factor({expr})))")]
    assert [r_label(v) for v in r_levels(col, used_only=True)] == r_used


def test_missing_level_is_rs_addNA():
    """na="level": missing values are the last level, named as R names addNA's level (xNA)."""
    expr = 'c("b", NA, "a", "b", NA)'
    r_names, r_mat = r_model_matrix(expr, True, na_level=True)
    col = pd.Series(["b", None, "a", "b", None])
    f = Factor.learn(col, name="x", na="level")
    assert f.levels == ("a", "b", NA_LEVEL)
    assert ["(Intercept)", *f.names()] == r_names
    np.testing.assert_array_equal(np.c_[np.ones(5), f.matrix(col)], r_mat)


# ----------------------------------------------------------------------------- mutants
def _appearance_order(col: pd.Series) -> Factor:
    """MUTANT (Sequential's public predictors before issue 38): levels in order of first
    appearance, so the reference level is the first row's value."""
    return Factor("x", tuple(pd.unique(col.dropna())))


def _last_reference(col: pd.Series) -> Factor:
    """MUTANT: the last level as the reference (R's contr.SAS)."""
    lv = r_levels(col)
    return Factor("x", tuple(lv[1:] + lv[:1]))


@pytest.mark.parametrize("mutant", [_appearance_order, _last_reference])
def test_r_comparison_kills_reference_level_mutants(mutant):
    expr, col = FRAMES["character"]
    r_names, r_mat = r_model_matrix(expr, True)
    good = Factor.learn(col, name="x")
    assert ["(Intercept)", *good.names()] == r_names
    bad = mutant(col)
    assert ["(Intercept)", *bad.names()] != r_names
    assert not np.array_equal(np.c_[np.ones(len(col)), bad.matrix(col)], r_mat)


# ----------------------------------------------------------------------------- one code everywhere
@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(3)
    n = 60
    # "c" first: the order of first appearance is not R's
    g = np.r_[["c", "a", "b"], rng.choice(["a", "b", "c"], n - 3)]
    return pd.DataFrame({
        "g": g,
        "b": np.r_[[True, False], rng.uniform(size=n - 2) < 0.5],
        "h": pd.Categorical(rng.choice(["lo", "hi", "mid"], n), categories=["lo", "mid", "hi"]),
        "x": rng.normal(size=n),
        "y": rng.poisson(5, size=n) + 1.0,
    })


PRED = ["g", "b", "h"]


def _everywhere(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """The indicator columns of g, b and h (in that order, no intercept) as each of the six
    former encoders builds them now."""
    from surveysynth.analysis.formulas import formula_matrix
    from surveysynth.synth import NBSynthesizer, Sequential
    from surveysynth.synth.cells import build_cells
    from surveysynth.synth.sequential import _factor  # noqa: PLC2701
    from surveysynth.synthetic_utility import _Coder  # noqa: PLC2701 - the encoder under test

    out = {}
    mm, names = model_matrix(frame, "~g+b+h")
    out["calibration"] = mm[:, 1:]
    fm = formula_matrix("y ~ g + b + h", frame, "test")
    out["svyglm"] = np.asarray(fm.rhs, dtype=float)[:, 1:]
    cells = build_cells(frame, PRED, "main")
    out["cells"] = cells.Xc[cells.codes][:, 1:]
    X, _ = NBSynthesizer("y", predictors=PRED)._design_matrix(frame, PRED, [])  # noqa: SLF001
    out["risk_weighted"] = X[:, 1:]
    seq = Sequential(variables=[{"name": "y", "type": "continuous"}])
    _, X_pub = seq._encode_public(frame, PRED)  # noqa: SLF001 - the encoders under test
    out["sequential_public"] = X_pub
    steps = [seq._value_step(p, "categorical", None, None, frame[p], frame.index)  # noqa: SLF001
             for p in PRED]
    assert all(_factor(s).name == p for s, p in zip(steps, PRED, strict=True))
    out["sequential_step"] = np.column_stack([seq._encode_step(s, frame)  # noqa: SLF001
                                              for s in steps])
    out["report"] = np.column_stack([_Coder(p, frame[p], [frame[p]], True).matrix(frame[p])
                                     for p in PRED])
    return out


def test_same_codes_in_every_encoder(frame):
    """Must show (issue 38): the same data give the same 0/1 columns, same reference level
    (R's first level), same order, through calibration, svyglm, the cells of FBS/FBP/PBP, the
    risk-weighted synthesizers, Sequential (public predictors and synthesized steps) and the
    report; and they are R's model.matrix columns."""
    got = _everywhere(frame)
    ref = got["calibration"]
    assert ref.shape == (len(frame), 2 + 1 + 2)
    for where, mat in got.items():
        np.testing.assert_array_equal(mat, ref, err_msg=where)
    # R: model.matrix(~g+b+h) on the same frame, live
    with r_session() as (ro, _):
        ro.r('invisible(Sys.setlocale("LC_COLLATE", "C"))')
        ro.r.assign("g", ro.StrVector(frame["g"].tolist()))
        ro.r.assign("b", ro.BoolVector(frame["b"].tolist()))
        ro.r.assign("h", ro.StrVector(frame["h"].astype(str).tolist()))
        ro.r('df <- data.frame(g = g, b = b, h = factor(h, levels = c("lo", "mid", "hi")))')
        ro.r("mm <- model.matrix(~g+b+h, df)")
        r_names = [str(s) for s in ro.r("colnames(mm)")]
        r_mat = np.array(ro.r("as.vector(mm)"), dtype=float).reshape(len(r_names), -1).T
    assert model_matrix(frame, "~g+b+h")[1] == r_names == [
        "(Intercept)", "gb", "gc", "bTRUE", "hmid", "hhi"]
    np.testing.assert_array_equal(ref, r_mat[:, 1:])


def test_same_names_where_r_names_are_used(frame):
    from surveysynth.synth import NBSynthesizer
    from surveysynth.synth.cells import build_cells
    from surveysynth.synthetic_utility import _Coder  # noqa: PLC2701 - the encoder under test

    r_names = ["gb", "gc", "bTRUE", "hmid", "hhi"]
    assert build_cells(frame, PRED, "main").columns[1:] == r_names
    nb = NBSynthesizer("y", predictors=PRED)
    assert nb._design_matrix(frame, PRED, [])[1][1:] == r_names  # noqa: SLF001
    assert _Coder("g", frame["g"], [frame["g"]], True).columns == ["gb", "gc"]


def test_a_mutant_encoder_is_caught_by_the_comparison(frame):
    """The appearance-order mutant (Sequential's public predictors before) differs on this
    frame, whose first row is "c": the comparison above would fail for it."""
    mut = _appearance_order(frame["g"])
    assert mut.levels[0] == "c"
    assert not np.array_equal(mut.matrix(frame["g"]), _everywhere(frame)["calibration"][:, :2])


# ----------------------------------------------------------------------------- learned once
def test_unseen_level_in_a_synthetic_set_names_column_and_rows():
    f = Factor.learn(pd.Series(["a", "b", "a"]), name="stype")
    syn = pd.Series(["a", "z", "b", "z"], index=[10, 11, 12, 13])
    with pytest.raises(ValueError, match=r"column 'stype'.*\['z'\].*rows \[11, 13\].*Fix"):
        f.codes(syn)


def test_unseen_level_on_new_data_of_a_formula_is_an_error():
    from surveysynth.analysis.formulas import formula_matrix

    df = pd.DataFrame({"y": [1.0, 2, 3, 4], "g": ["b", "a", "b", "a"]})
    mm = formula_matrix("y ~ g", df, "test")
    new = pd.DataFrame({"y": [1.0, 2], "g": ["a", "q"]})
    with pytest.raises(ValueError, match=r"term 'g'.*\['q'\].*rows \[1\]"):
        mm.rhs.model_spec.get_model_matrix(new)


def test_missing_value_policy():
    col = pd.Series(["b", None, "a"], index=[5, 6, 7])
    with pytest.raises(ValueError, match=r"predictor 'x' has missing values in rows \[6\].*Fix"):
        Factor.learn(col, name="x")
    lev = Factor.learn(col, name="x", na="level")
    assert lev.codes(col).tolist() == [1, 2, 0]
    skip = Factor.learn(col, name="x", na="skip")
    assert skip.levels == ("a", "b")
    assert skip.codes(col).tolist() == [1, -1, 0]
    np.testing.assert_array_equal(skip.indicators(skip.codes(col)), [[1.0], [0.0], [0.0]])
    # a learned coding without the NA level refuses a missing value later
    with pytest.raises(ValueError, match="not among the levels"):
        Factor.learn(pd.Series(["a", "b"]), name="x", na="level").codes(col)
    # the NA level stays one object through pickling (a fitted synthesizer)
    assert pickle.loads(pickle.dumps(lev)).levels[-1] is NA_LEVEL


def test_with_levels_appends_before_the_missing_level():
    f = Factor("x", ("b", "a", NA_LEVEL), na="level").with_levels(["z", "c", "a"])
    assert f.levels == ("b", "a", "c", "z", NA_LEVEL)


def test_is_factor_is_rs_factor_or_logical():
    assert is_factor(pd.Series(["a"])) and is_factor(pd.Series([True]))
    assert is_factor(pd.Series(pd.Categorical([1, 2])))
    assert is_factor(pd.Series([True, None], dtype="boolean"))
    assert not is_factor(pd.Series([1, 2])) and not is_factor(pd.Series([1.5]))
