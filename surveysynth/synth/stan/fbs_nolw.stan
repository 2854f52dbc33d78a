// FBS when log w is a function of the predictor cells (docs/pseudo_posterior.md, "FBS with
// cell-constant weights"). FBS's joint model of (y, log w) factors as p(log w | x) p(y | log w, x);
// when log w is constant within every cell its within-cell variance is 0 (tau_w -> 0: the
// density is unbounded and the sampler cannot mix; measured on apistrat by stype: R-hat 4.0 for
// B and lb), and given x, log w carries no information about y. This is fbs.stan's outcome
// column alone, exactly as fbs_re.stan without its PSU terms: y_i ~ N((Xc b)_c(i), tau), with
// fbs.stan's priors for that column: b ~ MVN(0, diag(s_y) Omega diag(s_y)), Omega ~ LKJ(6),
// s_y ~ half-t(3, 0, 10), tau ~ half-t(3, 0, 10). Record i's likelihood is raised to alpha_i,
// summed EXACTLY from alpha-weighted per-cell statistics (w_c, ybar_c, centred scatter Syy_c).
// log_lik: each record's full normalised log density log N(y_i | (Xc b)_c(i), tau).
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
  int<lower=1> K;
  int<lower=1> C;
  matrix[C, K] Xc;
  vector<lower=0>[C] w;
  vector[C] ybar;
  vector[C] Syy;
  int<lower=0, upper=1> save_log_lik;
  array[save_log_lik ? n : 0] int<lower=1, upper=C> cell;
  vector[save_log_lik ? n : 0] y;       // outcome on the modelled scale
}
parameters {
  vector[K] b;
  vector[(K * (K - 1)) %/% 2] lb;
  vector<lower=0>[K] s_y;
  real<lower=0> tau;
}
model {
  vector[C] mu = Xc * b;
  matrix[K, K] L_Omega_B = chol_corr_constrain_lp(lb, K);
  L_Omega_B ~ lkj_corr_cholesky(6);
  s_y ~ student_t(3, 0, 10);
  tau ~ student_t(3, 0, 10);
  b ~ multi_normal_cholesky(rep_vector(0, K), diag_pre_multiply(s_y, L_Omega_B));
  target += -sum(w) * (0.5 * log(2 * pi()) + log(tau))
            - 0.5 * (sum(Syy) + dot_product(w, square(ybar - mu))) / square(tau);
}
generated quantities {
  vector[save_log_lik ? n : 0] log_lik;
  if (save_log_lik) {
    vector[C] mu = Xc * b;
    log_lik = -0.5 * log(2 * pi()) - log(tau) - 0.5 * square((y - mu[cell]) / tau);
  }
}
