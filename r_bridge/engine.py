"""R ``survey`` as an estimation engine: ``design.mean(..., engine="r")`` and friends.

:class:`REngine` registers with surveysynth's engine registry through the entry-point group
``surveysynth.engines`` (pyproject.toml); the estimation core looks it up there and never
imports this module. Its :meth:`REngine.estimate` (:func:`estimate`) is called with the domain
codes the design has already computed. It rebuilds the design in R with :func:`r_bridge.designs.to_r`, subsets it to the
rows in a domain (``dom >= 0``: the design's subset minus ``na_rm`` rows, R's
``design[rows, ]``, which keeps every PSU for the variance), and calls ``svytotal``,
``svymean``, ``svyratio`` or ``svyquantile`` directly, or through ``svyby`` over the ``by``
columns. Estimates and standard errors come back as (D, V) arrays in the order the native
engine uses.

Decisions (so the two engines estimate the same thing, and R does all of the arithmetic):

* Categorical analysis variables, and every variable of ``proportion``, are sent to R as
  factors whose levels are the levels the native engine reports, in its order; ``by``
  columns likewise. R's output rows are matched to the native domains by their labels, not
  by position, so a different sort order in R cannot mix domains up.
* The design's ``lonely_psu``, ``adjust_domain_lonely`` and ``ultimate_cluster`` are set as
  R's options ``survey.lonely.psu`` / ``survey.adjust.domain.lonely`` /
  ``survey.ultimate.cluster`` for the call and restored after.
* Quantiles: ``svyquantile`` with R 4.1's defaults (``qrule="math"``, Woodruff interval
  ``interval.type="mean"``, design df) and ``alpha = 1 - level``; the SE is R's, derived
  from its interval.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from surveysynth.engines import Engine
from surveysynth.estimate import category_levels, is_categorical

from . import _INSTALL_HINT, r_session
from .designs import to_r

_DOM = ".ss_domain"
_R_FUNS: dict[str, Any] = {}
_R_CODE = r"""
function(design, dom_col, stat, vars, dens, byvars, quantiles, level, lonely, adjlonely,
         ultimate = FALSE) {
  op <- options(survey.lonely.psu = lonely, survey.adjust.domain.lonely = adjlonely,
                survey.ultimate.cluster = ultimate)
  on.exit(options(op))
  f <- function(v) stats::as.formula(paste("~", paste(sprintf("`%s`", v), collapse = " + ")))
  design <- design[design$variables[[dom_col]] >= 0, ]
  FUN <- switch(stat, total = survey::svytotal, mean = survey::svymean,
                proportion = survey::svymean, ratio = survey::svyratio,
                quantile = survey::svyquantile)
  extra <- switch(stat,
    ratio = list(denominator = f(dens)),
    quantile = list(quantiles = quantiles, ci = TRUE, alpha = 1 - level),
    list())
  ci <- NULL
  if (stat == "quantile") {
    # per domain, as svyby does, but keeping svyquantile's own (Woodruff) interval, which
    # confint() on an svyby result would replace by a Wald interval
    keys <- if (length(byvars)) do.call(paste, c(lapply(byvars, function(b)
      as.character(design$variables[[b]])), sep = "\r")) else rep("", nrow(design))
    groups <- unique(keys)
    one <- function(g) {
      q <- do.call(FUN, c(list(f(vars), design[keys == g, ]), extra))
      rbind(as.numeric(coef(q)), as.numeric(SE(q)), as.numeric(confint(q)[, 1]),
            as.numeric(confint(q)[, 2]))
    }
    out <- lapply(groups, one)
    pick <- function(i) do.call(rbind, lapply(out, function(m) m[i, ]))
    est <- pick(1); se <- pick(2); ci <- list(pick(3), pick(4)); keys <- groups
  } else if (length(byvars)) {
    res <- do.call(survey::svyby, c(list(f(vars), f(byvars), design, FUN), extra,
                                   list(keep.var = TRUE)))
    G <- nrow(res)
    est <- matrix(as.numeric(coef(res)), nrow = G)
    se <- matrix(as.numeric(as.matrix(SE(res))), nrow = G)
    keys <- do.call(paste, c(lapply(byvars, function(b) as.character(res[[b]])), sep = "\r"))
  } else {
    res <- do.call(FUN, c(list(f(vars), design), extra))
    est <- matrix(as.numeric(coef(res)), nrow = 1)
    se <- matrix(as.numeric(SE(res)), nrow = 1)
    keys <- ""
  }
  list(est = est, se = se, keys = keys, lo = if (is.null(ci)) NULL else ci[[1]],
       hi = if (is.null(ci)) NULL else ci[[2]])
}
"""


def _levels_frame(design: Any, call: dict, by_df: pd.DataFrame | None) -> tuple[pd.DataFrame, list]:
    """The design's full frame with analysis and by columns recoded for R (not mutating it)."""
    frame = design.full_data
    new: dict[str, Any] = {}
    stat = call["stat"]
    for c in call.get("variables", []):
        s = frame[c]
        if stat == "proportion" or (stat in ("mean", "total") and is_categorical(s)):
            levels = category_levels(s[design.in_subset])
            codes = pd.Index(levels).get_indexer(s)
            new[c] = pd.Categorical.from_codes(codes, categories=[str(x) for x in levels])
    by_cols = list(by_df.columns) if by_df is not None else []
    for c in by_cols:
        levels = list(by_df[c].cat.categories) if isinstance(by_df[c].dtype, pd.CategoricalDtype) \
            else category_levels(by_df[c])
        codes = pd.Index(levels).get_indexer(frame[c])
        new[c] = pd.Categorical.from_codes(codes, categories=[str(x) for x in levels])
    if _DOM in frame.columns:
        raise ValueError(f"engine='r': the data have a column named {_DOM!r}; rename it.")
    out = frame.assign(**new) if new else frame.copy(deep=False)
    return out, by_cols


def estimate(design: Any, call: dict, *, dom: np.ndarray, D: int, by: Any = None,
             by_df: pd.DataFrame | None = None, na_rm: bool = False,
             return_ci: bool = False) -> tuple:
    """Estimates and SEs from R ``survey`` as (D, V) arrays, in the native engine's order.

    ``call`` is ``{"stat": "total"|"mean"|"proportion", "variables": [...]}``,
    ``{"stat": "ratio", "numerator": [...], "denominator": [...]}`` or
    ``{"stat": "quantile", "variables": [...], "quantiles": [...], "level": 0.95}``;
    ``dom`` holds the domain code of every row of the full frame (-1 outside), ``by_df`` the
    labels of the D domains (None for one domain). ``na_rm`` needs no action here: rows with
    missing values are already outside every domain.

    ``return_ci=True`` returns ``(est, se, ci_low, ci_high)``: for quantiles R's own Woodruff
    limits (asymmetric, so they cannot be rebuilt from the SE), None for other statistics.
    """
    stat = call["stat"]
    if stat not in ("total", "mean", "proportion", "ratio", "quantile"):
        raise ValueError(f"engine='r': statistic {stat!r} is not available through R.")
    frame, by_cols = _levels_frame(design, call, by_df)
    frame = frame.assign(**{_DOM: np.asarray(dom, dtype=np.int64)})
    if stat == "ratio":
        vars_, dens = call["numerator"], call["denominator"]
    else:
        vars_, dens = call["variables"], []
    with r_session("survey") as (ro, _):
        if "estimate" not in _R_FUNS:
            _R_FUNS["estimate"] = ro.r(_R_CODE)
        rd = to_r(design, frame=frame, subset=False)
        res = _R_FUNS["estimate"](
            rd,
            _DOM,
            stat,
            ro.StrVector(vars_),
            ro.StrVector(dens),
            ro.StrVector(by_cols),
            ro.FloatVector(call.get("quantiles", [])),
            float(call.get("level", 0.95)),
            getattr(design, "lonely_psu", "fail"),
            bool(getattr(design, "adjust_domain_lonely", False)),
            bool(getattr(design, "ultimate_cluster", False)),
        )
        keys = [str(k) for k in res.rx2("keys")]
        G = len(keys)

        def grab(name: str) -> np.ndarray | None:
            v = res.rx2(name)
            if v is ro.NULL:
                return None
            return np.array(v, dtype=float).reshape((G, -1), order="F")

        est, se, lo, hi = grab("est"), grab("se"), grab("lo"), grab("hi")
    if by_df is None:
        order = np.zeros(1, dtype=np.int64)
    else:
        ours = by_df.astype(str).agg("\r".join, axis=1).tolist() if by_cols else [""]
        pos = {k: i for i, k in enumerate(keys)}
        missing = [k for k in ours if k not in pos]
        if missing or len(keys) != D:
            raise RuntimeError(
                f"engine='r': R returned domains {keys[:5]} for {D} expected domains "
                f"{ours[:5]}; please report this."
            )
        order = np.array([pos[k] for k in ours], dtype=np.int64)
    if return_ci:
        return (est[order], se[order], None if lo is None else lo[order],
                None if hi is None else hi[order])
    return est[order], se[order]


class REngine(Engine):
    """R ``survey`` through rpy2: ``svytotal``, ``svymean``, ``svyratio``, ``svyquantile``,
    ``svyby``, on the design rebuilt in R (linearization and replicate designs)."""

    name = "r"
    description = "R survey through rpy2 (svydesign / svrepdesign estimators)"
    required_module = "rpy2"
    install_hint = _INSTALL_HINT
    design_kinds = ("taylor", "replicate")

    def estimate(self, design: Any, call: dict, *, dom: np.ndarray, D: int, by: Any = None,
                 by_df: pd.DataFrame | None = None, na_rm: bool = False,
                 return_ci: bool = False) -> tuple:
        return estimate(design, call, dom=dom, D=D, by=by, by_df=by_df, na_rm=na_rm,
                        return_ci=return_ci)
