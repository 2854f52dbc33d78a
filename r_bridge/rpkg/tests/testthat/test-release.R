suppressMessages(library(survey))
data(api)

skip_if_no_python <- function() {
  if (!reticulate::py_module_available("surveysynth")) skip("Python surveysynth not available")
}

dstrat <- function() svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)

# the combining rules, written here from the papers (not read from the package):
# partial (Reiter 2003) T = ubar + b/m; full (Raghunathan, Reiter & Rubin 2003)
# T = (1 + 1/m) b - ubar, at least ubar (n_syn/n + (1 + n_syn/n)/m) (Raab, Nowok & Dibben
# 2016; issue 36) with n = n_syn
combine_r <- function(q, u, kind) {
  m <- nrow(q); qbar <- colMeans(q); ubar <- colMeans(u); b <- apply(q, 2, var)
  T <- if (kind == "partial") ubar + b / m else (1 + 1 / m) * b - ubar
  if (kind == "full") T <- pmax(T, ubar * (1 + 2 / m))
  list(estimate = qbar, se = sqrt(T), between = b, within = ubar)
}

test_that("plain reticulate calls return data.frames once the package is loaded", {
  skip_if_no_python()
  pd <- reticulate::import("pandas", convert = FALSE)
  x <- pd$DataFrame(reticulate::dict(a = c(1.5, 2.5), s = c("u", "v")))
  expect_true("pandas.DataFrame" %in% class(x))           # pandas 3's class name
  df <- reticulate::py_to_r(x)
  expect_identical(df, data.frame(a = c(1.5, 2.5), s = c("u", "v")))
  # a converting module: the estimator's answer arrives as a data.frame, NA kept
  ss <- reticulate::import("surveysynth")
  pdes <- ss$SurveyDesign(ss_to_pandas(apistrat), strata = "stype", weights = "pw", fpc = "fpc")
  r <- pdes$mean("api00", by = "stype")
  expect_s3_class(r, "data.frame")
  ref <- svyby(~api00, ~stype, dstrat(), svymean)
  expect_equal(r$estimate, unname(coef(ref)), tolerance = 1e-9)
  expect_equal(r$se, unname(SE(ref)), tolerance = 1e-9)
  na <- reticulate::py_eval(paste0("__import__('pandas').DataFrame({'n': __import__('pandas')",
                                   ".array([1, None], dtype='Int64'), 'c': ['a', None]})"),
                            convert = FALSE)
  expect_identical(reticulate::py_to_r(na), data.frame(n = c(1L, NA), c = c("a", NA)))
  ser <- reticulate::py_eval("__import__('pandas').Series([1.0, 2.0], name='x')", convert = FALSE)
  expect_identical(reticulate::py_to_r(ser), data.frame(x = c(1, 2)))
})

test_that("R spelling: na.rm = TRUE in messages, formula strings as by=", {
  skip_if_no_python()
  d <- svydesign(id = ~dnum + snum, fpc = ~fpc1 + fpc2, data = apiclus2)
  msg <- tryCatch(ss_estimate(d, "total", ~enroll), error = conditionMessage)
  expect_match(msg, "na.rm = TRUE", fixed = TRUE)
  expect_false(grepl("na_rm", msg) || grepl("True", msg) || grepl("Detailed traceback", msg))
  ref <- svyby(~api00, ~stype, d, svymean)
  for (by in list(~stype, "~stype", "stype")) {
    e <- ss_estimate(d, "mean", "~api00", by = by)
    expect_equal(e$se, unname(SE(ref)), tolerance = 1e-9)
  }
  e2 <- ss_estimate(d, "ratio", ~api00, denominator = "~api99", by = "~stype + awards")
  ref2 <- svyby(~api00, ~stype + awards, d, svyratio, denominator = ~api99)
  expect_equal(e2$estimate, unname(coef(ref2)), tolerance = 1e-9)
  expect_equal(e2$se, unname(SE(ref2)), tolerance = 1e-9)
  sd <- ss_design(apiclus2, ids = "~dnum + snum", fpc = c("fpc1", "fpc2"))
  expect_equal(ss_estimate(sd, "mean", ~api00)$se, as.numeric(SE(svymean(~api00, d))),
               tolerance = 1e-9)
})

test_that("replicate designs from R: jackknife equals R's JKn, BRR equals R's brr", {
  skip_if_no_python()
  d <- dstrat()
  jk <- ss_replicate(d, "jackknife")
  rjk <- as.svrepdesign(d, type = "JKn")
  expect_equal(ss_estimate(jk, "mean", ~api00 + enroll)$se,
               unname(SE(svymean(~api00 + enroll, rjk))), tolerance = 1e-9)
  back <- as_svydesign(jk)
  expect_s3_class(back, "svyrep.design")
  expect_equal(SE(svytotal(~enroll, back)), SE(svytotal(~enroll, rjk)), tolerance = 1e-9,
               ignore_attr = TRUE)
  b1 <- ss_replicate(d, "bootstrap", replicates = 40, seed = 5)
  b2 <- ss_replicate(d, "bootstrap", replicates = 40, seed = 5)
  expect_identical(ss_estimate(b1, "mean", ~api00)$se, ss_estimate(b2, "mean", ~api00)$se)
  expect_identical(ncol(as_svydesign(b1)$repweights), 40L)
})

test_that("ss_tabulate: cells, margins and SEs equal svyby totals", {
  skip_if_no_python()
  d <- dstrat()
  tab <- ss_tabulate(d, rows = ~stype, cols = "~awards")
  expect_s3_class(tab, "data.frame")
  int <- tab[tab$cell == "interior", ]
  ref <- svyby(~one, ~stype + awards, update(d, one = 1), svytotal)
  key <- paste(int$stype, int$awards)
  rkey <- paste(ref$stype, ref$awards)
  expect_setequal(key, rkey)
  expect_equal(int$estimate[match(rkey, key)], unname(coef(ref)), tolerance = 1e-9)
  expect_equal(int$se[match(rkey, key)], unname(SE(ref)), tolerance = 1e-9)
  tot <- tab[tab$cell == "grand total", ]
  expect_equal(tot$estimate, sum(weights(d)), tolerance = 1e-9)
  means <- ss_tabulate(d, rows = ~stype, value = ~api00, stat = "mean")
  rm <- svyby(~api00, ~stype, d, svymean)
  expect_equal(means$se[means$cell == "interior"], unname(SE(rm)), tolerance = 1e-9)
  w <- ss_table_wide(tab)
  expect_identical(names(w)[1], "stype")
  expect_equal(w$All[w$stype == "All"], sum(weights(d)), tolerance = 1e-9)
  f <- tempfile(fileext = ".csv")
  ss_write_table(tab, f, title = "Schools")
  expect_true(any(grepl("Schools", readLines(f))))
  d2 <- svydesign(id = ~dnum + snum, fpc = ~fpc1 + fpc2, data = apiclus2)
  expect_error(ss_tabulate(d2, rows = ~stype, value = ~enroll), "na.rm = TRUE")
  t2 <- ss_tabulate(d2, rows = ~stype, value = ~enroll, na.rm = TRUE)
  r2 <- svyby(~enroll, ~stype, d2, svytotal, na.rm = TRUE)
  expect_equal(t2$se[t2$cell == "interior"], unname(SE(r2)), tolerance = 1e-9)
})

test_that("ss_laplace_tables: the budget split, noise added, the record's epsilon", {
  skip_if_no_python()
  d <- dstrat()
  # cells that cut across the strata (weights vary within each cell)
  lap <- ss_laplace_tables(d, rows = ~awards, cols = ~sch.wide, value = ~api00, epsilon = 2,
                           seed = 1)
  # 2 tables x 4 cells per record (interior, row and column margins, total): eps / (2 * 8)
  expect_equal(lap$budget$eps_point, 2 / 16)
  expect_equal(lap$budget$eps_replicate, 2 / 16 / 10)
  expect_identical(lap$privacy$epsilon, 2)
  expect_identical(lap$privacy$family, "laplace")
  exact <- ss_tabulate(d, rows = ~awards, cols = ~sch.wide)
  expect_identical(nrow(lap$counts), nrow(exact))
  expect_true(all(lap$counts$estimate != exact$estimate))    # noise was added to every cell
  expect_s3_class(lap$sensitivity, "data.frame")
})

kng <- function(...) {
  ss_synthesizer("quantile", variables = c("visits", "salary"), epsilon = 5, m = 3,
                 population_size = 1e5, bounds = list(visits = c(0, 60), salary = c(0, 5e5)),
                 C_X = list(visits = 1, salary = 60), quantiles = c(0.1, 0.25, 0.5, 0.75, 0.9),
                 n_iter = 150, progress = FALSE, ...)
}

test_that("a KNG release from R: survey designs out, the full-synthesis rule, the record", {
  skip_if_no_python()
  data <- reticulate::import("surveysynth.release_config")$example_data()
  expect_s3_class(data, "data.frame")
  # quantile synthesis runs within strata and needs weights constant within each (issue 36,
  # D7): the example's PPS weights vary within fields, so each field gets its mean weight
  data$w <- ave(data$weight, data$field)
  des <- svydesign(ids = ~1, strata = ~field, weights = ~w, data = data)
  syn <- ss_fit(kng(random_state = 11, method = "stepwise"), des)   # m = 3 is not `method`
  rel <- ss_release(syn)
  designs <- ss_release_designs(rel)
  expect_length(designs, 3L)
  for (d in designs) {
    expect_s3_class(d, "survey.design2")
    expect_identical(nrow(d$variables), nrow(data))
    expect_equal(sum(weights(d)), 1e5, tolerance = 1e-9)    # population_size
  }
  est <- ss_release_estimate(rel, "mean", ~salary + visits)
  q <- t(sapply(designs, function(d) coef(svymean(~salary + visits, d))))
  u <- t(sapply(designs, function(d) SE(svymean(~salary + visits, d))^2))
  ref <- combine_r(q, u, "full")
  expect_equal(est$estimate, unname(ref$estimate), tolerance = 1e-9)
  expect_equal(est$se, unname(ref$se), tolerance = 1e-9)
  expect_equal(est$between, unname(ref$between), tolerance = 1e-9)
  expect_equal(est$within, unname(ref$within), tolerance = 1e-9)
  # printed with its df and CI (issue 37)
  expect_output(print(est), "mean +SE +df +2\\.5 % +97\\.5 %")
  expect_s3_class(est, "ss_release_estimate")
  shown <- capture.output(print(est))
  row <- strsplit(trimws(shown[2]), " +")[[1]]
  expect_identical(row[1], "salary")
  expect_equal(as.numeric(row[-1]), signif(unlist(est[1, c("estimate", "se", "df", "ci_low",
                                                           "ci_high")]), 6), ignore_attr = TRUE)
  # by domains: a row per domain with the domain as a column (no "E:salary" row names)
  eb <- structure(data.frame(field = c("a", "b"), variable = "salary", estimate = c(1, 2),
                             se = 0.5, df = c(1.5, 30), ci_low = 0, ci_high = 3,
                             note = NA_character_),
                  class = c("ss_release_estimate", "ss_estimate", "data.frame"),
                  statistic = "mean", level = 0.9)
  shown <- capture.output(print(eb))
  expect_match(shown[1], "^ *field +salary +SE +df +5 % +95 %$")
  expect_match(shown[2], "^ *a +1 +0.5 +1.5 +0 +3$")
  expect_match(shown[3], "^ *b +2 +0.5 +30.0 +0 +3$")
  expect_length(shown, 3L)
  # ss_estimate on a release is the same call
  expect_identical(ss_estimate(rel, "mean", ~salary)$se, est$se[1])
  tab <- ss_tabulate(rel, rows = ~visits)
  int <- tab[tab$cell == "interior", ]
  qt <- t(sapply(designs, function(d) {
    v <- factor(d$variables$visits, levels = int$visits)
    coef(svytotal(~v, update(d, v = v)))
  }))
  expect_equal(int$estimate, unname(colMeans(qt)), tolerance = 1e-9)
  p <- ss_privacy(rel)
  expect_identical(p$epsilon, 5)
  expect_identical(p$m, 3L)
  expect_identical(p$family, "kng")
  expect_true(p$seeded)
  expect_true(nzchar(p$guarantee_text))
  expect_false("random_state" %in% names(p$facts))          # the seed is never in the record
  # seeded: the same release again
  rel2 <- ss_release(ss_fit(kng(random_state = 11, method = "stepwise"), des))
  expect_identical(ss_release_estimate(rel2, "mean", ~salary)$estimate, est$estimate[1])
  f <- tempfile()
  ss_save_release(rel, f)
  back <- ss_load_release(file.path(f, "public"))
  expect_equal(ss_release_estimate(back, "mean", ~salary)$estimate, est$estimate[1],
               tolerance = 1e-12)
})

test_that("synthesizer errors are R errors that say what to do", {
  skip_if_no_python()
  expect_error(ss_synthesizer("magic"), "is not a synthesizer")
  # settings go through the one validator at once, named as in Python; whole numbers are
  # integers where the constraint table counts
  expect_error(ss_synthesizer("FBS", outcome = "salary", chains = 0), "chains=0 is not valid")
  expect_error(ss_synthesizer("mixture", outcome = "salary", transform = "sqrt"),
               "transform must be one of")
  expect_error(ss_synthesizer("FBS", outcome = "salary", target_epsilon = 1,
                              target_lipschitz = 1), "not both")
  expect_s3_class(ss_synthesizer("nb", outcome = "visits", chains = 2, draws = 100),
                  "ss_synthesizer")
  expect_error(ss_release(kng()), "fit")
  expect_error(ss_release_designs(42), "ss_release")
  expect_error(ss_release_pipeline("no-such.toml"), "config")
})

test_that("the release pipeline from R writes a release that loads back", {
  skip_if_no_python()
  rc <- reticulate::import("surveysynth.release_config")
  dir <- tempfile("pipeline"); dir.create(dir)
  write.csv(rc$example_data(), file.path(dir, "example.csv"), row.names = FALSE)
  cfg <- rc$example_config("quantile")
  cfg <- sub("n_iter = [0-9]+", "n_iter = 100", cfg)
  writeLines(cfg, file.path(dir, "release.toml"))
  out <- ss_release_pipeline(file.path(dir, "release.toml"), quiet = TRUE)
  expect_true(file.exists(file.path(out, "public", "manifest.json")))
  rel <- ss_load_release(file.path(out, "public", "synthetic"))
  p <- ss_privacy(rel)
  expect_identical(p$epsilon, 5)
  expect_identical(p$m, 3L)
  expect_s3_class(ss_release_designs(rel)[[1]], "survey.design2")
})
