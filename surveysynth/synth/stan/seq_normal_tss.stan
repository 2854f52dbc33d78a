// Sequential synthesizer, normal family TRUNCATED to public bounds (bounded, bounded continuous,
// a positive or continuous variable with bounds), by sufficient statistics plus one truncation
// normaliser per distinct predictor row (docs/sequential.md). The same model, priors and
// weighted pseudo likelihood as seq_normal.stan (which keeps the fits that save per-record
// log_lik):
//   y_i ~ N(mu_i, sigma) truncated to (lo, hi),  mu_i = loc + scale * (a + x_i' b),
//   sigma = scale * s;  a ~ N(0, 5), b ~ N(0, 2.5), s ~ half-t(3, 0, 2.5),
//   target += sum_i alpha_i log p_i  (the full normalised density).
// The log density splits into the untruncated kernel and the normaliser, which depends on the
// predictors only:
//   sum_i alpha_i log p_i = [kernel: the weighted sums of seq_normal_ss.stan]
//                           - sum_d alpha_d log Z(x_d),
//   Z(x) = Phi((hi - mu(x)) / sigma) - Phi((lo - mu(x)) / sigma),
// d over the DISTINCT predictor rows Xd (nd rows), alpha_d the summed alphas of the rows sharing
// x_d (computed in _seq_models.py). The kernel, with z_i = (y_i - loc) / scale,
// u_i = (1, ((x_i - xbar)' L))' and beta = (at, bt')' (the sampled coordinates below):
//   -W (log(2 pi) / 2 + log(scale s)) - (q - 2 beta' h + beta' G beta) / (2 s^2),
//   W = sum alpha_i, G = sum alpha_i u_i u_i', h = sum alpha_i u_i z_i, q = sum alpha_i z_i^2.
// A gradient costs O(P^2 + nd P) instead of O(n P): exact, not an approximation (a bounded
// variable given discrete predictors has a few dozen distinct rows; with a continuous predictor
// nd = n and the cost is that of seq_normal's normaliser alone).
//
// Sampling parametrization as seq_normal.stan (exact): b = L bt, a = at - xbar' b, so
// a + x' b = at + ((x - xbar)' L) bt; the sufficient statistics are of the centred, whitened
// predictors (with xbar = 0, L = I they are seq_normal_ss's). The normaliser is
// seq_normal.stan's function, unchanged (normal_lcdf and log_diff_exp), so the two programs
// give the same log density. The per-record log densities (the Lipschitz bound) are computed in
// numpy from the draws (surveysynth/synth/_seq_models.py, normal_loglik).
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
}
data {
  int<lower=0> P;
  vector[P] xbar;                          // predictor centring (sequential: the records' means)
  matrix[P, P] L;                          // whitening: b = L bt (invertible)
  real<lower=0> W;                         // sufficient statistics of the whitened predictors
  matrix[P + 1, P + 1] G;
  vector[P + 1] h;
  real<lower=0> q;
  real loc;
  real<lower=0> scale;
  int<lower=0, upper=1> has_lo;
  real lo;
  int<lower=0, upper=1> has_hi;
  real hi;
  int<lower=1> nd;
  matrix[nd, P] Xd;                        // the distinct predictor rows
  vector<lower=0>[nd] alpha_d;             // summed alphas per distinct predictor row
}
transformed data {
  matrix[nd, P] XdL = (Xd - rep_matrix(xbar', nd)) * L;
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
  vector[P + 1] beta = append_row(at, bt);
  real rss = q - 2 * dot_product(beta, h) + quad_form_sym(G, beta);
  target += -W * (0.5 * log(2 * pi()) + log(scale * s)) - 0.5 * rss / square(s);
  target += -dot_product(alpha_d, seq_normal_log_norm(loc + scale * (at + XdL * bt), scale * s,
                                                     has_lo, lo, has_hi, hi));
  a ~ normal(0, 5);   // priors on the natural parameters (linear in at, bt: constant Jacobian)
  b ~ normal(0, 2.5);
  s ~ student_t(3, 0, 2.5);
}
