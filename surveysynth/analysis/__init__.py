"""Design-based analysis: survey-weighted GLMs and tests (R ``svyglm``, ``svychisq``,
``svyttest``, ``svyranktest``, ``regTermTest``, ``anova.svyglm``, ``AIC``/``BIC`` for svyglm),
``svyvar``, ``svyolr``, ``svyloglin``, and R's ``pchisqsum``/``pFsum``, on linearization and replicate designs;
prediction (``predict.svyglm``, ``marginpred``, ``svypredmeans``), survival (``svykm``,
``svycoxph``, ``svylogrank``, ``svysurvreg``) and other models (``svyivreg``, ``svynls``,
``svymle``, ``svygofchisq``, ``svystandardize``); the
multivariate summaries (``svyprcomp``, ``svyfactanal``, ``svycralpha``, ``svycdf``), ``svysmooth`` and the
graphics (``svyhist``, ``svyboxplot``, ``svyplot``, ``svyqqplot``, ``svyqqmath``; matplotlib,
imported only when drawing).

Sits above the estimation core and the combining rules, below privacy and releases
(``SyntheticRelease.glm`` combines :func:`svyglm` over synthetic sets).
"""

from __future__ import annotations

from .chisqsum import pchisqsum, pFsum
from .crossval import with_crossval, withCrossval
from .design_tests import TestResult, svychisq, svyranktest, svyttest
from .families import quasi
from .glm import GLMResults, GLMSummary, svyglm
from .graphics import dotchart, svyboxplot, svycoplot, svyhist, svyplot, svyqqmath, svyqqplot
from .imputation import ImputationDesign, MIcombine, mi_combine, with_pv, withPV
from .loglin import LoglinResults, svyloglin
from .loglin import anova as loglin_anova
from .multivariate import (
    FactanalResult,
    PrcompResult,
    StepCDF,
    svycdf,
    svycralpha,
    svyfactanal,
    svyprcomp,
)
from .olr import OLRResults, svyolr
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
from .scoretest import svyscoretest
from .small_area import FayHerriot, eblupFH, fay_herriot, mseFH, svysmooth_area, svysmoothArea
from .small_area_unit import (
    BatteseHarterFuller,
    battese_harter_fuller,
    eblupBHF,
    svysmooth_unit,
    svysmoothUnit,
)
from .smoothing import Smooth, make_panel_svysmooth, svysmooth
from .summaries import make_formula, psrsq, svykappa
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
           "svyttest", "svyvar", "OLRResults", "svyolr", "LoglinResults", "loglin_anova",
           "svyloglin"]
__all__ += ["CoxResults", "KMCurve", "KMCurves", "marginpred", "predict_svyglm", "quasi",
            "svycoxph", "svykm", "svylogrank", "svypredmeans", "svysurvreg"]
__all__ += ["predict_svycoxph"]
__all__ += ["MLEResults", "svymle"]
__all__ += ["RegressionResults", "svygofchisq", "svyivreg", "svynls", "svystandardize"]
__all__ += ["Smooth", "make_panel_svysmooth", "svysmooth", "dotchart", "svycoplot"]
__all__ += ["svyboxplot", "svyhist", "svyplot", "svyqqmath", "svyqqplot"]
__all__ += ["FactanalResult", "PrcompResult", "StepCDF", "svycdf", "svycralpha", "svyfactanal",
            "svyprcomp"]
__all__ += ["make_formula", "psrsq", "svykappa"]
__all__ += ["with_crossval", "withCrossval"]
__all__ += ["svyscoretest"]
__all__ += ["FayHerriot", "eblupFH", "fay_herriot", "mseFH", "svysmooth_area", "svysmoothArea"]
__all__ += ["BatteseHarterFuller", "battese_harter_fuller", "eblupBHF", "svysmooth_unit",
            "svysmoothUnit"]
__all__ += ["ImputationDesign", "MIcombine", "mi_combine", "withPV", "with_pv"]
