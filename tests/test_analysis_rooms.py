"""The analysis layer without an import circle (issue 38): regtest refits a model through the
result itself (``GLMResults.update``, R's ``update``) and recognises results without importing
glm.py. What that must keep: the same refit, and the same refusals of non-results."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.analysis import AIC, anova, regTermTest, svyglm


@pytest.fixture(scope="module")
def fit():
    rng = np.random.default_rng(8)
    n = 120
    df = pd.DataFrame({"st": np.repeat(["a", "b", "c"], n // 3), "x": rng.normal(size=n),
                       "z": rng.normal(size=n), "w": rng.uniform(1, 3, n)})
    df["y"] = 1 + 0.5 * df["x"] - 0.3 * df["z"] + rng.normal(size=n)
    design = ss.SurveyDesign(df, strata="st", weights="w")
    return design, svyglm("y ~ x + z + offset(z)", design)


def test_update_is_svyglm_of_the_new_formula_on_the_same_design(fit):
    design, full = fit
    a = full.update("y ~ x + offset(z)")
    b = svyglm("y ~ x + offset(z)", design)
    pd.testing.assert_series_equal(a.params, b.params)
    pd.testing.assert_frame_equal(a.vcov(), b.vcov())


def test_anova_refits_through_update(fit):
    """Sequential anova tests x in the model refitted without z (keeping the offset): its row
    equals regTermTest of x on that model fitted directly (a refit that lost the offset, the
    design or the family would differ)."""
    design, full = fit
    rows = anova(full, method="Wald")
    assert rows.shape[0] == 2
    direct = regTermTest(svyglm("y ~ x + offset(z)", design), "x", method="Wald")
    assert rows["statistic"].iloc[0] == pytest.approx(direct.statistic, rel=1e-12)
    assert rows["p"].iloc[0] == pytest.approx(direct.p_value, rel=1e-12)
    no_offset = regTermTest(svyglm("y ~ x", design), "x", method="Wald")
    assert abs(no_offset.statistic - direct.statistic) > 1e-6 * abs(direct.statistic)


@pytest.mark.parametrize("call", [lambda m: regTermTest(m, "x"), lambda m: AIC(m)])
def test_a_non_result_is_refused(fit, call):
    _, full = fit
    with pytest.raises(TypeError, match="svyglm"):
        call(full.coef_table())
