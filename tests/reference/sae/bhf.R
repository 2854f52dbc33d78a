# Reference numbers for the Battese-Harter-Fuller unit-level model
# (surveysynth.analysis.small_area_unit, issue 42).
# R survey 4.5's svysmoothUnit calls SUMMER::smoothUnit, a Bayesian fit with INLA, which is not
# on CRAN and cannot be built here. The references are:
#  (a) R sae 1.3's eblupBHF on its own man-page examples (cornsoybean / cornsoybeanmeans; REML
#      for corn, ML for soybeans in counties 10, 1, 5). sae fits with lme4::lmer, whose default
#      optimizer (nloptwrap: BOBYQA, xtol_abs = ftol_abs = 1e-8 on theta = sigma_v / sigma_e and
#      on the deviance) stops short of the optimum; we store its variance components and EBLUPs;
#  (b) the model written out here by hand: the REML (or ML) log-likelihood profiled over beta
#      and sigma_e^2 is maximised in the variance ratio lambda = sigma_v^2 / sigma_e^2 with
#      optimize(tol = 1e-12) and the maximum polished to the root of its analytic derivative
#      (uniroot, tol 1e-15; optimize alone locates a smooth maximum only to ~sqrt(eps)
#      relative); then beta (GLS), the EBLUPs (sae's finite-population mean with fpc, and the
#      mean mu_d = Xbar_d'beta + v_d) and the Prasad-Rao-Datta MSE in closed form (Rao & Molina
#      2015, section 7.2: g1 + g2 + 2 g3 for REML; ML adds Datta-Lahiri's bias term).
#      Also the You-Rao survey-weighted pseudo-EBLUP (Rao & Molina 2015, section 7.6.2) and
#      SUMMER's direct estimates on api designs (svysmoothUnit's inputs).
# Regenerate (sae 1.3 and survey 4.5 built from the cran/sae and cran/survey mirrors):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>; R CMD INSTALL -l /tmp/rlib45 <cran/sae checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/sae/bhf.R > tests/reference/sae/bhf.json
suppressMessages({library(survey); library(sae)})
stopifnot(packageVersion("survey") == "4.5", packageVersion("sae") == "1.3")
data(api); data(cornsoybean); data(cornsoybeanmeans)

## (b) the model by hand --------------------------------------------------------------------
# y: response; X: model matrix; dom: domain labels; the domains are taken in sorted order.
bhf_ref <- function(y, X, dom, method = "REML", lambda = NULL) {
  doms <- sort(unique(dom)); n <- length(y); p <- ncol(X)
  f <- factor(dom, levels = doms)
  nd <- as.vector(table(f))
  Sx <- rowsum(X, f, reorder = TRUE); Sy <- as.vector(rowsum(y, f, reorder = TRUE))
  parts <- function(lam) {      # H = V / sigma_e^2 = I + lam Z Z'; H_d^-1 = I - g_d J
    g <- lam / (1 + lam * nd)
    M <- crossprod(X) - t(Sx) %*% (g * Sx)
    beta <- solve(M, crossprod(X, y) - t(Sx) %*% (g * Sy))
    r <- as.vector(y - X %*% beta); Sr <- as.vector(rowsum(r, f, reorder = TRUE))
    rHr <- sum(r^2) - sum(g * Sr^2)
    list(g = g, M = M, beta = beta, r = r, Sr = Sr, rHr = rHr)
  }
  dfe <- if (method == "REML") n - p else n
  loglik <- function(lam) {
    q <- parts(lam)
    ld <- sum(log(1 + lam * nd))
    s2 <- q$rHr / dfe
    if (method == "REML")
      -0.5 * (dfe * (1 + log(2 * pi * s2)) + ld + as.numeric(determinant(q$M)$modulus))
    else -0.5 * (dfe * (1 + log(2 * pi * s2)) + ld)
  }
  score <- function(lam) {     # d loglik / d lam
    q <- parts(lam)
    a <- 1 / (1 + lam * nd)
    ZPy2 <- sum((a * q$Sr)^2)
    tr <- sum(nd * a)
    if (method == "REML") tr <- tr - sum(diag(solve(q$M, t(Sx) %*% (a^2 * Sx))))
    0.5 * (dfe * ZPy2 / q$rHr - tr)
  }
  opt_lambda <- NA; polished <- FALSE
  if (is.null(lambda)) {
    up <- 1; while (score(up) > 0) up <- up * 10
    o <- optimize(loglik, c(0, up), maximum = TRUE, tol = 1e-12)
    opt_lambda <- o$maximum
    lambda <- o$maximum
    if (score(0) <= 0) lambda <- 0 else {
      lo <- lambda / 2; hi <- lambda * 2
      if (score(lo) > 0 && score(hi) < 0) {
        lambda <- uniroot(score, c(lo, hi), tol = 1e-15)$root; polished <- TRUE
      }
    }
  }
  q <- parts(lambda)
  se2 <- q$rHr / dfe; sv2 <- lambda * se2
  Q <- solve(q$M) * se2                    # Var(beta_hat) = (X'V^-1X)^-1
  xbar <- Sx / nd; ybar <- Sy / nd
  gam <- sv2 / (sv2 + se2 / nd)
  u <- as.vector(gam * (ybar - xbar %*% q$beta))
  # asymptotic covariance of (sigma_v^2, sigma_e^2): inverse of (Rao & Molina 2015, 7.2)
  al <- se2 + nd * sv2
  Iv <- 0.5 * sum(nd^2 / al^2); Ive <- 0.5 * sum(nd / al^2)
  Ie <- 0.5 * sum((nd - 1) / se2^2 + 1 / al^2)
  Vs <- solve(matrix(c(Iv, Ive, Ive, Ie), 2))
  g3 <- (se2^2 * Vs[1, 1] - 2 * se2 * sv2 * Vs[1, 2] + sv2^2 * Vs[2, 2]) /
    (nd^2 * (sv2 + se2 / nd)^3)
  g1 <- gam * se2 / nd
  # ML: Datta-Lahiri's bias term b(delta)' grad g1, b the ML bias of (sigma_v^2, sigma_e^2)
  bias_ml <- c(0, 0)
  if (method == "ML") {
    Vi <- 1 / al                                   # 1' V_d^-1 = 1' / al_d
    Mv <- t(Sx) %*% ((Vi^2) * Sx)                  # X'V^-1 Z Z' V^-1 X
    cd <- sv2 * (2 * se2 + nd * sv2) / al^2        # V_d^-2 = (I - c_d J) / se2^2
    Me <- (crossprod(X) - t(Sx) %*% (cd * Sx)) / se2^2
    Minv <- Q
    bias_ml <- as.vector(0.5 * Vs %*% c(-sum(diag(Minv %*% Mv)), -sum(diag(Minv %*% Me))))
  }
  dg1 <- cbind(se2^2 / al^2, nd * sv2^2 / al^2)   # d g1 / d(sigma_v^2, sigma_e^2)
  list(doms = doms, nd = nd, lambda = lambda, opt_lambda = opt_lambda, polished = polished,
       score = score(lambda), loglike = loglik(lambda),
       refvar = sv2, errorvar = se2, beta = as.vector(q$beta), std_error = sqrt(diag(Q)),
       Q = Q, u = u, gamma = gam, g1 = g1, g3 = g3, bias_ml = bias_ml, dg1 = dg1,
       xbar = xbar, ybar = ybar)
}

# EBLUPs and MSEs for target domains with population means Xbar (rows = domains, model-matrix
# columns) and sizes N (NULL: the mean mu_d = Xbar_d'beta + v_d, no fpc).
bhf_pred <- function(fit, Xbar, doms, N = NULL) {
  k <- match(doms, fit$doms); s <- !is.na(k)
  beta <- fit$beta; Q <- fit$Q; se2 <- fit$errorvar; sv2 <- fit$refvar
  est <- as.vector(Xbar %*% beta); mse <- sv2 + rowSums((Xbar %*% Q) * Xbar)
  if (!is.null(N)) mse <- mse + se2 / N
  kk <- k[s]
  nd <- fit$nd[kk]; gam <- fit$gamma[kk]; xb <- fit$xbar[kk, , drop = FALSE]
  if (is.null(N)) { fr <- 0; xr <- Xbar[s, , drop = FALSE] } else {
    fr <- nd / N[s]; xr <- (Xbar[s, , drop = FALSE] - fr * xb) / (1 - fr)
    xr[fr == 1, ] <- 0
  }
  # sae: f ybar + (Xbar - f xbar)'beta + (1 - f) u  ==  f ybar + (1 - f)(xr'beta + u)
  est[s] <- fr * fit$ybar[kk] + (1 - fr) * (as.vector(xr %*% beta) + fit$u[kk])
  dd <- xr - gam * xb
  g2 <- rowSums((dd %*% Q) * dd)
  g1 <- fit$g1[kk]; g3 <- fit$g3[kk]
  pr <- g1 + g2 + 2 * g3 - as.vector(fit$dg1[kk, , drop = FALSE] %*% fit$bias_ml)
  extra <- 0
  if (!is.null(N)) extra <- se2 / (N[s] - nd) - fit$bias_ml[2] / (N[s] - nd)
  extra[!is.finite(extra)] <- 0
  mse[s] <- (1 - fr)^2 * (pr + extra)
  g2a <- rep(NA, length(doms)); g2a[s] <- g2
  list(domain = doms, estimate = est, mse = mse, g2 = g2a, sampled = s)
}

# You-Rao pseudo-EBLUP of mu_d with weights w; variance components from the unweighted fit.
bhf_pseudo <- function(fit, y, X, dom, w, Xbar, doms) {
  f <- factor(dom, levels = fit$doms)
  sw <- as.vector(rowsum(w, f, reorder = TRUE)); sw2 <- as.vector(rowsum(w^2, f, reorder = TRUE))
  delta2 <- sw2 / sw^2
  gw <- fit$refvar / (fit$refvar + fit$errorvar * delta2)
  xw <- rowsum(w * X, f, reorder = TRUE) / sw; yw <- as.vector(rowsum(w * y, f, reorder = TRUE)) / sw
  Z <- w * (X - gw[as.integer(f)] * xw[as.integer(f), , drop = FALSE])
  bw <- as.vector(solve(crossprod(Z, X), crossprod(Z, y)))
  k <- match(doms, fit$doms); s <- !is.na(k)
  est <- as.vector(Xbar %*% bw)
  est[s] <- gw[k[s]] * yw[k[s]] + as.vector((Xbar[s, , drop = FALSE] -
                                             gw[k[s]] * xw[k[s], , drop = FALSE]) %*% bw)
  list(domain = doms, estimate = est, beta = bw, gamma = gw)
}

sae_fit <- function(r) list(eblup = r$eblup$eblup, domain = r$eblup$domain,
                            sampsize = r$eblup$sampsize, refvar = r$fit$refvar,
                            errorvar = r$fit$errorvar, fixed = as.vector(r$fit$fixed),
                            random = as.vector(r$fit$random[, 1]), loglike = r$fit$loglike)

cs <- cornsoybean; cm <- cornsoybeanmeans
Xmean <- data.frame(cm$CountyIndex, cm$MeanCornPixPerSeg, cm$MeanSoyBeansPixPerSeg)
Popn <- data.frame(cm$CountyIndex, cm$PopnSegments)
corn <- eblupBHF(CornHec ~ CornPix + SoyBeansPix, dom = County, meanxpop = Xmean,
                 popnsize = Popn, data = cs)
soy <- eblupBHF(SoyBeansHec ~ CornPix + SoyBeansPix, dom = County, selectdom = c(10, 1, 5),
                meanxpop = Xmean, popnsize = Popn, method = "ML", data = cs)
soy_reml <- eblupBHF(SoyBeansHec ~ CornPix + SoyBeansPix, dom = County, meanxpop = Xmean,
                     popnsize = Popn, data = cs)
X <- cbind(1, cs$CornPix, cs$SoyBeansPix)
Xb <- cbind(1, cm$MeanCornPixPerSeg, cm$MeanSoyBeansPixPerSeg)
hand <- function(y, method, lambda = NULL, doms = cm$CountyIndex) {
  fit <- bhf_ref(y, X, cs$County, method, lambda)
  k <- match(doms, cm$CountyIndex)
  fpc <- bhf_pred(fit, Xb[k, , drop = FALSE], doms, cm$PopnSegments[k])
  mu <- bhf_pred(fit, Xb[k, , drop = FALSE], doms)
  fit$Q <- NULL; fit$dg1 <- NULL; fit$xbar <- NULL
  c(fit, list(eblup = fpc$estimate, mse = fpc$mse, mu = mu$estimate, mse_mu = mu$mse,
              g2_mu = mu$g2, g2 = fpc$g2))
}
corn_sae <- sae_fit(corn); soy_sae <- sae_fit(soy)
out <- list(R_version = R.version.string,
            survey_version = as.character(packageVersion("survey")),
            sae_version = as.character(packageVersion("sae")),
            lme4_version = as.character(packageVersion("lme4")),
            nloptwrap = list(algorithm = "NLOPT_LN_BOBYQA", xtol_abs = 1e-8, ftol_abs = 1e-8),
            cornsoybean = list(County = cs$County, CornHec = cs$CornHec,
                               SoyBeansHec = cs$SoyBeansHec, CornPix = cs$CornPix,
                               SoyBeansPix = cs$SoyBeansPix, CountyIndex = cm$CountyIndex,
                               PopnSegments = cm$PopnSegments,
                               MeanCornPixPerSeg = cm$MeanCornPixPerSeg,
                               MeanSoyBeansPixPerSeg = cm$MeanSoyBeansPixPerSeg),
            sae = list(corn_REML = corn_sae, soy_ML = soy_sae, soy_REML = sae_fit(soy_reml)),
            hand = list(corn_REML = hand(cs$CornHec, "REML"),
                        corn_ML = hand(cs$CornHec, "ML"),
                        soy_REML = hand(cs$SoyBeansHec, "REML"),
                        soy_ML = hand(cs$SoyBeansHec, "ML", doms = c(10, 1, 5)),
                        # at sae's own variance ratio: the EBLUPs sae reports
                        corn_at_sae = hand(cs$CornHec, "REML",
                                           corn_sae$refvar / corn_sae$errorvar),
                        soy_ML_at_sae = hand(cs$SoyBeansHec, "ML",
                                             soy_sae$refvar / soy_sae$errorvar, c(10, 1, 5))))

## a boundary case: no domain effect, the REML optimum is sigma_v^2 = 0 -----------------------
bx <- c(1.2, 3.4, 2.2, 5.1, 4.4, 0.7, 2.9, 3.3, 4.8, 1.9, 2.5, 3.7)
bdom <- rep(c("a", "b", "c", "d"), each = 3)
by <- 2 + 0.5 * bx + c(0.3, -0.2, -0.1, 0.25, -0.3, 0.05, -0.35, 0.2, 0.15, 0.1, 0.2, -0.3)
bfit <- bhf_ref(by, cbind(1, bx), bdom)
bpred <- bhf_pred(bfit, cbind(1, c(2, 3, 4, 3.5)), c("a", "b", "c", "e"))
out$boundary <- list(x = bx, dom = bdom, y = by, refvar = bfit$refvar, errorvar = bfit$errorvar,
                     lambda = bfit$lambda, score0 = bfit$score, beta = bfit$beta,
                     estimate = bpred$estimate, mse = bpred$mse)

## design-based: svysmoothUnit's inputs on api designs -------------------------------------------
dstrat <- svydesign(id = ~1, strata = ~stype, weights = ~pw, data = apistrat, fpc = ~fpc)
rstrat <- as.svrepdesign(dstrat)   # JKn
cal <- calibrate(dstrat, ~stype + api99,
                 c(`(Intercept)` = 6194, stypeH = 755, stypeM = 1018, api99 = 3914069))
unit_fit <- function(design, formula = api00 ~ meals) {
  d <- svyby(~api00, ~cname, design, svymean)
  doms <- sort(unique(as.character(apipop$cname)))
  dat <- design$variables
  mf <- model.frame(formula, dat)
  X <- model.matrix(formula, dat); y <- model.response(mf)
  Xp <- model.matrix(formula, apipop)
  Xbar <- rowsum(Xp, apipop$cname, reorder = TRUE) / as.vector(table(apipop$cname))
  Xbar <- Xbar[doms, , drop = FALSE]
  fit <- bhf_ref(y, X, as.character(dat$cname))
  pr <- bhf_pred(fit, Xbar, doms)
  w <- if (inherits(design, "svyrep.design")) weights(design, "sampling") else weights(design)
  ps <- bhf_pseudo(fit, y, X, as.character(dat$cname), as.vector(w), Xbar, doms)
  list(domain = doms, direct = d[match(doms, d$cname), 2], direct_var = d[match(doms, d$cname), 3]^2,
       estimate = pr$estimate, mse = pr$mse, sampled = pr$sampled, refvar = fit$refvar,
       errorvar = fit$errorvar, beta = fit$beta, loglike = fit$loglike,
       pseudo = ps$estimate, pseudo_beta = ps$beta)
}
out$api <- list(dstrat = unit_fit(dstrat), rstrat = unit_fit(rstrat), cal = unit_fit(cal),
                dstrat_ell = unit_fit(dstrat, api00 ~ meals + ell))
cat(jsonlite::toJSON(out, digits = NA, auto_unbox = TRUE, na = "null", matrix = "rowmajor"))
