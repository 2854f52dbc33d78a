// Sequential synthesizer, normal family WITHOUT truncation (continuous, positive on log y, the
// log-weights model), by sufficient statistics (docs/sequential.md). The same model, priors and
// weighted pseudo likelihood as seq_normal.stan with has_lo = has_hi = 0:
//   y_i ~ N(loc + scale * (a + x_i' b), scale * s),  target += sum_i alpha_i log p_i,
// computed exactly from weighted sums instead of record by record. With z_i = (y_i - loc) / scale,
// u_i = (1, x_i')' and beta = (a, b')':
//   sum_i alpha_i log p_i = -W (log(2 pi) / 2 + log(scale s)) - (q - 2 beta' h + beta' G beta) / (2 s^2),
//   W = sum alpha_i, G = sum alpha_i u_i u_i', h = sum alpha_i u_i z_i, q = sum alpha_i z_i^2
// (z standardised, so the expanded square loses no precision that matters). A gradient costs
// O(P^2) instead of O(n P). The per-record log densities (the Lipschitz bound) are computed in
// numpy from the draws (surveysynth/synth/_seq_models.py), so nothing per record is needed here.
data {
  int<lower=0> P;
  real<lower=0> W;
  matrix[P + 1, P + 1] G;
  vector[P + 1] h;
  real<lower=0> q;
  real<lower=0> scale;
}
parameters {
  real a;
  vector[P] b;
  real<lower=0> s;
}
model {
  vector[P + 1] beta = append_row(a, b);
  real rss = q - 2 * dot_product(beta, h) + quad_form_sym(G, beta);
  target += -W * (0.5 * log(2 * pi()) + log(scale * s)) - 0.5 * rss / square(s);
  a ~ normal(0, 5);
  b ~ normal(0, 2.5);
  s ~ student_t(3, 0, 2.5);
}
