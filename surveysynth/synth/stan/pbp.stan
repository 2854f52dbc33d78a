// PBP: risk-weighted pseudo Bayes model for the population (seed 001 Section 2.3).
// Pseudo likelihood prod_i p(y_i, x_i | theta)^(wt_i * alpha_i), wt normalised to sum to n;
// x_i ~ Categorical(theta) over the predictor cells, y_i | x_i ~ N(x_i beta, sigma).
// log_lik is the record's full log density log p(y_i, x_i | theta) WITHOUT wt_i.
functions {
  vector pbp_loglik(vector y, array[] int cell, matrix X, vector theta, vector beta,
                    real sigma) {
    return log(theta[cell]) - 0.5 * log(2 * pi()) - log(sigma)
           - 0.5 * square((y - X * beta) / sigma);
  }
}
data {
  int<lower=1> n;
  int<lower=1> K;                       // number of cells = columns of X
  matrix[n, K] X;
  array[n] int<lower=1, upper=K> cell;
  vector[n] y;
  vector<lower=0>[n] wt;                // survey weights normalised to sum to n
  vector<lower=0, upper=1>[n] alpha;
  int<lower=0, upper=1> save_log_lik;
}
transformed data {
  vector[n] a = alpha .* wt;
}
parameters {
  simplex[K] theta;
  vector[K] beta;
  real<lower=0> sigma;
}
model {
  theta ~ dirichlet(rep_vector(1, K));
  beta ~ normal(0, 10);
  sigma ~ student_t(3, 0, 10);
  target += dot_product(a, pbp_loglik(y, cell, X, theta, beta, sigma));
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = pbp_loglik(y, cell, X, theta, beta, sigma);
  }
}
