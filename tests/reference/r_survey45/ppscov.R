# svydesign(pps=ppscov(Delta)) (weighted=FALSE) works from R survey 4.5 on (4.1.1, the R on
# this machine, fails: "argument of length 0"): R's election example with the covariance of
# the sampling indicators Delta = pi_ij - pi_i pi_j, from R survey 4.5 built from the
# cran/survey mirror ("version 4.5"):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/ppscov.R > tests/reference/r_survey45/ppscov.json
suppressMessages(library(survey))
stopifnot(packageVersion("survey") == "4.5")
data(election)
pij <- election_jointprob; pi <- diag(pij)
Delta <- pij - outer(pi, pi)
d_ht <- svydesign(id=~1, fpc=~p, data=election_pps, pps=ppscov(Delta))
d_yg <- svydesign(id=~1, fpc=~p, data=election_pps, pps=ppscov(Delta), variance="YG")
st <- function(r) list(estimate=as.vector(coef(r)), se=as.vector(SE(r)), vcov=as.vector(vcov(r)))
out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  ht_total = st(svytotal(~Bush+Kerry, d_ht)),
  ht_mean = st(svymean(~Bush+Kerry, d_ht)),
  yg_total = st(svytotal(~Bush+Kerry, d_yg)),
  ht_ratio = st(svyratio(~Bush, ~Kerry, d_ht))
)
cat(jsonlite::toJSON(out, digits=NA, auto_unbox=TRUE, pretty=TRUE), "\n")
