"""``engine="samplics"``: the same estimates computed by samplics' TaylorEstimator.

samplics (0.6.1) computes one-stage (ultimate cluster) linearization variances with a
per-stratum finite population correction given as ``1 - n/N``. It therefore reproduces R
``survey`` for: stratified and/or clustered designs with an fpc at the first stage only, and
multistage designs without fpc (R's ultimate-cluster approximation); lonely PSUs under
``"fail"`` and under ``"remove"``/``"certainty"`` (samplics' "skip": zero contribution, R's
result for both). Anything else raises :class:`UnsupportedBySamplics` saying why: quantiles
(samplics' median uses another rule and interval), multistage variance with later-stage fpc,
and lonely-PSU rules ``"adjust"``/``"average"``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd

from ..estimate import is_categorical
from .base import Engine


class UnsupportedBySamplics(NotImplementedError):
    """The design or statistic is outside what samplics computes the way R does."""


def _check(design, call) -> None:
    if call["stat"] == "quantile":
        raise UnsupportedBySamplics(
            "engine='samplics' does not compute quantiles the way R survey does (samplics has only "
            "a median with a different rule and interval): use engine='native' or 'r'."
        )
    if design.has_fpc and design.n_stages > 1:
        raise UnsupportedBySamplics(
            "engine='samplics' computes only first-stage (ultimate cluster) variance; this design "
            "has an fpc at later stages, whose variance R adds recursively. Use engine='native' "
            "or 'r'."
        )
    if design.lonely_psu in ("adjust", "average"):
        stage = design.stages[0]
        if (stage.n_psu == 1).any():
            raise UnsupportedBySamplics(
                f"engine='samplics' has no lonely_psu={design.lonely_psu!r} rule (it only fails, "
                "or skips the stratum as R's 'remove'/'certainty' do). Use engine='native' or 'r'."
            )
    if design.design_kind != "taylor":
        raise UnsupportedBySamplics("engine='samplics' is for linearization designs only.")


def estimate(design: Any, call: dict, dom: np.ndarray, D: int, by: Any = None,
             by_df: pd.DataFrame | None = None, na_rm: bool = False,
             return_ci: bool = False) -> tuple:
    """Estimates and standard errors, shape (D, V), ordered as the native engine orders them."""
    _check(design, call)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        from samplics.estimation import TaylorEstimator
        from samplics.utils.types import PopParam, SinglePSUEst

    stage = design.stages[0]
    stratum = stage.stratum_of_cluster[stage.cluster]
    psu = stage.cluster
    w = design.full_weights
    one_stratum = stage.n_strata == 1
    if one_stratum:
        fpc = float(stage.fpc_factor[0])
        strat_arg = None
    else:
        fpc = {int(h): float(f) for h, f in enumerate(stage.fpc_factor)}
        strat_arg = stratum
    lonely = (stage.n_psu == 1) & (stage.fpc_factor >= 1e-7)
    single = SinglePSUEst.error if design.lonely_psu == "fail" else SinglePSUEst.skip
    if not lonely.any():
        single = SinglePSUEst.error
    # samplics evaluates every domain label, so rows outside all domains get their own label
    domain = np.where(dom >= 0, dom, D)
    use_domain = D > 1 or (dom < 0).any()

    stat = call["stat"]
    frame = design.full_data
    columns: list[tuple[np.ndarray, np.ndarray | None, object]] = []
    if stat == "ratio":
        for b in call["denominator"]:
            for a in call["numerator"]:
                columns.append((design.numeric_values(a), design.numeric_values(b), PopParam.ratio))
    else:
        param = PopParam.total if stat == "total" else PopParam.mean
        for c in call["variables"]:
            s = frame[c]
            if stat == "proportion" or is_categorical(s):
                Y, _ = design.level_indicators(c)
                columns += [(Y[:, j], None, param) for j in range(Y.shape[1])]
            else:
                columns.append((design.numeric_values(c), None, param))

    est = np.empty((D, len(columns)))
    se = np.empty((D, len(columns)))
    for j, (y, x, param) in enumerate(columns):
        # rows outside every domain only form samplics' extra domain label D; give them a
        # nonzero value so samplics' CV of that unused label does not divide by zero
        y = np.where(dom >= 0, np.nan_to_num(y), 1.0)
        kwargs = dict(y=y, samp_weight=w, stratum=strat_arg, psu=psu, fpc=fpc, single_psu=single)
        if x is not None:
            kwargs["x"] = np.where(dom >= 0, np.nan_to_num(x), 1.0)
        if use_domain:
            kwargs["domain"] = domain
        est_obj = TaylorEstimator(param=param)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est_obj.estimate(**kwargs)
        if use_domain:
            for d in range(D):
                est[d, j] = est_obj.point_est[d]
                se[d, j] = est_obj.stderror[d]
        else:
            est[0, j] = est_obj.point_est
            se[0, j] = est_obj.stderror
    return est, se


class SamplicsEngine(Engine):
    """samplics' TaylorEstimator (linearization designs; see the module docstring)."""

    name = "samplics"
    description = "samplics 0.6.1 TaylorEstimator (one-stage linearization)"
    required_module = "samplics"
    install_hint = "pip install 'samplics==0.6.1' (a dependency of surveysynth)"
    design_kinds = ("taylor",)

    def estimate(self, design: Any, call: dict, *, dom: np.ndarray, D: int, by: Any = None,
                 by_df: pd.DataFrame | None = None, na_rm: bool = False,
                 return_ci: bool = False) -> tuple:
        return estimate(design, call, dom, D, by=by, by_df=by_df, na_rm=na_rm,
                        return_ci=return_ci)
