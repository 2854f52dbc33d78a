# surveysynth for R users: survey designs in, data.frames out, survey designs back.
#
# Python is reached through reticulate (set RETICULATE_PYTHON, or use
# reticulate::use_python(), to pick the Python where surveysynth is installed).
# Data frames never go through reticulate's own data.frame conversion, which turns an
# integer NA into -2147483648 and a character NA into the string "NA": each column crosses
# as plain arrays plus a missing-value mask (r_bridge.convert.frame_from_parts/_to_parts).

.ss <- new.env(parent = emptyenv())

#' The Python side of the package
#'
#' Imports, once per session, the Python modules the package calls: `surveysynth`,
#' `r_bridge.designs` and `r_bridge.convert`. Every function of the package goes through it,
#' so that a Python without surveysynth stops with the same message and fix everywhere.
#'
#' @return an environment holding the modules (`ss`, `designs`, `convert`), as reticulate
#'   Python objects (not converted).
#' @section Which Python:
#' reticulate uses `RETICULATE_PYTHON` (or [reticulate::use_python()]) when set before the first
#' call. If that Python lacks surveysynth (or its R bridge), the error names the Python in use
#' and the fix: install surveysynth into it, or point `RETICULATE_PYTHON` at the Python that
#' has it.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' py <- ss_python()
#' reticulate::py_get_attr(py$ss, "__version__")
#' @export
ss_python <- function() {
  if (is.null(.ss$ss)) {
    ss <- .import_or_fix("surveysynth")
    if (!reticulate::py_has_attr(ss, "SurveyDesign")) {
      where <- tryCatch(paste(unlist(reticulate::py_to_r(ss$`__path__`)), collapse = ", "),
                        error = function(e) "?")
      stop("Python imported 'surveysynth' from ", where, ", which is not the package (a ",
           "folder of that name in the working directory shadows it). Fix: run R from ",
           "another folder, or put the package's folder first on PYTHONPATH.", call. = FALSE)
    }
    designs <- .import_or_fix("r_bridge.designs")
    convert <- .import_or_fix("r_bridge.convert")
    .ss$ss <- ss
    .ss$designs <- designs
    .ss$convert <- convert
  }
  .ss
}

# the fix for a Python that lacks surveysynth (or a module of it), in one place
.python_fix <- function(module) {
  python <- tryCatch(reticulate::py_config()$python, error = function(e) "unknown")
  paste0("Python module '", module, "' is not available to reticulate (Python: ", python,
         "). Fix: pip install surveysynth into that Python, or point RETICULATE_PYTHON at ",
         "the Python that has it (Sys.setenv(RETICULATE_PYTHON = \"/path/to/.venv/bin/python\") ",
         "before the first surveysynth call, in a new R session).")
}

.import_or_fix <- function(module) {
  top <- sub("\\..*$", "", module)
  if (!reticulate::py_module_available(top)) stop(.python_fix(top), call. = FALSE)
  tryCatch(reticulate::import(module, convert = FALSE), error = function(e) {
    stop(.python_fix(module), "\nPython said: ", .r_spelling(conditionMessage(e)),
         call. = FALSE)
  })
}

# a module of the Python package (surveysynth.synth, ...), after ss_python()'s checks
.ss_module <- function(module) {
  ss_python()
  .import_or_fix(module)
}

.pylist <- function(x) if (is.null(x)) NULL else as.list(x)

# numbers cross as raw bytes (R raw <-> Python bytearray): exact, one block copy, and
# independent of reticulate's NumPy support
.raw <- function(v) writeBin(as.numeric(v), raw(), endian = "little")
.unraw <- function(b, n = length(b) %/% 8L) readBin(b, "double", n, endian = "little")

# one column as plain arrays: values (missing entries zeroed), missing mask, levels, tz
.ss_part <- function(name, x, dtype = NULL) {
  if (is.array(x) && length(dim(x)) == 1L && is.atomic(x) && !is.factor(x)) x <- as.vector(x)
  if (!is.null(dim(x)) || is.list(x)) {
    stop(sprintf("column '%s' is a matrix or list column; split it into vectors first.", name),
         call. = FALSE)
  }
  na <- is.na(x)
  part <- list(name = name, na = as.raw(na), levels = list(), ordered = FALSE, tz = "",
               dtype = dtype)
  num <- function(v) { v <- as.numeric(v); v[na] <- 0; .raw(v) }
  if (is.factor(x)) {
    part$kind <- "factor"; part$values <- num(as.integer(x))
    part$levels <- as.list(levels(x)); part$ordered <- is.ordered(x)
  } else if (inherits(x, "Date")) {
    part$kind <- "Date"; part$values <- num(unclass(x))
  } else if (inherits(x, "POSIXct")) {
    tz <- attr(x, "tzone")
    part$kind <- "POSIXct"; part$values <- num(unclass(x))
    part$tz <- if (is.null(tz) || !nzchar(tz[1])) "" else tz[1]
  } else if (is.logical(x)) {
    part$kind <- "logical"; part$values <- num(x)
  } else if (is.integer(x)) {
    part$kind <- "integer"; part$values <- num(x)
  } else if (is.double(x)) {
    part$kind <- "double"; part$values <- num(x)
  } else if (is.character(x)) {
    v <- x; v[na] <- ""
    part$kind <- "character"; part$values <- as.list(enc2utf8(v))
  } else {
    stop(sprintf("column '%s' has class %s, which surveysynth does not convert; convert it ",
                 name, class(x)[1]), "with as.numeric(), as.character() or factor().",
         call. = FALSE)
  }
  part
}

#' Convert a data.frame to a pandas DataFrame, exactly
#'
#' Each column crosses as plain arrays plus a missing-value mask, so that nothing changes on
#' the way: factors (levels and their order, ordered or not), `NA` in every type, integers,
#' logicals, strings, `Date` and `POSIXct` (time zone kept). reticulate's own conversion is
#' not used: it turns an integer `NA` into -2147483648 and a character `NA` into `"NA"`.
#'
#' @param df a data.frame. Matrix and list columns are refused (split them into vectors).
#' @return a pandas DataFrame (a reticulate Python object) with a default (0-based) index.
#' @seealso [ss_from_pandas()] for the way back.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' df <- data.frame(x = c(1.5, NA), f = factor(c("a", "b")), s = c("u", NA))
#' pdf <- ss_to_pandas(df)
#' identical(ss_from_pandas(pdf), df)
#' @export
ss_to_pandas <- function(df) {
  stopifnot(is.data.frame(df))
  dtypes <- attr(df, "pandas.dtypes")
  parts <- lapply(seq_along(df), function(j) {
    nm <- names(df)[j]
    .ss_part(nm, df[[j]], if (!is.null(dtypes) && nm %in% names(dtypes)) dtypes[[nm]] else NULL)
  })
  .py(ss_python()$convert$frame_from_parts(parts, nrow(df)))
}

.ss_frame <- function(parts, n) {
  cols <- lapply(parts, function(p) {
    v <- if (is.raw(p$values)) .unraw(p$values, n) else as.character(unlist(p$values))
    na <- as.logical(p$na)
    x <- switch(p$kind,
      double = as.numeric(v),
      integer = as.integer(v),
      logical = as.logical(v),
      character = as.character(v),
      factor = structure(as.integer(v), levels = as.character(unlist(p$levels)),
                         class = if (isTRUE(p$ordered)) c("ordered", "factor") else "factor"),
      Date = structure(as.numeric(v), class = "Date"),
      POSIXct = structure(as.numeric(v), class = c("POSIXct", "POSIXt"), tzone = p$tz),
      stop("unknown column kind ", p$kind))
    x[na] <- NA
    x
  })
  names(cols) <- vapply(parts, function(p) as.character(p$name), "")
  dtypes <- vapply(parts, function(p) as.character(p$dtype), "")
  names(dtypes) <- names(cols)
  structure(cols, row.names = .set_row_names(as.integer(n)), class = "data.frame",
            pandas.dtypes = dtypes)
}

#' Convert a pandas DataFrame to a data.frame, exactly
#'
#' The reverse of [ss_to_pandas()]: categoricals become factors, pandas' missing values `NA`,
#' nullable integers and booleans R integers and logicals, datetimes `Date` or `POSIXct`.
#' The pandas index is not kept; use `reticulate::py_to_r()` (which the package registers for
#' pandas objects) to get a non-default index as columns.
#'
#' @param pdf a pandas DataFrame (a reticulate Python object).
#' @return a data.frame.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' pd <- reticulate::import("pandas", convert = FALSE)
#' ss_from_pandas(pd$DataFrame(reticulate::dict(a = c(1, 2), b = c("x", "y"))))
#' @export
ss_from_pandas <- function(pdf) {
  py <- ss_python()
  parts <- reticulate::py_to_r(.py(py$convert$frame_to_parts(pdf)))
  out <- .ss_frame(parts, reticulate::py_len(pdf))
  attr(out, "pandas.dtypes") <- NULL
  out
}

# ---------------------------------------------------------------- designs in
.formula_vars <- function(e) {
  if (is.null(e)) return(character(0))
  if (is.call(e) && identical(e[[1]], as.name("~"))) e <- eval(e, baseenv())
  if (!inherits(e, "formula")) return(NULL)
  v <- all.vars(e)
  rhs <- deparse(e[[length(e)]])
  if (length(v) == 0 && !rhs %in% c("1", "0")) return(NULL)
  if (length(v) && !identical(sort(attr(stats::terms(e), "term.labels")), sort(v))) return(NULL)
  v
}

#' A surveysynth design from a survey design or a data.frame
#'
#' Reads the design specification from an R `survey` design object (the `svydesign()` call
#' it was made by, or a replicate design's weights, type, scale and rscales) or builds it
#' from a data.frame with `svydesign()`'s arguments. Estimates from the result equal R
#' `survey`'s (tested to 1e-9 relative); [as_svydesign()] converts it back.
#'
#' @param design a `survey.design2` (from [survey::svydesign()]), an `svyrep.design`
#'   ([survey::svrepdesign()], [survey::as.svrepdesign()]) or a data.frame.
#' @param ids,strata,weights,fpc,probs for a data.frame: the design variables as formulas
#'   (`~dnum + snum`), formula strings or column names, as in [survey::svydesign()]
#'   (`ids = ~1`: no clusters).
#' @param nest for a data.frame: `TRUE` when cluster ids are unique only within strata.
#' @param lonely_psu for a data.frame: what to do with a stratum of one PSU: `"fail"`,
#'   `"remove"`, `"certainty"`, `"adjust"` or `"average"` (R's `survey.lonely.psu`). For a
#'   survey design the option `survey.lonely.psu` in force is used.
#' @param ... not used.
#' @return an `ss_design`: a list whose `py` element is the Python `SurveyDesign` or
#'   `ReplicateDesign`. Use it with [ss_estimate()], [ss_replicate()], [ss_tabulate()],
#'   [ss_fit()] and [as_svydesign()].
#' @section Not supported:
#' PPS, two-phase and calibrated R designs, and subsets whose dropped rows R has discarded:
#' convert the full design and use `by =` (or calibrate in Python).
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' dstrat <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' sd <- ss_design(dstrat)
#' sd
#' ss_design(apiclus1, ids = ~dnum, weights = ~pw, fpc = ~fpc)
#' @export
ss_design <- function(design, ...) UseMethod("ss_design")

#' @rdname ss_design
#' @export
ss_design.default <- function(design, ...) {
  stop("ss_design() needs a survey design (svydesign(), svrepdesign()) or a data.frame, not ",
       class(design)[1], ".", call. = FALSE)
}

#' @rdname ss_design
#' @export
ss_design.survey.design2 <- function(design, ...) {
  if (inherits(design, "twophase") || isTRUE(design$pps) || !is.null(design$postStrata)) {
    stop("ss_design(): PPS, two-phase and calibrated designs are not supported; convert ",
         "the svydesign() they were built from.", call. = FALSE)
  }
  cl <- design$call
  ok <- is.call(cl) && identical(deparse(cl[[1]]), "svydesign")
  if (!ok) {
    stop("ss_design(): this design was not made by svydesign() (its call is ",
         deparse(cl)[1], "). A subset loses rows the variance needs: convert the full ",
         "design and subset with ss_estimate(..., by =) or in Python.", call. = FALSE)
  }
  n_kept <- stats::ave(as.integer(factor(design$cluster[, 1])), design$strata[, 1],
                       FUN = function(x) length(unique(x)))
  if (any(n_kept != design$fpc$sampsize[, 1])) {
    stop("ss_design(): this design is a subset whose dropped rows R has discarded (its PSU ",
         "counts no longer match its rows). Convert the full design and use by= or a ",
         "subset in Python.", call. = FALSE)
  }
  mc <- match.call(survey::svydesign, cl)
  nest <- !is.null(mc$nest) && isTRUE(eval(mc$nest, baseenv()))
  py <- ss_python()
  res <- .py(py$designs$design_from_parts(
    ss_to_pandas(design$variables),
    ids = .pylist(.formula_vars(mc$ids)), strata = .pylist(.formula_vars(mc$strata)),
    fpc = .pylist(.formula_vars(mc$fpc)), weights = .pylist(.formula_vars(mc$weights)),
    probs = .pylist(.formula_vars(mc$probs)), nest = nest, prob = .raw(design$prob),
    stages = ncol(design$cluster), has_fpc = !is.null(design$fpc$popsize),
    lonely_psu = getOption("survey.lonely.psu", "fail"),
    adjust_domain_lonely = isTRUE(getOption("survey.adjust.domain.lonely", FALSE))))
  structure(list(py = res), class = "ss_design")
}

#' @rdname ss_design
#' @export
ss_design.svyrep.design <- function(design, ...) {
  if (!is.null(design$postStrata)) {
    stop("ss_design(): calibrated replicate designs are not supported.", call. = FALSE)
  }
  repw <- unclass(weights(design, "analysis"))
  py <- ss_python()
  res <- .py(py$designs$replicate_from_parts(
    ss_to_pandas(design$variables), .raw(repw),
    .raw(design$pweights), design$type, as.numeric(design$scale),
    .raw(design$rscales), isTRUE(design$mse),
    if (is.null(design$rho)) NULL else as.numeric(design$rho)))
  structure(list(py = res), class = "ss_design")
}

#' @rdname ss_design
#' @export
ss_design.data.frame <- function(design, ids = ~1, strata = NULL, weights = NULL, fpc = NULL,
                                 probs = NULL, nest = FALSE, lonely_psu = "fail", ...) {
  f <- function(x) {
    if (is.null(x)) return(NULL)
    if (inherits(x, "formula")) return(paste(deparse(x), collapse = ""))
    if (is.character(x) && length(x) == 1L && grepl("^\\s*~", x)) return(x)
    v <- .vars(x, "design argument")
    if (length(v) == 1L) v else as.list(v)
  }
  res <- .py(ss_python()$ss$SurveyDesign(ss_to_pandas(design), ids = f(ids),
                                         strata = f(strata), weights = f(weights),
                                         fpc = f(fpc), probs = f(probs), nest = nest,
                                         lonely_psu = lonely_psu))
  structure(list(py = res), class = "ss_design")
}

#' @export
print.ss_design <- function(x, ...) {
  cat("surveysynth design (Python)\n")
  cat(reticulate::py_repr(x$py), "\n", sep = "")
  invisible(x)
}

#' @export
dim.ss_design <- function(x) {
  as.integer(reticulate::py_to_r(x$py$data$shape))
}

# ---------------------------------------------------------------- estimates out
#' Estimates from a design: any estimator by name, a data.frame back
#'
#' Calls the estimator `statistic` of the Python design (Taylor linearization, or the
#' replicate weights of a replicate design) and returns its answer as a data.frame. The
#' numbers equal R `survey`'s `svymean`, `svytotal`, `svyratio`, `svyquantile` and `svyby`.
#'
#' @param design an `ss_design`, a survey design (converted with [ss_design()]), or an
#'   `ss_release` (the estimator runs on each synthetic design and the release's combining
#'   rule is applied: see [ss_release_estimate()]).
#' @param statistic the estimator: `"mean"`, `"total"`, `"ratio"` (with `denominator =`),
#'   `"proportion"` or `"quantile"` (with `quantiles =`). Another name is refused with the
#'   list of valid ones.
#' @param x the variables: a formula (`~api00 + enroll`), a formula string (`"~api00"`) or a
#'   character vector.
#' @param by domains, as in [survey::svyby()]: a formula, formula string or character vector.
#' @param ... further arguments of the Python estimator: `na.rm = TRUE`, `deff = TRUE`,
#'   `level = 0.9`, `denominator = ~api99`, `quantiles = c(0.25, 0.5)`. Formulas become
#'   column names and dots in argument names underscores (`na.rm` is Python's `na_rm`).
#' @return a data.frame of class `ss_estimate`, one row per variable (and level, quantile
#'   or domain), with the `by` columns, `variable`, `estimate`, `se`, `ci_low`, `ci_high`,
#'   `df` (and `deff`). It prints as R `survey` prints: like [survey::svymean()] without
#'   `by`, in [survey::svyby()]'s layout (a row per domain, a column per estimate and its
#'   SE) with `by`; [coef()], [survey::SE()] and [confint()] work on it. A release's estimate
#'   (class `ss_release_estimate`) prints its df and confidence interval too.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' dstrat <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' sd <- ss_design(dstrat)
#' ss_estimate(sd, "mean", ~api00 + enroll)
#' ss_estimate(sd, "mean", ~api00, by = ~stype)        # as svyby(~api00, ~stype, dstrat, svymean)
#' ss_estimate(sd, "ratio", ~api00, denominator = ~api99)
#' ss_estimate(sd, "quantile", ~api00, quantiles = c(0.25, 0.5))
#' ss_estimate(dstrat, "total", ~enroll, na.rm = TRUE)  # a survey design converted on the fly
#' @export
ss_estimate <- function(design, statistic, x, by = NULL, ...) {
  if (inherits(design, "ss_release")) return(ss_release_estimate(design, statistic, x, by, ...))
  if (!inherits(design, "ss_design")) design <- ss_design(design)
  .estimate(design$py, statistic, x, by, list(...), "surveysynth designs")
}

# the estimators of designs and releases (Python methods returning one row per estimate)
.ESTIMATORS <- c("mean", "total", "ratio", "proportion", "quantile")

.estimate <- function(obj, statistic, x, by, args, what) {
  valid <- paste0("\"", .ESTIMATORS, "\"", collapse = ", ")
  if (!is.character(statistic) || length(statistic) != 1L || is.na(statistic)) {
    stop("statistic must be the name of an estimator: one of ", valid, ".", call. = FALSE)
  }
  if (!statistic %in% .ESTIMATORS || !reticulate::py_has_attr(obj, statistic)) {
    hint <- if (tolower(statistic) == "median") {
      " (a median: \"quantile\" with quantiles = 0.5)"
    } else if (tolower(sub("^svy", "", statistic)) %in% .ESTIMATORS) {
      paste0(" (R's ", statistic, " is \"", tolower(sub("^svy", "", statistic)), "\")")
    } else ""
    stop("statistic = \"", statistic, "\" is not an estimator of ", what, ". Fix: one of ",
         valid, hint, ".", call. = FALSE)
  }
  args <- .py_args(args)
  if (!is.null(by)) args$by <- as.list(.vars(by, "by"))
  fun <- reticulate::py_get_attr(obj, statistic)
  res <- .py(do.call(reticulate::py_call, c(list(fun, as.list(.vars(x, "x"))), args)))
  out <- .df(res)
  # a release's combined estimate (Python ReleaseEstimate): printed with df and CI, the rule,
  # its df (capped by the synthetic design's df) and its assumptions, and the one-line
  # explanation of a df below 2
  combined <- reticulate::py_has_attr(res, "df_note")
  structure(out, class = c(if (combined) "ss_release_estimate", "ss_estimate", "data.frame"),
            statistic = statistic, level = if (is.null(args$level)) 0.95 else args$level,
            df_note = if (combined) reticulate::py_to_r(res$df_note()),
            rule_note = if (combined && reticulate::py_has_attr(res, "rule_note"))
              reticulate::py_to_r(res$rule_note()))
}

.STAT_COLS <- c("estimate", "se", "ci_low", "ci_high", "df", "deff", "cv", "variance",
                "between", "within", "m", "note", "n")

# the by columns of an estimate, and each row's label without them (api00, awardsYes,
# api00.0.25, api00/api99: svyby's column names)
.by_cols <- function(x) setdiff(names(x), c(.STAT_COLS, "variable", "level", "quantile"))

.var_labels <- function(x) {
  lab <- as.character(x$variable)
  if ("level" %in% names(x)) lab <- paste0(lab, as.character(x$level))
  if ("quantile" %in% names(x)) lab <- paste0(lab, ".", as.character(x$quantile))
  lab
}

.labels <- function(x) {
  lab <- .var_labels(x)
  by <- .by_cols(x)
  if (length(by)) {
    pre <- do.call(paste, c(lapply(by, function(b) as.character(x[[b]])), sep = "."))
    lab <- paste0(pre, ":", lab)
  }
  lab
}

# an estimate by domains in svyby's layout: a row per domain (named like svyby's rows), the
# by columns, then a column per estimate, its SE ("se", or "se.<label>" for several or a
# ratio) and "DEff.<label>" (as survey's svyby data.frame)
.svyby_frame <- function(x) {
  by <- .by_cols(x)
  lab <- .var_labels(x)
  dom <- do.call(paste, c(lapply(by, function(b) as.character(x[[b]])), sep = "."))
  keep <- !duplicated(dom)
  out <- as.data.frame(lapply(stats::setNames(by, by), function(b) x[[b]][keep]),
                       stringsAsFactors = FALSE)
  labs <- unique(lab)
  cell <- function(col, l) {
    v <- x[[col]][lab == l]
    v[match(dom[keep], dom[lab == l])]
  }
  # svyby names a single estimate's SE "se", except for ratios
  one <- length(labs) == 1L && !identical(attr(x, "statistic"), "ratio")
  se_name <- if (one) "se" else paste0("se.", labs)
  for (l in labs) out[[l]] <- cell("estimate", l)
  for (i in seq_along(labs)) out[[se_name[i]]] <- cell("se", labs[i])
  if ("deff" %in% names(x)) for (l in labs) out[[paste0("DEff.", l)]] <- cell("deff", l)
  rownames(out) <- dom[keep]
  out
}

#' @export
print.ss_estimate <- function(x, ...) {
  if (length(.by_cols(x))) {  # as survey's print of an svyby result
    print(.svyby_frame(x), ...)
    return(invisible(x))
  }
  m <- cbind(x$estimate, x$se)
  colnames(m) <- c(attr(x, "statistic"), "SE")
  if ("deff" %in% names(x)) m <- cbind(m, DEff = x$deff)
  rownames(m) <- .labels(x)
  stats::printCoefmat(m)  # as survey::print.svystat
  invisible(x)
}

.ci_names <- function(lev) paste(format(100 * c((1 - lev) / 2, (1 + lev) / 2), trim = TRUE), "%")

#' @export
print.ss_release_estimate <- function(x, ...) {
  ci <- .ci_names(attr(x, "level"))
  m <- cbind(x$estimate, x$se, x$df, x$ci_low, x$ci_high)
  colnames(m) <- c(attr(x, "statistic"), "SE", "df", ci)
  by <- .by_cols(x)
  if (length(by)) {  # a row per domain and variable, the domains as columns (not row names)
    out <- data.frame(x[by], check.names = FALSE, stringsAsFactors = FALSE)
    lab <- .var_labels(x)
    if (length(unique(lab)) > 1L) out$variable <- lab
    out <- cbind(out, as.data.frame(signif(m, 6), check.names = FALSE))
    names(out)[length(out) - 4L] <- if (length(unique(lab)) > 1L) attr(x, "statistic") else
      lab[1]
    print(out, row.names = FALSE)
  } else {
    rownames(m) <- .labels(x)
    print(signif(m, 6))
  }
  notes <- unique(x$note[!is.na(x$note) & nzchar(x$note)])
  for (n in notes) cat("Note: ", n, "\n", sep = "")
  if (!is.null(attr(x, "rule_note"))) cat(attr(x, "rule_note"), "\n", sep = "")
  if (!is.null(attr(x, "df_note"))) cat(attr(x, "df_note"), "\n", sep = "")
  invisible(x)
}

#' @export
coef.ss_estimate <- function(object, ...) stats::setNames(object$estimate, .labels(object))

#' @method SE ss_estimate
#' @export
SE.ss_estimate <- function(object, ...) stats::setNames(object$se, .labels(object))

#' @export
confint.ss_estimate <- function(object, parm, level = NULL, ...) {
  lev <- attr(object, "level")
  m <- cbind(object$ci_low, object$ci_high)
  colnames(m) <- .ci_names(lev)
  rownames(m) <- .labels(object)
  m
}

# ---------------------------------------------------------------- designs back
.svydesign <- function(data, ids, strata, fpc, weights, wvec, nest) {
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
}

#' Convert a surveysynth design back to an R survey design
#'
#' Builds the design with R's own [survey::svydesign()] (the design variables as formulas)
#' or, for a replicate design, [survey::svrepdesign()] with its replicate weights, type,
#' scale, rscales and mse, so that R `survey` gives the same estimates as surveysynth. A
#' subset stays a subset of the full design (all PSUs kept for the variance).
#'
#' @param design an `ss_design` (from [ss_design()], [ss_replicate()]).
#' @return a `survey.design2` or an `svyrep.design`.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' sd <- ss_design(apistrat, strata = ~stype, weights = ~pw, fpc = ~fpc)
#' back <- as_svydesign(sd)
#' svymean(~api00, back)
#' @export
as_svydesign <- function(design) {
  if (!inherits(design, "ss_design")) {
    stop("as_svydesign() needs an ss_design (from ss_design()).", call. = FALSE)
  }
  p <- reticulate::py_to_r(.py(ss_python()$designs$design_parts(design$py)))
  data <- .ss_frame(p$columns, p$n)
  w <- .unraw(p$weights_vec)
  if (identical(p$kind, "replicate")) {
    repw <- matrix(.unraw(p$repweights), nrow = p$n)
    out <- survey::svrepdesign(variables = data, repweights = repw, weights = w,
                               type = "other", scale = p$scale,
                               rscales = .unraw(p$rscales), combined.weights = TRUE,
                               mse = p$mse)
    out$type <- p$type
    if (!is.null(p$rho)) out$rho <- p$rho
  } else {
    ids <- unlist(p$ids); strata <- unlist(p$strata); fpc <- unlist(p$fpc)
    wname <- unlist(p$weights)
    out <- NULL
    if (!length(wname) && length(fpc)) {
      out <- .svydesign(data, ids, strata, fpc, NULL, NULL, p$nest)
      if (!isTRUE(all.equal(1 / out$prob, w, tolerance = 1e-12, check.attributes = FALSE)))
        out <- NULL
    }
    if (is.null(out)) {
      out <- .svydesign(data, ids, strata, fpc, wname, if (length(wname)) NULL else w, p$nest)
    }
    if (!identical(p$lonely_psu, getOption("survey.lonely.psu", "fail"))) {
      message("note: the design uses lonely_psu = '", p$lonely_psu, "'; set options(",
              "survey.lonely.psu = '", p$lonely_psu, "') for the same variances in R.")
    }
  }
  inside <- as.logical(p$inside)
  if (!all(inside)) out <- out[inside, ]
  out
}
