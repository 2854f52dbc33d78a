library(testthat)
library(surveysynth)
test_check("surveysynth")
