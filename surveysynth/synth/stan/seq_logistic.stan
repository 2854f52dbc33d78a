// Sequential synthesizer, logistic family (binary variables and missing-value indicators;
// docs/sequential.md). y_i in {0, 1}, logit P(y_i = 1) = a + x_i' b; risk-weighted pseudo
// likelihood target += alpha_i * log p_i with log p_i = y_i eta_i - log(1 + exp(eta_i)).
// Priors: a ~ N(0, 5), b ~ N(0, 2.5) (x standardised).
data {
  int<lower=1> n;
  int<lower=0> P;
  matrix[n, P] X;
  array[n] int<lower=0, upper=1> y;
  vector<lower=0>[n] alpha;  // alpha_i summed over identical records (sequential.py)
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  vector[n] yv = to_vector(y);
  vector[n] ay = alpha .* yv;
  real say = sum(ay);
  vector[P] Xay = X' * ay;
}
parameters {
  real a;
  vector[P] b;
}
model {
  // sum_i alpha_i (y_i eta_i - log1p_exp(eta_i)) with the linear part from data-only sums:
  // sum_i alpha_i y_i eta_i = a sum(alpha y) + b' X'(alpha y)
  target += a * say + dot_product(Xay, b) - dot_product(alpha, log1p_exp(a + X * b));
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
