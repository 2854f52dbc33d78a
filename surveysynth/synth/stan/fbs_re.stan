// FBS with a PSU random intercept (issue 36, D1-D4; docs/clustered_synthesis.md): the outcome
// model of FBS (seed 001 Section 2.1) for a clustered design whose weights are constant within
// PSUs. FBS's joint model of (y, log w) factors as p(log w | x) p(y | log w, x); log w is then a
// PSU-level design variable released as collected with the ids and fpc (D2), its within-PSU
// variance is 0 (the degenerate dimension: a record-level residual of log w has no density),
// so the synthesis conditions on it: record i of PSU j(i) in predictor cell c(i),
//   y_i = (Xc b)_c + (Zpsu gamma)_j + u_j + e_i,  u_j ~ N(0, sigma_u),  e_i ~ N(0, tau),
// with Zpsu the PSU-level covariates, centred: the PSU's log weight (unless log w is constant
// or a function of the cells) and the PSU's shares of the predictor cells (contextual effects:
// u is independent of x only given the PSU's composition; Mundlak 1978). u = sigma_u * z, z ~ N(0, 1) (non-centred, D3) or, with
// centred = 1, hierarchical centring: z is the PSU's level and u = z - pc'Xc b, the
// level minus the record-share average of the cell means (a shear of (b, z) with unit
// Jacobian, u ~ N(0, sigma_u) as before): the same posterior, a different sampling
// geometry (no ridge between the cell means and the mean of u), chosen from the data for
// efficiency only (docs/clustered_synthesis.md). Record i's
// likelihood is raised to alpha_i; given u it depends on the data only through its
// (cell x PSU) group g, so sum_i alpha_i log N(y_i | m_g, tau) is computed EXACTLY from
// alpha-weighted group statistics w_g, ybar_g and the centred scatter S_g (as fbs.stan does
// per cell). Priors as fbs.stan for the outcome column: b ~ MVN(0, diag(s_y) Omega diag(s_y)),
// Omega ~ LKJ(6), s_y, tau ~ half-t(3, 0, 10); sigma_u ~ half-t(3, 0, 10); gamma ~ N(0, 10).
// log_lik: the CONDITIONAL density of y_i given u_j (D4), full normalised.
functions {
  // Stan's cholesky_factor_corr constrain with its log Jacobian (as fbs.stan)
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
  matrix[C, K] Xc;
  int<lower=1> J;                       // PSUs
  int<lower=0, upper=1> centred;        // parametrization of u (sampling only)
  simplex[C] pc;                        // record shares of the cells (centring only)
  int<lower=0> P;                       // PSU-level covariates (centred)
  matrix[J, P] Zpsu;
  int<lower=1> G;                       // (cell x PSU) groups with records
  array[G] int<lower=1, upper=C> g_cell;
  array[G] int<lower=1, upper=J> g_psu;
  vector<lower=0>[G] w;                 // sum of alpha in the group
  vector[G] ybar;                       // alpha-weighted group mean (0 where w = 0)
  vector[G] S;                          // alpha-weighted centred scatter
  int<lower=0, upper=1> save_log_lik;
  array[save_log_lik ? n : 0] int<lower=1, upper=C> cell;
  array[save_log_lik ? n : 0] int<lower=1, upper=J> psu;
  vector[save_log_lik ? n : 0] y;
}
parameters {
  vector[K] b;
  vector[(K * (K - 1)) %/% 2] lb;
  vector<lower=0>[K] s_y;
  vector[P] gamma;
  real<lower=0> tau;
  real<lower=0> sigma_u;
  vector[J] z;
}
transformed parameters {
  vector[J] u = centred ? z - dot_product(pc, Xc * b) : sigma_u * z;
}
model {
  vector[J] a = u + Zpsu * gamma;
  vector[G] m = (Xc * b)[g_cell] + a[g_psu];
  matrix[K, K] L_Omega_B = chol_corr_constrain_lp(lb, K);
  L_Omega_B ~ lkj_corr_cholesky(6);
  s_y ~ student_t(3, 0, 10);
  tau ~ student_t(3, 0, 10);
  sigma_u ~ student_t(3, 0, 10);
  gamma ~ normal(0, 10);
  if (centred) u ~ normal(0, sigma_u); else z ~ std_normal();
  b ~ multi_normal_cholesky(rep_vector(0, K), diag_pre_multiply(s_y, L_Omega_B));
  target += -sum(w) * (0.5 * log(2 * pi()) + log(tau))
            - 0.5 * (sum(S) + dot_product(w, square(ybar - m))) / square(tau);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    vector[J] a = u + Zpsu * gamma;
    vector[n] mi = (Xc * b)[cell] + a[psu];
    log_lik = -0.5 * log(2 * pi()) - log(tau) - 0.5 * square((y - mi) / tau);
  }
}
