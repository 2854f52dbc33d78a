// Sequential synthesizer, ordered logistic (ordinal variables; docs/sequential.md).
// y_i in 1..K, P(y_i > k) = inv_logit(x_i' b - c_k) with ordered cutpoints c; risk-weighted
// pseudo likelihood target += alpha_i * log p_i. Priors: b ~ N(0, 2.5), c ~ N(0, 5).
// Sampled in a centred, whitened parametrization (exact; see seq_normal.stan): b = L bt,
// c = ct + xbar' b (a common shift keeps c ordered), so x' b - c = ((x - xbar)' L) bt - ct.
// log p_i vectorized over records (the same values as Stan's ordered_logistic_lpmf):
//   y = 1: log(1 - inv_logit(eta - c_1)) = -log1p_exp(eta - c_1)
//   y = K: log inv_logit(eta - c_{K-1}) = -log1p_exp(c_{K-1} - eta)
//   else:  log(inv_logit(eta - c_{y-1}) - inv_logit(eta - c_y)), by log_diff_exp
// (seq_ord_ll: the per-record log_lik). The model block sums the same density factorised
// (issue 39 item 2; ~20% less time per gradient at 10,000 rows): with u = eta - c_{y-1} and
// v = eta - c_y, inv_logit(u) - inv_logit(v) = inv_logit(u) (1 - inv_logit(v)) (1 - exp(v - u))
// and v - u = c_{y-1} - c_y, so
//   sum_i alpha_i log p_i = sum_{y_i > 1} alpha_i log_inv_logit(u_i)
//                           - sum_{y_i < K} alpha_i log1p_exp(v_i)
//                           + sum_{k = 2..K-1} A_k log1m_exp(c_{k-1} - c_k),
// A_k the summed alphas of category k (the y = 1 and y = K cases are the first two sums'
// missing terms). u and v are each one product of data rows [XL_i, -e_{y-1}] (resp. e_y) with
// (bt, ct): c_k - c_{k-1} = ct_k - ct_{k-1} (the centring shifts every cutpoint alike).
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
  vector<lower=0>[n] alpha;  // alpha_i summed over identical records (sequential.py)
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
  // the factorised sums (header): rows of the u (y > 1) and v (y < K) products
  int nu = n - n1;
  int nv = n - nK;
  matrix[nu, P + K - 1] Zu = rep_matrix(0, nu, P + K - 1);
  matrix[nv, P + K - 1] Zv = rep_matrix(0, nv, P + K - 1);
  vector[nu] alpha_u;
  vector[nv] alpha_v;
  vector[K] A = rep_vector(0, K);
  {
    int ju = 0;
    int jv = 0;
    for (i in 1:n) {
      A[y[i]] += alpha[i];
      if (y[i] > 1) {
        ju += 1;
        if (P > 0) {
          Zu[ju, 1:P] = XL[i];
        }
        Zu[ju, P + y[i] - 1] = -1;
        alpha_u[ju] = alpha[i];
      }
      if (y[i] < K) {
        jv += 1;
        if (P > 0) {
          Zv[jv, 1:P] = XL[i];
        }
        Zv[jv, P + y[i]] = -1;
        alpha_v[jv] = alpha[i];
      }
    }
  }
}
parameters {
  vector[P] bt;
  ordered[K - 1] ct;
}
transformed parameters {
  vector[P] b = L * bt;
  vector[K - 1] c = ct + dot_product(xbar, b);
}
model {
  {
    vector[P + K - 1] bc = append_row(bt, ct);
    target += dot_product(alpha_u, log_inv_logit(Zu * bc))
              - dot_product(alpha_v, log1p_exp(Zv * bc));
    if (K > 2) {
      target += dot_product(A[2:(K - 1)], log1m_exp(ct[1:(K - 2)] - ct[2:(K - 1)]));
    }
  }
  b ~ normal(0, 2.5);   // priors on the natural parameters (constant Jacobian)
  c ~ normal(0, 5);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = seq_ord_ll(X * b, c, i1, iK, im, km, kl);
  }
}
