// Sequential synthesizer, logistic family (binary variables and missing-value indicators;
// docs/sequential.md). y_i in {0, 1}, logit P(y_i = 1) = a + x_i' b; risk-weighted pseudo
// likelihood target += alpha_i * log p_i with log p_i = y_i eta_i - log(1 + exp(eta_i)).
// Priors: a ~ N(0, 5), b ~ N(0, 2.5) (x standardised).
// Sampled in a centred, whitened parametrization (exact; see seq_normal.stan): b = L bt,
// a = at - xbar' b, so a + x' b = at + ((x - xbar)' L) bt.
data {
  int<lower=1> n;
  int<lower=0> P;
  matrix[n, P] X;
  vector[P] xbar;                          // predictor centring (sequential: the records' means)
  matrix[P, P] L;                          // whitening: b = L bt (invertible)
  array[n] int<lower=0, upper=1> y;
  vector<lower=0>[n] alpha;  // alpha_i summed over identical records (sequential.py)
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  matrix[n, P] XL = (X - rep_matrix(xbar', n)) * L;
  vector[n] yv = to_vector(y);
  vector[n] ay = alpha .* yv;
  real say = sum(ay);
  vector[P] XLay = XL' * ay;
}
parameters {
  real at;
  vector[P] bt;
}
transformed parameters {
  vector[P] b = L * bt;
  real a = at - dot_product(xbar, b);
}
model {
  // sum_i alpha_i (y_i eta_i - log1p_exp(eta_i)) with the linear part from data-only sums:
  // sum_i alpha_i y_i eta_i = at sum(alpha y) + bt' XL'(alpha y), eta_i = at + XL_i bt
  target += at * say + dot_product(XLay, bt) - dot_product(alpha, log1p_exp(at + XL * bt));
  a ~ normal(0, 5);
  b ~ normal(0, 2.5);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    vector[n] eta = a + X * b;
    log_lik = yv .* eta - log1p_exp(eta);
  }
}
