# Reference for surveysynth's multiphase (two phases), R survey 4.5's ?multiphase example
# (nwtco case-cohort: iid phase 1, phase 2 stratified on rel) plus svytotal, svyby, the phase
# parts and the example's phase-2 raking calibration.
# Run:  R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/multiphase.R
#       (from the repository root; /tmp/rlib45 holds survey 4.5 built from the cran/survey
#       mirror; writes tests/reference/r_survey45/multiphase.json). survey 4.1.1 has no
#       multiphase. The data (survival's nwtco) are read by the test from R's survival.
suppressMessages({library(survey); library(jsonlite); library(survival)})
data(nwtco)
mcchs <- multiphase(id=list(~seqno, ~seqno), strata=list(NULL, ~rel),
                    subset=list(~I(in.subcohort | rel)), probs=list(~1, NULL), data=nwtco)
stat <- function(s) list(estimate=unname(as.numeric(coef(s))), se=unname(as.numeric(SE(s))),
                         phase1=unname(as.numeric(diag(as.matrix(attr(vcov(s), "phases")[[1]])))),
                         phase2=unname(as.numeric(diag(as.matrix(attr(vcov(s), "phases")[[2]])))))
g <- svyglm(edrel~rel+histol+stage, design=mcchs)
m <- calibrate(mcchs, ~factor(stage)+rel, phase=2, calfun="raking")
gm <- svyglm(edrel~rel+histol+stage, design=m)
res <- list(
  mean_edrel=stat(svymean(~edrel, mcchs)), total_edrel=stat(svytotal(~edrel, mcchs)),
  total_rel=stat(svytotal(~rel, mcchs)),
  mean_edrel_age=stat(svymean(~edrel+age, mcchs)),
  glm=list(coef=unname(coef(g)), se=unname(SE(g)), df=g$df.residual),
  degf=degf(mcchs),
  cal_total_stage=list(estimate=unname(as.numeric(coef(svytotal(~factor(stage), m)))),
                       vcov=unname(as.numeric(vcov(svytotal(~factor(stage), m))))),
  cal_total_edrel=stat(svytotal(~edrel, m)), cal_mean_edrel=stat(svymean(~edrel, m)),
  cal_glm=list(coef=unname(coef(gm)), se=unname(SE(gm))))
out <- list(R_version=R.version.string, survey_version=as.character(packageVersion("survey")),
            results=res)
writeLines(toJSON(out, digits=NA, auto_unbox=TRUE), "tests/reference/r_survey45/multiphase.json")
