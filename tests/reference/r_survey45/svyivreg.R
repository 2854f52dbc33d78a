# Reference numbers from R survey 4.5 for svyivreg's summary: survey 4.1.1 (the R on this machine)
# scaled vcov(m) and summary(m) by the residual variance (its own tests/svyivreg-var.R fails);
# 4.5 reports the design-based variance, which surveysynth's svyivreg gives.
# Regenerate (survey 4.5 built from the cran/survey mirror, tag "version 4.5"; AER installed):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/svyivreg.R > tests/reference/r_survey45/svyivreg.json
suppressMessages({library(survey); library(AER)})
stopifnot(packageVersion("survey") == "4.5")
data(api)
dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
m <- svyivreg(api00 ~ ell + meals | ell + mobility + api99, design=dstrat)
s <- summary(m)
out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  dstrat_iv = list(coef = as.vector(coef(m)), vcov = as.vector(vcov(m)),
                   summary = as.vector(coef(s)), df = s$df[2])
)
cat(jsonlite::toJSON(out, digits=NA, auto_unbox=TRUE, pretty=TRUE), "\n")
