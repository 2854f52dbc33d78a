// FBP: risk-weighted fully Bayes model for the population (seed 001 Section 2.2; Leon-Novelo
// and Savitsky 2019). Population: y ~ N(x beta, sigma_y); pi | y ~ LN(kappa_y y + x kappa_x,
// sigma_pi). Exact sample likelihood of (y_i, pi_i), seed 001 eq. (6), raised to alpha_i:
//   log N(log pi | kappa_y y + x kappa_x, sigma_pi) + log N(y | x beta, sigma_y)
//   - (x kappa_x + sigma_pi^2/2 + kappa_y x beta + kappa_y^2 sigma_y^2/2).
// Priors: seed 000 supplement, Appendix D, on the ORIGINAL coefficients. For sampling, y is
// centred at a constant `centre` inside the pi model: the parameter kappa_x_c has intercept
// kappa_x[1] + kappa_y * centre (Xc's first column is the intercept). This shear has unit
// Jacobian and the prior is put on kappa_x = kappa_x_c - kappa_y * centre * e_1, so the model
// is exactly the paper's; only the posterior geometry improves (no kappa_y/intercept ridge).
// The sum over records uses exact alpha-weighted per-cell statistics of v = (y, log pi):
// w_c, vbar_c and the centred scatter S_c (see fbs.stan).
functions {
  // sum_i alpha_i log p_s(y_i, pi_i) over records of each cell, from the cell statistics
  vector fbp_cell_ll(vector w, vector ybar, vector pbar, vector Syy, vector Syp, vector Spp,
                     vector mu, vector k, real kappa_y, real sigma_y, real sigma_pi,
                     real centre) {
    // e = log pi - kappa_y (y - centre) - k = a' v + b with a = (-kappa_y, 1)
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
  real centre;
  vector<lower=0>[C] w;
  vector[C] ybar;
  vector[C] pbar;
  vector[C] Syy;
  vector[C] Syp;
  vector[C] Spp;
  int<lower=0, upper=1> save_log_lik;
  array[save_log_lik ? n : 0] int<lower=1, upper=C> cell;
  vector[save_log_lik ? n : 0] y;       // outcome on the modelled scale
  vector[save_log_lik ? n : 0] lpi;     // log inclusion probability, pi = 1 / w
}
parameters {
  vector[K] beta;
  real kappa_y;
  vector[K] kappa_x_c;
  real<lower=0> sigma_y;
  real<lower=0> sigma_pi;
}
transformed parameters {
  vector[K] kappa_x = kappa_x_c;
  kappa_x[1] -= kappa_y * centre;
}
model {
  beta ~ normal(0, 10);
  kappa_y ~ normal(0, 10);
  kappa_x ~ normal(0, 10);
  sigma_y ~ cauchy(0, 1);
  sigma_pi ~ cauchy(0, 1);
  target += sum(fbp_cell_ll(w, ybar, pbar, Syy, Syp, Spp, Xc * beta, Xc * kappa_x_c, kappa_y,
                            sigma_y, sigma_pi, centre));
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    vector[C] mu = Xc * beta;
    vector[C] k = Xc * kappa_x_c;
    vector[n] e = lpi - kappa_y * (y - centre) - k[cell];
    log_lik = -log(2 * pi()) - log(sigma_pi) - log(sigma_y)
              - 0.5 * square(e / sigma_pi) - 0.5 * square((y - mu[cell]) / sigma_y)
              - (k[cell] + 0.5 * square(sigma_pi) + kappa_y * (mu[cell] - centre)
                 + 0.5 * square(kappa_y * sigma_y));
  }
}
