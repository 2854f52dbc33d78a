// Sequential synthesizer, ordered logistic WITH a PSU random intercept (clustered designs;
// issue 36 D3; docs/sequential.md "Clustered designs"). P(y_i > k) = inv_logit(x_i' b + u_{g(i)}
// - c_k), u_j = sigma_u * z_j, z_j ~ N(0, 1) (non-centred), sigma_u ~ half-t(3, 0, 1), g(i) the
// record's PSU (1..J); b ~ N(0, 2.5), c ~ N(0, 5); centred, whitened as seq_ordinal.stan.
// log p_i given u (D4); rows are the distinct (x, y, PSU) patterns with summed alphas (exact).
functions {
  vector seq_ord_ll(vector eta, vector c, array[] int i1, array[] int iK, array[] int im,
                    array[] int km, array[] int kl) {
    int K = num_elements(c) + 1;
    vector[num_elements(eta)] ll;
    ll[i1] = -log1p_exp(eta[i1] - c[1]);
    ll[iK] = -log1p_exp(c[K - 1] - eta[iK]);
    if (size(im) > 0) {
      ll[im] = log_diff_exp(log_inv_logit(eta[im] - c[kl]), log_inv_logit(eta[im] - c[km]));
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
  matrix[P, P] L;                          // whitening: b = L bt (invertible)
  array[n] int<lower=1, upper=K> y;
  vector<lower=0>[n] alpha;  // alpha_i summed over identical (x, y, PSU) records
  int<lower=1> J;
  array[n] int<lower=1, upper=J> g;
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  matrix[n, P] XL = (X - rep_matrix(xbar', n)) * L;
  int n1 = 0;
  int nK = 0;
  for (i in 1:n) {
    n1 += y[i] == 1;
    nK += y[i] == K;
  }
  array[n1] int i1;
  array[nK] int iK;
  array[n - n1 - nK] int im;
  array[n - n1 - nK] int km;   // a middle record's category y: P(y) uses c[y - 1], c[y]
  array[n - n1 - nK] int kl;   // y - 1
  {
    int j1 = 0;
    int jK = 0;
    int jm = 0;
    for (i in 1:n) {
      if (y[i] == 1) {
        j1 += 1;
        i1[j1] = i;
      } else if (y[i] == K) {
        jK += 1;
        iK[jK] = i;
      } else {
        jm += 1;
        im[jm] = i;
        km[jm] = y[i];
        kl[jm] = y[i] - 1;
      }
    }
  }
}
parameters {
  vector[P] bt;
  ordered[K - 1] ct;
  real<lower=0> sigma_u;
  vector[J] z_u;
}
transformed parameters {
  vector[P] b = L * bt;
  vector[K - 1] c = ct + dot_product(xbar, b);
  vector[J] u = sigma_u * z_u;
}
model {
  target += dot_product(alpha, seq_ord_ll(XL * bt + u[g], ct, i1, iK, im, km, kl));
  b ~ normal(0, 2.5);   // priors on the natural parameters (constant Jacobian)
  c ~ normal(0, 5);
  sigma_u ~ student_t(3, 0, 1);
  z_u ~ std_normal();
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = seq_ord_ll(X * b + u[g], c, i1, iK, im, km, kl);
  }
}
