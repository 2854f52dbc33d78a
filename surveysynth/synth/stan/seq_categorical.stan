// Sequential synthesizer, multinomial logit (categorical variables; docs/sequential.md).
// y_i in 1..K, P(y_i = k) = softmax(eta_i)[k], eta_i1 = 0 (reference), eta_ik = a_k + x_i' B_k;
// risk-weighted pseudo likelihood target += alpha_i * log p_i.
// Priors: a ~ N(0, 5), B ~ N(0, 2.5) (x standardised).
// Sampled in centred, whitened coordinates (exact; see seq_normal.stan): the predictors
// (X - xbar) L with a column of ones for the intercepts, XL1 = [1, (X - xbar) L], and across
// the K - 1 logits the coordinates Q (data, invertible; Sequential: the inverse square root of
// the multinomial covariance of the records' category shares, which decorrelates the logits'
// intercepts and coefficients): [at'; Bt] = Ct Q, B = L Bt, a = at - B' xbar, so that
// a_k + x' B_k = (XL1 [at'; Bt])_k. Ct is what NUTS sees.
// The weighted log likelihood sum_i alpha_i (eta_i,y_i - lse_i), lse_i = log sum_k exp(eta_ik):
//   the linear part from data-only sums, sum_k (XL1' (alpha .* [y = k]))' [at'; Bt]_k (k >= 2);
//   lse_i = log1p(sum_{k >= 2} exp(eta_ik)) (eta_i1 = 0): one matrix exp and a product, while
//   every eta < 300 (no overflow); otherwise the stable running log1p_exp over the columns
//   (the same value; only the rounding differs).
functions {
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
    vector[n] lse = seq_cat_lse(E);
    vector[n] ll = -lse;
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
  vector<lower=0>[n] alpha;  // alpha_i summed over identical records (sequential.py)
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  matrix[n, P + 1] XL1 = append_col(rep_vector(1, n), (X - rep_matrix(xbar', n)) * L);
  matrix[P + 1, K - 1] S = rep_matrix(0, P + 1, K - 1);   // XL1' (alpha .* [y = k]), k >= 2
  for (i in 1:n) {
    if (y[i] > 1) {
      S[:, y[i] - 1] += alpha[i] * XL1[i]';
    }
  }
}
parameters {
  matrix[P + 1, K - 1] Ct;
}
transformed parameters {
  matrix[P + 1, K - 1] ABt = Ct * Q;       // [at'; Bt]
  matrix[P, K - 1] B = rep_matrix(0, P, K - 1);
  if (P > 0) {                             // (a range 2:1 is not empty in Stan)
    B = L * ABt[2:(P + 1)];
  }
  vector[K - 1] a = ABt[1]' - B' * xbar;
}
model {
  target += sum(S .* ABt) - dot_product(alpha, seq_cat_lse(XL1 * ABt));
  a ~ normal(0, 5);   // priors on the natural parameters (constant Jacobian)
  to_vector(B) ~ normal(0, 2.5);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = seq_cat_ll(y, rep_matrix(a', n) + X * B);
  }
}
