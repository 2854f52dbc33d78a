// Sequential synthesizer, multinomial logit (categorical variables; docs/sequential.md).
// y_i in 1..K, P(y_i = k) = softmax(eta_i)[k], eta_i1 = 0 (reference), eta_ik = a_k + x_i' B_k;
// risk-weighted pseudo likelihood target += alpha_i * log p_i.
// Priors: a ~ N(0, 5), B ~ N(0, 2.5) (x standardised).
// Sampled in a centred, whitened parametrization (exact; see seq_normal.stan): B = L Bt,
// a = at - B' xbar, so a_k + x' B_k = at_k + ((x - xbar)' L) Bt_k.
functions {
  // log softmax(eta_i)[y_i] of every record, vectorized over records: the row-wise
  // log-sum-exp is accumulated over the K columns (K is small) as lse + log1p_exp(e_k - lse),
  // stable for any eta; the selected entry is a row-wise dot product with the one-hot codes.
  vector seq_cat_ll(matrix Y1, matrix eta) {
    int K = cols(eta);
    vector[rows(eta)] lse = col(eta, 1);
    for (k in 2:K) {
      lse += log1p_exp(col(eta, k) - lse);
    }
    return rows_dot_product(Y1, eta) - lse;
  }
}
data {
  int<lower=1> n;
  int<lower=0> P;
  int<lower=2> K;
  matrix[n, P] X;
  vector[P] xbar;                          // predictor centring (sequential: the records' means)
  matrix[P, P] L;                          // whitening: B = L Bt (invertible)
  array[n] int<lower=1, upper=K> y;
  vector<lower=0>[n] alpha;  // alpha_i summed over identical records (sequential.py)
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  matrix[n, P] XL = (X - rep_matrix(xbar', n)) * L;
  matrix[n, K] Y1 = rep_matrix(0, n, K);   // one-hot codes
  for (i in 1:n) {
    Y1[i, y[i]] = 1;
  }
}
parameters {
  vector[K - 1] at;
  matrix[P, K - 1] Bt;
}
transformed parameters {
  matrix[P, K - 1] B = L * Bt;
  vector[K - 1] a = at - B' * xbar;
}
model {
  matrix[n, K] eta = append_col(rep_vector(0, n), rep_matrix(at', n) + XL * Bt);
  target += dot_product(alpha, seq_cat_ll(Y1, eta));
  a ~ normal(0, 5);   // priors on the natural parameters (constant Jacobian)
  to_vector(B) ~ normal(0, 2.5);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = seq_cat_ll(Y1, append_col(rep_vector(0, n), rep_matrix(a', n) + X * B));
  }
}
