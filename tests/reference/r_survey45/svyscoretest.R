# svyscoretest is new in R survey 4.5 (absent from 4.1.1, the R on this machine): ?svyscoretest's
# examples (myco), and logistic models on apiclus1 (linearization), a JK1 replicate design and a
# calibrated design, every method, from R survey 4.5 built from the cran/survey mirror
# ("version 4.5"):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/svyscoretest.R > tests/reference/r_survey45/svyscoretest.json
suppressMessages(library(survey))
stopifnot(packageVersion("survey") == "4.5")
data(myco); data(api)
dmyco <- svydesign(id=~1, strata=~interaction(Age,leprosy), weights=~wt, data=myco)
m_full <- svyglm(leprosy~I((Age+7.5)^-2)+Scar, family=quasibinomial, design=dmyco)
v <- function(x) as.vector(x)
st <- function(s) list(estimate=v(coef(s)), se=v(SE(s)), vcov=v(vcov(s)))
dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
rclus1 <- as.svrepdesign(dclus1)
dcal <- calibrate(dclus1, ~api99, c(6194, 3914069))
# fitted at top level: svyscoretest's update() re-evaluates the call's design name
mc <- svyglm(I(sch.wide=="Yes")~ell+meals+stype, family=quasibinomial, design=dclus1)
mr <- svyglm(I(sch.wide=="Yes")~ell+meals+stype, family=quasibinomial, design=rclus1)
mk <- svyglm(I(sch.wide=="Yes")~ell+meals+stype, family=quasibinomial, design=dcal)
out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  myco_drop_scar = v(svyscoretest(m_full, ~Scar)),
  myco_add_interaction = v(svyscoretest(m_full, add.terms=~I((Age+7.5)^-2):Scar)),
  myco_add_age_pseudo = v(svyscoretest(m_full, add.terms=~factor(Age), method="pseudo")),
  myco_add_age_individual_notfull = st(svyscoretest(m_full, add.terms=~factor(Age),
                                                    method="individual", fullrank=FALSE)),
  myco_add_age_individual = st(suppressWarnings(svyscoretest(m_full, add.terms=~factor(Age),
                                                             method="individual"))),
  clus_drop_stype_working = v(svyscoretest(mc, ~stype)),
  clus_drop_stype_pseudo = v(svyscoretest(mc, ~stype, method="pseudoscore")),
  clus_drop_stype_working_inf = v(svyscoretest(mc, ~stype, ddf=Inf)),
  clus_drop_stype_pseudo_inf = v(svyscoretest(mc, ~stype, method="pseudoscore", ddf=Inf)),
  clus_drop_ell_individual = st(svyscoretest(mc, ~ell, method="individual")),
  clus_add_mobility_working = v(svyscoretest(mc, add.terms=~mobility+api99)),
  rep_drop_stype_working = v(svyscoretest(mr, ~stype)),
  rep_drop_stype_pseudo = v(svyscoretest(mr, ~stype, method="pseudoscore")),
  cal_drop_stype_working = v(svyscoretest(mk, ~stype)),
  cal_drop_stype_pseudo = v(svyscoretest(mk, ~stype, method="pseudoscore")),
  mwt_rep = mean(weights(rclus1)),
  disp_clus = v(coef(summary(mc)$dispersion)), disp_rep = v(summary(mr)$dispersion),
  myco_data = as.list(myco)  # myco is not in survey 4.1.1: the data the tests use
)
cat(jsonlite::toJSON(out, digits=NA, auto_unbox=TRUE, pretty=TRUE), "\n")
