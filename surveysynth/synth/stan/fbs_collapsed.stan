// FBS with the coefficients integrated out: the same posterior as fbs.stan, sampled in the
// hyperparameters (correlation factors, scales, tau, rho) alone; B is drawn exactly from its
// Gaussian conditional in generated quantities.
//
// Why: with main effects (an intercept and small contrasts) each contrast has its own
// half-t scale informed by one coefficient, and the centred joint posterior of (B, s) is a
// funnel where a contrast is near zero (fbs.stan: R-hat 1.1-1.4, 19-123 divergences of 1000 at
// Delta_alpha = 1.8 on the SDR design). Given (s_y, s_w, Omega_B, Sigma) the pseudo
// likelihood is Gaussian in vec(B) and so is the prior, so B integrates out in closed form:
//   vec(B) ~ N(0, U U'),  U = blockdiag(diag(s_y) L, diag(s_w) L),  Omega_B = L L'
//   loglik(B) = c0 - 0.5 vec(B)' P vec(B) + vec(B)' h,
//   P = Sigma^{-1} (x) A,  A = Xc' diag(w) Xc,  h = vec(G Sigma^{-1}),  G = Xc' diag(w) zbar,
//   c0 = sum(w) log N-const - 0.5 tr(Sigma^{-1} T),  T = sum_i alpha_i z_i z_i'
//   log int = c0 - log|L_M| + 0.5 |v|^2,  M = I + U' P U = L_M L_M',  v = L_M^{-1} U' h
// (M >= I, so the form stays well conditioned as scales go to zero). Conditional draw:
// vec(B) = U L_M^{-T} (v + e), e ~ N(0, I). Data, priors and outputs are those of fbs.stan;
// tests/test_pseudo_posterior.py checks the marginal against prior x likelihood / conditional
// at arbitrary B (computed in numpy) and the two programs' posteriors against each other.
functions {
  vector quad2(vector a11, vector a12, vector a22, vector tau, real rho) {
    return (a11 / square(tau[1]) - 2 * rho * a12 / (tau[1] * tau[2]) + a22 / square(tau[2]))
           / (1 - square(rho));
  }
  real bvn_const(vector tau, real rho) {
    return -log(2 * pi()) - log(tau[1]) - log(tau[2]) - 0.5 * log1m(square(rho));
  }
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
  // the same factor without the Jacobian (generated quantities)
  matrix chol_corr_constrain(vector y, int K) {
    matrix[K, K] L = rep_matrix(0, K, K);
    vector[num_elements(y)] z = tanh(y);
    int k = 1;
    L[1, 1] = 1;
    for (i in 2:K) {
      real sum_sqs = square(z[k]);
      L[i, 1] = z[k];
      k += 1;
      for (j in 2:(i - 1)) {
        L[i, j] = z[k] * sqrt(1 - sum_sqs);
        k += 1;
        sum_sqs += square(L[i, j]);
      }
      L[i, i] = sqrt(1 - sum_sqs);
    }
    return L;
  }
  // Sigma^{-1} entries (11, 12, 22)
  vector sigma_inv(vector tau, real rho) {
    real d = 1 - square(rho);
    return [1 / (square(tau[1]) * d), -rho / (tau[1] * tau[2] * d), 1 / (square(tau[2]) * d)]';
  }
  // [L_M | U'h] for the Gaussian integral over vec(B): columns 1..2K are L_M, column 2K+1 U'h
  matrix collapse(matrix A, matrix G, matrix L, vector s_y, vector s_w, vector si) {
    int K = rows(A);
    matrix[K, K] Ly = diag_pre_multiply(s_y, L);
    matrix[K, K] Lw = diag_pre_multiply(s_w, L);
    matrix[K, K] ALy = A * Ly;
    matrix[K, K] ALw = A * Lw;
    matrix[2 * K, 2 * K] M;
    matrix[2 * K, 2 * K + 1] out;
    vector[K] h1 = si[1] * col(G, 1) + si[2] * col(G, 2);
    vector[K] h2 = si[2] * col(G, 1) + si[3] * col(G, 2);
    M[1:K, 1:K] = si[1] * (Ly' * ALy);
    M[1:K, (K + 1):(2 * K)] = si[2] * (Ly' * ALw);
    M[(K + 1):(2 * K), 1:K] = M[1:K, (K + 1):(2 * K)]';
    M[(K + 1):(2 * K), (K + 1):(2 * K)] = si[3] * (Lw' * ALw);
    out[:, 1:(2 * K)] = cholesky_decompose(add_diag(0.5 * (M + M'), 1));
    out[1:K, 2 * K + 1] = Ly' * h1;
    out[(K + 1):(2 * K), 2 * K + 1] = Lw' * h2;
    return out;
  }
}
data {
  int<lower=1> n;
  int<lower=1> K;
  int<lower=1> C;
  matrix[C, K] Xc;
  vector<lower=0>[C] w;
  matrix[C, 2] zbar;
  vector[C] S11;
  vector[C] S12;
  vector[C] S22;
  int<lower=0, upper=1> save_log_lik;
  array[save_log_lik ? n : 0] int<lower=1, upper=C> cell;
  matrix[save_log_lik ? n : 0, 2] Z;
}
transformed data {
  matrix[K, K] A = crossprod(diag_pre_multiply(sqrt(w), Xc));
  matrix[K, 2] G = Xc' * diag_pre_multiply(w, zbar);
  real sw = sum(w);
  vector[1] T11 = [sum(S11) + dot_product(w, col(zbar, 1) .* col(zbar, 1))]';
  vector[1] T12 = [sum(S12) + dot_product(w, col(zbar, 1) .* col(zbar, 2))]';
  vector[1] T22 = [sum(S22) + dot_product(w, col(zbar, 2) .* col(zbar, 2))]';
}
parameters {
  vector[(K * (K - 1)) %/% 2] lb;
  vector<lower=0>[K] s_y;
  vector<lower=0>[K] s_w;
  real rs;
  vector<lower=0>[2] tau;
}
transformed parameters {
  real rho = tanh(rs);
}
model {
  matrix[K, K] L_Omega_B = chol_corr_constrain_lp(lb, K);
  matrix[2, 2] L_Omega_S = chol_corr_constrain_lp([rs]', 2);
  matrix[2 * K, 2 * K + 1] LMh = collapse(A, G, L_Omega_B, s_y, s_w,
                                          sigma_inv(tau, rho));
  vector[2 * K] v = mdivide_left_tri_low(LMh[:, 1:(2 * K)], col(LMh, 2 * K + 1));
  L_Omega_B ~ lkj_corr_cholesky(6);
  L_Omega_S ~ lkj_corr_cholesky(6);
  s_y ~ student_t(3, 0, 10);
  s_w ~ student_t(3, 0, 10);
  tau ~ student_t(3, 0, 10);
  target += sw * bvn_const(tau, rho) - 0.5 * sum(quad2(T11, T12, T22, tau, rho))
            - sum(log(diagonal(LMh[:, 1:(2 * K)]))) + 0.5 * dot_self(v);
}
generated quantities {
  matrix[K, 2] B;
  vector[save_log_lik ? n : 0] log_lik;
  {
    matrix[K, K] L = chol_corr_constrain(lb, K);
    matrix[2 * K, 2 * K + 1] LMh = collapse(A, G, L, s_y, s_w, sigma_inv(tau, rho));
    matrix[2 * K, 2 * K] LM = LMh[:, 1:(2 * K)];
    vector[2 * K] v = mdivide_left_tri_low(LM, col(LMh, 2 * K + 1));
    vector[2 * K] e;
    vector[2 * K] u;
    for (j in 1:(2 * K)) {
      e[j] = std_normal_rng();
    }
    u = mdivide_right_tri_low((v + e)', LM)';
    B[:, 1] = diag_pre_multiply(s_y, L) * u[1:K];
    B[:, 2] = diag_pre_multiply(s_w, L) * u[(K + 1):(2 * K)];
  }
  if (save_log_lik) {
    matrix[C, 2] Mu = Xc * B;
    vector[n] u1 = col(Z, 1) - col(Mu, 1)[cell];
    vector[n] u2 = col(Z, 2) - col(Mu, 2)[cell];
    log_lik = bvn_const(tau, rho) - 0.5 * quad2(u1 .* u1, u1 .* u2, u2 .* u2, tau, rho);
  }
}
