# Reference numbers for the Fay-Herriot model (surveysynth.analysis.small_area, issue 42).
# R survey 4.5's svysmoothArea calls SUMMER::smoothArea, a Bayesian fit with INLA, which is not
# on CRAN and cannot be built here; the reference is therefore R sae 1.3's eblupFH/mseFH
# (REML/ML/FH Fisher scoring, Prasad-Rao / Datta-Lahiri MSE) on SUMMER's direct estimates
# (svyby(svymean) or svytotal / domain size, computed here as SUMMER computes them).
# Regenerate (survey 4.5 and sae 1.3 built from the cran/survey and cran/sae mirrors):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>; R CMD INSTALL -l /tmp/rlib45 <cran/sae checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/sae/fay_herriot.R > tests/reference/sae/fay_herriot.json
suppressMessages({library(survey); library(sae)})
stopifnot(packageVersion("survey") == "4.5", packageVersion("sae") == "1.3")
data(api); data(milk); data(grapes)

fh <- function(formula, vardir, method = "REML", data, PRECISION = 1e-4) {
  r <- eval(bquote(mseFH(.(formula), .(substitute(vardir)), method = .(method), data = data,
                         PRECISION = .(PRECISION))))
  list(eblup = as.vector(r$est$eblup), mse = as.vector(r$mse), refvar = r$est$fit$refvar,
       beta = r$est$fit$estcoef$beta, std_error = r$est$fit$estcoef$std.error,
       pvalue = r$est$fit$estcoef$pvalue, iterations = r$est$fit$iterations,
       goodness = as.list(r$est$fit$goodness))
}
milk$var <- milk$SD^2
milk$MajorArea <- factor(milk$MajorArea)
out <- list(R_version = R.version.string,
            survey_version = as.character(packageVersion("survey")),
            sae_version = as.character(packageVersion("sae")),
            milk = list(y = milk$yi, var = milk$var, major = as.integer(milk$MajorArea),
                        REML = fh(yi ~ MajorArea, var, "REML", milk),
                        ML = fh(yi ~ MajorArea, var, "ML", milk),
                        FH = fh(yi ~ MajorArea, var, "FH", milk),
                        REML_tight = fh(yi ~ MajorArea, var, "REML", milk, 1e-12)),
            grapes = list(grapehect = grapes$grapehect, area = grapes$area,
                          workdays = grapes$workdays, var = grapes$var,
                          REML = fh(grapehect ~ area + workdays - 1, var, "REML", grapes),
                          ML = fh(grapehect ~ area + workdays - 1, var, "ML", grapes),
                          FH = fh(grapehect ~ area + workdays - 1, var, "FH", grapes)))

# design-based: SUMMER's direct estimates by county, county covariates from apipop
xdom <- aggregate(cbind(meals, ell) ~ cname, data = apipop, FUN = mean)
Nc <- as.data.frame(table(cname = apipop$cname)); names(Nc)[2] <- "size"
area_fit <- function(design, size = FALSE, formula = ~ meals, var.tol = 1e-10) {
  if (size) {
    d <- svyby(~api00, ~cname, design, svytotal)
    s <- Nc$size[match(d$cname, Nc$cname)]
    direct <- data.frame(domain = as.character(d$cname), mean = d[, 2] / s, var = (d[, 3] / s)^2)
  } else {
    d <- svyby(~api00, ~cname, design, svymean)
    direct <- data.frame(domain = as.character(d$cname), mean = d[, 2], var = d[, 3]^2)
  }
  dat <- merge(xdom, direct, by.x = "cname", by.y = "domain", all.x = TRUE)
  dat <- dat[order(dat$cname), ]
  keep <- !is.na(dat$var) & dat$var > var.tol
  X <- model.matrix(formula, dat)
  fd <- dat[keep, ]; fd$y <- fd$mean
  r <- eval(bquote(mseFH(.(update(formula, y ~ .)), var, data = fd)))
  A <- r$est$fit$refvar; psi <- fd$var; Xk <- X[keep, , drop = FALSE]
  Q <- solve(t(Xk / (A + psi)) %*% Xk)
  beta <- r$est$fit$estcoef$beta
  est <- as.vector(X %*% beta); mse <- A + rowSums((X %*% Q) * X)   # synthetic, out of model
  est[keep] <- r$est$eblup; mse[keep] <- r$mse
  list(domain = as.character(dat$cname), direct = dat$mean, direct_var = dat$var,
       in_model = keep, estimate = est, mse = mse, refvar = A, beta = beta)
}
dstrat <- svydesign(id = ~1, strata = ~stype, weights = ~pw, data = apistrat, fpc = ~fpc)
rstrat <- as.svrepdesign(dstrat)   # JKn
cal <- calibrate(dstrat, ~stype + api99,
                 c(`(Intercept)` = 6194, stypeH = 755, stypeM = 1018, api99 = 3914069))
out$api <- list(dstrat = area_fit(dstrat), dstrat_size = area_fit(dstrat, size = TRUE),
                dstrat_ell = area_fit(dstrat, formula = ~ meals + ell),
                rstrat = area_fit(rstrat), cal = area_fit(cal))
cat(jsonlite::toJSON(out, digits = NA, auto_unbox = TRUE, na = "null"))
