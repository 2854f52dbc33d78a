// Negative binomial regression (NB2, log link) with a risk-weighted pseudo likelihood
// (seed 002 Section 2.4): target += alpha[i] * NB(y_i | exp(x_i' beta), phi).
data {
  int<lower=1> N;
  int<lower=1> P;
  matrix[N, P] X;
  array[N] int<lower=0> y;
  vector<lower=0, upper=1>[N] alpha;
  real<lower=0> beta_scale;  // beta ~ N(0, beta_scale^2) on the log-mean scale
  real<lower=0> phi_scale;   // phi ~ half-Cauchy(0, phi_scale)
  real eta0;                 // log-mean offset (log of the sample mean), centres the intercept
  int<lower=0, upper=1> save_log_lik;
}
parameters {
  vector[P] beta;
  real<lower=0> phi;
}
model {
  vector[N] eta = eta0 + X * beta;
  for (i in 1:N) {
    target += alpha[i] * neg_binomial_2_log_lpmf(y[i] | eta[i], phi);
  }
  beta ~ normal(0, beta_scale);
  phi ~ cauchy(0, phi_scale);
}
generated quantities {
  vector[save_log_lik ? N : 0] log_lik;
  if (save_log_lik) {
    vector[N] eta = eta0 + X * beta;
    for (i in 1:N) {
      log_lik[i] = neg_binomial_2_log_lpmf(y[i] | eta[i], phi);
    }
  }
}
