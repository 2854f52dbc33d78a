// FBP with a PSU random intercept on the population model's mean (issue 36, D1-D4;
// docs/clustered_synthesis.md). Population: y_i ~ N((Xc beta)_c + (Zpsu gamma)_j + u_j, sigma_y),
// Zpsu the PSU's centred shares of the predictor cells (contextual effects, as fbs_re), for record i of
// PSU j in predictor cell c, u_j = sigma_u z_j, z ~ N(0, 1) (non-centred, D3), or with
// centred = 1 u = z - pc'Xc beta ~ N(0, sigma_u) (hierarchical centring, as fbs_re: same
// posterior, a sampling geometry without the intercept / mean-of-u ridge);
// pi | y ~ LN(kappa_y y + x kappa_x, sigma_pi). Exact sample likelihood given u (fbp.stan with
// mu = x beta + u_j), raised to alpha_i. has_pi = 0 drops the pi model: when log pi is a
// function of the predictor cells (apiclus1: constant weights) the selection is not
// informative given x, E[pi | y, x] / E[pi | x] = 1 and the sample likelihood is the
// population's; a pi model would be degenerate there (sigma_pi -> 0, unbounded density).
// Priors as fbp.stan (seed 000 Appendix D) and sigma_u ~ half-Cauchy(0, 1) like sigma_y.
// Given u the records of a (cell x PSU) group share mu and k, so the sum over records is
// computed EXACTLY from alpha-weighted group statistics of v = (y, log pi) (fbp.stan's
// function, applied per group). log_lik: the CONDITIONAL density given u_j (D4).
functions {
  vector fbp_cell_ll(vector w, vector ybar, vector pbar, vector Syy, vector Syp, vector Spp,
                     vector mu, vector k, real kappa_y, real sigma_y, real sigma_pi,
                     real centre) {
    vector[rows(w)] ebar = pbar - kappa_y * (ybar - centre) - k;
    vector[rows(w)] see = square(kappa_y) * Syy - 2 * kappa_y * Syp + Spp;
    vector[rows(w)] norm = k + 0.5 * square(sigma_pi) + kappa_y * (mu - centre)
                           + 0.5 * square(kappa_y * sigma_y);
    return -w * (log(2 * pi()) + log(sigma_pi) + log(sigma_y))
           - 0.5 * (see + w .* square(ebar)) / square(sigma_pi)
           - 0.5 * (Syy + w .* square(ybar - mu)) / square(sigma_y)
           - w .* norm;
  }
}
data {
  int<lower=1> n;
  int<lower=1> K;
  int<lower=1> C;
  matrix[C, K] Xc;
  int<lower=1> J;
  int<lower=0, upper=1> centred;        // parametrization of u (sampling only)
  simplex[C] pc;                        // record shares of the cells (centring only)
  int<lower=0, upper=1> has_pi;
  real centre;
  int<lower=0> P;                       // PSU-level covariates (centred cell shares)
  matrix[J, P] Zpsu;
  int<lower=1> G;
  array[G] int<lower=1, upper=C> g_cell;
  array[G] int<lower=1, upper=J> g_psu;
  vector<lower=0>[G] w;
  vector[G] ybar;
  vector[G] pbar;
  vector[G] Syy;
  vector[G] Syp;
  vector[G] Spp;
  int<lower=0, upper=1> save_log_lik;
  array[save_log_lik ? n : 0] int<lower=1, upper=C> cell;
  array[save_log_lik ? n : 0] int<lower=1, upper=J> psu;
  vector[save_log_lik ? n : 0] y;
  vector[save_log_lik ? n : 0] lpi;
}
parameters {
  vector[K] beta;
  vector[P] gamma;
  array[has_pi] real kappa_y;
  vector[has_pi ? K : 0] kappa_x_c;
  real<lower=0> sigma_y;
  array[has_pi] real<lower=0> sigma_pi;
  real<lower=0> sigma_u;
  vector[J] z;
}
transformed parameters {
  vector[J] u = centred ? z - dot_product(pc, Xc * beta) : sigma_u * z;
  vector[has_pi ? K : 0] kappa_x = kappa_x_c;
  if (has_pi) kappa_x[1] -= kappa_y[1] * centre;
}
model {
  vector[G] mu = (Xc * beta)[g_cell] + (u + Zpsu * gamma)[g_psu];
  beta ~ normal(0, 10);
  gamma ~ normal(0, 10);
  sigma_y ~ cauchy(0, 1);
  sigma_u ~ cauchy(0, 1);
  if (centred) u ~ normal(0, sigma_u); else z ~ std_normal();
  if (has_pi) {
    kappa_y ~ normal(0, 10);
    kappa_x ~ normal(0, 10);
    sigma_pi ~ cauchy(0, 1);
    target += sum(fbp_cell_ll(w, ybar, pbar, Syy, Syp, Spp, mu, (Xc * kappa_x_c)[g_cell],
                              kappa_y[1], sigma_y, sigma_pi[1], centre));
  } else {
    target += -sum(w) * (0.5 * log(2 * pi()) + log(sigma_y))
              - 0.5 * (sum(Syy) + dot_product(w, square(ybar - mu))) / square(sigma_y);
  }
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    vector[n] mu = (Xc * beta)[cell] + (u + Zpsu * gamma)[psu];
    if (has_pi) {
      vector[n] k = (Xc * kappa_x_c)[cell];
      vector[n] e = lpi - kappa_y[1] * (y - centre) - k;
      log_lik = -log(2 * pi()) - log(sigma_pi[1]) - log(sigma_y)
                - 0.5 * square(e / sigma_pi[1]) - 0.5 * square((y - mu) / sigma_y)
                - (k + 0.5 * square(sigma_pi[1]) + kappa_y[1] * (mu - centre)
                   + 0.5 * square(kappa_y[1] * sigma_y));
    } else {
      log_lik = -0.5 * log(2 * pi()) - log(sigma_y) - 0.5 * square((y - mu) / sigma_y);
    }
  }
}
