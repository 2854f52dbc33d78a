// Sequential synthesizer, multinomial logit (categorical variables; docs/sequential.md).
// y_i in 1..K, P(y_i = k) = softmax(eta_i)[k], eta_i1 = 0 (reference), eta_ik = a_k + x_i' B_k;
// risk-weighted pseudo likelihood target += alpha_i * log p_i.
// Priors: a ~ N(0, 5), B ~ N(0, 2.5) (x standardised).
functions {
  vector seq_cat_ll(array[] int y, matrix eta) {
    int n = num_elements(y);
    vector[n] ll;
    for (i in 1:n) {
      ll[i] = eta[i, y[i]] - log_sum_exp(eta[i]);
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
  vector<lower=0, upper=1>[n] alpha;
  int<lower=0, upper=1> save_log_lik;
}
parameters {
  vector[K - 1] a;
  matrix[P, K - 1] B;
}
model {
  matrix[n, K] eta = append_col(rep_vector(0, n), rep_matrix(a', n) + X * B);
  target += dot_product(alpha, seq_cat_ll(y, eta));
  a ~ normal(0, 5);
  to_vector(B) ~ normal(0, 2.5);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = seq_cat_ll(y, append_col(rep_vector(0, n), rep_matrix(a', n) + X * B));
  }
}
