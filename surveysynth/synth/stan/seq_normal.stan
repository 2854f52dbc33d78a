// Sequential synthesizer, normal family (docs/sequential.md): continuous (normal), positive
// (normal on log y) and bounded / bounded continuous (normal truncated to public bounds), and the
// model of log weights. Risk-weighted pseudo likelihood: target += alpha_i * log p_i, where
// log p_i is the FULL normalised density on the modelled scale, truncation normaliser included.
//   y_i ~ N(mu_i, sigma) [truncated to (lo, hi)],  mu_i = loc + scale * (a + x_i' b),
//   sigma = scale * s;  priors a ~ N(0, 5), b ~ N(0, 2.5), s ~ half-t(3, 0, 2.5)
// (weakly informative on the standardised scale: x standardised, y centred by loc, scaled by
// scale).
functions {
  vector seq_normal_ll(vector y, vector mu, real sigma, int has_lo, real lo, int has_hi,
                       real hi) {
    int n = num_elements(y);
    vector[n] ll = -0.5 * log(2 * pi()) - log(sigma) - 0.5 * square((y - mu) / sigma);
    if (has_lo || has_hi) {
      for (i in 1:n) {
        real uh = has_hi ? normal_lcdf(hi | mu[i], sigma) : 0;
        real ul = has_lo ? normal_lcdf(lo | mu[i], sigma) : negative_infinity();
        ll[i] -= log_diff_exp(uh, ul);
      }
    }
    return ll;
  }
}
data {
  int<lower=1> n;
  int<lower=0> P;
  matrix[n, P] X;
  vector[n] y;
  vector<lower=0>[n] alpha;  // alpha_i summed over identical records (sequential.py)
  real loc;
  real<lower=0> scale;
  int<lower=0, upper=1> has_lo;
  real lo;
  int<lower=0, upper=1> has_hi;
  real hi;
  int<lower=0, upper=1> save_log_lik;
}
parameters {
  real a;
  vector[P] b;
  real<lower=0> s;
}
model {
  vector[n] mu = loc + scale * (a + X * b);
  target += dot_product(alpha, seq_normal_ll(y, mu, scale * s, has_lo, lo, has_hi, hi));
  a ~ normal(0, 5);
  b ~ normal(0, 2.5);
  s ~ student_t(3, 0, 2.5);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = seq_normal_ll(y, loc + scale * (a + X * b), scale * s, has_lo, lo, has_hi, hi);
  }
}
