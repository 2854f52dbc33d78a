# Reference numbers from R survey 4.5 for what 4.5 computes differently from 4.1.1 (the R on
# this machine): svyvar's n with na.rm=TRUE, the Gaussian AIC of svyglm (Lumley & Scott 2015,
# corrected in 4.x after 4.1), and regTermTest(method="LRT") refitting on the model's rows.
# Regenerate (survey 4.5 built from the cran/survey mirror, tag "version 4.5"):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/analysis.R > tests/reference/r_survey45/analysis.json
suppressMessages(library(survey))
stopifnot(packageVersion("survey") == "4.5")
data(api)
dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
dclus2 <- svydesign(id=~dnum+snum, weights=~pw, data=apiclus2)
rstrat <- as.svrepdesign(dstrat)          # JKn
cal <- calibrate(dstrat, ~stype+api99, c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))

vv <- function(v) list(estimate=as.vector(v), vcov=as.vector(attr(v, "var")))
out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  svyvar = list(
    dclus1_api00_acsk3_narm = vv(svyvar(~api00+acs.k3, dclus1, na.rm=TRUE)),
    dstrat_acsk3_narm = vv(svyvar(~acs.k3, dstrat, na.rm=TRUE)),
    cal_acs46_narm = vv(svyvar(~acs.46+api00, cal, na.rm=TRUE))
  ),
  aic_gaussian = list(
    dstrat = as.vector(AIC(svyglm(api00~ell+meals+mobility, design=dstrat))),
    dclus2 = as.vector(AIC(svyglm(api00~ell+meals+mobility, design=dclus2))),
    rstrat = as.vector(AIC(svyglm(api00~ell+meals+mobility, design=rstrat))),
    cal = as.vector(AIC(svyglm(api00~ell+meals+mobility, design=cal))),
    dstrat_no_null_intercept = as.vector(AIC(svyglm(api00~ell+meals, design=dstrat),
                                             null_has_intercept=FALSE)),
    dclus2_two_models = as.vector(t(AIC(svyglm(api00~ell, design=dclus2),
                                        svyglm(api00~ell+meals+mobility, design=dclus2))))
  ),
  lrt_missing = local({
    m <- svyglm(api00~ell+acs.k3, design=dclus1)
    r <- regTermTest(m, ~acs.k3, method="LRT")
    list(chisq=as.vector(r$chisq), p=r$p, lambda=as.vector(r$lambda), ddf=r$ddf)
  })
)
cat(jsonlite::toJSON(out, digits=NA, auto_unbox=TRUE, pretty=TRUE), "\n")
