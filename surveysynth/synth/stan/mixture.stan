// Finite mixture of normal regressions (truncated Dirichlet process; seed 003, seed 002 CE
// synthesizer) with a risk-weighted pseudo likelihood:
//   target += alpha[i] * log sum_k theta_k N(z_i | x_i' beta_k, sigma_k),
// components marginalised with log_sum_exp. z is the outcome on the modelled scale (transformed,
// then standardised by the caller); log_lik is on the transformed (unstandardised) scale.
// beta = R^{-1} beta_qr is linear, so priors on beta need no Jacobian adjustment.
data {
  int<lower=1> N;
  int<lower=1> P;
  int<lower=1> K;
  matrix[N, P] X;
  vector[N] z;
  vector<lower=0, upper=1>[N] alpha;
  real<lower=0> gamma;        // DP concentration: theta ~ Dirichlet(gamma / K)
  real<lower=0> beta_scale;   // beta_k ~ N(0, beta_scale^2)
  real<lower=0> sigma_scale;  // sigma_k ~ half-N(0, sigma_scale^2)
  real log_jacobian;          // -log(sd) of the standardisation, for log_lik
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  // QR reparameterisation (Stan User's Guide 1.2): same model, better geometry for NUTS
  matrix[N, P] Q = qr_thin_Q(X) * sqrt(N - 1.0);
  matrix[P, P] R_inv = inverse(qr_thin_R(X) / sqrt(N - 1.0));
}
parameters {
  simplex[K] theta;
  matrix[P, K] beta_qr;
  vector<lower=0>[K] sigma;
}
transformed parameters {
  matrix[P, K] beta = R_inv * beta_qr;  // coefficients on X; the priors are on beta
}
model {
  matrix[N, K] lp = Q * beta_qr;
  vector[K] log_theta = log(theta);
  vector[N] ll;
  for (k in 1:K) {
    lp[:, k] = log_theta[k] - 0.5 * square((z - lp[:, k]) / sigma[k]) - log(sigma[k]);
  }
  for (i in 1:N) {
    ll[i] = log_sum_exp(lp[i]);
  }
  target += dot_product(alpha, ll);  // the constant -0.5 log(2 pi) is dropped here only
  theta ~ dirichlet(rep_vector(gamma / K, K));
  to_vector(beta) ~ normal(0, beta_scale);
  sigma ~ normal(0, sigma_scale);
}
generated quantities {
  vector[save_log_lik ? N : 0] log_lik;
  if (save_log_lik) {
    matrix[N, K] lp = X * beta;
    vector[K] log_theta = log(theta);
    for (k in 1:K) {
      lp[:, k] = log_theta[k] - 0.5 * square((z - lp[:, k]) / sigma[k]) - log(sigma[k]);
    }
    for (i in 1:N) {
      // full normalised log density of the transformed outcome
      log_lik[i] = log_sum_exp(lp[i]) - 0.5 * log(2 * pi()) + log_jacobian;
    }
  }
}
