#' surveysynth: survey estimation and private synthetic releases from R
#'
#' The R interface to the 'surveysynth' Python package, reached through 'reticulate'.
#' Survey designs go in ([ss_design()] reads an `svydesign()` or `svrepdesign()` object, or
#' builds a design from a data.frame), estimates come back as data.frames printed like
#' R `survey`'s ([ss_estimate()], [ss_tabulate()]), and the synthesizers
#' ([ss_synthesizer()], [ss_fit()], [ss_release()]) give releases whose synthetic designs are
#' `survey` objects again ([ss_release_designs()]) and whose estimates have the combining
#' rules applied ([ss_release_estimate()]).
#'
#' @section Python:
#' The package needs a Python with the 'surveysynth' package installed. Point reticulate at
#' it before the first call, with `Sys.setenv(RETICULATE_PYTHON = "/path/to/.venv/bin/python")`
#' or `reticulate::use_python()`. Every function stops with the fix when that Python lacks
#' surveysynth ([ss_python()]).
#'
#' @section R spelling:
#' Variables are given as formulas (`~api00 + enroll`), formula strings (`"~api00"`) or
#' character vectors; dots in argument names become underscores (`na.rm = TRUE` is Python's
#' `na_rm=True`); Python's errors arrive as R errors in R spelling, with row numbers counted
#' from 1 as R counts.
#'
#' @importFrom stats coef confint as.formula weights
#' @importFrom survey SE
#' @keywords internal
"_PACKAGE"
