"""surveysynth: survey designs, design-based estimation that matches R ``survey``, and private
synthetic releases of confidential survey microdata.

Light to import: Stan, R and samplics load only when a feature that needs them is used.
"""

from __future__ import annotations

from ._lazy import lazy_getattr
from .combine import combine
from .design import SurveyDesign

__version__ = "0.1.0"

_EXPORTS = {
    "ReplicateDesign": ".replicate_design",
    "SyntheticRelease": ".release",
    "load_release": ".release",
    "tabulate": ".tables",
    "Table": ".tables",
    "dp_tabulate": ".dp_tables",
    "inclusion_probabilities": ".sampling",
    "pps_systematic": ".sampling",
    "vcov": ".contrasts",
    "contrast": ".contrasts",
    "run_release": ".pipeline",
    "load_config": ".pipeline",
    "svyglm": ".analysis",
    "GLMResults": ".analysis",
    "svychisq": ".analysis",
    "svyttest": ".analysis",
    "svyranktest": ".analysis",
    "svyvar": ".analysis", "regTermTest": ".analysis", "anova": ".analysis",
    "AIC": ".analysis", "BIC": ".analysis",
    "marginpred": ".analysis", "svypredmeans": ".analysis", "predict_svyglm": ".analysis",
    "svykm": ".analysis", "svycoxph": ".analysis", "svylogrank": ".analysis",
    "svysurvreg": ".analysis", "predict_svycoxph": ".analysis", "svygofchisq": ".analysis",
    "svyivreg": ".analysis",
    "svynls": ".analysis", "svystandardize": ".analysis", "svymle": ".analysis",
    "svyprcomp": ".analysis", "svyfactanal": ".analysis", "svycralpha": ".analysis",
    "svycdf": ".analysis", "svyhist": ".analysis", "svyboxplot": ".analysis",
    "svyplot": ".analysis", "svyqqplot": ".analysis", "svyqqmath": ".analysis",
    "svysmooth": ".analysis", "svycoplot": ".analysis", "dotchart": ".analysis",
    "make_panel_svysmooth": ".analysis",
    "svyolr": ".analysis", "svyloglin": ".analysis",
    "HR": ".variance.pps", "ppsmat": ".variance.pps",
    "ppscov": ".variance.pps", "poisson_sampling": ".variance.pps",
    "trim_weights": ".calibration",
    "DaskSurveyDesign": ".engines.dask_engine", "DaskReplicateDesign": ".engines.dask_engine",
    "redistribute_weights": ".nonresponse", "predict_ratio": ".ratio_estimators",
    "propensity_adjust": ".propensity", "balance_table": ".propensity",
    "svyratio_separate": ".ratio_estimators", "quad_form": ".replicate_generators",
    "Estimate": ".results",
    "psrsq": ".analysis", "svykappa": ".analysis", "make_formula": ".analysis",
    "withCrossval": ".analysis", "with_crossval": ".analysis", "svyscoretest": ".analysis",
    "sparseCells": ".nonresponse_cells",
    "sparse_cells": ".nonresponse_cells", "neighbours": ".nonresponse_cells",
    "joinCells": ".nonresponse_cells", "join_cells": ".nonresponse_cells",
    "nonresponse_weights": ".nonresponse_cells", "oldsvyquantile": ".oldquantile",
    "xdesign": ".xdesign",
    "make_calfun": ".calibration", "cal_names": ".calibration", "cal_sinh": ".calibration",
    "cal_linear": ".calibration", "cal_raking": ".calibration", "cal_logit": ".calibration",
    "svysmoothArea": ".analysis", "fay_herriot": ".analysis",
    "svysmoothUnit": ".analysis", "battese_harter_fuller": ".analysis",
    "pps_brewer": ".sampling", "pps_sampford": ".sampling", "pps_poisson": ".sampling",
    "strata_allocation": ".sampling", "stratsample": ".sampling",
    "ImputationDesign": ".analysis", "MIcombine": ".analysis", "withPV": ".analysis",
    "twophase": ".twophase_design", "TwoPhaseDesign": ".twophase_design",
    "multiframe": ".multiframe_design", "MultiFrameDesign": ".multiframe_design",
    "multiphase": ".multiphase_design", "MultiPhaseDesign": ".multiphase_design",
    "DBSurveyDesign": ".db_design",
}
# synth, privacy and datasets are subpackages loaded on first access (__getattr__ below)
__all__ = ["SurveyDesign", "combine", "__version__", "synth", "privacy", "datasets",  # noqa: F822
           *sorted(_EXPORTS)]
_lazy = lazy_getattr(__name__, _EXPORTS)


def __getattr__(name: str):
    if name in ("synth", "privacy", "datasets", "synthetic_utility", "simulate"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    return _lazy(name)
