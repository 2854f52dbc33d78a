# Reference for surveysynth's multiframe (dual-frame designs), R survey 4.5's ?multiframe example.
# Run:  R_LIBS=/tmp/rlib45 Rscript tests/reference/r_survey45/multiframe.R
#       (from the repository root; /tmp/rlib45 holds survey 4.5 built from the cran/survey
#       mirror; writes tests/reference/r_survey45/multiframe.json). survey 4.1.1 has no
#       multiframe. The JSON stores the data (phoneframes: DatA, DatB and the joint inclusion
#       probability matrices PiklA, PiklB) and the results, with the versions R reports.
suppressMessages({library(survey); library(jsonlite)})
data(phoneframes)
A_in_frames <- cbind(1, DatA$Domain=="ab")
B_in_frames <- cbind(DatB$Domain=="ba", 1)
Bdes_pps <- svydesign(id=~1, fpc=~ProbB, data=DatB, pps=ppsmat(PiklB))
Ades_pps <- svydesign(id=~1, fpc=~ProbA, data=DatA, pps=ppsmat(PiklA))
stat <- function(s) list(estimate=unname(as.numeric(coef(s))), se=unname(as.numeric(SE(s))))
by_stat <- function(s) list(level=as.character(s[[1]]), estimate=unname(as.numeric(coef(s))),
                            se=unname(as.numeric(SE(s))))
res <- list()
for (th in list(0.74, NULL)) {
  mf <- multiframe(list(Ades_pps, Bdes_pps), list(A_in_frames, B_in_frames), theta=th)
  key <- if (is.null(th)) "constant_default" else "constant_074"
  res[[key]] <- list(theta=if (is.null(th)) NA else th,
                     frame_weights=mf$frame_weights,
                     total_Lei=stat(svytotal(~Lei, mf)), mean_Lei=stat(svymean(~Lei, mf)),
                     total_Feed_Clo=stat(svytotal(~Feed+Clo, mf)),
                     mean_Lei_by_Size=by_stat(svyby(~Lei, ~Size, svymean, design=mf)),
                     total_Lei_by_Size=by_stat(svyby(~Lei, ~Size, svytotal, design=mf)),
                     degf=degf(mf))
}
# Kalton-Anderson / Bankier "expected" estimator: overlaps are each unit's probabilities in
# both frames (ProbA, ProbB; 0 outside a frame)
mfe <- multiframe(list(Ades_pps, Bdes_pps),
                  list(cbind(DatA$ProbA, DatA$ProbB), cbind(DatB$ProbA, DatB$ProbB)),
                  estimator="expected")
res$expected <- list(frame_weights=mfe$frame_weights, total_Lei=stat(svytotal(~Lei, mfe)),
                     mean_Lei=stat(svymean(~Lei, mfe)))
# a calibrated-free variance check on non-PPS frames: SRS without replacement in each frame
DatA$fpcA <- sum(1/DatA$ProbA); DatB$fpcB <- sum(1/DatB$ProbB)
Asrs <- svydesign(id=~1, fpc=~fpcA, data=DatA); Bsrs <- svydesign(id=~1, fpc=~fpcB, data=DatB)
mfs <- multiframe(list(Asrs, Bsrs), list(A_in_frames, B_in_frames), theta=0.5)
res$srs <- list(total_Lei=stat(svytotal(~Lei, mfs)), mean_Lei=stat(svymean(~Lei, mfs)))
out <- list(R_version=R.version.string, survey_version=as.character(packageVersion("survey")),
            DatA=DatA, DatB=DatB, PiklA=unname(PiklA), PiklB=unname(PiklB), results=res)
writeLines(toJSON(out, digits=NA, auto_unbox=TRUE, na="null"),
           "tests/reference/r_survey45/multiframe.json")
