// Sequential synthesizer, logistic family WITH a PSU random intercept (clustered designs; issue
// 36 D3; docs/sequential.md "Clustered designs"). logit P(y_i = 1) = a + x_i' b + u_{g(i)},
// u_j = sigma_u * z_j, z_j ~ N(0, 1) (non-centred), sigma_u ~ half-t(3, 0, 1); a ~ N(0, 5),
// b ~ N(0, 2.5); g(i) the record's PSU (1..J). Risk-weighted pseudo likelihood
// target += alpha_i * log p_i, log p_i = y_i eta_i - log(1 + exp(eta_i)) given u (D4).
// Rows are the distinct (x, y, PSU) patterns with summed alphas (exact). Centred, whitened
// (a, b) as seq_logistic.stan.
data {
  int<lower=1> n;
  int<lower=0> P;
  matrix[n, P] X;
  vector[P] xbar;
  matrix[P, P] L;
  array[n] int<lower=0, upper=1> y;
  vector<lower=0>[n] alpha;
  int<lower=1> J;
  array[n] int<lower=1, upper=J> g;
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  matrix[n, P] XL = (X - rep_matrix(xbar', n)) * L;
  vector[n] yv = to_vector(y);
  vector[n] ay = alpha .* yv;
  real say = sum(ay);
  vector[P] XLay = XL' * ay;
  vector[J] Jay = rep_vector(0, J);        // sum of alpha_i y_i per PSU
  for (i in 1:n) {
    Jay[g[i]] += ay[i];
  }
}
parameters {
  real at;
  vector[P] bt;
  real<lower=0> sigma_u;
  vector[J] z_u;
}
transformed parameters {
  vector[P] b = L * bt;
  real a = at - dot_product(xbar, b);
  vector[J] u = sigma_u * z_u;
}
model {
  target += at * say + dot_product(XLay, bt) + dot_product(Jay, u)
            - dot_product(alpha, log1p_exp(at + XL * bt + u[g]));
  a ~ normal(0, 5);
  b ~ normal(0, 2.5);
  sigma_u ~ student_t(3, 0, 1);
  z_u ~ std_normal();
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    vector[n] eta = a + X * b + u[g];
    log_lik = yv .* eta - log1p_exp(eta);
  }
}
