// Sequential synthesizer, ordered logistic (ordinal variables; docs/sequential.md).
// y_i in 1..K, P(y_i > k) = inv_logit(x_i' b - c_k) with ordered cutpoints c; risk-weighted
// pseudo likelihood target += alpha_i * log p_i. Priors: b ~ N(0, 2.5), c ~ N(0, 5).
functions {
  vector seq_ord_ll(array[] int y, vector eta, vector c) {
    int n = num_elements(y);
    vector[n] ll;
    for (i in 1:n) {
      ll[i] = ordered_logistic_lpmf(y[i] | eta[i], c);
    }
    return ll;
  }
}
data {
  int<lower=1> n;
  int<lower=0> P;
  int<lower=2> K;
  matrix[n, P] X;
  array[n] int<lower=1, upper=K> y;
  vector<lower=0>[n] alpha;  // alpha_i summed over identical records (sequential.py)
  int<lower=0, upper=1> save_log_lik;
}
parameters {
  vector[P] b;
  ordered[K - 1] c;
}
model {
  target += dot_product(alpha, seq_ord_ll(y, X * b, c));
  b ~ normal(0, 2.5);
  c ~ normal(0, 5);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = seq_ord_ll(y, X * b, c);
  }
}
