"""Designs across the language boundary: ``to_r`` (SurveyDesign -> R ``survey.design2``,
ReplicateDesign -> ``svyrep.design``) and ``from_r`` (the reverse).

``to_r`` rebuilds the design with R's own ``svydesign`` call from the design's variable names, so
R checks and processes it exactly as an R user's design (``ids``, ``strata``, ``fpc`` and
``weights`` as formulas; ``nest``; a subset becomes R's ``design[rows, ]``, which keeps the full
design's PSU counts for the variance). The object's ``call`` reads like a hand-written one:
``svydesign(ids = ~dnum, strata = ~stype, weights = ~pw, fpc = ~fpc, data = data)``.

``from_r`` reads the design variables from the object's call, matched against ``svydesign``'s
arguments (``id=`` and ``ids=`` alike), and the data from ``$variables``; weights are taken
from the object itself (``1/prob``) whenever the call does not name a single weight column, and
are always checked against ``1/prob`` to 1e-12.

Decisions:

* R keeps the lonely-PSU rule in the global options ``survey.lonely.psu`` and
  ``survey.adjust.domain.lonely``, not in the design. ``from_r`` copies the options in force at
  conversion time into the SurveyDesign; ``to_r`` does not touch R's global options (the R
  engine sets them for the duration of each estimate and restores them).
* Weights given in Python as an array, as ``probs``, or computed from the fpc are passed to R as
  the vector ``weights`` (the call shows ``weights = weights``); a single weight column is passed
  as its formula.
* Designs R builds in ways SurveyDesign does not represent are refused with a message saying
  what to do: PPS designs (``pps=``), calibrated or post-stratified designs, two-phase designs,
  and subsets whose dropped rows R has already discarded (convert the full design, then call
  ``.subset()`` in Python: the variance needs every PSU).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from . import r_session
from .convert import pandas_to_r, r_to_pandas

_R_FUNS: dict[str, Any] = {}
_R_CODE = {
    # build a survey.design2 whose call reads like a hand-written svydesign() call
    "svydesign": r"""
function(data, ids, strata, fpc, weights, wvec, nest) {
  f <- function(v) if (length(v)) stats::as.formula(paste("~", paste(sprintf("`%s`", v),
                                                        collapse = " + "))) else ~1
  args <- list(ids = f(ids))
  if (length(strata)) args$strata <- f(strata)
  if (length(weights)) args$weights <- f(weights) else if (!is.null(wvec))
    args$weights <- quote(weights)
  if (length(fpc)) args$fpc <- f(fpc)
  if (isTRUE(nest)) args$nest <- TRUE
  args$data <- quote(data)
  env <- new.env(parent = asNamespace("survey"))
  assign("data", data, envir = env)
  assign("weights", wvec, envir = env)
  eval(as.call(c(quote(svydesign), args)), env)
}""",
    "subset": "function(design, keep) design[keep, ]",
    # a svyrep.design from analysis weights; R's svrepdesign() cannot take every type
    # (mrbbootstrap, subbootstrap come from as.svrepdesign), so scale and rscales are given
    # and the type (and Fay's rho) are set afterwards, as as.svrepdesign leaves them
    "svrepdesign": r"""
function(data, repw, pw, type, scale, rscales, mse, rho) {
  env <- new.env(parent = asNamespace("survey"))
  assign("data", data, envir = env)
  assign("repweights", repw, envir = env)
  assign("weights", pw, envir = env)
  d <- eval(quote(svrepdesign(variables = data, repweights = repweights, weights = weights,
                              type = "other", scale = scale, rscales = rscales,
                              combined.weights = TRUE, mse = mse)),
            list2env(list(scale = scale, rscales = rscales, mse = mse), parent = env))
  d$type <- type
  if (!is.null(rho)) d$rho <- rho
  d$call <- call("svrepdesign", variables = quote(data), repweights = quote(repweights),
                 weights = quote(weights), type = type, scale = scale,
                 combined.weights = TRUE, mse = mse)
  d
}""",
    "describe_rep": r"""
function(d) list(repw = unclass(weights(d, "analysis")), pw = as.numeric(d$pweights),
                 type = d$type, scale = as.numeric(d$scale),
                 rscales = as.numeric(d$rscales), mse = isTRUE(d$mse),
                 rho = if (is.null(d$rho)) NA_real_ else as.numeric(d$rho),
                 postStrata = !is.null(d$postStrata))""",
    # everything from_r needs from a survey.design2, or an explanation of why not
    "describe2": r"""
function(d) {
  problem <- ""
  if (inherits(d, "twophase") || inherits(d, "twophase2")) problem <- "a two-phase design"
  else if (isTRUE(d$pps) || inherits(d, "pps")) problem <- "a PPS (pps=) design"
  else if (!is.null(d$postStrata)) problem <- "a calibrated or post-stratified design"
  else if (!inherits(d, "survey.design2")) problem <- paste("of class", class(d)[1])
  if (nzchar(problem)) return(list(problem = problem))
  pieces <- function(e) {
    if (is.null(e)) return(character(0))
    if (!inherits(e, "formula")) return(NA_character_)
    v <- all.vars(e)
    if (length(v) == 0 && !identical(deparse(e[[2]]), "1") &&
        !identical(deparse(e[[2]]), "0")) return(NA_character_)
    if (length(v) && !identical(sort(attr(stats::terms(e), "term.labels")), sort(v)))
      return(NA_character_)
    v
  }
  cl <- d$call
  ok_call <- is.call(cl) && identical(deparse(cl[[1]]), "svydesign")
  mc <- if (ok_call) match.call(survey::svydesign, cl) else NULL
  arg <- function(name) if (is.null(mc)) NA_character_ else {
    e <- mc[[name]]
    if (is.null(e)) character(0)
    else if (inherits(e, "formula")) pieces(e)
    else if (is.call(e) && identical(e[[1]], as.name("~"))) pieces(eval(e, baseenv()))
    else NA_character_
  }
  nest <- if (is.null(mc) || is.null(mc$nest)) FALSE else isTRUE(eval(mc$nest, baseenv()))
  # PSUs per stage-1 stratum in the rows R kept, against the counts R stored for the variance
  n_kept <- ave(as.integer(factor(d$cluster[, 1])), d$strata[, 1],
                FUN = function(x) length(unique(x)))
  list(problem = "", ok_call = ok_call,
       ids = arg("ids"), strata = arg("strata"), fpc = arg("fpc"),
       weights = arg("weights"), probs = arg("probs"), nest = nest,
       stages = ncol(d$cluster), has_fpc = !is.null(d$fpc$popsize),
       prob = as.numeric(d$prob), dropped = any(n_kept != d$fpc$sampsize[, 1]),
       lonely = as.character(getOption("survey.lonely.psu", "fail")),
       adjust_domain = isTRUE(getOption("survey.adjust.domain.lonely", FALSE)))
}""",
}


def _rfun(ro, name: str):
    if name not in _R_FUNS:
        _R_FUNS[name] = ro.r(_R_CODE[name])
    return _R_FUNS[name]


def _strvec(ro, values) -> Any:
    return ro.StrVector([str(v) for v in (values or [])])


def _is_replicate(design: Any) -> bool:
    return getattr(design, "design_kind", None) == "replicate"


def to_r(design: Any, frame: pd.DataFrame | None = None, subset: bool = True):
    """The R ``survey`` object for a surveysynth design.

    A :class:`~surveysynth.SurveyDesign` becomes a ``survey.design2`` built by R's
    ``svydesign`` from the design's columns (its subset, if any, applied with R's
    ``design[rows, ]``); a ReplicateDesign becomes a ``svyrep.design``.

    ``frame`` (internal, used by the R engine) replaces the design's full data with a frame
    holding the same rows and design columns plus recoded analysis columns; ``subset=False``
    skips the design's subset.
    """
    if _is_replicate(design):
        return _replicate_to_r(design, frame=frame, subset=subset)
    full_data = design.full_data
    data = full_data if frame is None else frame
    if frame is not None and frame.shape[0] != full_data.shape[0]:
        raise ValueError("to_r: frame must have the design's rows (internal error).")
    wvar = design.weights_var
    weights = [wvar] if isinstance(wvar, str) else None
    with r_session("survey") as (ro, _):
        rdata = pandas_to_r(data)
        def build(wvec):
            return _rfun(ro, "svydesign")(
                rdata,
                _strvec(ro, design.ids_vars),
                _strvec(ro, design.strata_vars),
                _strvec(ro, design.fpc_vars),
                _strvec(ro, weights),
                wvec,
                ro.BoolVector([bool(design.nest)]),
            )

        rd = None
        if not weights and design.fpc_vars:
            # weights that follow from the fpc are left to R, as in a hand-written call
            rd = build(ro.NULL)
            w_r = 1.0 / np.array(rd.rx2("prob"), dtype=float)
            if not np.allclose(w_r, design.full_weights, rtol=1e-12, atol=0):
                rd = None
        if rd is None:
            rd = build(ro.NULL if weights else ro.FloatVector(np.ascontiguousarray(design.full_weights)))
        if subset and design.is_subset:
            rd = _rfun(ro, "subset")(rd, ro.BoolVector(design.in_subset.tolist()))
        return rd


def from_r(obj: Any):
    """A surveysynth design from an R ``survey.design2`` (or ``svyrep.design``) object.

    See the module docstring for what is read from where and which designs are refused.
    """
    with r_session("survey") as (ro, _):
        classes = [str(c) for c in ro.r["class"](obj)]
        if "svyrep.design" in classes:
            return _replicate_from_r(ro, obj)
        info = _rfun(ro, "describe2")(obj)
        info = {k: info.rx2(k) for k in info.names}
        problem = str(info["problem"][0])
        if problem:
            raise ValueError(
                f"from_r: the R object is {problem}, which SurveyDesign does not represent. "
                "Fix: convert the uncalibrated svydesign() it was built from and apply the "
                "step in Python, or estimate it in R."
            )
        if bool(info["dropped"][0]):
            raise ValueError(
                "from_r: the R design is a subset whose dropped rows R has discarded (its PSU "
                "counts no longer match its rows), so the full design cannot be rebuilt. Fix: "
                "convert the full design and call .subset(mask) on the SurveyDesign."
            )

        def names(key: str) -> list[str] | None:
            v = info[key]
            vals = [None if x is ro.NA_Character else str(x) for x in v]
            if any(x is None for x in vals):
                return None
            return vals

        data = r_to_pandas(obj.rx2("variables"))
        prob = np.array(info["prob"], dtype=float)
        ok_call = bool(info["ok_call"][0])
        ids, strata, fpc = names("ids"), names("strata"), names("fpc")
        wcols, pcols = names("weights"), names("probs")
        lonely = str(info["lonely"][0])
        adjust = bool(info["adjust_domain"][0])
        nest = bool(info["nest"][0])
        stages = int(info["stages"][0])
        has_fpc = bool(info["has_fpc"][0])
    return design_from_parts(data, ids=ids if ok_call else None, strata=strata, fpc=fpc,
                             weights=wcols, probs=pcols, nest=nest, prob=prob,
                             stages=stages, has_fpc=has_fpc, lonely_psu=lonely,
                             adjust_domain_lonely=adjust)


def design_from_parts(data: pd.DataFrame, ids: list[str] | None, strata: list[str] | None,
                      fpc: list[str] | None, weights: list[str] | None,
                      probs: list[str] | None, nest: bool, prob: np.ndarray, stages: int,
                      has_fpc: bool, lonely_psu: str = "fail",
                      adjust_domain_lonely: bool = False):
    """A SurveyDesign from the pieces of an R ``survey.design2`` (used by from_r and rpkg).

    ``ids``/``strata``/``fpc``/``weights``/``probs`` are the column names the R call gave
    as formulas (``[]`` when absent, ``None`` when given otherwise than as a formula);
    ``prob`` is R's ``$prob``. Weights are a named column only when the call names exactly
    one weight column that equals ``1/prob``; otherwise they are ``1/prob`` itself.
    """
    from surveysynth import SurveyDesign

    if ids is None or strata is None or fpc is None:
        raise ValueError(
            "from_r: the design's call does not give ids, strata and fpc as formulas of column "
            "names (like svydesign(ids = ~psu, strata = ~str, fpc = ~N, data = df)), so they "
            "cannot be read back. Fix: rebuild it in R with formulas of columns of the data."
        )
    ids, strata, fpc = list(ids), list(strata), list(fpc)
    wcols = None if weights is None else list(weights)
    pcols = None if probs is None else list(probs)
    for what, cols in (("ids", ids), ("strata", strata), ("fpc", fpc)):
        missing = [c for c in cols if c not in data.columns]
        if missing:
            raise ValueError(f"from_r: {what} columns {missing} are not in the design's variables.")
    if bool(has_fpc) != bool(fpc):
        raise ValueError("from_r: the R design's fpc does not match its call (internal error).")
    if ids and len(ids) != int(stages):
        raise ValueError(f"from_r: ids {ids} do not match the R design's {stages} stage(s).")
    if lonely_psu not in ("fail", "remove", "certainty", "adjust", "average"):
        raise ValueError(f"from_r: R option survey.lonely.psu={lonely_psu!r} is not supported.")
    from .convert import from_bytes

    w_r = 1.0 / from_bytes(prob)
    spec: Any
    if wcols is not None and len(wcols) == 1 and pcols == [] and wcols[0] in data.columns:
        spec = wcols[0]
        if not np.allclose(data[spec].to_numpy(dtype=float), w_r, rtol=1e-12, atol=0):
            spec = w_r
    elif wcols == [] and pcols == [] and has_fpc:
        spec = None  # weights follow from the fpc, as in R
    else:
        spec = w_r
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "No weights or probabilities supplied")
        design = SurveyDesign(
            data,
            ids=ids or None,
            strata=strata or None,
            weights=spec,
            fpc=fpc or None,
            nest=bool(nest),
            lonely_psu=lonely_psu,
            adjust_domain_lonely=bool(adjust_domain_lonely),
        )
    if not np.allclose(design.full_weights, w_r, rtol=1e-12, atol=0):
        raise ValueError(
            "from_r: the rebuilt weights differ from the R design's 1/prob (internal error); "
            "please report it."
        )
    return design


def design_parts(design: Any) -> dict:
    """Everything R needs to rebuild a surveysynth design (used by the R package rpkg/).

    Plain Python values, lists and bytes (see r_bridge.convert.to_bytes), so reticulate
    converts them without surprises and without NumPy.
    """
    from .convert import frame_to_parts, to_bytes

    full_data = design.full_data
    out: dict[str, Any] = {
        "n": int(full_data.shape[0]),
        "columns": frame_to_parts(full_data),
        "inside": to_bytes(design.in_subset, "u1"),
        "weights_vec": to_bytes(design.full_weights),
    }
    if _is_replicate(design):
        repw = design.full_design().replicate_weights("analysis")
        out.update(kind="replicate", repweights=to_bytes(repw), replicates=int(repw.shape[1]),
                   type=str(design.type), scale=float(design.scale),
                   rscales=to_bytes(design.rscales), mse=bool(design.mse),
                   rho=None if design.rho is None else float(design.rho))
        return out
    wvar = design.weights_var
    out.update(kind="design", ids=list(design.ids_vars or []),
               strata=list(design.strata_vars or []), fpc=list(design.fpc_vars or []),
               weights=[wvar] if isinstance(wvar, str) else [], nest=bool(design.nest),
               lonely_psu=str(design.lonely_psu),
               adjust_domain_lonely=bool(design.adjust_domain_lonely))
    return out


def replicate_from_parts(data: pd.DataFrame, repweights: np.ndarray, weights: np.ndarray,
                         type: str, scale: float, rscales: np.ndarray, mse: bool,  # noqa: A002
                         rho: float | None = None):
    """A ReplicateDesign from an R ``svyrep.design``'s analysis weights and scales."""
    from surveysynth.replicate_design import SVREP_TYPES, ReplicateDesign

    from .convert import from_bytes

    n = data.shape[0]
    repw = from_bytes(repweights).reshape((n, -1), order="F") if isinstance(
        repweights, (bytes, bytearray, memoryview)) else np.asarray(repweights, dtype=float)
    design = ReplicateDesign(
        data,
        repweights=repw.reshape((n, -1), order="F"),
        weights=from_bytes(weights),
        type=type if type in SVREP_TYPES and type != "Fay" else "other",
        scale=float(scale),
        rscales=from_bytes(rscales),
        mse=bool(mse),
        combined_weights=True,
    )
    design.type = str(type)  # R's label (e.g. "mrbbootstrap"); scale and rscales are explicit
    design.rho = None if rho is None or np.isnan(rho) else float(rho)
    return design


def _replicate_to_r(design: Any, frame: pd.DataFrame | None = None, subset: bool = True):
    """A ReplicateDesign as an R ``svyrep.design`` (analysis weights, explicit scales)."""
    data = design.full_data if frame is None else frame
    repw = np.asfortranarray(design.full_design().replicate_weights("analysis"),
                             dtype=np.float64)
    with r_session("survey") as (ro, _):
        rmat = ro.r["matrix"](ro.FloatVector(repw.ravel(order="F")), nrow=repw.shape[0])
        rho = design.rho
        rd = _rfun(ro, "svrepdesign")(
            pandas_to_r(data),
            rmat,
            ro.FloatVector(np.ascontiguousarray(design.full_weights, dtype=np.float64)),
            str(design.type),
            float(design.scale),
            ro.FloatVector(np.ascontiguousarray(design.rscales, dtype=np.float64)),
            bool(design.mse),
            ro.NULL if rho is None else float(rho),
        )
        if subset and design.is_subset:
            rd = _rfun(ro, "subset")(rd, ro.BoolVector(design.in_subset.tolist()))
        return rd


def _replicate_from_r(ro, obj: Any):
    """A ReplicateDesign from an R ``svyrep.design`` (caller holds the R session)."""
    info = _rfun(ro, "describe_rep")(obj)
    info = {k: info.rx2(k) for k in info.names}
    if bool(info["postStrata"][0]):
        raise ValueError(
            "from_r: the R object is a calibrated or post-stratified replicate design, which "
            "ReplicateDesign does not represent. Fix: convert the design before calibration."
        )
    n = int(ro.r["nrow"](obj.rx2("variables"))[0])
    return replicate_from_parts(
        r_to_pandas(obj.rx2("variables")),
        np.array(info["repw"], dtype=float).reshape((n, -1), order="F"),
        np.array(info["pw"], dtype=float),
        str(info["type"][0]),
        float(info["scale"][0]),
        np.array(info["rscales"], dtype=float),
        bool(info["mse"][0]),
        float(info["rho"][0]),
    )
