suppressMessages(library(survey))
data(api)

skip_if_no_python <- function() {
  if (!reticulate::py_module_available("surveysynth")) skip("Python surveysynth not available")
}

designs <- list(
  apistrat = quote(svydesign(id = ~1, strata = ~stype, weights = ~pw, fpc = ~fpc, data = apistrat)),
  apiclus1 = quote(svydesign(id = ~dnum, weights = ~pw, fpc = ~fpc, data = apiclus1)),
  apiclus2 = quote(svydesign(id = ~dnum + snum, fpc = ~fpc1 + fpc2, data = apiclus2))
)

est <- function(d) {
  m <- svymean(~api00 + api99, d); t <- svytotal(~api00 + api99, d)
  c(coef(m), SE(m), coef(t), SE(t))
}

test_that("data.frames with factors and NA survive R -> pandas -> R column by column", {
  skip_if_no_python()
  df <- data.frame(
    x = c(1.5, NA, -2, 1e300), n = c(1L, NA, 3L, .Machine$integer.max),
    l = c(TRUE, NA, FALSE, TRUE), s = c("a", NA, "b", "NA"),
    f = factor(c("z", NA, "y", "z"), levels = c("z", "y", "w")),
    o = factor(c("lo", "hi", "hi", NA), levels = c("lo", "hi"), ordered = TRUE),
    d = as.Date(c("2001-02-03", NA, "1960-01-01", "2024-02-29")),
    t = as.POSIXct(c("2020-01-01 10:00:01", NA, "1969-12-31 23:59:59", "2021-06-01 00:00:00"),
                   tz = "UTC"),
    stringsAsFactors = FALSE)
  back <- ss_from_pandas(ss_to_pandas(df))
  expect_identical(names(back), names(df))
  for (n in names(df)) expect_identical(back[[n]], df[[n]], label = n)
  # the Python side sees what a pandas user expects
  pdf <- ss_to_pandas(df)
  dt <- reticulate::py_eval("lambda d: [str(t) for t in d.dtypes]")(pdf)
  expect_identical(unlist(dt)[1:6], c("float64", "Int64", "boolean", "str", "category",
                                      "category"))
})

test_that("svydesign -> Python -> svydesign gives identical svymean/svytotal", {
  skip_if_no_python()
  for (nm in names(designs)) {
    d <- eval(designs[[nm]])
    py <- ss_design(d)
    back <- as_svydesign(py)
    expect_equal(est(back), est(d), tolerance = 1e-12, label = nm)
    m <- ss_estimate(py, "mean", ~api00 + api99)
    expect_equal(unname(coef(m)), unname(coef(svymean(~api00 + api99, d))), tolerance = 1e-9)
    expect_equal(unname(SE(m)), unname(SE(svymean(~api00 + api99, d))), tolerance = 1e-9)
  }
})

test_that("replicate designs round trip with their scales", {
  skip_if_no_python()
  set.seed(3)
  for (r in suppressWarnings(list(as.svrepdesign(eval(designs$apiclus1), type = "JK1"),
                 suppressWarnings(as.svrepdesign(eval(designs$apiclus2), type = "mrbbootstrap",
                                                 replicates = 30)),
                 as.svrepdesign(eval(designs$apistrat), type = "Fay", fay.rho = 0.3)))) {
    py <- ss_design(r)
    back <- as_svydesign(py)
    expect_s3_class(back, "svyrep.design")
    expect_equal(back$scale, r$scale)
    expect_identical(back$type, r$type)
    expect_equal(est(back), est(r), tolerance = 1e-12)
    expect_equal(unname(SE(ss_estimate(py, "total", ~api00))),
                 unname(SE(svytotal(~api00, r))), tolerance = 1e-9)
  }
})

test_that("ss_estimate calls any estimator, with by, ratio, quantile and na.rm", {
  skip_if_no_python()
  d <- eval(designs$apistrat)
  by <- ss_estimate(d, "mean", ~api00, by = ~stype)
  ref <- svyby(~api00, ~stype, d, svymean)
  expect_s3_class(by, "data.frame")
  expect_identical(levels(by$stype), levels(apistrat$stype))
  expect_equal(by$estimate, unname(coef(ref)), tolerance = 1e-9)
  expect_equal(by$se, unname(SE(ref)), tolerance = 1e-9)
  r <- ss_estimate(d, "ratio", ~api00, denominator = ~api99)
  expect_equal(r$estimate, unname(coef(svyratio(~api00, ~api99, d))), tolerance = 1e-9)
  q <- ss_estimate(d, "quantile", ~api00, quantiles = c(0.25, 0.5))
  rq <- svyquantile(~api00, d, quantiles = c(0.25, 0.5), ci = TRUE)
  expect_equal(q$estimate, unname(coef(rq)), tolerance = 1e-9)
  expect_equal(q$se, unname(SE(rq)), tolerance = 1e-9)
  dc2 <- eval(designs$apiclus2)
  tot <- ss_estimate(dc2, "total", ~enroll, na.rm = TRUE)
  expect_equal(tot$se, as.numeric(SE(svytotal(~enroll, dc2, na.rm = TRUE))), tolerance = 1e-9)
  p <- ss_estimate(d, "proportion", ~awards)
  expect_equal(p$estimate, unname(coef(svymean(~awards, d))), tolerance = 1e-9)
})

test_that("printing reads like R survey", {
  skip_if_no_python()
  py <- ss_design(eval(designs$apistrat))
  expect_output(print(py), "Stratified Independent Sampling design")
  m <- ss_estimate(py, "mean", ~api00)
  expect_output(print(m), "mean +SE")
  expect_output(print(m), "api00 +662\\.29 +9\\.4089")
  # the same text as R's own print of svymean
  expect_identical(capture.output(print(m)),
                   capture.output(print(svymean(~api00, eval(designs$apistrat)))))
  expect_named(coef(m), "api00")
  expect_identical(colnames(confint(m)), c("2.5 %", "97.5 %"))
  expect_identical(dim(py), c(200L, ncol(apistrat)))
})

test_that("Python errors surface as R errors with their message", {
  skip_if_no_python()
  d <- eval(designs$apistrat)
  expect_error(ss_estimate(d, "mean", ~no_such_column), "no_such_column")
  expect_error(ss_estimate(d, "mean", ~api00, by = ~acs.k3), "missing values")
  expect_error(ss_design(subset(d, stype == "E")), "subset")
  expect_error(ss_design(d[apistrat$api00 > 700, ]), "subset")
  expect_error(ss_design(42), "needs a survey design")
})

test_that("a data.frame builds a design directly", {
  skip_if_no_python()
  py <- ss_design(apiclus1, ids = ~dnum, weights = ~pw, fpc = ~fpc)
  m <- ss_estimate(py, "mean", ~api00)
  expect_equal(m$se, as.numeric(SE(svymean(~api00, eval(designs$apiclus1)))), tolerance = 1e-9)
})

test_that("estimates by domains print in svyby's layout, the same text as R's svyby", {
  skip_if_no_python()
  d <- eval(designs$apistrat)
  same <- function(ours, r) expect_identical(capture.output(print(ours)), capture.output(print(r)))
  same(ss_estimate(d, "mean", ~api00, by = ~stype), svyby(~api00, ~stype, d, svymean))
  same(ss_estimate(d, "mean", ~api00 + api99, by = ~stype),
       svyby(~api00 + api99, ~stype, d, svymean))
  same(ss_estimate(d, "total", ~api00, by = ~stype + awards, deff = TRUE),
       svyby(~api00, ~stype + awards, d, svytotal, deff = TRUE))
  same(ss_estimate(d, "proportion", ~awards, by = ~stype), svyby(~awards, ~stype, d, svymean))
  same(ss_estimate(d, "ratio", ~api00, denominator = ~api99, by = ~stype),
       svyby(~api00, ~stype, d, svyratio, denominator = ~api99))
  same(ss_estimate(d, "quantile", ~api00, quantiles = c(0.25, 0.5), by = ~stype),
       svyby(~api00, ~stype, d, svyquantile, quantiles = c(0.25, 0.5)))
  # coef() names as svyby's (in the data.frame's row order: domain by domain)
  expect_setequal(names(coef(ss_estimate(d, "mean", ~api00 + api99, by = ~stype))),
                  names(coef(svyby(~api00 + api99, ~stype, d, svymean))))
})

test_that("row numbers in errors are R's (1-based)", {
  skip_if_no_python()
  d <- eval(designs$apistrat)
  na <- which(is.na(apistrat$acs.k3))
  msg <- tryCatch(ss_estimate(d, "mean", ~api00, by = ~acs.k3), error = conditionMessage)
  expect_match(msg, paste0("rows ", paste(na[1:5], collapse = ", "), " and ",
                           length(na) - 5, " more"), fixed = TRUE)
  bad <- apiclus1
  bad$fpc[c(3, 7)] <- 0.5  # fractions among population sizes, R rows 3 and 7
  msg <- tryCatch(ss_design(bad, ids = ~dnum, weights = ~pw, fpc = ~fpc), error = conditionMessage)
  expect_match(msg, "rows [3, 7] values < 1", fixed = TRUE)
  # the conversion itself: lists, brackets, a single row, and counts left alone
  expect_identical(surveysynth:::.one_based_rows("in rows 0, 9 and 3 more; row 4; rows [2]"),
                   "in rows 1, 10 and 3 more; row 5; rows [3]")
  expect_identical(surveysynth:::.one_based_rows("5 rows have NA"), "5 rows have NA")
})

test_that("an unknown estimator name is refused with the valid ones", {
  skip_if_no_python()
  d <- eval(designs$apistrat)
  valid <- "one of \"mean\", \"total\", \"ratio\", \"proportion\", \"quantile\""
  expect_error(ss_estimate(d, "meen", ~api00), valid, fixed = TRUE)
  expect_error(ss_estimate(d, "subset", ~api00), valid, fixed = TRUE)  # a method, not an estimator
  expect_error(ss_estimate(d, "svymean", ~api00), "R's svymean is \"mean\"", fixed = TRUE)
  expect_error(ss_estimate(d, "median", ~api00), "\"quantile\" with quantiles = 0.5",
               fixed = TRUE)
})

test_that("every exported function has an installed help page", {
  for (f in getNamespaceExports("surveysynth")) {
    expect_length(utils::help(f, package = "surveysynth"), 1L)
  }
  rd <- tools::Rd_db("surveysynth")
  expect_true("ss_design.Rd" %in% names(rd))
})
