package kiln

// #include <stdlib.h>
import "C"

// Exit ends the program with code through the C library's exit, which runs
// the handlers registered with atexit; Go's own exit (os.Exit, or main
// returning) skips them. kiln registers one once NewMPICommunicator has
// initialised MPI: MPI_Finalize, without which mpirun takes the process's
// end for an abnormal termination and fails the job. So a program that made
// an MPI communicator ends with kiln.Exit. As with os.Exit, deferred
// functions do not run.
func Exit(code int) { C.exit(C.int(code)) }
