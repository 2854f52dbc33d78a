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
* Calibrated designs cross both ways with their variance. ``to_r`` of a SurveyDesign from
  ``calibrate``/``post_stratify``/``rake`` (and ``trim_weights``) builds the svydesign with
  the current weights as a vector and sets R's ``postStrata`` from the design's adjustments:
  a ``greg_calibration`` (``qr`` of the orthonormal basis of ``X sqrt(w)``: the same
  projection R's ``qr.resid`` uses), post-stratum indexes with their ``weights`` and
  ``oldweights`` attributes, a ``raking`` list of margins; R's ``svyrecvar`` then gives our
  SEs. The call reads ``calibrated(svydesign(...), "calibrate")``. ``from_r`` of an R
  calibrated ``survey.design2`` (whose call is ``calibrate(...)``, not ``svydesign()``)
  rebuilds the sampling structure from the object itself (cluster and strata formula terms;
  fpc columns found by their values, R keeping only population sizes; ``nest`` tried both
  ways), checks every stage's clusters, strata and population sizes against R's, and turns
  ``postStrata`` into the same adjustments (``qr.Q`` of R's qr for calibration). Calibrated
  ``svyrep.design`` objects carry recalibrated replicate weights, which is all their
  variance uses, so they convert as any replicate design (ReplicateDesigns calibrated in
  Python go to R the same way).
* Designs R builds in ways SurveyDesign does not represent are refused with a message saying
  what to do: PPS designs (``pps=``), cluster-level calibration (``stage=``), two-phase
  designs, subsets whose dropped rows R has already discarded (convert the full design, then
  call ``.subset()`` in Python: the variance needs every PSU), and subsets of calibrated
  designs (R keeps their rows with ``prob = Inf``, so the other rows' weights are lost).
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
    # calibration adjustments as R's postStrata entries (svyrecvar reads them)
    "greg": r"""
function(basis, w) {
  cal <- list(qr = qr(basis), w = w, stage = 0, index = NULL)
  class(cal) <- c("greg_calibration", "gen_raking")
  cal
}""",
    "post": r"""
function(index, weights, oldweights) {
  attr(index, "oldweights") <- oldweights
  attr(index, "weights") <- weights
  index
}""",
    "raking": r"""
function(indexes, weights) {
  r <- mapply(function(i, w) { attr(i, "weights") <- w; i }, indexes, weights,
              SIMPLIFY = FALSE)
  class(r) <- "raking"
  r
}""",
    "set_cal": r"""
function(d, w, ps, what) {
  d$prob <- 1 / w
  d$postStrata <- ps
  d$call <- call("calibrated", d$call, what)
  d
}""",
    # R's postStrata as plain pieces (a problem string for what has no counterpart)
    "describe_cal": r"""
function(d) {
  one <- function(p) {
    if (inherits(p, "greg_calibration")) {
      if (!identical(as.numeric(p$stage), 0)) return(list(kind = "problem",
        what = "cluster-level calibration (calibrate(stage=, aggregate.stage=))"))
      q <- p$qr
      return(list(kind = "greg", basis = qr.Q(q)[, seq_len(q$rank), drop = FALSE],
                  w = as.numeric(p$w)))
    }
    if (inherits(p, "raking")) {
      return(list(kind = "rake",
                  index = lapply(p, function(m) as.integer(factor(as.vector(m)))),
                  weights = lapply(p, function(m) as.numeric(attr(m, "weights")))))
    }
    if (is.list(p) || is.null(attr(p, "weights")))
      return(list(kind = "problem", what = paste("a postStrata entry of class", class(p)[1])))
    old <- attr(p, "oldweights")
    list(kind = "post", index = as.integer(factor(as.vector(p))),
         weights = as.numeric(attr(p, "weights")),
         oldweights = if (is.null(old)) rep(1, length(p)) else as.numeric(old))
  }
  lapply(d$postStrata, one)
}""",
    # the sampling structure of a survey.design2 whose call is not svydesign() (a calibrated
    # or trimmed design): formula term labels, partitions and population sizes
    "structure2": r"""
function(d) {
  lab <- function(df) { tt <- attr(df, "terms"); if (is.null(tt)) NULL else
    attr(tt, "term.labels") }
  codes <- function(df) lapply(df, function(x) as.integer(factor(x)))
  list(ids = lab(d$cluster), strata = if (isTRUE(d$has.strata)) lab(d$strata) else
       character(0), has_strata = isTRUE(d$has.strata),
       cluster = codes(d$cluster), strata_codes = codes(d$strata),
       popsize = if (is.null(d$fpc$popsize)) NULL else unclass(d$fpc$popsize),
       sampsize = unclass(d$fpc$sampsize))
}""",
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
       calibrated = !is.null(d$postStrata), infinite = any(!is.finite(d$prob)),
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
    if weights and getattr(design, "_calibration", ()):
        weights = None  # calibrated (or trimmed) weights are no longer the column's
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
        if not weights and design.fpc_vars and not getattr(design, "_calibration", ()):
            # weights that follow from the fpc are left to R, as in a hand-written call
            rd = build(ro.NULL)
            w_r = 1.0 / np.array(rd.rx2("prob"), dtype=float)
            if not np.allclose(w_r, design.full_weights, rtol=1e-12, atol=0):
                rd = None
        if rd is None:
            rd = build(ro.NULL if weights else ro.FloatVector(np.ascontiguousarray(design.full_weights)))
        if getattr(design, "_calibration", ()):
            rd = _calibration_to_r(ro, rd, design)
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
        if bool(info["calibrated"][0]) and bool(info["infinite"][0]):
            raise ValueError(
                "from_r: the R design is a subset of a calibrated design (R keeps its rows "
                "with prob = Inf), whose other rows' weights are lost. Fix: convert the full "
                "calibrated design and call .subset(mask) on the SurveyDesign.")
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
        if not bool(info["calibrated"][0]):
            return design_from_parts(data, ids=ids if ok_call else None, strata=strata,
                                     fpc=fpc, weights=wcols, probs=pcols, nest=nest,
                                     prob=prob, stages=stages, has_fpc=has_fpc,
                                     lonely_psu=lonely, adjust_domain_lonely=adjust)
        base = _design_from_structure(ro, obj, data, prob, lonely, adjust)
        return _calibration_from_r(ro, obj, base, prob)



def _calibration_to_r(ro, rd, design: Any):
    """R's ``postStrata`` for a calibrated SurveyDesign (the adjustments its linearization
    variance applies, in order), and ``prob = 1/weights``: R's ``svyrecvar`` then computes the
    same calibrated variance. The R call reads ``calibrated(svydesign(...), "<steps>")``."""
    from surveysynth.calibration import GregAdjustment, PostStratAdjustment, RakeAdjustment

    def fvec(x):
        return ro.FloatVector(np.ascontiguousarray(x, dtype=np.float64))

    def ivec(codes):
        return ro.IntVector((np.asarray(codes, dtype=np.int64) + 1).astype(np.int32))

    ps, steps = [], []
    for adj in getattr(design, "_calibration", ()):
        if isinstance(adj, GregAdjustment):
            B = np.asfortranarray(adj.basis, dtype=np.float64)
            mat = ro.r["matrix"](ro.FloatVector(B.ravel(order="F")), nrow=B.shape[0])
            ps.append(_rfun(ro, "greg")(mat, fvec(adj.w)))
            steps.append("calibrate")
        elif isinstance(adj, PostStratAdjustment):
            ps.append(_rfun(ro, "post")(ivec(adj.codes), fvec(adj.psw), fvec(adj.oldw)))
            steps.append("postStratify")
        elif isinstance(adj, RakeAdjustment):
            ps.append(_rfun(ro, "raking")(
                ro.r["list"](*[ivec(c) for c, _ in adj.margins]),
                ro.r["list"](*[fvec(w) for _, w in adj.margins])))
            steps.append("rake")
        elif getattr(adj, "stage", 0):
            raise ValueError("to_r: calibration within clusters (calibrate(stage=)) is not "
                             "converted to R's greg_calibration list yet. Fix: estimate with "
                             "engine='native' (equal to R's calibrate(stage=)).")
        elif getattr(adj, "chain_rule", False):
            raise ValueError("to_r: the design has a nonresponse adjustment "
                             "(redistribute_weights), which R survey's svydesign objects "
                             "cannot hold. Fix: adjust a replicate design (its weights carry "
                             "the adjustment) and convert that.")
        else:
            raise ValueError(f"to_r: calibration step {type(adj).__name__} has no R "
                             "counterpart (internal error).")
    return _rfun(ro, "set_cal")(rd, fvec(design.full_weights), ro.r["list"](*ps),
                                ro.StrVector([", ".join(steps)]))


def _calibration_from_r(ro, obj: Any, design: Any, prob: np.ndarray):
    """The SurveyDesign ``design`` (the uncalibrated structure) with R's ``postStrata`` as
    its calibration adjustments and R's weights ``1/prob``."""
    from surveysynth.calibration import GregAdjustment, PostStratAdjustment, RakeAdjustment

    entries = _rfun(ro, "describe_cal")(obj)
    adjs = []
    for e in entries:
        e = {k: e.rx2(k) for k in e.names}
        kind = str(e["kind"][0])
        if kind == "problem":
            raise ValueError(
                f"from_r: the R design holds {e['what'][0]}, which SurveyDesign does not "
                "represent. Fix: calibrate at the population level (stage = 0) in R, or "
                "convert the design before calibration and calibrate in Python.")
        if kind == "greg":
            basis = np.array(e["basis"], dtype=float).reshape(
                (int(ro.r["nrow"](e["basis"])[0]), -1), order="F")
            adjs.append(GregAdjustment(basis, np.array(e["w"], dtype=float)))
        elif kind == "post":
            adjs.append(PostStratAdjustment(np.array(e["index"], dtype=np.int64) - 1,
                                            np.array(e["weights"], dtype=float),
                                            np.array(e["oldweights"], dtype=float)))
        else:
            adjs.append(RakeAdjustment([
                (np.array(i, dtype=np.int64) - 1, np.array(w, dtype=float))
                for i, w in zip(e["index"], e["weights"], strict=True)]))
    w = 1.0 / prob
    for adj in adjs:
        design = design.with_calibration(w, adj)
    return design


def _partition_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """True when two code vectors group the rows the same way."""
    a = pd.factorize(np.asarray(a))[0]
    b = pd.factorize(np.asarray(b))[0]
    pairs = pd.factorize(a.astype(np.int64) * (int(b.max()) + 1) + b)[0]
    return int(pairs.max()) == int(a.max()) == int(b.max())


def _design_from_structure(ro, obj: Any, data: pd.DataFrame, prob: np.ndarray,
                           lonely: str, adjust: bool):
    """A SurveyDesign rebuilt from a survey.design2's own structure (its ``cluster`` and
    ``strata`` formulas' terms, its population sizes matched to data columns), for designs
    whose call is not ``svydesign()`` (calibrate, postStratify, rake, trimWeights return
    such). Every stage's clusters, strata and population sizes are checked against R's."""
    from surveysynth import SurveyDesign

    info = _rfun(ro, "structure2")(obj)
    info = {k: info.rx2(k) for k in info.names}
    clusters = [np.array(c, dtype=np.int64) for c in info["cluster"]]
    strata_r = [np.array(c, dtype=np.int64) for c in info["strata_codes"]]
    ids = [] if info["ids"] is ro.NULL else [str(x) for x in info["ids"]]
    strata = [str(x) for x in info["strata"]] if info["strata"] is not ro.NULL else None
    S = len(clusters)
    fix = ("Fix: rebuild it in R with formulas of columns of the data, e.g. "
           "calibrate(svydesign(ids = ~psu, strata = ~str, fpc = ~N, data = df), ...).")
    if (not ids and S > 1) or (ids and len(ids) != S) or (
            bool(info["has_strata"][0]) and not strata):
        raise ValueError("from_r: the design's clusters or strata were not given as formulas "
                         "of column names, so they cannot be read back. " + fix)
    fpc = None
    if info["popsize"] is not ro.NULL:
        n = data.shape[0]
        pop = np.array(info["popsize"], dtype=float).reshape((n, -1), order="F")
        samp = np.array(info["sampsize"], dtype=float).reshape((n, -1), order="F")
        fpc = []
        numeric = [c for c in data.columns if pd.api.types.is_numeric_dtype(data[c])
                   and not pd.api.types.is_bool_dtype(data[c])]
        for s in range(S):
            found = None
            for c in numeric:
                v = data[c].to_numpy(dtype=float, na_value=np.nan)
                if np.array_equal(v, pop[:, s]) or (
                        np.all(v <= 1) and np.allclose(v * pop[:, s], samp[:, s],
                                                       rtol=1e-12, atol=0)):
                    found = c
                    break
            if found is None:
                raise ValueError(
                    f"from_r: no column of the data holds the stage-{s + 1} population sizes "
                    "(or sampling fractions) of the design's fpc. " + fix)
            fpc.append(found)
    import warnings

    last_err: Exception | None = None
    for nest in ((False, True) if strata else (False,)):
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "No weights or probabilities supplied")
                design = SurveyDesign(data, ids=ids or None, strata=strata or None,
                                      weights=1.0 / prob, fpc=fpc, nest=nest,
                                      lonely_psu=lonely, adjust_domain_lonely=adjust)
        except ValueError as exc:
            last_err = exc
            continue
        st = design.stages
        same = len(st) == S and all(
            _partition_equal(st[s].cluster, clusters[s])
            and _partition_equal(st[s].stratum_of_cluster[st[s].cluster],
                                 strata_r[min(s, len(strata_r) - 1)])
            for s in range(S))
        if fpc:
            same = same and np.allclose(getattr(design, "_popsize", None), pop, rtol=1e-12, atol=0)
        if same:
            return design
    raise ValueError("from_r: the design rebuilt from the R object's formulas does not have "
                     "R's clusters, strata or population sizes" +
                     (f" ({last_err})" if last_err else "") + ". " + fix)

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
    # a calibrated svyrep.design keeps recalibrated replicate weights: its postStrata
    # record is not used by the replicate variance, so the weights are all there is
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
