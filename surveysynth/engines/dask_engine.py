"""``engine="dask"``: the registered Dask engine (and the public Dask import paths).

:class:`DaskEngine` runs an in-memory design's estimate through the Dask designs' one pass
(:mod:`surveysynth.engines.dask_design`, :mod:`surveysynth.engines.dask_pass`), so that the
Dask path is checked against the native engine on every design the test suite builds. The
module also keeps the import path ``surveysynth.engines.dask_engine`` of the user-facing
:class:`DaskSurveyDesign`, :class:`DaskReplicateDesign` and :class:`UnsupportedByDask`
(the entry point ``surveysynth.engines: dask`` points here). It changes when the engine
protocol (:class:`surveysynth.engines.Engine`) or the engine's call translation changes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .base import Engine
from .dask_design import DaskReplicateDesign, DaskSurveyDesign
from .dask_pass import IN_SCOPE, STATS, UnsupportedByDask

__all__ = ["DaskEngine", "DaskReplicateDesign", "DaskSurveyDesign", "UnsupportedByDask"]


# ------------------------------------------------------------------------ the engine
class DaskEngine(Engine):
    """``engine="dask"`` on an in-memory design: the same one-pass computation on Dask.

    For data that do not fit in memory use :class:`DaskSurveyDesign` /
    :class:`DaskReplicateDesign` directly; this engine exists so that the Dask path is checked
    against the native engine on every design the test suite builds.
    """

    name = "dask"
    description = "Dask (distributed) one-pass domain sums: totals, means, ratios, proportions"
    required_module = "distributed"
    install_hint = "pip install 'surveysynth[dask]'"
    design_kinds = ("taylor", "replicate")

    def estimate(self, design: Any, call: dict, *, dom: np.ndarray, D: int, by: Any = None,
                 by_df: pd.DataFrame | None = None, na_rm: bool = False,
                 return_ci: bool = False) -> tuple:
        stat = call["stat"]
        if stat not in STATS or return_ci:
            raise UnsupportedByDask(f"engine='dask' computes {STATS}, not {stat!r}.")
        frame = design.full_data.copy(deep=False)
        cols = call.get("variables") or (call["numerator"] + call["denominator"])
        extra = {"__dom__": dom.astype(np.int64), IN_SCOPE: dom >= 0,
                 "__w__": np.asarray(design.full_weights, float)}
        if design.design_kind == "taylor":
            ids = list(design.ids_vars)
            if not ids:
                extra["__row__"] = np.arange(frame.shape[0])
                ids = ["__row__"]
            need = list(dict.fromkeys(cols + ids + (design.strata_vars or []) +
                                      (design.fpc_vars or [])))
            data = pd.concat([frame[[c for c in need if c in frame.columns]],
                              pd.DataFrame(extra, index=frame.index)], axis=1)
            dd_design = DaskSurveyDesign(
                data, ids=ids, strata=design.strata_vars, weights="__w__",
                fpc=design.fpc_vars, nest=design.nest, lonely_psu=design.lonely_psu,
                adjust_domain_lonely=design.adjust_domain_lonely, npartitions=3,
                ultimate_cluster=bool(getattr(design, "ultimate_cluster", False)))
        else:
            full = design.full_design()
            A = full.replicate_weights("analysis")
            reps = [f"__rep{r}__" for r in range(A.shape[1])]
            data = pd.concat([frame[cols], pd.DataFrame(extra, index=frame.index),
                              pd.DataFrame(A, columns=reps, index=frame.index)], axis=1)
            dd_design = DaskReplicateDesign(data, repweights=reps, weights="__w__",
                                            type="other", scale=design.scale,
                                            rscales=design.rscales, mse=design.mse,
                                            npartitions=3)
        if stat == "ratio":
            dens = call["denominator"]
            num = call["numerator"] + [d for d in dens if d not in call["numerator"]]
            kinds = (num, [])
            cols = call["numerator"]
        else:
            dens = None
            kinds = dd_design._kinds(cols, stat == "proportion")  # noqa: SLF001 - the designs serve their engine
        inner = {"stat": stat, "cols": cols, "dens": dens, "num": kinds[0], "cat": kinds[1],
                 "by": ["__dom__"], "na_rm": True, "scope": IN_SCOPE}
        est, se, _ = dd_design._estimate(inner, 0.95, "normal", 1.0)  # noqa: SLF001
        return est, se
