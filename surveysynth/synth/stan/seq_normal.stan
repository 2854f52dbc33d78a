// Sequential synthesizer, normal family (docs/sequential.md): continuous (normal), positive
// (normal on log y) and bounded / bounded continuous (normal truncated to public bounds), and the
// model of log weights. Risk-weighted pseudo likelihood: target += alpha_i * log p_i, where
// log p_i is the FULL normalised density on the modelled scale, truncation normaliser included.
//   y_i ~ N(mu_i, sigma) [truncated to (lo, hi)],  mu_i = loc + scale * (a + x_i' b),
//   sigma = scale * s;  priors a ~ N(0, 5), b ~ N(0, 2.5), s ~ half-t(3, 0, 2.5)
// (weakly informative on the standardised scale: x standardised, y centred by loc, scaled by
// scale). Untruncated fits without log_lik use seq_normal_ss.stan (sufficient statistics).
//
// Sampling parametrization (exact): the predictors are centred and whitened, b = L bt and
// a = at - xbar' b with xbar, L data (sequential.py: the records' predictor means and the
// inverse square root of their covariance), so a + x' b = at + ((x - xbar)' L) bt. A linear
// change of variables leaves the posterior of (a, b) unchanged (constant Jacobian; the priors
// are on a and b), but the sampler sees nearly uncorrelated coordinates: correlated predictors
// otherwise make NUTS take many more leapfrog steps per draw. seq_negbin, seq_logistic,
// seq_ordinal and seq_categorical do the same.
//
// The truncation normaliser log Z(x) = log(Phi((hi - mu) / sigma) - Phi((lo - mu) / sigma))
// depends on a record's predictors only, so it is computed once per DISTINCT predictor row
// (Xd, nd rows; xd maps each row of X to its row of Xd) and weighted by the summed alphas of
// the rows sharing it: sum_i alpha_i log Z(x_i) = sum_d (sum_{i: x_i = x_d} alpha_i) log Z(x_d).
// A bounded variable given discrete predictors needs a few dozen normal_lcdf pairs per gradient
// instead of one pair per row (exact; the per-row log_lik below indexes the same values).
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
  vector[P] xbar;                          // predictor centring (sequential: the records' means)
  matrix[P, P] L;                          // whitening: b = L bt (invertible)
  vector[n] y;
  vector<lower=0>[n] alpha;  // alpha_i summed over identical records (sequential.py)
  real loc;
  real<lower=0> scale;
  int<lower=0, upper=1> has_lo;
  real lo;
  int<lower=0, upper=1> has_hi;
  real hi;
  int<lower=1> nd;
  matrix[nd, P] Xd;                        // the distinct rows of X
  array[n] int<lower=1, upper=nd> xd;      // X[i] = Xd[xd[i]]
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  matrix[n, P] XL = (X - rep_matrix(xbar', n)) * L;
  matrix[nd, P] XdL = (Xd - rep_matrix(xbar', nd)) * L;
  vector[nd] alpha_d = rep_vector(0, nd);  // summed alphas per distinct predictor row
  for (i in 1:n) {
    alpha_d[xd[i]] += alpha[i];
  }
}
parameters {
  real at;
  vector[P] bt;
  real<lower=0> s;
}
transformed parameters {
  vector[P] b = L * bt;
  real a = at - dot_product(xbar, b);
}
model {
  real sigma = scale * s;
  target += dot_product(alpha, seq_normal_kernel(y, loc + scale * (at + XL * bt), sigma));
  if (has_lo || has_hi) {
    target += -dot_product(alpha_d, seq_normal_log_norm(loc + scale * (at + XdL * bt), sigma,
                                                       has_lo, lo, has_hi, hi));
  }
  a ~ normal(0, 5);   // priors on the natural parameters (linear in at, bt: constant Jacobian)
  b ~ normal(0, 2.5);
  s ~ student_t(3, 0, 2.5);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    real sigma = scale * s;
    vector[nd] lz = seq_normal_log_norm(loc + scale * (a + Xd * b), sigma, has_lo, lo, has_hi,
                                        hi);
    log_lik = seq_normal_kernel(y, loc + scale * (a + X * b), sigma) - lz[xd];
  }
}
