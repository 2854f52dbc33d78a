// Sequential synthesizer, negative binomial family (counts / integers; docs/sequential.md).
// y_i = value - lower bound (>= 0) ~ NB2(mu_i, phi), log mu_i = eta0 + a + x_i' b, truncated
// above at hi (the public upper bound minus the lower bound) when given: the pmf is divided by
// its normaliser F(hi | mu_i, phi), the same truncated pmf that is synthesized from. The
// normaliser depends on a record's predictors only: it is computed once per DISTINCT predictor
// row (Xd; xd maps rows of X to rows of Xd) and weighted by the summed alphas of the rows
// sharing it (exact; see seq_normal.stan).
// Risk-weighted pseudo likelihood target += alpha_i * log p_i.
// Priors: a ~ N(0, 5), b ~ N(0, 2.5), phi ~ half-Cauchy(0, 10).
// Sampled in a centred, whitened parametrization (exact; see seq_normal.stan): b = L bt,
// a = at - xbar' b, so eta0 + a + x' b = eta0 + at + ((x - xbar)' L) bt.
functions {
  // log Gamma(k + phi) - log Gamma(phi) for k = 0..kmax, as sum_{j < k} log(phi + j) (a
  // cumulative sum: exact to rounding for every phi). The difference of two lgammas loses
  // |lgamma(phi)| x 1e-16 to cancellation: 0.01-0.1 per count at phi ~ 1e13, which made a
  // spurious high-density region at huge phi where chains stuck at tree depth 10 (a
  // Poisson-like count under small alphas lets phi wander there in early warm-up).
  vector seq_nb_lpoch(real phi, int kmax) {
    vector[kmax + 1] out = rep_vector(0, kmax + 1);
    if (kmax > 0) {
      out[2:(kmax + 1)] = cumulative_sum(log(phi + linspaced_vector(kmax, 0, kmax - 1)));
    }
    return out;
  }
  // log F(hi | mu, phi), the truncation normaliser: log of the sum of the pmf over the support
  // 0..hi, log F = l0 + log_sum_exp_k(c_k + k lq) with c_k = lgamma(k + phi) - lgamma(phi)
  // - lgamma(k + 1) (seq_nb_lpoch), l0 = phi log(phi / (mu + phi)) = -phi l1,
  // lq = log(mu / (mu + phi)) (exact; Stan's neg_binomial_2_lcdf differentiates the incomplete
  // beta function in phi by a slow series). seq_nb_lse is the log_sum_exp part, of every row of
  // lq: its matrix of terms is ONE product [lq, 1] * [k; c] (one autodiff node per element;
  // lq * k + rep_matrix(c, n) made two per element and a copy), then one log_sum_exp per row.
  // The same values as before to rounding (issue 39 item 2; docs/sequential.md).
  vector seq_nb_lse(vector lq, real phi, int hi) {
    int n = num_elements(lq);
    row_vector[hi + 1] k = linspaced_row_vector(hi + 1, 0, hi);
    matrix[n, hi + 1] M = append_col(lq, rep_vector(1, n))
                          * append_row(k, seq_nb_lpoch(phi, hi)' - lgamma(k + 1));
    vector[n] out;
    for (i in 1:n) {
      out[i] = log_sum_exp(M[i]);
    }
    return out;
  }
  vector seq_nb_log_norm(vector eta, real phi, int hi) {
    return seq_nb_lse(-log1p_exp(log(phi) - eta), phi, hi) - phi * log1p_exp(eta - log(phi));
  }
  // log NB2(y_i | exp(eta_i), phi) of every record, vectorized over records:
  // lgamma(y + phi) - lgamma(phi) - lgamma(y + 1) [lgy1] + phi log(phi / (mu + phi))
  // + y log(mu / (mu + phi)), with log(phi / (mu + phi)) = -log1p_exp(eta - log phi)
  // (the same density as neg_binomial_2_log_lpmf, term by term).
  // The lgamma(y + phi) - lgamma(phi) term takes one value per distinct count: it is computed
  // for k = 0..max(y) (seq_nb_lpoch) and indexed by y1 = y + 1 (exact; ymax logs instead of
  // n lgammas).
  vector seq_nb_ll(vector yv, array[] int y1, int ymax, vector lgy1, vector eta, real phi) {
    vector[num_elements(yv)] l1 = log1p_exp(eta - log(phi));
    vector[ymax + 1] lg = seq_nb_lpoch(phi, ymax);
    return lg[y1] - lgy1 - phi * l1 + yv .* (eta - log(phi) - l1);
  }
}
data {
  int<lower=1> n;
  int<lower=0> P;
  matrix[n, P] X;
  vector[P] xbar;                          // predictor centring (sequential: the records' means)
  matrix[P, P] L;                          // whitening: b = L bt (invertible)
  array[n] int<lower=0> y;
  vector<lower=0>[n] alpha;  // alpha_i summed over identical records (sequential.py)
  real eta0;
  int<lower=0, upper=1> has_hi;
  int<lower=0> hi;
  int<lower=1> nd;
  matrix[nd, P] Xd;                        // the distinct rows of X
  array[n] int<lower=1, upper=nd> xd;      // X[i] = Xd[xd[i]]
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  matrix[n, P] XL = (X - rep_matrix(xbar', n)) * L;
  matrix[nd, P + 1] XdL1 = append_col(rep_vector(1, nd), (Xd - rep_matrix(xbar', nd)) * L);
  vector[n] yv = to_vector(y);
  vector[n] lgy1 = lgamma(yv + 1);
  int ymax = max(y);
  array[n] int y1;
  for (i in 1:n) {
    y1[i] = y[i] + 1;
  }
  vector[nd] alpha_d = rep_vector(0, nd);  // summed alphas per distinct predictor row
  for (i in 1:n) {
    alpha_d[xd[i]] += alpha[i];
  }
  // the weighted likelihood's data-only pieces (model block below)
  vector[n] ay = alpha .* yv;
  real say = sum(ay);
  vector[P] XLay = XL' * ay;
  real alpha_lgy1 = dot_product(alpha, lgy1);
  vector[ymax + 1] A = rep_vector(0, ymax + 1);   // summed alphas per count value
  for (i in 1:n) {
    A[y1[i]] += alpha[i];
  }
  vector[nd] ay_d = rep_vector(0, nd);     // summed alpha_i y_i per distinct predictor row
  for (i in 1:n) {
    ay_d[xd[i]] += ay[i];
  }
}
parameters {
  real at;
  vector[P] bt;
  real<lower=0> phi;
}
transformed parameters {
  vector[P] b = L * bt;
  real a = at - dot_product(xbar, b);
}
model {
  // sum_i alpha_i log p_i with every per-row term on the DISTINCT predictor rows d (exact):
  // with l1 = log1p_exp(eta - log phi), log p_i = lg[y_i] - lgy1_i - (phi + y_i) l1 + y_i (eta_i
  // - log phi) - log F(x_i), and log F = -phi l1 + lse (seq_nb_log_norm), so the truncated pmf's
  // p^phi cancels against its normaliser's: log p_i = lg[y_i] - lgy1_i + y_i (eta_i - log phi)
  // - y_i l1 - lse. eta_i enters linearly through data sums (say, XLay); l1 and lse are
  // per distinct row, weighted by alpha_d and ay_d (summed alpha, alpha y of the rows sharing it).
  // eta_d - log phi as ONE product of [1, XdL_d] with (eta0 + at - log phi, bt) (issue 39
  // item 2: the intercept and log phi folded in; phi multiplies a dot product, not a vector)
  {
    real a0 = eta0 + at - log(phi);
    vector[nd] el = XdL1 * append_row(a0, bt);
    vector[nd] l1 = log1p_exp(el);
    target += dot_product(A, seq_nb_lpoch(phi, ymax)) - alpha_lgy1
              + a0 * say + dot_product(XLay, bt);
    if (has_hi) {
      target += -dot_product(ay_d, l1)
                - dot_product(alpha_d, seq_nb_lse(-log1p_exp(-el), phi, hi));
    } else {
      target += -phi * dot_product(alpha_d, l1) - dot_product(ay_d, l1);
    }
  }
  a ~ normal(0, 5);   // priors on the natural parameters (linear in at, bt: constant Jacobian)
  b ~ normal(0, 2.5);
  phi ~ cauchy(0, 10);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = seq_nb_ll(yv, y1, ymax, lgy1, eta0 + a + X * b, phi);
    if (has_hi) {
      vector[nd] lz = seq_nb_log_norm(eta0 + a + Xd * b, phi, hi);
      log_lik -= lz[xd];
    }
  }
}
