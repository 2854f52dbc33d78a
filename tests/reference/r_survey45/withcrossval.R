# withCrossval is new in R survey 4.5 (absent from 4.1.1, the R on this machine): ?withCrossval's
# example, ridge regression over a tuning grid with each loss, a JKn and a calibrated replicate
# design, from R survey 4.5 built from the cran/survey mirror ("version 4.5"):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/withcrossval.R > tests/reference/r_survey45/withcrossval.json
suppressMessages(library(survey))
stopifnot(packageVersion("survey") == "4.5")
data(api)
rclus1 <- as.svrepdesign(svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc))
jkstrat <- as.svrepdesign(svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc))
rcal <- calibrate(jkstrat, ~stype+api99,
                  c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
lmtrain <- function(X, y, w, tuning) lm.wfit(X, y, w)
lmtest <- function(X, trainfit, tuning) X %*% coef(trainfit)
# ridge: (X'WX + tuning * I_without_intercept)^-1 X'Wy
ridgetrain <- function(X, y, w, tuning) {
  P <- diag(ncol(X)) * tuning; P[1, 1] <- 0
  solve(crossprod(X, w * X) + P, crossprod(X, w * y))
}
ridgetest <- function(X, trainfit, tuning) X %*% trainfit
# a constant prediction (the training weighted mean) for the entropy loss
meantrain <- function(X, y, w, tuning) sum(w * y) / sum(w)
meantest <- function(X, trainfit, tuning) rep(trainfit, NROW(X))  # X[is_test,] drops to a vector
tun <- c(0, 1e3, 1e5)
out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  man_example = withCrossval(rclus1, api00~api99+ell+stype, trainfun=lmtrain, testfun=lmtest,
                             intercept=TRUE, loss="MSE", tuning=1),
  ridge_mse = withCrossval(rclus1, api00~api99+ell+meals, trainfun=ridgetrain,
                           testfun=ridgetest, intercept=TRUE, loss="MSE", tuning=tun),
  ridge_abs = withCrossval(rclus1, api00~api99+ell+meals, trainfun=ridgetrain,
                           testfun=ridgetest, intercept=TRUE, loss="AbsError", tuning=tun),
  jkn_mse = withCrossval(jkstrat, api00~api99+ell+stype, trainfun=lmtrain, testfun=lmtest,
                         intercept=TRUE, loss="MSE", tuning=1),
  cal_mse = withCrossval(rcal, api00~api99+ell+stype, trainfun=lmtrain, testfun=lmtest,
                         intercept=TRUE, loss="MSE", tuning=1),
  jkn_entropy = withCrossval(jkstrat, I(as.numeric(sch.wide == "Yes"))~1, trainfun=meantrain,
                             testfun=meantest, intercept=TRUE, loss="entropy", tuning=1)
)
cat(jsonlite::toJSON(out, digits=NA, auto_unbox=TRUE, pretty=TRUE), "\n")
