// PBP: risk-weighted pseudo Bayes model for the population (seed 001 Section 2.3).
// Pseudo likelihood prod_i p(y_i, x_i | theta)^(wt_i * alpha_i), wt = survey weights normalised
// to sum to n; x_i ~ Categorical(theta) over the predictor cells, y_i | x_i ~ N(x_i beta, sigma).
// The sum over records uses exact per-cell statistics of a_i = wt_i * alpha_i: A_c = sum a_i,
// ybar_c and the centred scatter Syy_c (see fbs.stan).
// log_lik is each record's full log density log p(y_i, x_i | theta), WITHOUT wt_i; the
// mechanism's contribution of record i is wt_i * alpha_i * log_lik_i.
data {
  int<lower=1> n;
  int<lower=1> K;
  int<lower=1> C;
  matrix[C, K] Xc;
  vector<lower=0>[C] A;
  vector[C] ybar;
  vector[C] Syy;
  int<lower=0, upper=1> save_log_lik;
  array[save_log_lik ? n : 0] int<lower=1, upper=C> cell;
  vector[save_log_lik ? n : 0] y;
}
parameters {
  simplex[C] theta;
  vector[K] beta;
  real<lower=0> sigma;
}
model {
  vector[C] mu = Xc * beta;
  theta ~ dirichlet(rep_vector(1, C));
  beta ~ normal(0, 10);
  sigma ~ student_t(3, 0, 10);
  target += dot_product(A, log(theta)) - sum(A) * (0.5 * log(2 * pi()) + log(sigma))
            - 0.5 * (sum(Syy) + dot_product(A, square(ybar - mu))) / square(sigma);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    vector[C] mu = Xc * beta;
    log_lik = log(theta[cell]) - 0.5 * log(2 * pi()) - log(sigma)
              - 0.5 * square((y - mu[cell]) / sigma);
  }
}
