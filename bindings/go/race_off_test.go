//go:build !race

package kiln_test

// raceEnabled shortens the loops the race detector slows down.
const raceEnabled = false
