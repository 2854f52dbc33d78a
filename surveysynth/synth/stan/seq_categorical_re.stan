// Sequential synthesizer, multinomial logit WITH PSU random intercepts (clustered designs;
// issue 36 D3; docs/sequential.md "Clustered designs"). eta_i1 = 0 (reference),
// eta_ik = a_k + x_i' B_k + u_{k, g(i)} for k = 2..K: ONE random intercept per PSU and
// non-reference logit, independent, each logit its own scale: u_kj = sigma_u[k] * z_kj,
// z ~ N(0, 1) (non-centred), sigma_u[k] ~ half-t(3, 0, 1). (A single intercept shared by the
// non-reference logits would only move "reference vs the rest" together: the clustering it
// carries would depend on which level happens to be first.) g(i) the record's PSU (1..J);
// a ~ N(0, 5), B ~ N(0, 2.5), centred, whitened, and in the logit coordinates Q, as
// seq_categorical.stan ([at'; Bt] = Ct Q; its linear part from data sums, the random
// intercepts' by the summed alphas per (logit, PSU); its log-sum-exp). log p_i given u (D4);
// rows are the distinct (x, y, PSU) patterns with summed alphas (exact).
functions {
  // log sum_k exp(eta_ik) with eta_i1 = 0, from E = the non-reference columns (as
  // seq_categorical.stan: one matrix exp while every eta < 300, the stable running
  // log1p_exp otherwise)
  vector seq_cat_lse(matrix E) {
    int Km1 = cols(E);
    if (max(E) < 300) {
      return log1p(exp(E) * rep_vector(1, Km1));
    }
    vector[rows(E)] lse = log1p_exp(col(E, 1));
    for (k in 2:Km1) {
      lse += log1p_exp(col(E, k) - lse);
    }
    return lse;
  }
  // log softmax(eta_i)[y_i] of every record (generated quantities: per-record log_lik)
  vector seq_cat_ll(array[] int y, matrix E) {
    int n = rows(E);
    vector[n] ll = -seq_cat_lse(E);
    for (i in 1:n) {
      if (y[i] > 1) {
        ll[i] += E[i, y[i] - 1];
      }
    }
    return ll;
  }
}
data {
  int<lower=1> n;
  int<lower=0> P;
  int<lower=2> K;
  matrix[n, P] X;
  vector[P] xbar;                          // predictor centring (sequential: the records' means)
  matrix[P, P] L;                          // whitening: B = L Bt (invertible)
  matrix[K - 1, K - 1] Q;                  // logit coordinates: [at'; Bt] = Ct Q (invertible)
  array[n] int<lower=1, upper=K> y;
  vector<lower=0>[n] alpha;  // alpha_i summed over identical (x, y, PSU) records
  int<lower=1> J;
  array[n] int<lower=1, upper=J> g;
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  matrix[n, P + 1] XL1 = append_col(rep_vector(1, n), (X - rep_matrix(xbar', n)) * L);
  matrix[P + 1, K - 1] S = rep_matrix(0, P + 1, K - 1);   // XL1' (alpha .* [y = k]), k >= 2
  matrix[K - 1, J] Su = rep_matrix(0, K - 1, J);          // summed alpha per (y = k, PSU)
  for (i in 1:n) {
    if (y[i] > 1) {
      S[:, y[i] - 1] += alpha[i] * XL1[i]';
      Su[y[i] - 1, g[i]] += alpha[i];
    }
  }
}
parameters {
  matrix[P + 1, K - 1] Ct;
  vector<lower=0>[K - 1] sigma_u;
  matrix[K - 1, J] z_u;
}
transformed parameters {
  matrix[P + 1, K - 1] ABt = Ct * Q;       // [at'; Bt]
  matrix[P, K - 1] B = rep_matrix(0, P, K - 1);
  if (P > 0) {                             // (a range 2:1 is not empty in Stan)
    B = L * ABt[2:(P + 1)];
  }
  vector[K - 1] a = ABt[1]' - B' * xbar;
  matrix[K - 1, J] u = diag_pre_multiply(sigma_u, z_u);
}
model {
  target += sum(S .* ABt) + sum(Su .* u)
            - dot_product(alpha, seq_cat_lse(XL1 * ABt + u[:, g]'));
  a ~ normal(0, 5);   // priors on the natural parameters (constant Jacobian)
  to_vector(B) ~ normal(0, 2.5);
  sigma_u ~ student_t(3, 0, 1);
  to_vector(z_u) ~ std_normal();
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = seq_cat_ll(y, rep_matrix(a', n) + X * B + u[:, g]');
  }
}
