package kiln_test

import (
	"os"
	"testing"

	kiln "github.com/kiln-ml/kiln/bindings/go"
)

// The MPI tests' child processes end through kiln.Exit, so that MPI is
// finalized and mpirun reports success.
func TestMain(m *testing.M) {
	code := m.Run()
	if os.Getenv("KILN_GO_MPI_CHILD") != "" {
		kiln.Exit(code)
	}
	os.Exit(code)
}
