package kiln

// CheckABI is checkABI for the tests of package kiln_test.
var CheckABI = checkABI
