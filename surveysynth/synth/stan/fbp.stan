// FBP: risk-weighted fully Bayes model for the population (seed 001 Section 2.2; Leon-Novelo
// and Savitsky 2019). Population: y ~ N(x beta, sigma_y); pi | y ~ LN(kappa_y y + x kappa_x,
// sigma_pi). Exact sample likelihood of (y_i, pi_i), seed 001 eq. (6), raised to alpha_i.
// y_c is the outcome centred at a constant (data) in the pi model only: kappa_x absorbs
// kappa_y * centre, which removes the kappa_y / intercept posterior correlation.
functions {
  vector normal_vec(vector x, vector mu, real sigma) {
    return -0.5 * log(2 * pi()) - log(sigma) - 0.5 * square((x - mu) / sigma);
  }
  vector fbp_loglik(vector y, vector y_c, vector lpi, matrix X, vector beta, real kappa_y,
                    vector kappa_x, real sigma_y, real sigma_pi, real centre) {
    vector[rows(X)] xb = X * beta;
    vector[rows(X)] xk = X * kappa_x;
    return normal_vec(lpi, kappa_y * y_c + xk, sigma_pi) + normal_vec(y, xb, sigma_y)
           - (xk + 0.5 * square(sigma_pi) + kappa_y * (xb - centre)
              + 0.5 * square(kappa_y * sigma_y));
  }
}
data {
  int<lower=1> n;
  int<lower=1> K;
  matrix[n, K] X;
  vector[n] y;          // outcome on the modelled scale
  vector[n] lpi;        // log inclusion probability, pi = 1 / w
  real centre;          // centring constant for y in the pi model
  vector<lower=0, upper=1>[n] alpha;
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  vector[n] y_c = y - centre;
}
parameters {
  vector[K] beta;
  real kappa_y;
  vector[K] kappa_x;
  real<lower=0> sigma_y;
  real<lower=0> sigma_pi;
}
model {
  beta ~ normal(0, 10);
  kappa_y ~ normal(0, 10);
  kappa_x ~ normal(0, 10);
  sigma_y ~ cauchy(0, 1);
  sigma_pi ~ cauchy(0, 1);
  target += dot_product(alpha, fbp_loglik(y, y_c, lpi, X, beta, kappa_y, kappa_x, sigma_y,
                                          sigma_pi, centre));
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = fbp_loglik(y, y_c, lpi, X, beta, kappa_y, kappa_x, sigma_y, sigma_pi, centre);
  }
}
