# The R <-> Python plumbing shared by every function of the package: R-spelled arguments,
# Python errors as R errors in R spelling, and pandas DataFrames as data.frames for plain
# reticulate calls (reticulate 1.28 knows pandas only as "pandas.core.frame.DataFrame", while
# pandas 3 objects carry the class "pandas.DataFrame").

# Python code the R side needs: make any pandas frame portable to a data.frame (index kept as
# columns, MultiIndex columns flattened, object columns of mixed values typed).
.PY_HELPERS <- "
def portable(df):
    import pandas as _pd
    if isinstance(df, _pd.Series):
        df = df.to_frame(name=df.name if df.name is not None else 'value')
    df = df.copy(deep=False)
    if isinstance(df.columns, _pd.MultiIndex):
        df.columns = ['.'.join(str(p) for p in c) for c in df.columns]
    else:
        df.columns = [str(c) for c in df.columns]
    plain = isinstance(df.index, _pd.RangeIndex) and df.index.name is None and \\
        df.index.start == 0 and df.index.step == 1
    if not plain:
        names = [n if n is not None else ('index' if df.index.nlevels == 1 else f'level_{i}')
                 for i, n in enumerate(df.index.names)]
        df.index = df.index.set_names(names)
        df = df.reset_index()
        df.columns = [str(c) for c in df.columns]
    for c in df.columns:
        s = df[c]
        if s.dtype != object:
            continue
        kind = _pd.api.types.infer_dtype(s, skipna=True)
        if kind in ('string', 'empty'):
            continue
        if kind == 'boolean':
            df[c] = s.astype('boolean')
        elif kind == 'integer':
            df[c] = s.astype('Int64')
        elif kind in ('floating', 'mixed-integer-float', 'decimal'):
            df[c] = s.astype('Float64')
        else:
            df[c] = s.map(lambda v: v if v is None or (isinstance(v, float) and v != v)
                          else str(v)).astype('str')
    return df
"

.helpers <- function() {
  if (is.null(.ss$helpers)) {
    env <- reticulate::py_run_string(.PY_HELPERS, local = TRUE, convert = FALSE)
    .ss$helpers <- list(portable = reticulate::py_get_item(env, "portable"))
  }
  .ss$helpers
}

# Python's spelling in error messages -> R's: na_rm=True -> na.rm = TRUE, and row numbers
# counted from 1 as R counts
.r_spelling <- function(msg) {
  msg <- sub("\n+Detailed traceback:.*$", "", msg)
  msg <- sub("^Error in py_call_impl\\([^)]*\\) *:\\s*", "", msg)
  msg <- trimws(msg)
  msg <- .one_based_rows(msg)
  msg <- gsub("\\bna_rm\\b", "na.rm", msg, perl = TRUE)
  msg <- gsub("\\b([A-Za-z][A-Za-z0-9_.]*) ?= ?True\\b", "\\1 = TRUE", msg, perl = TRUE)
  msg <- gsub("\\b([A-Za-z][A-Za-z0-9_.]*) ?= ?False\\b", "\\1 = FALSE", msg, perl = TRUE)
  msg <- gsub("\\b([A-Za-z][A-Za-z0-9_.]*) ?= ?None\\b", "\\1 = NULL", msg, perl = TRUE)
  msg
}

# Python's messages name rows by the pandas index: 0-based positions for every frame that
# comes from R (ss_to_pandas gives a default index). "rows 0, 4 and 3 more", "rows [0, 4]"
# and "row 7" become R's row numbers: "rows 1, 5 and 3 more", "rows [1, 5]", "row 8".
.one_based_rows <- function(msg) {
  re <- "\\b(rows?) (\\[?)([0-9]+(, [0-9]+)*)"
  hits <- gregexpr(re, msg, perl = TRUE)
  found <- regmatches(msg, hits)[[1]]
  if (!length(found)) return(msg)
  regmatches(msg, hits) <- list(vapply(found, function(h) {
    p <- regmatches(h, regexec("^(rows?) (\\[?)(.*)$", h))[[1]]
    nums <- as.numeric(strsplit(p[4], ", ", fixed = TRUE)[[1]]) + 1
    paste0(p[2], " ", p[3], paste(format(nums, scientific = FALSE, trim = TRUE),
                                  collapse = ", "))
  }, ""))
  msg
}

# run Python; its errors become R errors with R spelling (and no Python traceback)
.py <- function(expr) {
  tryCatch(expr, error = function(e) stop(.r_spelling(conditionMessage(e)), call. = FALSE))
}

# column names from a formula (~a + b), a formula string ("~a+b") or a character vector
.vars <- function(x, arg = "x") {
  if (is.null(x)) return(NULL)
  if (is.character(x) && length(x) == 1L && grepl("^\\s*~", x)) x <- stats::as.formula(x)
  if (inherits(x, "formula")) {
    v <- all.vars(x)
    if (!length(v)) stop(arg, ": the formula names no column.", call. = FALSE)
    return(v)
  }
  if (is.character(x)) return(x)
  if (is.factor(x)) return(as.character(x))
  stop(arg, ": give a formula (~a + b), a formula string (\"~a + b\") or column names ",
       "(c(\"a\", \"b\")), not a ", class(x)[1], ".", call. = FALSE)
}

# one column -> a Python str, several -> a Python list
.py_names <- function(x, arg) {
  v <- .vars(x, arg)
  if (is.null(v)) NULL else if (length(v) == 1L) v else as.list(v)
}

# arguments that Python wants as integers (R's 3 is a double)
.INT_ARGS <- c("m", "chains", "draws", "warmup", "tune_draws", "tune_warmup", "refit_warmup",
               "max_refits", "K", "n_iter", "replicates", "random_state", "seed")

# R arguments -> Python keyword arguments: dots to underscores, formulas (and "~a" strings)
# to column names, whole numbers to integers where Python counts (.INT_ARGS, and `ints`: a
# synthesizer's integer settings, read from its constraint table)
.py_args <- function(args, keep = character(0), ints = character(0)) {
  if (!length(args)) return(list())
  if (is.null(names(args)) || any(!nzchar(names(args)))) {
    stop("name every further argument (like na.rm = TRUE).", call. = FALSE)
  }
  names(args) <- gsub(".", "_", names(args), fixed = TRUE)
  for (nm in names(args)) {
    a <- args[[nm]]
    if (inherits(a, "formula") ||
        (is.character(a) && length(a) == 1L && grepl("^\\s*~", a) && !nm %in% keep)) {
      args[nm] <- list(.py_names(a, nm))
    } else if (nm %in% c(.INT_ARGS, ints) && is.numeric(a) && length(a) == 1L && !is.na(a) &&
               a == round(a) && abs(a) < .Machine$integer.max) {
      args[[nm]] <- as.integer(a)
    } else if (is.character(a) && length(a) > 1L) {
      args[[nm]] <- as.list(a)
    }
  }
  args
}

# any pandas object -> data.frame, exactly (see ss_from_pandas)
.df <- function(x) py_to_r_pandas(x)

# S3 method registered for reticulate::py_to_r on pandas 3's class names
py_to_r_pandas <- function(x) {
  helpers <- .helpers()
  pdf <- .py(reticulate::py_call(helpers$portable, x))
  ss_from_pandas(pdf)
}

.onLoad <- function(libname, pkgname) {
  ns <- asNamespace("reticulate")
  for (cls in c("pandas.DataFrame", "pandas.Series")) {
    registerS3method("py_to_r", cls, py_to_r_pandas, envir = ns)
  }
  invisible()
}
