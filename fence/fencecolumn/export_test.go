package fencecolumn

// Exported for the tests in package fencecolumn_test.
var CheckPredicate = checkPredicate
