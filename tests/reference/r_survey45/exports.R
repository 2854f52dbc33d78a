# Every object R survey 4.5 exports (getNamespaceExports("survey")), for the coverage table
# docs/r_survey_functions.md (checked by tests/test_r_survey_functions_doc.py).
# Regenerate (survey 4.5 built from the cran/survey mirror, tag "version 4.5"):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/exports.R > tests/reference/r_survey45/exports.json
# How it counts: 103 exported names = 99 functions + 4 calibration-function objects
# (cal.linear, cal.logit, cal.raking, cal.sinh, class "calfun", used as calibrate(calfun=)).
# S3 methods (print.svystat, anova.svyglm, predict.svyglm, ...) are registered with S3method(),
# not exported, so they are not in this list (the doc lists the ones users call by their own rows).
suppressMessages(library(survey))
stopifnot(packageVersion("survey") == "4.5")
ns <- asNamespace("survey")
ex <- sort(getNamespaceExports("survey"))
kind <- vapply(ex, function(n) {
  obj <- get(n, envir = ns)
  if (is.function(obj)) "function" else paste(class(obj), collapse = "/")
}, "")
s3 <- ns$.__NAMESPACE__.$S3methods
out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  n_exports = length(ex),
  n_functions = sum(kind == "function"),
  n_registered_s3_methods = nrow(s3),
  exports = lapply(seq_along(ex), function(i) list(name = ex[[i]], kind = kind[[i]]))
)
cat(jsonlite::toJSON(out, digits = NA, auto_unbox = TRUE, pretty = TRUE), "\n")
