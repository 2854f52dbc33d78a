"""Design-based analysis: survey-weighted GLMs and tests (R ``svyglm``, ``svychisq``,
``svyttest``, ``svyranktest``, ``regTermTest``, ``anova.svyglm``, ``AIC``/``BIC`` for svyglm),
``svyvar``, and R's ``pchisqsum``/``pFsum``, on linearization and replicate designs.

Sits above the estimation core and the combining rules, below privacy and releases
(``SyntheticRelease.glm`` combines :func:`svyglm` over synthetic sets).
"""

from __future__ import annotations

from .chisqsum import pchisqsum, pFsum
from .design_tests import TestResult, svychisq, svyranktest, svyttest
from .families import quasi
from .glm import GLMResults, GLMSummary, svyglm
from .othermodels import (
    MLEResults,
    RegressionResults,
    svygofchisq,
    svyivreg,
    svymle,
    svynls,
    svystandardize,
)
from .prediction import marginpred, predict_svyglm, svypredmeans
from .regtest import AIC, BIC, anova, reg_term_test, regTermTest
from .survival import (
    CoxResults,
    KMCurve,
    KMCurves,
    predict_svycoxph,
    svycoxph,
    svykm,
    svylogrank,
    svysurvreg,
)
from .variance_matrix import svyvar

__all__ = ["AIC", "BIC", "GLMResults", "GLMSummary", "TestResult", "anova", "pFsum",
           "pchisqsum", "regTermTest", "reg_term_test", "svychisq", "svyglm", "svyranktest",
           "svyttest", "svyvar"]
__all__ += ["CoxResults", "KMCurve", "KMCurves", "marginpred", "predict_svyglm", "quasi",
            "svycoxph", "svykm", "svylogrank", "svypredmeans", "svysurvreg"]
__all__ += ["predict_svycoxph"]
__all__ += ["MLEResults", "svymle"]
__all__ += ["RegressionResults", "svygofchisq", "svyivreg", "svynls", "svystandardize"]
