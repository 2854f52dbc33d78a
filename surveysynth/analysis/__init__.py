"""Design-based analysis: survey-weighted GLMs and tests (R ``svyglm``, ``svychisq``,
``svyttest``, ``svyranktest``, ``regTermTest``, ``anova.svyglm``, ``AIC``/``BIC`` for svyglm),
``svyvar``, and R's ``pchisqsum``/``pFsum``, on linearization and replicate designs; the
multivariate summaries (``svyprcomp``, ``svyfactanal``, ``svycralpha``, ``svycdf``), ``svysmooth`` and the
graphics (``svyhist``, ``svyboxplot``, ``svyplot``, ``svyqqplot``, ``svyqqmath``; matplotlib,
imported only when drawing).

Sits above the estimation core and the combining rules, below privacy and releases
(``SyntheticRelease.glm`` combines :func:`svyglm` over synthetic sets).
"""

from __future__ import annotations

from .chisqsum import pchisqsum, pFsum
from .design_tests import TestResult, svychisq, svyranktest, svyttest
from .glm import GLMResults, GLMSummary, svyglm
from .graphics import dotchart, svyboxplot, svycoplot, svyhist, svyplot, svyqqmath, svyqqplot
from .imputation import ImputationDesign, MIcombine, mi_combine, with_pv, withPV
from .multivariate import (
    FactanalResult,
    PrcompResult,
    StepCDF,
    svycdf,
    svycralpha,
    svyfactanal,
    svyprcomp,
)
from .regtest import AIC, BIC, anova, reg_term_test, regTermTest
from .smoothing import Smooth, make_panel_svysmooth, svysmooth
from .variance_matrix import svyvar

__all__ = ["AIC", "BIC", "GLMResults", "GLMSummary", "TestResult", "anova", "pFsum",
           "pchisqsum", "regTermTest", "reg_term_test", "svychisq", "svyglm", "svyranktest",
           "svyttest", "svyvar"]
__all__ += ["Smooth", "make_panel_svysmooth", "svysmooth", "dotchart", "svycoplot"]
__all__ += ["svyboxplot", "svyhist", "svyplot", "svyqqmath", "svyqqplot"]
__all__ += ["FactanalResult", "PrcompResult", "StepCDF", "svycdf", "svycralpha", "svyfactanal",
            "svyprcomp"]
__all__ += ["ImputationDesign", "MIcombine", "mi_combine", "withPV", "with_pv"]
