# Reference numbers from svrep 0.9.0 (on R survey 4.1.1, Debian's) for the nonresponse
# weighting-class adjustment redistribute_weights(), on its man-page example (two steps:
# unknown eligibility, then nonresponse, by stype, on a JK1 design of apiclus1) and on an SDR
# design. The response status is drawn with set.seed(1) and stored. Regenerate (svrep built
# as in sdr_reference.R):
#   R_LIBS=/tmp/rlib_svrep Rscript tests/reference/svrep/redistribute_reference.R
suppressMessages({library(survey); library(svrep)})
stopifnot(packageVersion("svrep") == "0.9.0")
out_dir <- "tests/reference/svrep"
if (!exists(".formula2varlist", baseenv()))  # see sdr_reference.R
  .formula2varlist <- function(formula, data, ...)
    eval(attr(terms(formula), "variables"), data, environment(formula))
data(api)
# survey's svytotal/svymean on a replicate design with combined, compressed weights and a
# `selfrep` vector (JK1 with an fpc, as here) index pw = 1 by !selfrep and get NAs ("All
# replicates contained NAs", survey 4.1.1 and 4.5). No PSU here is self-representing, so not
# dropping them changes nothing else:
options(survey.drop.replicates = FALSE)
set.seed(1)
status <- sample(x = c("Respondent", "Nonrespondent", "Ineligible", "Unknown eligibility"),
                 size = nrow(apiclus1), replace = TRUE)
dclus1 <- svydesign(id = ~dnum, weights = ~pw, data = apiclus1, fpc = ~fpc)
dclus1$variables$response_status <- status
rep_design <- as.svrepdesign(dclus1)
ue <- redistribute_weights(rep_design,
                           reduce_if = response_status %in% c("Unknown eligibility"),
                           increase_if = !response_status %in% c("Unknown eligibility"),
                           by = c("stype"))
nr <- redistribute_weights(ue, reduce_if = response_status %in% c("Nonrespondent"),
                           increase_if = response_status == "Respondent", by = c("stype"))
resp <- subset(nr, response_status == "Respondent")
est <- function(d) {
  t <- svytotal(~enroll, d); m <- svymean(~api00, d)
  b <- svyby(~api00, ~stype, d, svymean)
  list(total = unname(coef(t)), total_se = unname(SE(t)), mean = unname(coef(m)),
       mean_se = unname(SE(m)), by_mean = unname(coef(b)), by_se = unname(SE(b)))
}
# SDR design of apistrat with a nonresponse adjustment by stype and sch.wide
dstrat <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
set.seed(2)
dstrat$variables$resp <- rbinom(nrow(apistrat), 1, 0.75)
sdr <- suppressMessages(as_sdr_design(dstrat, replicates = 20, sort_variable = "snum"))
sdr_nr <- redistribute_weights(sdr, reduce_if = resp == 0, increase_if = resp == 1,
                               by = c("stype", "sch.wide"))
out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  svrep_version = as.character(packageVersion("svrep")),
  status = status,
  ue_pweights = as.vector(ue$pweights),
  ue_repweights = unname(as.matrix(weights(ue, "analysis"))),
  nr_pweights = as.vector(nr$pweights),
  nr_repweights = unname(as.matrix(weights(nr, "analysis"))),
  nr_est = est(resp),
  sdr_resp = dstrat$variables$resp,
  sdr_pweights = as.vector(sdr_nr$pweights),
  sdr_est = est(subset(sdr_nr, resp == 1))
)
writeLines(jsonlite::toJSON(out, digits = NA, auto_unbox = TRUE),
           file.path(out_dir, "redistribute_reference.json"))
