# surveysynth for R users: survey designs in, data.frames out, survey designs back.
#
# Python is reached through reticulate (set RETICULATE_PYTHON, or use
# reticulate::use_python(), to pick the Python where surveysynth is installed).
# Data frames never go through reticulate's own data.frame conversion, which turns an
# integer NA into -2147483648 and a character NA into the string "NA": each column crosses
# as plain arrays plus a missing-value mask (r_bridge.convert.frame_from_parts/_to_parts).

.ss <- new.env(parent = emptyenv())

#' The Python side: modules surveysynth, r_bridge.designs, r_bridge.convert
#' @export
ss_python <- function() {
  if (is.null(.ss$ss)) {
    if (!reticulate::py_module_available("surveysynth")) {
      stop("Python package 'surveysynth' is not available to reticulate (Python: ",
           reticulate::py_config()$python, "). Fix: pip install surveysynth into that ",
           "Python, or point RETICULATE_PYTHON at the Python that has it.", call. = FALSE)
    }
    .ss$ss <- reticulate::import("surveysynth", convert = FALSE)
    .ss$designs <- reticulate::import("r_bridge.designs", convert = FALSE)
    .ss$convert <- reticulate::import("r_bridge.convert", convert = FALSE)
  }
  .ss
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

#' A pandas DataFrame from a data.frame: factors (levels and order), NA in every type,
#' integers, logicals, strings, Dates and POSIXct kept exactly.
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

#' A data.frame from a pandas DataFrame (the reverse of ss_to_pandas).
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

#' A surveysynth design (Python) from a survey design or a data.frame
#' @param design a survey.design2 (svydesign), svyrep.design (svrepdesign,
#'   as.svrepdesign) or a data.frame.
#' @export
ss_design <- function(design, ...) UseMethod("ss_design")

#' @export
ss_design.default <- function(design, ...) {
  stop("ss_design() needs a survey design (svydesign(), svrepdesign()) or a data.frame, not ",
       class(design)[1], ".", call. = FALSE)
}

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
#' Call any estimator of a surveysynth design by name; get a data.frame back
#'
#' @param design an ss_design, a survey design (converted with ss_design()), or an
#'   ss_release (the estimator runs on each synthetic design and the release's combining
#'   rule is applied: see ss_release_estimate()).
#' @param statistic "mean", "total", "ratio", "proportion", "quantile", or any other
#'   estimator method of the Python design.
#' @param x variables: a formula (~api00 + enroll), a formula string ("~api00") or a
#'   character vector.
#' @param by domains: a formula, formula string or character vector (like svyby).
#' @param ... further arguments of the Python estimator; formulas become column names and
#'   dots in argument names become underscores (na.rm = TRUE is na_rm = True).
#' @export
ss_estimate <- function(design, statistic, x, by = NULL, ...) {
  if (inherits(design, "ss_release")) return(ss_release_estimate(design, statistic, x, by, ...))
  if (!inherits(design, "ss_design")) design <- ss_design(design)
  .estimate(design$py, statistic, x, by, list(...), "surveysynth designs")
}

.estimate <- function(obj, statistic, x, by, args, what) {
  if (!is.character(statistic) || length(statistic) != 1L || startsWith(statistic, "_")) {
    stop("statistic must be the name of an estimator, like \"mean\".", call. = FALSE)
  }
  if (!reticulate::py_has_attr(obj, statistic)) {
    stop(what, " have no estimator '", statistic, "'.", call. = FALSE)
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

.labels <- function(x) {
  keys <- setdiff(names(x), c("estimate", "se", "ci_low", "ci_high", "df", "deff", "cv",
                             "variance", "between", "within", "m", "note", "n"))
  by <- setdiff(keys, c("variable", "level", "quantile"))
  lab <- as.character(x$variable)
  if ("level" %in% keys) lab <- paste0(lab, as.character(x$level))
  if ("quantile" %in% keys) lab <- paste0(lab, ".", as.character(x$quantile))
  if (length(by)) {
    pre <- do.call(paste, c(lapply(by, function(b) as.character(x[[b]])), sep = "."))
    lab <- paste0(pre, ":", lab)
  }
  lab
}

#' @export
print.ss_estimate <- function(x, ...) {
  m <- cbind(x$estimate, x$se)
  colnames(m) <- c(attr(x, "statistic"), "SE")
  if ("deff" %in% names(x)) m <- cbind(m, DEff = x$deff)
  rownames(m) <- .labels(x)
  stats::printCoefmat(m)  # as survey::print.svystat
  invisible(x)
}

#' @export
print.ss_release_estimate <- function(x, ...) {
  lev <- attr(x, "level")
  m <- cbind(x$estimate, x$se, x$df, x$ci_low, x$ci_high)
  colnames(m) <- c(attr(x, "statistic"), "SE", "df",
                   paste(format(100 * c((1 - lev) / 2, (1 + lev) / 2), trim = TRUE), "%"))
  rownames(m) <- .labels(x)
  print(signif(m, 6))
  notes <- unique(x$note[!is.na(x$note) & nzchar(x$note)])
  for (n in notes) cat("Note: ", n, "\n", sep = "")
  if (!is.null(attr(x, "rule_note"))) cat(attr(x, "rule_note"), "\n", sep = "")
  if (!is.null(attr(x, "df_note"))) cat(attr(x, "df_note"), "\n", sep = "")
  invisible(x)
}

#' @export
coef.ss_estimate <- function(object, ...) stats::setNames(object$estimate, .labels(object))

#' @export
SE.ss_estimate <- function(object, ...) stats::setNames(object$se, .labels(object))

#' @export
confint.ss_estimate <- function(object, parm, level = NULL, ...) {
  lev <- attr(object, "level")
  m <- cbind(object$ci_low, object$ci_high)
  colnames(m) <- paste(format(100 * c((1 - lev) / 2, (1 + lev) / 2), trim = TRUE), "%")
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

#' A survey design object (survey.design2 or svyrep.design) from a surveysynth design
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
