# Reference numbers from svrep 0.9.0 (built from the cran/svrep mirror, tag "version 0.9.0", on
# R survey 4.1.1, Debian's) for successive-difference replication (as_sdr_design) and its
# helpers. SDR factors are deterministic given the sort order, so the Python factors are tested
# against these to 1e-12. Regenerate:
#   git -C /work/.mirror/cran+svrep/repo archive HEAD | tar -x -C /tmp/svrep-src
#   R CMD INSTALL -l /tmp/rlib_svrep /tmp/svrep-src
#   R_LIBS=/tmp/rlib_svrep Rscript tests/reference/svrep/sdr_reference.R
# It writes tests/reference/svrep/sdr_reference.json and library_stsys_sample.csv (the columns
# of svrep's example data used by the tests).
suppressMessages({library(survey); library(svrep)})
stopifnot(packageVersion("svrep") == "0.9.0")
# svrep's as_sdr_design sorts with base R's sort_by(), which it back-fills on R < 4.4 with a
# copy that calls base's internal .formula2varlist (R >= 4.4 only). On R 4.2 give it R 4.4's
# meaning (the variables of a one-sided formula evaluated in the data), found from svrep's
# namespace through the global environment:
if (!exists(".formula2varlist", baseenv()))
  .formula2varlist <- function(formula, data, ...)
    eval(attr(terms(formula), "variables"), data, environment(formula))
out_dir <- "tests/reference/svrep"
data(api)
data("library_stsys_sample", package = "svrep")
lib <- as.data.frame(library_stsys_sample)[, c("SAMPLING_STRATUM", "SAMPLING_SORT_ORDER",
                                               "STRATUM_POP_SIZE", "TOTSTAFF", "TOTCIR",
                                               "VISITS")]
lib <- data.frame(lapply(lib, function(x) { attributes(x) <- NULL; x }))
lib <- lib[order(lib$SAMPLING_SORT_ORDER), ]
rownames(lib) <- NULL
write.csv(lib, file.path(out_dir, "library_stsys_sample.csv"), row.names = FALSE)

rep_out <- function(rd, formula, ncol_factors = Inf) {
  tt <- svytotal(formula, rd, na.rm = TRUE)
  mm <- svymean(formula, rd, na.rm = TRUE)
  f <- unname(as.matrix(weights(rd, "replication")))
  list(factors = f[, seq_len(min(ncol(f), ncol_factors)), drop = FALSE], replicates = ncol(f),
       scale = rd$scale, rscales = rd$rscales, mse = rd$mse, type = rd$type,
       total = unname(coef(tt)), total_se = unname(SE(tt)),
       mean = unname(coef(mm)), mean_se = unname(SE(mm)))
}
q <- function(expr) suppressMessages(suppressWarnings(expr))

# svrep's man-page example (stratified systematic sample of libraries)
d_lib <- svydesign(data = lib, strata = ~SAMPLING_STRATUM, ids = ~1, fpc = ~STRATUM_POP_SIZE)
lib_normal <- q(as_sdr_design(d_lib, replicates = 180, sort_variable = "SAMPLING_SORT_ORDER",
                              use_normal_hadamard = TRUE))
lib_default <- q(as_sdr_design(d_lib, replicates = 180, sort_variable = "SAMPLING_SORT_ORDER"))
# the same rows shuffled: the factors follow the sort variable, not the data order
set.seed(3)
shuf <- sample(nrow(lib))
d_lib_shuf <- svydesign(data = lib[shuf, ], strata = ~SAMPLING_STRATUM, ids = ~1,
                        fpc = ~STRATUM_POP_SIZE)
lib_shuf <- q(as_sdr_design(d_lib_shuf, replicates = 20, sort_variable = "SAMPLING_SORT_ORDER"))

dstrat <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)
dclus2 <- svydesign(id = ~dnum + snum, fpc = ~fpc1 + fpc2, data = apiclus2)
dsrs <- svydesign(id = ~1, weights = ~pw, data = apisrs)
dclus1 <- svydesign(id = ~dnum, weights = ~pw, data = apiclus1)

H179 <- survey:::hadamard(179)
out <- list(
  R_version = R.version.string,
  survey_version = as.character(packageVersion("survey")),
  svrep_version = as.character(packageVersion("svrep")),
  make_sdr_n4_default = unname(q(make_sdr_replicate_factors(4, 4, use_normal_hadamard = FALSE))),
  make_sdr_n4_normal = unname(q(make_sdr_replicate_factors(4, 4, use_normal_hadamard = TRUE))),
  make_sdr_n7_r8 = unname(q(make_sdr_replicate_factors(7, 8))),
  make_sdr_n50_r8 = unname(q(make_sdr_replicate_factors(50, 8))),
  make_sdr_n37_r16 = unname(q(make_sdr_replicate_factors(37, 16))),
  hadamard_179 = apply(H179, 1, paste, collapse = ""),
  lib_normal = rep_out(lib_normal, ~TOTSTAFF + VISITS, ncol_factors = 12),
  lib_default = rep_out(lib_default, ~TOTSTAFF + VISITS, ncol_factors = 12),
  lib_shuffled = c(rep_out(lib_shuf, ~TOTSTAFF), list(rows = shuf)),
  apistrat_snum = rep_out(q(as_sdr_design(dstrat, replicates = 20, sort_variable = "snum")),
                          ~api00 + enroll),
  apiclus2_snum = rep_out(q(as_sdr_design(dclus2, replicates = 50, sort_variable = "snum")),
                          ~api00 + enroll),
  apisrs_api99 = rep_out(q(as_sdr_design(dsrs, replicates = 250, sort_variable = "api99")),
                         ~api00, ncol_factors = 12),
  apiclus1_dnum = rep_out(q(as_sdr_design(dclus1, replicates = 8, sort_variable = "dnum",
                                          mse = FALSE)), ~api00)
)
writeLines(jsonlite::toJSON(out, digits = NA, auto_unbox = TRUE),
           file.path(out_dir, "sdr_reference.json"))
