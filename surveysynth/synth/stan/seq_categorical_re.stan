// Sequential synthesizer, multinomial logit WITH PSU random intercepts (clustered designs;
// issue 36 D3; docs/sequential.md "Clustered designs"). eta_i1 = 0 (reference),
// eta_ik = a_k + x_i' B_k + u_{k, g(i)} for k = 2..K: ONE random intercept per PSU and
// non-reference logit, independent, each logit its own scale: u_kj = sigma_u[k] * z_kj,
// z ~ N(0, 1) (non-centred), sigma_u[k] ~ half-t(3, 0, 1). (A single intercept shared by the
// non-reference logits would only move "reference vs the rest" together: the clustering it
// carries would depend on which level happens to be first.) g(i) the record's PSU (1..J);
// a ~ N(0, 5), B ~ N(0, 2.5), centred, whitened as seq_categorical.stan. log p_i given u (D4);
// rows are the distinct (x, y, PSU) patterns with summed alphas (exact).
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
  vector<lower=0>[n] alpha;  // alpha_i summed over identical (x, y, PSU) records
  int<lower=1> J;
  array[n] int<lower=1, upper=J> g;
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
  vector<lower=0>[K - 1] sigma_u;
  matrix[K - 1, J] z_u;
}
transformed parameters {
  matrix[P, K - 1] B = L * Bt;
  vector[K - 1] a = at - B' * xbar;
  matrix[K - 1, J] u = diag_pre_multiply(sigma_u, z_u);
}
model {
  matrix[n, K] eta = append_col(rep_vector(0, n), rep_matrix(at', n) + XL * Bt + u[:, g]');
  target += dot_product(alpha, seq_cat_ll(Y1, eta));
  a ~ normal(0, 5);   // priors on the natural parameters (constant Jacobian)
  to_vector(B) ~ normal(0, 2.5);
  sigma_u ~ student_t(3, 0, 1);
  to_vector(z_u) ~ std_normal();
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = seq_cat_ll(Y1, append_col(rep_vector(0, n), rep_matrix(a', n) + X * B + u[:, g]'));
  }
}
