# svyglm(std.errors="Bell-McCaffrey"/"Bell-McCaffrey-2", degf=) is new in R survey 4.5
# (absent from 4.1.1): ?svyglm's examples (dstrat, dclus2), the one-stage cluster design
# dclus1 and a calibrated dclus1, with the Bell-McCaffrey degrees of freedom where the n x n
# projection is small. R survey 4.5 built from the cran/survey mirror (tag "version 4.5"):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/bell_mccaffrey.R > tests/reference/r_survey45/bell_mccaffrey.json
suppressMessages(library(survey))
stopifnot(packageVersion("survey") == "4.5")
data(api)
dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
dclus2 <- svydesign(id=~dnum+snum, weights=~pw, data=apiclus2)
dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
pop <- c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069)
cal <- calibrate(dclus1, ~stype+api99, pop)
fit <- function(f, d, se, degf=FALSE, family=gaussian()) {
  m <- svyglm(f, design=d, std.errors=se, degf=degf, family=family)
  list(coef=as.vector(coef(m)), vcov=as.vector(vcov(m)), df_residual=m$df.residual,
       df_coef=if (is.null(m$df.coef)) NULL else as.vector(m$df.coef))
}
f <- api00 ~ ell + meals + mobility
out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  dstrat = fit(f, dstrat, "Bell-McCaffrey"),
  dclus2 = fit(f, dclus2, "Bell-McCaffrey"),
  dclus1 = fit(f, dclus1, "Bell-McCaffrey", degf=TRUE),
  dclus1_bm2 = fit(f, dclus1, "Bell-McCaffrey-2", degf=TRUE),
  dstrat_degf = fit(f, dstrat, "Bell-McCaffrey", degf=TRUE),
  cal = fit(f, cal, "Bell-McCaffrey", degf=TRUE),
  dclus1_logit = fit(sch.wide ~ ell + meals, dclus1, "Bell-McCaffrey", degf=TRUE,
                     family=quasibinomial()),
  dclus1_linearized = fit(f, dclus1, "linearized"))
cat(jsonlite::toJSON(out, digits=NA, auto_unbox=TRUE, pretty=TRUE), "\n")
