# Reference numbers for the five defaults R survey 4.5 changed from 4.1.1 (the R on this
# machine, which the tests run live with survey_version="4.1"): the "math"/"school"/"hf3"
# quantile rules (wlow <= 0, and n == 1 for the continuous rules), lonely.psu="adjust"
# centring a lonely stratum on the mean over all strata, svrepdesign(type="ACS") with
# mse=TRUE, strict trimWeights not re-sharing to weights already trimmed, and the replicate
# GLM behind svyciprop(method="likelihood") (Pearson residuals scaled by the mean weight:
# dispersion 1). The examples are R's own: tests/quantiles-chile.R (datos_ejemplo.rds, the
# data written out below), tests/multistage-rcpp.R and tests/lonely.psu.R, ?trimWeights.
# R survey 4.5 built from the cran/survey mirror (tag "version 4.5"):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>
#   cd tests/reference/r_survey45 && git -C <cran/survey checkout> show HEAD:tests/datos_ejemplo.rds > /tmp/datos_ejemplo.rds
#   R_LIBS=/tmp/rlib45 Rscript r_compat.R /tmp/datos_ejemplo.rds > r_compat.json
suppressMessages(library(survey))
stopifnot(packageVersion("survey") == "4.5")
args <- commandArgs(trailingOnly=TRUE)
data(api); data(mu284)

## 1. quantiles: R's Chile example (domain quantiles), api at p = 0 and one-row domains
datos <- as.data.frame(readRDS(args[1]))
for (v in names(datos)) attributes(datos[[v]]) <- NULL
options(survey.lonely.psu="remove")
chile <- svydesign(id=~id_directorio, strata=~estrato, weights=~f_pers, check.strata=TRUE, data=datos)
groups <- sort(unique(datos$CL_GRUPO_OCU_08))
ps <- c(0, 0.25, 0.5, 0.75, 1)
chile_q <- lapply(c("math", "school", "hf3", "hf7"), function(rule) sapply(groups, function(g)
  coef(suppressWarnings(svyquantile(~ing_t_p, subset(chile, CL_GRUPO_OCU_08 == g), ps,
                                    qrule=rule, ci=FALSE)))))
names(chile_q) <- c("math", "school", "hf3", "hf7")
chile_isco8_ci <- local({ q <- suppressWarnings(svyquantile(~ing_t_p, subset(chile, CL_GRUPO_OCU_08 == "ISCO08_8"),
                                                      c(0.25, 0.5), ci=TRUE))[[1]]
  list(estimate=as.vector(q[, 1]), ci_low=as.vector(q[, 2]), ci_high=as.vector(q[, 3]), se=as.vector(q[, 4])) })
options(survey.lonely.psu="fail")
dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
api_q <- list(
  dclus1_math = as.vector(coef(svyquantile(~api00+enroll, dclus1, c(0, 0.1, 0.5, 1), ci=FALSE))),
  dstrat_school = as.vector(coef(svyquantile(~api00, dstrat, c(0, 0.5, 1), qrule="school", ci=FALSE))),
  dstrat_one_row_hf7 = as.vector(coef(svyquantile(~api00, subset(dstrat, snum == apistrat$snum[1]),
                                                  c(0.25, 0.5), qrule="hf7", ci=FALSE))),
  dstrat_one_row_hf8 = as.vector(coef(svyquantile(~api00, subset(dstrat, snum == apistrat$snum[1]),
                                                  c(0.25, 0.5), qrule="hf8", ci=FALSE))))

## 2. lonely.psu = "adjust": tests/multistage-rcpp.R's mu284 with a third, lonely stratum
mu284_stratified <- rbind(
  transform(mu284, stratum=1, y2=y1 + c(0, 2, 1, 0, -1, 2, 0, 3, 0, 0, -1, -1, 1, -1, 0)),
  transform(mu284, stratum=2, y2=y1 + c(-1, 0, -1, 0, -1, 0, 0, 1, 2, -1, 1, 1, 0, 1, 0)),
  transform(mu284[1, ], stratum=3, y2=y1 + 2))
mu284_stratified$dom <- with(mu284_stratified, stratum == 1 | (stratum == 2 & id1 == 19))
dmu <- svydesign(data=mu284_stratified, strata=~stratum, nest=TRUE, id=~id1+id2, fpc=~n1+n2)
dmu_nofpc <- svydesign(data=mu284_stratified, strata=~stratum, nest=TRUE, id=~id1+id2)
ds_apiclus1 <- svydesign(id=~1, weights=~pw, strata=~dnum, data=apiclus1)
ds1 <- svydesign(id=~1, weights=~pw, strata=~dnum, data=subset(apiclus1, dnum != 413))[-31, ]
singleton <- svydesign(data=data.frame(Stratum=c(1, 1, 2, 2, 3), PSU=1:5,
                                       Design_Weight=c(10.5, 10.5, 20, 20, 15),
                                       Age=c(30.5, 40.5, 35, 52, 44)),
                       ids=~PSU, strata=~Stratum, weights=~Design_Weight)
tv <- function(s) list(estimate=as.vector(coef(s)), vcov=as.vector(vcov(s)))
byv <- function(b) list(estimate=as.vector(coef(b)), se=as.vector(SE(b)))
options(survey.lonely.psu="adjust")
pop_types <- data.frame(stype=c("E", "H", "M"), Freq=c(4421, 755, 1018))
adjust <- list(
  mu284_total = tv(svytotal(~y1+y2, dmu)),
  mu284_mean = tv(svymean(~y1+y2, dmu)),
  mu284_nofpc_total = tv(svytotal(~y1+y2, dmu_nofpc)),
  mu284_by_dom = byv(svyby(~y1, ~dom, dmu, svytotal)),
  mu284_by_dom_covmat = as.vector(vcov(svyby(~y1, ~dom, dmu, svytotal, covmat=TRUE))),
  mu284_by_dom_adjust_domain = local({ options(survey.adjust.domain.lonely=TRUE)
    on.exit(options(survey.adjust.domain.lonely=FALSE))
    byv(suppressWarnings(svyby(~y1, ~dom, svydesign(data=subset(mu284_stratified, stratum != 3),
        strata=~stratum, nest=TRUE, id=~id1+id2, fpc=~n1+n2), svytotal))) }),
  mu284_ultimate = local({ options(survey.ultimate.cluster=TRUE)
    on.exit(options(survey.ultimate.cluster=FALSE)); tv(svytotal(~y1+y2, dmu)) }),
  apiclus1_strata_dnum = tv(svymean(~api00+api99, ds_apiclus1)),
  apiclus1_ds1 = tv(suppressWarnings(svymean(~api00, ds1))),
  apiclus1_ds1_adjust_domain = local({ options(survey.adjust.domain.lonely=TRUE)
    on.exit(options(survey.adjust.domain.lonely=FALSE)); tv(suppressWarnings(svymean(~api00, ds1))) }),
  singleton_total = tv(svytotal(~Age, singleton)),
  apiclus1_poststrat = tv(svymean(~api00, postStratify(ds_apiclus1, ~stype, pop_types))),
  apistrat_brewer_one_h = tv(svytotal(~api00+meals, svydesign(id=~1, strata=~stype, fpc=~pi, pps="brewer",
    data=local({ x <- apistrat[apistrat$stype != "H" | seq_len(nrow(apistrat)) == which(apistrat$stype == "H")[1], ]
                 x$pi <- 1 / x$pw; x })))))
options(survey.lonely.psu="fail")

## 3. svrepdesign(type="ACS"): mse=TRUE unless mse=FALSE is given
acs_rep <- local({ set.seed(41); r <- as.svrepdesign(dstrat, type="bootstrap", replicates=8)
  weights(r, "analysis") })
acs <- function(...) { d <- suppressWarnings(suppressMessages(svrepdesign(data=apistrat,
  repweights=acs_rep, weights=~pw, type="ACS", combined.weights=TRUE, ...)))
  c(list(mse=d$mse, scale=d$scale), tv(svymean(~api00+api99, d))) }
acs_out <- list(repweights=as.vector(acs_rep), default=acs(), mse_false=acs(mse=FALSE),
                mse_true=acs(mse=TRUE))

## 4. trimWeights(strict=TRUE): ?trimWeights and the two-stage designs of tests/test_trim_weights.py
pop <- c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069)
trim1 <- function(d, upper, lower) { msg <- ""
  t <- withCallingHandlers(trimWeights(d, upper=upper, lower=lower, strict=TRUE),
                           warning=function(w) { msg <<- conditionMessage(w); invokeRestart("muffleWarning") })
  c(list(warning=msg, total_before=sum(weights(d)), weights=as.vector(weights(t))), tv(svymean(~api00+api99, t))) }
trim_out <- list(
  clus1_greg = trim1(calibrate(dclus1, ~stype+api99, pop), 45, 20),
  clus1_greg_40_30 = trim1(calibrate(dclus1, ~stype+api99, pop), 40, 30),
  clus1_greg_38_25 = trim1(calibrate(dclus1, ~stype+api99, pop), 38, 25),
  strat2 = trim1(svydesign(id=~dnum+snum, strata=~stype, weights=~pw, data=apistrat, nest=TRUE), 40, 20),
  clus2_poststrat = trim1(postStratify(svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2),
                                       ~stype, pop_types), 80, 15),
  clus2 = trim1(svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2), 60, 20))

## 5. svyciprop(method="likelihood") on replicate designs (R 4.1.1 gives NA)
nh <- local({ data(nhanes); x <- nhanes; x$hc <- factor(x$HI_CHOL, 0:1, c("no", "yes")); x })
rdes <- list(
  strat_jkn = list(as.svrepdesign(svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat), type="JKn"),
                   "awards", "No", "stype"),
  nhanes_brr = list(as.svrepdesign(svydesign(id=~SDMVPSU, strata=~SDMVSTRA, weights=~WTMEC2YR, nest=TRUE,
                                             data=subset(nh, SDMVPSU < 3)), type="BRR"), "hc", "yes", "agecat"),
  clus1_jk1_greg = list(calibrate(as.svrepdesign(dclus1, type="JK1"), ~stype+api99, pop), "sch.wide", "Yes", "stype"))
cip <- lapply(rdes, function(a) {
  d <- a[[1]]; f <- as.formula(sprintf("~I(%s == '%s')", a[[2]], a[[3]]))
  s <- svyciprop(f, d, method="likelihood", na.rm=TRUE)
  b <- svyby(f, as.formula(paste0("~", a[[4]])), d, svyciprop, vartype="ci", method="likelihood", na.rm=TRUE)
  fine <- function(s) plogis(confint(svyglm(as.formula(sprintf("I(%s == '%s') ~ 1", a[[2]], a[[3]])), s,
                                            family=quasibinomial), 1, method="likelihood", ddf=degf(s),
                                     del=0.01, maxsteps=2000))
  lv <- sort(unique(as.character(d$variables[[a[[4]]]])))
  fb <- sapply(lv, function(v) fine(d[as.character(d$variables[[a[[4]]]]) == v, ]))
  m <- svyglm(as.formula(sprintf("I(%s == '%s') ~ 1", a[[2]], a[[3]])), d, family=quasibinomial)
  list(estimate=as.vector(coef(s)), ci=as.vector(attr(s, "ci")), fine=as.vector(fine(d)),
       dispersion=as.vector(summary(m)$dispersion),
       by_estimate=as.vector(coef(b)), by_ci_low=as.vector(b$ci_l), by_ci_high=as.vector(b$ci_u),
       by_fine_low=as.vector(fb[1, ]), by_fine_high=as.vector(fb[2, ]))
})

out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  use_rcpp = getOption("survey.use_rcpp"),
  chile_data = datos,
  chile_groups = groups, chile_p = ps, chile_quantiles = lapply(chile_q, as.vector), chile_isco8_ci = chile_isco8_ci,
  api_quantiles = api_q,
  adjust = adjust,
  acs = acs_out,
  trim_strict = trim_out,
  ciprop_likelihood = cip)
cat(jsonlite::toJSON(out, digits=NA, auto_unbox=TRUE, dataframe="columns"), "\n")
