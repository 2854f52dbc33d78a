// Sequential synthesizer, normal family WITH a PSU random intercept (clustered designs; issue
// 36 D3; docs/sequential.md "Clustered designs"). The model of seq_normal.stan plus u_j:
//   y_i ~ N(mu_i, sigma) [truncated to (lo, hi)],  mu_i = loc + scale * (a + x_i' b + u_{g(i)}),
//   u_j = sigma_u * z_j, z_j ~ N(0, 1) (non-centred),  sigma_u ~ half-t(3, 0, 1),
// g(i) the record's first-stage sampling unit (PSU, 1..J). Other priors as seq_normal.stan; the
// same centred, whitened parametrization of (a, b). Risk-weighted pseudo likelihood
// target += alpha_i * log p_i with log p_i the FULL normalised density GIVEN u (the conditional
// density the Lipschitz bound is computed from, D4), truncation normaliser included: it depends
// on the record's predictors and its PSU, so it is computed once per DISTINCT (x, PSU) row (Xd,
// gd; xd maps rows to them) and weighted by the summed alphas of the rows sharing it (exact).
// Rows are the distinct (x, y, PSU) patterns with summed alphas (sequential.py; exact). Without
// bounds (has_lo = has_hi = 0) it is the untruncated normal (no sufficient-statistic program
// with random effects: the rows are already collapsed per pattern x PSU).
functions {
  vector seq_normal_log_norm(vector mu, real sigma, int has_lo, real lo, int has_hi, real hi) {
    int nd = num_elements(mu);
    vector[nd] out = rep_vector(0, nd);
    if (has_lo || has_hi) {
      for (d in 1:nd) {
        real uh = has_hi ? normal_lcdf(hi | mu[d], sigma) : 0;
        real ul = has_lo ? normal_lcdf(lo | mu[d], sigma) : negative_infinity();
        out[d] = log_diff_exp(uh, ul);
      }
    }
    return out;
  }
  vector seq_normal_kernel(vector y, vector mu, real sigma) {
    return -0.5 * log(2 * pi()) - log(sigma) - 0.5 * square((y - mu) / sigma);
  }
}
data {
  int<lower=1> n;
  int<lower=0> P;
  matrix[n, P] X;
  vector[P] xbar;
  matrix[P, P] L;
  vector[n] y;
  vector<lower=0>[n] alpha;  // alpha_i summed over identical (x, y, PSU) records
  real loc;
  real<lower=0> scale;
  int<lower=0, upper=1> has_lo;
  real lo;
  int<lower=0, upper=1> has_hi;
  real hi;
  int<lower=1> nd;
  matrix[nd, P] Xd;                        // the distinct (x, PSU) rows: predictors
  array[n] int<lower=1, upper=nd> xd;      // row i's distinct (x, PSU) row
  int<lower=1> J;                          // PSUs of the design
  array[n] int<lower=1, upper=J> g;        // row i's PSU
  array[nd] int<lower=1, upper=J> gd;      // distinct row d's PSU
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  matrix[n, P] XL = (X - rep_matrix(xbar', n)) * L;
  matrix[nd, P] XdL = (Xd - rep_matrix(xbar', nd)) * L;
  vector[nd] alpha_d = rep_vector(0, nd);
  for (i in 1:n) {
    alpha_d[xd[i]] += alpha[i];
  }
}
parameters {
  real at;
  vector[P] bt;
  real<lower=0> s;
  real<lower=0> sigma_u;
  vector[J] z_u;
}
transformed parameters {
  vector[P] b = L * bt;
  real a = at - dot_product(xbar, b);
  vector[J] u = sigma_u * z_u;
}
model {
  real sigma = scale * s;
  target += dot_product(alpha, seq_normal_kernel(y, loc + scale * (at + XL * bt + u[g]), sigma));
  if (has_lo || has_hi) {
    target += -dot_product(alpha_d, seq_normal_log_norm(loc + scale * (at + XdL * bt + u[gd]),
                                                       sigma, has_lo, lo, has_hi, hi));
  }
  a ~ normal(0, 5);
  b ~ normal(0, 2.5);
  s ~ student_t(3, 0, 2.5);
  sigma_u ~ student_t(3, 0, 1);
  z_u ~ std_normal();
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    real sigma = scale * s;
    vector[nd] lz = seq_normal_log_norm(loc + scale * (a + Xd * b + u[gd]), sigma, has_lo, lo,
                                        has_hi, hi);
    log_lik = seq_normal_kernel(y, loc + scale * (a + X * b + u[g]), sigma) - lz[xd];
  }
}
