# svyciprop(method="wilson") is new in R survey 4.5 (absent from 4.1.1, the R on this
# machine): ?svyciprop's examples and a domain, from R survey 4.5 built from the cran/survey
# mirror ("version 4.5"):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/svyciprop_wilson.R > tests/reference/r_survey45/svyciprop_wilson.json
suppressMessages(library(survey))
stopifnot(packageVersion("survey") == "4.5")
data(api)
dclus1 <- svydesign(id=~dnum, fpc=~fpc, data=apiclus1)
rclus1 <- as.svrepdesign(dclus1)   # JK1
dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
cal <- calibrate(dstrat, ~stype+api99, c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
ci <- function(r) c(estimate=as.vector(coef(r)), ci=as.vector(attr(r, "ci")), df=attr(r, "df"))
byci <- function(b) list(estimate=as.vector(coef(b)), ci_low=as.vector(b$ci_l),
                         ci_high=as.vector(b$ci_u))
out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  dclus1_ell0 = ci(svyciprop(~I(ell==0), dclus1, method="wilson")),
  dclus1_ell0_df_inf_level90 = ci(svyciprop(~I(ell==0), dclus1, method="wilson", df=Inf, level=0.9)),
  dclus1_ell0_df5 = ci(svyciprop(~I(ell==0), dclus1, method="wilson", df=5)),
  rclus1_emer0 = ci(svyciprop(~I(emer==0), rclus1, method="wilson")),
  cal_schwide = ci(svyciprop(~I(sch.wide=="Yes"), cal, method="wilson")),
  dclus1_ell0_by_stype = byci(svyby(~I(ell==0), ~stype, dclus1, svyciprop, method="wilson", vartype="ci"))
)
cat(jsonlite::toJSON(out, digits=NA, auto_unbox=TRUE, pretty=TRUE), "\n")
