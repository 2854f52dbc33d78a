# Reference numbers for surveysynth.sampling's sample size and allocation (issue 42):
# PracTools 1.7.5's nCont, nProp and strAlloc on their man-page examples and on api strata.
# PracTools itself imports packages not in Debian (usmap, geosphere); its three functions are
# plain base R, so they are read from the package's sources (the cran/PracTools mirror) and
# evaluated here. Regenerate:
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/practools/allocation.R <cran/PracTools git dir> \
#     > tests/reference/practools/allocation.json
args <- commandArgs(TRUE)
src <- function(f) eval(parse(text = system(paste0("git -C ", args[1], " show HEAD:R/", f, ".R"),
                                            intern = TRUE) |> gsub(pattern = "\r", replacement = "")), envir = globalenv())
for (f in c("nCont", "nProp", "strAlloc")) src(f)
desc <- system(paste0("git -C ", args[1], " show HEAD:DESCRIPTION"), intern = TRUE)
version <- sub("Version: ", "", grep("^Version:", desc, value = TRUE))
stopifnot(version == "1.7.5")
al <- function(a) {
  r <- list(nh = as.vector(a$nh), share = as.vector(a$`nh/n`))
  if (!is.null(a$`anticipated SE of estimated mean`)) r$se <- a$`anticipated SE of estimated mean`
  r
}
Nh <- c(215, 65, 252, 50, 149, 144)
Sh <- c(26787207, 10645109, 6909676, 11085034, 9817762, 44553355)
ch <- c(1400, 200, 300, 600, 450, 1000)
suppressMessages(library(survey)); data(api)
aNh <- as.vector(table(apipop$stype)); aSh <- as.vector(tapply(apipop$api00, apipop$stype, sd))
out <- list(
  R_version = R.version.string, PracTools_version = version,
  nCont = list(a = nCont(CV0 = 0.05, CVpop = 2), b = nCont(CV0 = 0.05, CVpop = 2, N = 500),
               c = nCont(CV0 = 0.10 / 1.645, CVpop = 1),
               d = nCont(CV0 = 0.15, S2 = 800, ybarU = 100, N = 2000),
               e = nCont(V0 = 4, S2 = 800, N = 2000)),
  nProp = list(a = nProp(V0 = 0.0005^2, N = Inf, pU = 0.01), b = nProp(CV0 = 0.05, N = Inf, pU = 0.01),
               c = nProp(V0 = (0.005 / 1.96)^2, N = Inf, pU = 0.01),
               d = nProp(CV0 = 0.05, N = 5000, pU = 0.2), e = nProp(V0 = 1e-4, N = 5000, pU = 0.2)),
  strAlloc = list(
    neyman = al(strAlloc(n.tot = 100, Nh = Nh, Sh = Sh, alloc = "neyman")),
    prop = al(strAlloc(n.tot = 100, Nh = Nh, alloc = "prop")),
    totcost = al(strAlloc(Nh = Nh, Sh = Sh, cost = 100000, ch = ch, alloc = "totcost")),
    totvar = al(strAlloc(Nh = Nh, Sh = Sh, CV0 = 0.05, ch = ch, ybarU = 11664181, alloc = "totvar")),
    totvar_V0 = al(strAlloc(Nh = Nh, Sh = Sh, V0 = 1e12, ch = ch, alloc = "totvar")),
    api_neyman = al(strAlloc(n.tot = 200, Nh = aNh, Sh = aSh, alloc = "neyman")),
    api_totcost = al(strAlloc(Nh = aNh, Sh = aSh, cost = 5000, ch = c(10, 30, 20), alloc = "totcost"))),
  api = list(Nh = aNh, Sh = aSh))
cat(jsonlite::toJSON(out, digits = NA, auto_unbox = TRUE))
