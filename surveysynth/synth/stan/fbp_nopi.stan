// FBP when log pi is a function of the predictor cells (docs/pseudo_posterior.md, "FBP with
// cell-constant weights"). Then selection is not informative given x: E[pi | y, x] = E[pi | x],
// the exact sample likelihood (seed 001 eq. 6) factorises into the population model of y and a
// pi factor free of y, and a pi model would be degenerate (sigma_pi -> 0, unbounded density;
// measured on apistrat by stype: R-hat 3.87). This is fbp.stan without the pi model, exactly as
// fbp_re.stan with has_pi = 0: y ~ N(x beta, sigma_y), priors beta ~ N(0, 10^2),
// sigma_y ~ half-Cauchy(0, 1) (seed 000 Appendix D), raised to alpha_i, summed from exact
// alpha-weighted per-cell statistics (w_c, ybar_c, centred scatter Syy_c; see fbs.stan).
// log_lik: each record's full normalised log density log N(y_i | x_i beta, sigma_y).
data {
  int<lower=1> n;
  int<lower=1> K;
  int<lower=1> C;
  matrix[C, K] Xc;
  vector<lower=0>[C] w;
  vector[C] ybar;
  vector[C] Syy;
  int<lower=0, upper=1> save_log_lik;
  array[save_log_lik ? n : 0] int<lower=1, upper=C> cell;
  vector[save_log_lik ? n : 0] y;       // outcome on the modelled scale
}
parameters {
  vector[K] beta;
  real<lower=0> sigma_y;
}
model {
  vector[C] mu = Xc * beta;
  beta ~ normal(0, 10);
  sigma_y ~ cauchy(0, 1);
  target += -sum(w) * (0.5 * log(2 * pi()) + log(sigma_y))
            - 0.5 * (sum(Syy) + dot_product(w, square(ybar - mu))) / square(sigma_y);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    vector[C] mu = Xc * beta;
    log_lik = -0.5 * log(2 * pi()) - log(sigma_y) - 0.5 * square((y - mu[cell]) / sigma_y);
  }
}
