// FBS: risk-weighted fully Bayes model for the observed sample (seed 001 Section 2.1).
// z_i = (outcome, log weight) on the modelled scale ~ MVN_2(x_i B, Sigma); record i's likelihood
// is raised to alpha_i. Priors: seed 000 supplement, Appendix C.
//
// Every record's mean depends only on its predictor cell c (categorical predictors), so
// sum_i alpha_i log MVN(z_i | x_c B, Sigma) is computed EXACTLY from alpha-weighted per-cell
// statistics: w_c = sum alpha_i, zbar_c = sum alpha_i z_i / w_c and the centred scatter
// S_c = sum alpha_i (z_i - zbar_c)(z_i - zbar_c)', using
// sum alpha_i (z_i - mu)(z_i - mu)' = S_c + w_c (zbar_c - mu)(zbar_c - mu)'.
// Per-record full normalised log densities are in generated quantities (log_lik).
//
// Output size: the correlation Cholesky factors are built in the model block from their
// unconstrained values with Stan's own cholesky_factor_corr transform and Jacobian (written
// out below), so each draw carries K(K-1)/2 + 1 correlation values instead of K^2 + 4. The
// unconstrained parameter vector, the target density and the sampler's geometry are exactly
// those of declaring `cholesky_factor_corr[K] L_Omega_B; cholesky_factor_corr[2] L_Omega_S;`
// (tests/test_pseudo_posterior.py compares log densities with that declaration). Writing,
// compressing and parsing the K x K factor was ~35% of a fit's wall time.
functions {
  // quadratic form v' Sigma^{-1} v for Sigma = [t1^2, r t1 t2; r t1 t2, t2^2], row-wise
  vector quad2(vector a11, vector a12, vector a22, vector tau, real rho) {
    return (a11 / square(tau[1]) - 2 * rho * a12 / (tau[1] * tau[2]) + a22 / square(tau[2]))
           / (1 - square(rho));
  }
  real bvn_const(vector tau, real rho) {
    return -log(2 * pi()) - log(tau[1]) - log(tau[2]) - 0.5 * log1m(square(rho));
  }
  // Stan's cholesky_factor_corr constrain (Reference Manual, "Cholesky factors of correlation
  // matrices"): z = tanh(y) are canonical partial correlations filled row by row; adds the
  // log Jacobian of y -> L to target.
  matrix chol_corr_constrain_lp(vector y, int K) {
    matrix[K, K] L = rep_matrix(0, K, K);
    vector[num_elements(y)] z = tanh(y);
    int k = 1;
    target += sum(log1m(square(z)));
    L[1, 1] = 1;
    for (i in 2:K) {
      real sum_sqs = square(z[k]);
      L[i, 1] = z[k];
      k += 1;
      for (j in 2:(i - 1)) {
        target += 0.5 * log1m(sum_sqs);
        L[i, j] = z[k] * sqrt(1 - sum_sqs);
        k += 1;
        sum_sqs += square(L[i, j]);
      }
      L[i, i] = sqrt(1 - sum_sqs);
    }
    return L;
  }
}
data {
  int<lower=1> n;
  int<lower=1> K;                       // coefficients
  int<lower=1> C;                       // predictor cells
  matrix[C, K] Xc;                      // design row of each cell
  vector<lower=0>[C] w;                 // sum of alpha in the cell
  matrix[C, 2] zbar;                    // alpha-weighted cell means (0 where w = 0)
  vector[C] S11;                        // alpha-weighted centred scatter
  vector[C] S12;
  vector[C] S22;
  int<lower=0, upper=1> save_log_lik;
  array[save_log_lik ? n : 0] int<lower=1, upper=C> cell;
  matrix[save_log_lik ? n : 0, 2] Z;
}
parameters {
  matrix[K, 2] B;                       // columns: beta_y, beta_w
  vector[(K * (K - 1)) %/% 2] lb;       // unconstrained values of the K x K correlation factor
  vector<lower=0>[K] s_y;
  vector<lower=0>[K] s_w;
  real rs;                              // unconstrained value of the 2 x 2 correlation factor
  vector<lower=0>[2] tau;
}
transformed parameters {
  real rho = tanh(rs);
}
model {
  matrix[C, 2] D = zbar - Xc * B;
  matrix[K, K] L_Omega_B = chol_corr_constrain_lp(lb, K);
  matrix[2, 2] L_Omega_S = chol_corr_constrain_lp([rs]', 2);
  L_Omega_B ~ lkj_corr_cholesky(6);
  L_Omega_S ~ lkj_corr_cholesky(6);
  s_y ~ student_t(3, 0, 10);
  s_w ~ student_t(3, 0, 10);
  tau ~ student_t(3, 0, 10);
  col(B, 1) ~ multi_normal_cholesky(rep_vector(0, K), diag_pre_multiply(s_y, L_Omega_B));
  col(B, 2) ~ multi_normal_cholesky(rep_vector(0, K), diag_pre_multiply(s_w, L_Omega_B));
  target += sum(w) * bvn_const(tau, rho)
            - 0.5 * (sum(quad2(S11, S12, S22, tau, rho))
                     + dot_product(w, quad2(col(D, 1) .* col(D, 1), col(D, 1) .* col(D, 2),
                                            col(D, 2) .* col(D, 2), tau, rho)));
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    matrix[C, 2] M = Xc * B;
    vector[n] u1 = col(Z, 1) - col(M, 1)[cell];
    vector[n] u2 = col(Z, 2) - col(M, 2)[cell];
    log_lik = bvn_const(tau, rho) - 0.5 * quad2(u1 .* u1, u1 .* u2, u2 .* u2, tau, rho);
  }
}
