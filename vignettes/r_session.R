# An R user's session with surveysynth (runnable: Rscript vignettes/r_session.R).
#
# Setup, once: install the Python package (make test, or pip install surveysynth) and this R
# package (R CMD INSTALL r_bridge/rpkg); tell reticulate which Python has surveysynth, e.g.
#   Sys.setenv(RETICULATE_PYTHON = "/path/to/venv/bin/python")
suppressMessages(library(survey))
library(surveysynth)
data(api)

# 1. A design as usual in R ...
dstrat <- svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)

# 2. ... becomes a surveysynth design (Python), read from the svydesign object itself
sd <- ss_design(dstrat)
print(sd)

# 3. Any estimator by name, answers as data.frames (printed like svymean)
m <- ss_estimate(sd, "mean", ~api00 + enroll)
print(m)
print(svymean(~api00 + enroll, dstrat))          # R survey: the same numbers
stopifnot(isTRUE(all.equal(coef(m), coef(svymean(~api00 + enroll, dstrat)), tolerance = 1e-9)))

by_type <- ss_estimate(sd, "mean", ~api00, by = ~stype)
print(as.data.frame(by_type))                    # a plain data.frame: stype is a factor
ss_estimate(sd, "ratio", ~api00, denominator = ~api99)
ss_estimate(sd, "quantile", ~api00, quantiles = c(0.25, 0.5, 0.75))
ss_estimate(sd, "proportion", ~awards, by = ~stype)

# Arguments follow R spelling: na.rm = TRUE is Python's na_rm=True
dclus2 <- svydesign(id = ~dnum + snum, fpc = ~fpc1 + fpc2, data = apiclus2)
ss_estimate(dclus2, "total", ~enroll, na.rm = TRUE)   # a survey design is converted on the fly

# Errors from Python arrive as R errors with their message
msg <- tryCatch(ss_estimate(sd, "mean", ~api0), error = conditionMessage)
cat("Error caught:", substr(msg, 1, 120), "...\n")

# 4. Replicate designs too: scale, rscales, type and mse are read from the object
set.seed(1)
rclus1 <- suppressWarnings(as.svrepdesign(svydesign(id = ~dnum, weights = ~pw, fpc = ~fpc,
                                                    data = apiclus1), type = "JK1"))
rd <- ss_design(rclus1)
print(rd)
print(ss_estimate(rd, "total", ~enroll))
print(svytotal(~enroll, rclus1))

# 5. Back to survey objects: identical results
back <- as_svydesign(sd)
print(back)
stopifnot(isTRUE(all.equal(SE(svytotal(~enroll, back)), SE(svytotal(~enroll, dstrat)),
                           tolerance = 1e-12)))
rback <- as_svydesign(rd)
stopifnot(isTRUE(all.equal(SE(svymean(~api00, rback)), SE(svymean(~api00, rclus1)),
                           tolerance = 1e-12)))

# 6. A design straight from a data.frame, and data.frames through pandas and back
sd2 <- ss_design(apiclus1, ids = ~dnum, weights = ~pw, fpc = ~fpc)
print(ss_estimate(sd2, "mean", ~api00))
df <- data.frame(g = factor(c("b", NA, "a"), levels = c("b", "a")), n = c(1L, NA, 3L))
stopifnot(identical(ss_from_pandas(ss_to_pandas(df)), df))

# 7. Replicate designs made from R designs, and published tables (data.frames)
jk <- ss_replicate(dstrat, "jackknife")          # JKn, as as.svrepdesign(type = "JKn")
print(ss_estimate(jk, "mean", ~api00, by = "~stype"))   # formula strings work too
tab <- ss_tabulate(dstrat, rows = ~stype, cols = ~awards)
print(tab)                                       # the published layout
print(ss_table_wide(tab, "se"))                  # one statistic as a grid
ss_write_table(tab, file.path(tempdir(), "schools.csv"), title = "Schools by type and awards")

# 8. Differentially private tables with Laplace noise (the budget and the guarantee come back)
lap <- ss_laplace_tables(dstrat, rows = ~awards, cols = ~sch.wide, value = ~api00, epsilon = 2)
print(lap$counts)
cat("Laplace tables:", lap$privacy$guarantee, "\n")

# 9. A private synthetic release from R: settings as the Python class takes them
syn <- ss_synthesizer("quantile", variables = c("api00", "api99"),
                      bounds = list(api00 = c(200, 1000), api99 = c(200, 1000)),
                      C_X = list(api99 = 1000), epsilon = 5, m = 3, n_iter = 200,
                      progress = FALSE)           # random_state = NULL: secret OS entropy
rel <- ss_release(ss_fit(syn, dstrat))
print(rel)
print(ss_release_estimate(rel, "mean", ~api00 + api99))   # combining rule applied
p <- ss_privacy(rel)
cat("epsilon:", p$epsilon, "\nguarantee:", p$guarantee_text, "\n")
syn_designs <- ss_release_designs(rel)           # m survey.design2 objects
print(svymean(~api00, syn_designs[[1]]))
# The Stan synthesizers take the same route, e.g.
#   ss_synthesizer("FBS", outcome = "salary", predictors = c("field", "gender"),
#                  target_lipschitz = 3.4, m = 3, population_size = 1e5)
# and a whole release from a config file: ss_release_pipeline("release.toml")

# 10. After library(surveysynth), plain reticulate calls return data.frames
ss_py <- reticulate::import("surveysynth")
pdes <- ss_py$SurveyDesign(ss_to_pandas(apistrat), strata = "stype", weights = "pw", fpc = "fpc")
print(class(pdes$mean("api00")))                 # "data.frame"
cat("r_session vignette: done\n")
