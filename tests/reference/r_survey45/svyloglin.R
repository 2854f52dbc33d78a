# anova.svyloglin from R survey 4.5: the score statistic's F test has k times the numerator
# (and denominator) df of 4.1.1's (fixed in survey 4.3, "degrees of freedom for score F-test
# in loglinear models"). ?svyloglin's example on the cluster design, its JK1 replicate
# design and a calibrated design. (Coefficients and vcov are the same in 4.1.1 and 4.5 and
# are tested live.) R survey 4.5 built from the cran/survey mirror (tag "version 4.5"):
#   R CMD INSTALL -l /tmp/rlib45 <cran/survey checkout>
#   R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/svyloglin.R > tests/reference/r_survey45/svyloglin.json
suppressMessages(library(survey))
stopifnot(packageVersion("survey") == "4.5")
data(api)
dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
pop <- c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069)
designs <- list(dclus1=dclus1, jk1=as.svrepdesign(dclus1, type="JK1"),
                cal=calibrate(dclus1, ~stype+api99, pop))
one <- function(an) list(dev=an$dev$dev, dev_p=an$dev$p[2:4], score=an$score$chisq,
                         score_p=an$score$p[2:4], a=an$a)
out <- lapply(designs, function(d) {
  a <- svyloglin(~stype+comp.imp, d)
  b <- update(a, ~.^2)
  dd <- update(a, ~.+as.numeric(stype):as.numeric(comp.imp))
  list(ab=one(anova(a, b)), ad=one(anova(a, dd)))
})
out$R_version <- R.version.string
out$survey_version <- as.character(packageVersion("survey"))
cat(jsonlite::toJSON(out, digits=NA, auto_unbox=TRUE, pretty=TRUE), "\n")
