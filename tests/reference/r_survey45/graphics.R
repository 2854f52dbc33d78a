# Reference values of R survey 4.5's svyboxplot (what it hands to bxp), where 4.5 differs from
# 4.1.1: the default "math" quantile rule takes the minimum at p = 0 (4.1.1: the second
# smallest value), and svyby(..., svyquantile) per group works (4.1.1 gives every group the
# last group's quantiles). Checked by tests/test_graphics.py.
# Regenerate (survey 4.5 built from the cran/survey mirror, tag "version 4.5"):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/graphics.R > tests/reference/r_survey45/graphics.json
suppressMessages(library(survey))
stopifnot(packageVersion("survey") == "4.5")
data(api)
pdf(NULL)
dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
rstrat <- as.svrepdesign(dstrat)          # JKn
cal <- calibrate(dstrat, ~stype+api99, c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
# svyboxplot.default with bxp() returning its argument: the values R draws
box <- survey:::svyboxplot.default
environment(box) <- list2env(list(bxp=function(z, ...) z), parent=asNamespace("survey"))
bx <- function(z) list(stats=as.vector(z$stats), n=as.vector(z$n), out=as.vector(z$out),
                       group=as.vector(z$group))
out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  svyboxplot = list(
    dstrat_stype_all = bx(box(enroll~stype, dstrat, all.outliers=TRUE)),
    dstrat_stype = bx(box(enroll~stype, dstrat)),
    dstrat_one = bx(box(enroll~1, dstrat)),
    dclus1_stype_all = bx(box(api00~stype, dclus1, all.outliers=TRUE)),
    rstrat_stype = bx(box(enroll~stype, rstrat)),
    cal_stype_all = bx(box(api00~stype, cal, all.outliers=TRUE)),
    cal_subset_one = bx(box(api00~1, subset(cal, sch.wide == "Yes"), all.outliers=TRUE))
  )
)
cat(jsonlite::toJSON(out, digits=NA, auto_unbox=FALSE, pretty=TRUE), "\n")
