# xdesign (crossed designs) is new in R survey 4.5 (absent from 4.1.1, the R on this machine):
# ?xdesign's examples (apiclus1 with one clustering; salamander, stored here as it is not in
# 4.1.1, with two crossed clusterings), means, totals and their covariance, svyglm, from R survey 4.5
# built from the cran/survey mirror ("version 4.5"):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/xdesign.R > tests/reference/r_survey45/xdesign.json
suppressMessages(library(survey))
stopifnot(packageVersion("survey") == "4.5")
data(api); data(salamander)
st <- function(s) list(estimate=as.vector(coef(s)), se=as.vector(SE(s)), vcov=as.vector(vcov(s)))
xclus1 <- suppressWarnings(xdesign(id=list(~dnum), weights=~pw, data=apiclus1))
xsal <- xdesign(id=list(~Male, ~Female), data=salamander, overlap="unbiased")
xsal2 <- xdesign(id=list(~Male, ~Female, ~Cross), data=salamander)
A <- as.matrix(xsal$adjacency) * 1
xadj <- suppressWarnings(xdesign(id=list(~1), data=salamander, adjacency=A))  # R needs an id
out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  xclus1_degf = degf(xclus1),
  xclus1_mean = st(svymean(~enroll+api00, xclus1)),
  xclus1_total = st(svytotal(~enroll+api00, xclus1)),
  sal_degf = degf(xsal),
  sal_mean = st(svymean(~Mate, xsal)),
  sal_total = st(svytotal(~Mate, xsal)),
  sal3_degf = degf(xsal2), sal3_mean = st(svymean(~Mate, xsal2)),
  adj_degf = degf(xadj), adj_mean = st(svymean(~Mate, xadj)),
  sal_glm = c(st(svyglm(Mate~Cross, xsal, family=quasibinomial)),
              df=svyglm(Mate~Cross, xsal, family=quasibinomial)$df.residual),
  clus_glm = c(st(svyglm(api00~ell+meals, xclus1)), df=svyglm(api00~ell+meals, xclus1)$df.residual),
  salamander = list(Mate=salamander$Mate, Cross=as.character(salamander$Cross),
                    Female=as.character(salamander$Female), Male=as.character(salamander$Male))
)
cat(jsonlite::toJSON(out, digits=NA, auto_unbox=TRUE, pretty=TRUE), "\n")
