package kiln

import (
	"runtime"
	"time"

	"github.com/kiln-ml/kiln/bindings/go/internal/capi"
)

// Communicator connects the ranks of data parallel training (DDP): each rank
// is a trainer attached to its own communicator, and the ranks average their
// gradients every step. See "Data parallel" in kiln's README and
// kiln_communicator_create_mpi in kiln.h for the semantics.
type Communicator struct {
	handle
	ctx *Context
}

func (c *Context) communicator(h uintptr) *Communicator {
	comm := &Communicator{handle{h: h}, c}
	runtime.SetFinalizer(comm, (*Communicator).Close)
	return comm
}

// NewMPICommunicator joins the MPI job this process belongs to (started by
// mpirun; a process started otherwise is a job of one rank), initialising
// MPI if the program has not. Every process of the job must call it. It
// fails with ErrDeviceUnavailable, giving the loader's reason, when kiln's
// distributed plugin (libkiln_dist.so) or Open MPI cannot be loaded.
func (c *Context) NewMPICommunicator() (*Communicator, error) {
	defer runtime.KeepAlive(c)
	var h uintptr
	if err := capi.Communicator_create_mpi(c.h, &h); err != nil {
		return nil, err
	}
	return c.communicator(h), nil
}

// NewLocalCommunicators makes one communicator per GPU of devices, over
// NCCL in this process: result i is rank i and runs on devices[i]. Drive
// each rank (its own model, trainer and calls) from a goroutine of its own,
// since the ranks meet in every collective. ErrInvalidArgument for no
// devices, a CPU device or one listed twice; ErrDeviceUnavailable for a GPU
// that is not there or a missing plugin; ErrNotSupported without NCCL.
func (c *Context) NewLocalCommunicators(devices ...Device) ([]*Communicator, error) {
	defer runtime.KeepAlive(c)
	devs := make([]capi.Device, len(devices))
	for i, d := range devices {
		devs[i] = d.c()
	}
	hs := make([]uintptr, len(devices)+1) // +1: &hs[0] must exist for none
	if err := capi.Communicator_create_local(c.h, devs, &hs[0]); err != nil {
		return nil, err
	}
	comms := make([]*Communicator, len(devices))
	for i := range comms {
		comms[i] = c.communicator(hs[i])
	}
	return comms, nil
}

// Close releases the caller's reference (an attached trainer keeps the
// communicator alive). It may be called more than once, from any goroutine.
func (comm *Communicator) Close() { comm.release(comm, capi.Communicator_release) }

func (comm *Communicator) count(f func(uintptr, *int64) error) (int, error) {
	defer runtime.KeepAlive(comm)
	var n int64
	err := f(comm.h, &n)
	return int(n), err
}

// Rank is this rank's number, in [0, Size).
func (comm *Communicator) Rank() (int, error) { return comm.count(capi.Communicator_rank) }

// Size is the number of ranks.
func (comm *Communicator) Size() (int, error) { return comm.count(capi.Communicator_size) }

// LocalRank is the rank among the ranks of this machine: the GPU to use.
func (comm *Communicator) LocalRank() (int, error) { return comm.count(capi.Communicator_local_rank) }

// SetTimeout bounds each collective: one that takes longer (a dead or stuck
// peer) fails with ErrCommunication, as does every later call. d must be
// positive. Not while an attached trainer runs.
func (comm *Communicator) SetTimeout(d time.Duration) error {
	defer runtime.KeepAlive(comm)
	return capi.Communicator_set_timeout(comm.h, d.Seconds())
}

// AttachCommunicator makes the trainer one rank of DDP training over comm,
// which it keeps alive. Every rank calls it: it starts them all from rank 0's
// weights and fails with ErrInvalidArgument on every rank when the models or
// options differ between ranks. From then on Step, Epoch, Fit and Evaluate
// work on this rank's share and average or reduce across ranks.
func (t *Trainer) AttachCommunicator(comm *Communicator) error {
	defer runtime.KeepAlive(t)
	defer runtime.KeepAlive(comm)
	return capi.Trainer_attach_communicator(t.h, comm.ptr())
}
