// FBS: risk-weighted fully Bayes model for the observed sample (seed 001 Section 2.1).
// (z1, z2) = (outcome, log weight) on the modelled scale ~ MVN_2(x_i B, Sigma), each record's
// likelihood raised to alpha_i. Priors: seed 000 supplement Appendix C.
functions {
  // full normalised bivariate normal log density of every row of Z (no dropped constants)
  vector bvn_loglik(matrix Z, matrix Mu, vector tau, real rho) {
    int n = rows(Z);
    vector[n] u1 = (col(Z, 1) - col(Mu, 1)) / tau[1];
    vector[n] u2 = (col(Z, 2) - col(Mu, 2)) / tau[2];
    real omr2 = 1 - square(rho);
    return -log(2 * pi()) - log(tau[1]) - log(tau[2]) - 0.5 * log(omr2)
           - (square(u1) - 2 * rho * (u1 .* u2) + square(u2)) / (2 * omr2);
  }
}
data {
  int<lower=1> n;
  int<lower=1> K;
  matrix[n, K] X;
  matrix[n, 2] Z;
  vector<lower=0, upper=1>[n] alpha;
  int<lower=0, upper=1> save_log_lik;
}
parameters {
  matrix[K, 2] B;                    // columns: beta_y, beta_w
  cholesky_factor_corr[K] L_Omega_B;
  vector<lower=0>[K] s_y;
  vector<lower=0>[K] s_w;
  cholesky_factor_corr[2] L_Omega_S;
  vector<lower=0>[2] tau;
}
transformed parameters {
  real rho = L_Omega_S[2, 1];
}
model {
  L_Omega_B ~ lkj_corr_cholesky(6);
  L_Omega_S ~ lkj_corr_cholesky(6);
  s_y ~ student_t(3, 0, 10);
  s_w ~ student_t(3, 0, 10);
  tau ~ student_t(3, 0, 10);
  col(B, 1) ~ multi_normal_cholesky(rep_vector(0, K), diag_pre_multiply(s_y, L_Omega_B));
  col(B, 2) ~ multi_normal_cholesky(rep_vector(0, K), diag_pre_multiply(s_w, L_Omega_B));
  target += dot_product(alpha, bvn_loglik(Z, X * B, tau, rho));
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    log_lik = bvn_loglik(Z, X * B, tau, rho);
  }
}
