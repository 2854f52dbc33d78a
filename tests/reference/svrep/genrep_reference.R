# Reference numbers from svrep 0.9.0 (on R survey 4.1.1, Debian's) for the generalized
# bootstrap (as_gen_boot_design) and Fay's generalized replication (as_fays_gen_rep_design):
# the quadratic forms of the variance estimators (get_design_quad_form, deterministic) and the
# SEs of designs whose replicate variance equals the quadratic form exactly
# (as_gen_boot_design(exact_vcov = TRUE), as_fays_gen_rep_design), so they are deterministic
# although svrep's factors are random. Regenerate (svrep built as in sdr_reference.R):
#   R_LIBS=/tmp/rlib_svrep Rscript tests/reference/svrep/genrep_reference.R
suppressMessages({library(survey); library(svrep)})
stopifnot(packageVersion("svrep") == "0.9.0")
out_dir <- "tests/reference/svrep"
data(api)
q <- function(expr) suppressMessages(suppressWarnings(expr))
lib <- read.csv(file.path(out_dir, "library_stsys_sample.csv"))
set.seed(2024)
small_strat <- apistrat[sort(sample(nrow(apistrat), 40)), ]
small_clus2 <- subset(apiclus2, dnum %in% c(15, 63, 83, 132, 135, 152, 173, 197))
designs <- list(
  strat = svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = small_strat),
  clus2 = svydesign(id = ~dnum + snum, fpc = ~fpc1 + fpc2, data = small_clus2),
  clus1 = svydesign(id = ~dnum, weights = ~pw, data = apiclus1)
)
estimators <- list(strat = c("Ultimate Cluster", "Stratified Multistage SRS", "SD1", "SD2"),
                   clus2 = c("Ultimate Cluster", "Stratified Multistage SRS", "SD1", "SD2"),
                   clus1 = c("Ultimate Cluster", "SD1", "SD2"))
ses <- function(rd) c(SE(svytotal(~enroll, rd)), SE(svymean(~api00, rd)),
                      SE(svyratio(~api00, ~api99, rd)))
out <- list(R_version = R.version.string,
            survey_version = as.character(packageVersion("survey")),
            svrep_version = as.character(packageVersion("svrep")),
            small_strat_snum = small_strat$snum, small_clus2_dnum = c(15, 63, 83, 132, 135, 152, 173, 197))
for (d in names(designs)) for (v in estimators[[d]]) {
  key <- paste(d, v)
  Q <- as.matrix(q(get_design_quad_form(designs[[d]], v)))
  # Q over the rows of the design (not svrep's compressed units); clus1's 183 x 183 is not
  # stored (its total SEs are)
  gb <- q(as_gen_boot_design(designs[[d]], variance_estimator = v, replicates = 200,
                             exact_vcov = TRUE))
  fg <- q(as_fays_gen_rep_design(designs[[d]], variance_estimator = v))
  out[[key]] <- list(Q = if (d == "clus1") NULL else unname(Q), gen_boot_se = unname(ses(gb)), gen_boot_scale = gb$scale,
                     fay_se = unname(ses(fg)), fay_replicates = ncol(weights(fg, "replication")),
                     fay_scale = fg$scale, fay_mse = fg$mse,
                     gen_boot_mean_factor = mean(weights(gb, "replication")))
}
# svrep's man-page example: SD2 on the stratified systematic library sample
d_lib <- svydesign(data = lib, strata = ~SAMPLING_STRATUM, ids = ~1, fpc = ~STRATUM_POP_SIZE)
gb_lib <- q(as_gen_boot_design(d_lib, variance_estimator = "SD2", replicates = 180,
                               exact_vcov = TRUE))
out$lib_sd2_total_se <- unname(SE(svytotal(~TOTSTAFF, gb_lib, na.rm = TRUE)))
# the linearization SEs the exact designs must reproduce
out$linearization_se <- lapply(designs, function(d) unname(ses(d)))
# tau = "auto" on a design where N(1, Q) gives negative factors
set.seed(5)
gb_auto <- q(as_gen_boot_design(designs$clus1, variance_estimator = "Ultimate Cluster",
                                replicates = 50, tau = "auto"))
out$tau_auto <- list(tau = gb_auto$tau, scale = gb_auto$scale,
                     min_factor = min(weights(gb_auto, "replication")))
writeLines(jsonlite::toJSON(out, digits = NA, auto_unbox = TRUE),
           file.path(out_dir, "genrep_reference.json"))
