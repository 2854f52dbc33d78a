# Replicate designs, published tables, Laplace tables, synthesizers, releases and the release
# pipeline, from R. Every function takes R-spelled arguments (formulas, na.rm = TRUE, vectors)
# and returns data.frames, survey objects or R lists; Python objects stay inside wrappers
# (class ss_design, ss_synthesizer, ss_release, ss_table) whose $py is the Python object.

.as_ss_design <- function(design) {
  if (inherits(design, "ss_design")) return(design)
  ss_design(design)
}

.wrap_design <- function(py) structure(list(py = py), class = "ss_design")

# ---------------------------------------------------------------- replicate designs
#' A replicate-weight design from a design
#'
#' Makes replicate weights for a design: the bootstrap, the jackknife or balanced repeated
#' replication, with the numbers of R's `as.svrepdesign()` where R has the method.
#'
#' @param design an ss_design or a survey design (svydesign()).
#' @param type "bootstrap" (Preston's multistage rescaled bootstrap by default; method =
#'   "raowu" and others as in Python), "jackknife" (JK1/JKn as R's "auto") or "brr"
#'   (fay.rho = 0.3 for Fay's method).
#' @param ... arguments of the Python method: replicates = 500, method =, seed =, mse =,
#'   fay.rho = (dots become underscores).
#' @return an `ss_design` holding a Python `ReplicateDesign`: use it with [ss_estimate()],
#'   [ss_tabulate()], or [as_svydesign()] for an `svyrep.design`.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' dstrat <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' jk <- ss_replicate(dstrat, "jackknife")
#' ss_estimate(jk, "mean", ~api00)                  # as svymean on as.svrepdesign(type = "JKn")
#' bs <- ss_replicate(dstrat, "bootstrap", replicates = 50, seed = 1)
#' ss_estimate(bs, "total", ~enroll)
#' @export
ss_replicate <- function(design, type = c("bootstrap", "jackknife", "brr"), ...) {
  design <- .as_ss_design(design)
  type <- match.arg(type)
  args <- .py_args(list(...))
  fun <- reticulate::py_get_attr(design$py, type)
  .wrap_design(.py(do.call(reticulate::py_call, c(list(fun), args))))
}

# ---------------------------------------------------------------- tables
.source <- function(source) {
  if (inherits(source, "ss_release") || inherits(source, "ss_design")) return(source$py)
  ss_design(source)$py
}

.table <- function(py) {
  long <- .df(py$long)
  structure(long, class = c("ss_table", "data.frame"), py = py,
            rows = unlist(reticulate::py_to_r(py$rows)),
            cols = unlist(reticulate::py_to_r(py$cols)))
}

#' A published table: counts, totals or means by rows x cols with margins, SE, CV, CI, flags
#'
#' The official tabulation of a design (or of a release, with its combining rule applied to
#' every cell): every cell and margin with its SE, CV and confidence interval, and flags for
#' cells too small or too unreliable to publish (`cv_max =`, `n_min =`).
#'
#' @param source an ss_design, a survey design, or an ss_release (the release's combining
#'   rule is applied to every cell).
#' @param rows,cols classification variables: formulas (~field), formula strings or names.
#' @param value numeric variable (NULL with stat = "total" counts: sums of weights).
#' @param stat "total" or "mean".
#' @param na.rm drop records with a missing value from the estimate.
#' @param ... cv_max =, n_min =, level =, ci = ("normal" or "t"), margin_label =.
#' @return a data.frame, one row per cell (class ss_table): the label columns, cell,
#'   estimate, se, cv, ci_low, ci_high, df, n_unweighted, flag, flag_reason. ss_table_wide()
#'   lays it out as a grid, ss_write_table() writes CSV, XLSX, LaTeX or HTML.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' dstrat <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' tab <- ss_tabulate(dstrat, rows = ~stype, cols = ~awards)     # weighted counts
#' tab
#' ss_tabulate(dstrat, rows = ~stype, value = ~api00, stat = "mean")
#' @export
ss_tabulate <- function(source, rows, cols = NULL, value = NULL, stat = "total",
                        na.rm = FALSE, ...) {
  py <- .source(source)
  args <- .py_args(list(...))
  args$rows <- as.list(.vars(rows, "rows"))
  if (!is.null(cols)) args$cols <- as.list(.vars(cols, "cols"))
  if (!is.null(value)) args$value <- .py_names(value, "value")
  args$stat <- stat
  args$na_rm <- isTRUE(na.rm)
  .table(.py(do.call(ss_python()$ss$tabulate, c(list(py), args))))
}

#' The table as a rows x cols grid of one statistic (margins last)
#'
#' @param table an `ss_table` (from [ss_tabulate()] or [ss_laplace_tables()]).
#' @param what the statistic: `"estimate"`, `"se"`, `"cv"`, `"ci_low"`, `"ci_high"`, `"df"`,
#'   `"n_unweighted"` or `"flag"`.
#' @return a data.frame: the rows variables' labels, then a column per level of `cols`.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' dstrat <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' tab <- ss_tabulate(dstrat, rows = ~stype, cols = ~awards)
#' ss_table_wide(tab, "se")
#' @export
ss_table_wide <- function(table, what = "estimate") {
  .df(.py(.table_py(table)$wide(what)))
}

.table_py <- function(table) {
  py <- attr(table, "py")
  if (!inherits(table, "ss_table") || is.null(py)) {
    stop("table: give a table from ss_tabulate() or ss_laplace_tables().", call. = FALSE)
  }
  py
}

#' Write a table: .csv, .xlsx, .tex or .html by the file's extension
#'
#' @param table an `ss_table` (from [ss_tabulate()] or [ss_laplace_tables()]).
#' @param path the file; its extension chooses the format.
#' @param ... `title =`, `digits =`, `labels =` (a named list of named character vectors:
#'   value labels per variable), `wide = TRUE` (CSV grid) as the Python exports take them.
#' @return `path`, invisibly.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' dstrat <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' tab <- ss_tabulate(dstrat, rows = ~stype)
#' f <- tempfile(fileext = ".csv")
#' ss_write_table(tab, f)
#' read.csv(f)
#' @export
ss_write_table <- function(table, path, ...) {
  py <- .table_py(table)
  ext <- tolower(sub(".*\\.([^.]*)$", "\\1", basename(path)))
  args <- .py_args(list(...))
  if (!is.null(args$labels)) args$labels <- lapply(args$labels, as.list)
  if (!is.null(args$digits) && is.list(args$digits)) {
    args$digits <- lapply(args$digits, as.integer)
  } else if (!is.null(args$digits)) {
    args$digits <- as.integer(args$digits)
  }
  fun <- switch(ext, csv = py$to_csv, xlsx = py$to_excel, tex = py$to_latex, html = py$to_html,
                stop("path: write .csv, .xlsx, .tex or .html, not '.", ext, "'.", call. = FALSE))
  .py(do.call(fun, c(list(path.expand(path)), args)))
  invisible(path)
}

#' @export
print.ss_table <- function(x, ...) {
  py <- attr(x, "py")
  if (is.null(py) || nrow(x) != reticulate::py_len(py$long)) return(NextMethod())
  cat(reticulate::py_str(py), "\n", sep = "")
  cat("(a data.frame of ", nrow(x), " cells: as.data.frame() for its columns, ",
      "ss_table_wide() for a grid)\n", sep = "")
  invisible(x)
}

#' Counts and means tables with Laplace noise (differentially private tables)
#'
#' A counts table and a means table of one variable, with Laplace noise calibrated to the
#' design-weighted sensitivity, for the baseline a synthetic release is compared with.
#'
#' @param design the confidential design (ss_design or svydesign()).
#' @param rows,cols classification variables (cols may be NULL).
#' @param value the numeric variable of the means table.
#' @param epsilon the total privacy budget of both tables.
#' @param replicates half-sample replicates for the variance (10).
#' @param seed NULL (secret entropy) or an integer, for the replicate selection only.
#' @param na.rm drop records with a missing value from the estimates.
#' @param ... cv_max =, n_min =, level =, margin_label =.
#' @return a list: counts and means (ss_table data.frames), budget (a list), privacy (the
#'   public privacy record, as ss_privacy()), sensitivity (a data.frame, for the curator only).
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' dstrat <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' lap <- ss_laplace_tables(dstrat, rows = ~awards, value = ~api00, epsilon = 1, seed = 1)
#' lap$counts
#' lap$privacy$guarantee
#' @export
ss_laplace_tables <- function(design, rows, cols = NULL, value, epsilon, replicates = 10,
                              seed = NULL, na.rm = FALSE, ...) {
  design <- .as_ss_design(design)
  args <- .py_args(c(list(replicates = replicates, seed = seed), list(...)))
  args$rows <- as.list(.vars(rows, "rows"))
  args["cols"] <- list(if (is.null(cols)) NULL else as.list(.vars(cols, "cols")))  # None kept
  args$value <- .py_names(value, "value")
  args$epsilon <- epsilon
  args$na_rm <- isTRUE(na.rm)
  lap <- .ss_module("surveysynth.privacy.laplace")
  res <- .py(do.call(lap$laplace_tables, c(list(design$py), args)))
  list(counts = .table(res$counts), means = .table(res$means),
       budget = reticulate::py_to_r(res$budget), privacy = .record(res$privacy),
       sensitivity = .df(res$sensitivity))
}

# ---------------------------------------------------------------- synthesizers
.SYNTHS <- c(fbs = "FBS", fbp = "FBP", pbp = "PBP", quantile = "QuantileSynthesizer",
             kng = "QuantileSynthesizer", quantilesynthesizer = "QuantileSynthesizer",
             mixture = "MixtureSynthesizer", mixturesynthesizer = "MixtureSynthesizer",
             nb = "NBSynthesizer", nbsynthesizer = "NBSynthesizer")

#' A synthesizer with its settings (not fitted)
#'
#' The Python synthesizer class named by `synthesizer`, made with the settings in `...`.
#' The settings are checked at once by the validator the Python API and the release config
#' use (each against the class's constraint table, then the rules between settings): a wrong
#' one is an error naming it, the value and the fix. Nothing is computed until [ss_fit()].
#'
#' @param synthesizer "FBS", "FBP", "PBP" (risk-weighted pseudo posteriors, Stan), "quantile"
#'   (KNG quantile-regression synthesis; also "KNG"), "mixture" or "NB"
#'   (identification-risk weighted synthesizers).
#' @param ... the settings, as the Python class takes them: outcome = "salary" (or ~salary),
#'   predictors = c("field", "gender") (or ~field + gender), target_lipschitz =, m =,
#'   chains =, draws =, warmup =, allow_unconverged = TRUE, population_size =,
#'   random_state = (an integer; NULL draws secret OS entropy), progress = FALSE, bounds =
#'   list(salary = c(0, 5e5)), ... Formulas become column names, dots in names underscores.
#' @return an `ss_synthesizer`: [ss_fit()] it on a design, then [ss_release()].
#' @seealso The settings of each synthesizer: `help(surveysynth.synth.FBS)` and the others
#'   in Python, or `reticulate::py_help()` on `ss_synthesizer(...)$py`.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' d <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' syn <- ss_synthesizer("quantile", variables = "api00", bounds = list(api00 = c(200, 1000)),
#'                       epsilon = 5, m = 3, random_state = 1, progress = FALSE)
#' rel <- ss_release(ss_fit(syn, d))
#' rel
#' @export
ss_synthesizer <- function(synthesizer, ...) {
  # not called `method`: KNG has a setting `method`, and R would match `m = 3` to it
  method <- synthesizer
  if (!is.character(method) || length(method) != 1L) {
    stop("synthesizer: one of \"FBS\", \"FBP\", \"PBP\", \"quantile\" (KNG), \"mixture\", \"NB\".",
         call. = FALSE)
  }
  cls <- unname(.SYNTHS[tolower(method)])
  if (is.na(cls)) {
    stop("synthesizer = \"", method, "\" is not a synthesizer. Fix: one of \"FBS\", \"FBP\", ",
         "\"PBP\", \"quantile\" (KNG), \"mixture\", \"NB\".", call. = FALSE)
  }
  synth <- .ss_module("surveysynth.synth")
  pycls <- reticulate::py_get_attr(synth, cls)
  # whole numbers become integers where the class's constraint table counts (chains, m, ...)
  ints <- unlist(reticulate::py_to_r(
    .ss_module("surveysynth.synth.params")$integer_settings(pycls)))
  args <- .py_args(list(...), ints = as.character(ints))
  for (nm in intersect(c("categorical", "release_columns"), names(args))) {
    if (is.character(args[[nm]])) args[[nm]] <- as.list(args[[nm]])  # a list even for one
  }
  if (is.list(args$bounds)) {
    args$bounds <- lapply(args$bounds, function(b) reticulate::tuple(as.list(as.numeric(b))))
  }
  py <- .py(do.call(reticulate::py_call, c(list(pycls), args)))
  # the one validator of the Python API and the release config (the class's constraint
  # table, then its cross-setting rules): a wrong setting stops here, naming it and the fix
  .py(py$check_params())
  structure(list(py = py, method = cls), class = "ss_synthesizer")
}

#' Fit a synthesizer to the confidential design
#'
#' Learns the synthesizer's model from the confidential data (Stan's MCMC for the
#' risk-weighted synthesizers, the private quantile mechanism for `"quantile"`).
#'
#' @param synthesizer from [ss_synthesizer()].
#' @param design an `ss_design`, a survey design or a data.frame.
#' @return the synthesizer, fitted (the Python object is fitted in place), invisibly.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' d <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' syn <- ss_synthesizer("quantile", variables = "api00", bounds = list(api00 = c(200, 1000)),
#'                       epsilon = 5, m = 3, random_state = 1, progress = FALSE)
#' rel <- ss_release(ss_fit(syn, d))
#' @export
ss_fit <- function(synthesizer, design) {
  if (!inherits(synthesizer, "ss_synthesizer")) {
    stop("ss_fit(): give a synthesizer from ss_synthesizer().", call. = FALSE)
  }
  src <- if (is.data.frame(design) && !inherits(design, "ss_table")) ss_to_pandas(design) else
    .as_ss_design(design)$py
  .py(synthesizer$py$fit(src))
  invisible(synthesizer)
}

#' @export
print.ss_synthesizer <- function(x, ...) {
  cat("surveysynth synthesizer (Python)\n", reticulate::py_repr(x$py), "\n", sep = "")
  invisible(x)
}

#' The synthetic release of a fitted synthesizer
#'
#' Draws `m` synthetic data sets. The release holds synthetic data only (never the
#' confidential values, weights or risk weights) and its privacy record.
#'
#' @param synthesizer a fitted `ss_synthesizer`.
#' @param m number of synthetic data sets (`NULL`: the synthesizer's `m`).
#' @return an `ss_release`: use it with [ss_release_estimate()], [ss_tabulate()],
#'   [ss_release_designs()], [ss_privacy()] and [ss_save_release()].
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' d <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' syn <- ss_synthesizer("quantile", variables = "api00", bounds = list(api00 = c(200, 1000)),
#'                       epsilon = 5, m = 3, random_state = 1, progress = FALSE)
#' rel <- ss_release(ss_fit(syn, d))
#' ss_release_estimate(rel, "mean", ~api00)
#' @export
ss_release <- function(synthesizer, m = NULL) {
  if (!inherits(synthesizer, "ss_synthesizer")) {
    stop("ss_release(): give a fitted synthesizer from ss_synthesizer() and ss_fit().",
         call. = FALSE)
  }
  args <- if (is.null(m)) list() else list(m = as.integer(m))
  .wrap_release(.py(do.call(synthesizer$py$release, args)))
}

.wrap_release <- function(py) structure(list(py = py), class = "ss_release")

#' @export
print.ss_release <- function(x, ...) {
  cat("surveysynth synthetic release (Python)\n", reticulate::py_repr(x$py), "\n", sep = "")
  invisible(x)
}

# ---------------------------------------------------------------- releases
.check_release <- function(release) {
  if (!inherits(release, "ss_release")) {
    stop("give a release from ss_release(), ss_load_release() or ss_release_pipeline().",
         call. = FALSE)
  }
}

#' The synthetic designs of a release as survey objects
#'
#' @param release an `ss_release`.
#' @return a list of `m` `survey.design2` objects ([as_svydesign()] on each synthetic
#'   design): analyse each with R `survey`, or use [ss_release_estimate()] for the combined
#'   inference.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' d <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' syn <- ss_synthesizer("quantile", variables = "api00", bounds = list(api00 = c(200, 1000)),
#'                       epsilon = 5, m = 3, random_state = 1, progress = FALSE)
#' rel <- ss_release(ss_fit(syn, d))
#' designs <- ss_release_designs(rel)
#' svymean(~api00, designs[[1]])
#' @export
ss_release_designs <- function(release) {
  .check_release(release)
  m <- reticulate::py_len(release$py$designs)
  lapply(seq_len(m), function(i) {
    d <- reticulate::py_get_item(release$py$designs, i - 1L)
    as_svydesign(.wrap_design(d))
  })
}

#' Estimates from a release with its combining rule applied
#'
#' The estimator runs on each of the m synthetic designs and the m results are combined by
#' the release's rule (partial synthesis: Reiter 2003; full synthesis: Raghunathan, Reiter
#' and Rubin 2003, with the always-positive fallback flagged in `note`).
#' @param release an ss_release.
#' @param statistic "mean", "total", "ratio" (denominator = ~x), "proportion", "quantile"
#'   (quantiles = c(0.25, 0.5)).
#' @param x,by formulas, formula strings or column names.
#' @param ... `na.rm = TRUE`, `level = 0.9`, `denominator = ~x`, `quantiles =`.
#' @return a data.frame (class `ss_release_estimate`, an `ss_estimate`): labels, estimate,
#'   variance, se, cv, df, ci_low, ci_high, between, within, m, note. It prints the
#'   estimate, SE, df and confidence interval, and one line explaining a df below 2.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' d <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' syn <- ss_synthesizer("quantile", variables = "api00", bounds = list(api00 = c(200, 1000)),
#'                       epsilon = 5, m = 3, random_state = 1, progress = FALSE)
#' rel <- ss_release(ss_fit(syn, d))
#' ss_release_estimate(rel, "mean", ~api00)
#' ss_release_estimate(rel, "quantile", ~api00, quantiles = c(0.25, 0.5))
#' @export
ss_release_estimate <- function(release, statistic, x, by = NULL, ...) {
  .check_release(release)
  .estimate(release$py, statistic, x, by, list(...), "releases")
}

# a PrivacyRecord as an R list
.record <- function(py) {
  rec <- reticulate::py_to_r(py$to_dict())
  rec
}

#' The privacy record of a release: mechanism, epsilon, the guarantee and its exact text
#'
#' The record is generated from what was actually run; its `guarantee_text` is the text a
#' release manifest carries.
#'
#' @param release an ss_release (or the privacy element of ss_laplace_tables()).
#' @return a list: family, mechanism, guarantee (the label), differentially_private,
#'   guarantee_text, epsilon, delta, delta_alpha, m, seeded, reproducibility, facts, ledger,
#'   published_without_budget, convergence_override, notes.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' d <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' syn <- ss_synthesizer("quantile", variables = "api00", bounds = list(api00 = c(200, 1000)),
#'                       epsilon = 5, m = 3, random_state = 1, progress = FALSE)
#' rel <- ss_release(ss_fit(syn, d))
#' rec <- ss_privacy(rel)
#' rec$guarantee
#' rec$epsilon
#' @export
ss_privacy <- function(release) {
  .check_release(release)
  .record(release$py$privacy)
}

#' Save a release: path/public (publish) and path/confidential (disclosure review only)
#'
#' `path/public` holds the synthetic data, the tables made from them and the manifest (method,
#' epsilon ledger, guarantee text, versions); `path/confidential` what was computed from the
#' confidential data, for the disclosure review. Only `public` may be published.
#'
#' @param release an `ss_release`.
#' @param path the release folder (created).
#' @param overwrite replace an existing release folder.
#' @return `path`, invisibly.
#' @seealso [ss_load_release()].
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' d <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' syn <- ss_synthesizer("quantile", variables = "api00", bounds = list(api00 = c(200, 1000)),
#'                       epsilon = 5, m = 3, random_state = 1, progress = FALSE)
#' rel <- ss_release(ss_fit(syn, d))
#' out <- file.path(tempdir(), "release")
#' ss_save_release(rel, out, overwrite = TRUE)
#' list.files(file.path(out, "public"))
#' @export
ss_save_release <- function(release, path, overwrite = FALSE) {
  .check_release(release)
  .py(release$py$save(path.expand(path), overwrite = isTRUE(overwrite)))
  invisible(path)
}

#' Load a saved release
#'
#' @param path the release's `public` folder (or any folder with its `manifest.json`), as
#'   written by [ss_save_release()] or the release pipeline.
#' @return an `ss_release` with the synthetic designs and the privacy record.
#' @examplesIf reticulate::py_module_available("surveysynth")
#' library(survey)
#' data(api)
#' d <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
#' syn <- ss_synthesizer("quantile", variables = "api00", bounds = list(api00 = c(200, 1000)),
#'                       epsilon = 5, m = 3, random_state = 1, progress = FALSE)
#' rel <- ss_release(ss_fit(syn, d))
#' out <- file.path(tempdir(), "release")
#' ss_save_release(rel, out, overwrite = TRUE)
#' back <- ss_load_release(file.path(out, "public"))
#' ss_release_estimate(back, "mean", ~api00)
#' @export
ss_load_release <- function(path) {
  .wrap_release(.py(ss_python()$ss$load_release(path.expand(path))))
}

#' Run the release pipeline on a config file (as `surveysynth release CONFIG.toml`)
#'
#' Reads the data, builds the design, fits the synthesizer, checks the release gates and
#' writes the release folder with its report, as the command line does.
#'
#' @param config path of the TOML config (docs/release-config.md describes every key).
#' @param quiet no console output.
#' @param verbose also the synthesizers' own progress.
#' @return the release folder (public/ and confidential/), invisibly.
#' @examples
#' \dontrun{
#' # a config written by `surveysynth release --example quantile > release.toml`
#' ss_release_pipeline("release.toml")
#' }
#' @export
ss_release_pipeline <- function(config, quiet = FALSE, verbose = FALSE) {
  if (!is.character(config) || length(config) != 1L || !file.exists(config)) {
    stop("config: the path of an existing release config (.toml), e.g. ",
         "ss_release_pipeline(\"release.toml\").", call. = FALSE)
  }
  out <- .py(ss_python()$ss$run_release(path.expand(config), quiet = isTRUE(quiet),
                                        verbosity = if (isTRUE(quiet)) 0L else
                                          if (isTRUE(verbose)) 2L else 1L))
  invisible(as.character(reticulate::py_str(out)))
}
