package kiln_test

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	kiln "github.com/kiln-ml/kiln/bindings/go"
)

func TestLocalCommunicatorErrors(t *testing.T) {
	ctx := newContext(t)
	if _, err := ctx.NewLocalCommunicators(); !errors.Is(err, kiln.ErrInvalidArgument) {
		t.Errorf("no devices: %v", err)
	}
	if _, err := ctx.NewLocalCommunicators(kiln.CPU); !errors.Is(err, kiln.ErrInvalidArgument) {
		t.Errorf("a CPU device: %v", err)
	}
	// The list is checked before any device is looked for, with a GPU or without.
	if _, err := ctx.NewLocalCommunicators(kiln.CUDA(0), kiln.CUDA(0)); !errors.Is(err, kiln.ErrInvalidArgument) {
		t.Errorf("a device listed twice: %v", err)
	}
	if n := must(ctx.DeviceCount(kiln.KindCUDA)); n == 0 {
		_, err := ctx.NewLocalCommunicators(kiln.CUDA(0))
		if !errors.Is(err, kiln.ErrDeviceUnavailable) && !errors.Is(err, kiln.ErrNotSupported) {
			t.Errorf("cuda:0 without a GPU: %v", err)
		}
		var ke *kiln.Error
		if errors.As(err, &ke) && ke.Message == "" {
			t.Error("no message")
		}
	}
}

// MPI is initialised once per process and cannot be undone, so the MPI test
// runs in a child process: this same test binary, running TestMPIChild.
func TestMPICommunicator(t *testing.T) {
	if os.Getenv("KILN_GO_MPI_CHILD") != "" {
		t.Skip("in the child")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, exe, "-test.run=^TestMPIChild$", "-test.v")
	cmd.Env = append(os.Environ(), "KILN_GO_MPI_CHILD=1")
	out, err := cmd.CombinedOutput()
	text := string(out)
	if strings.Contains(text, "MPI-UNAVAILABLE:") {
		t.Skipf("no MPI communicator here: %s", strings.TrimSpace(text[strings.Index(text, "MPI-UNAVAILABLE:"):]))
	}
	if err != nil || !strings.Contains(text, "--- PASS: TestMPIChild") {
		t.Fatalf("child: %v\n%s", err, text)
	}
	t.Logf("singleton MPI job: %s", firstLine(text[strings.Index(text, "MPI-OK:"):]))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func TestMPIChild(t *testing.T) {
	if os.Getenv("KILN_GO_MPI_CHILD") == "" {
		t.Skip("run by TestMPICommunicator in a process of its own")
	}
	ctx := newContext(t)
	comm, err := ctx.NewMPICommunicator()
	if errors.Is(err, kiln.ErrDeviceUnavailable) {
		t.Logf("MPI-UNAVAILABLE: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	size, rank, local := must(comm.Size()), must(comm.Rank()), must(comm.LocalRank())
	if size != 1 || rank != 0 || local != 0 {
		t.Fatalf("singleton: size %d rank %d local rank %d", size, rank, local)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if err := comm.SetTimeout(d); !errors.Is(err, kiln.ErrInvalidArgument) {
			t.Fatalf("SetTimeout(%v): %v", d, err)
		}
	}
	if err := comm.SetTimeout(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	// One rank of DDP trains exactly as the same trainer without it.
	weights := func(attach bool) []float32 {
		if err := ctx.SetSeed(5); err != nil {
			t.Fatal(err)
		}
		ds, _ := dataset(t, ctx, 64, 3)
		m := must(ctx.NewModelFromText("16-8-4", kiln.CPU))
		defer m.Close()
		tr := must(kiln.NewTrainer(m, kiln.WithBatchSize(16), kiln.WithShuffleSeed(2)))
		defer tr.Close()
		if attach {
			if err := tr.AttachCommunicator(comm); err != nil {
				t.Fatal(err)
			}
		}
		must(tr.Epoch(ds))
		w, _ := must2(m.Parameter(0))
		defer w.Close()
		return must(kiln.ToSlice[float32](w))
	}
	plain, ddp := weights(false), weights(true)
	for i := range plain {
		if plain[i] != ddp[i] {
			t.Fatalf("weight %d: %v with the communicator, %v without", i, ddp[i], plain[i])
		}
	}
	comm.Close()
	comm.Close()
	if _, err := comm.Rank(); !errors.Is(err, kiln.ErrClosed) {
		t.Fatalf("Rank after Close: %v", err)
	}
	m := must(ctx.NewModelFromText("4-2", kiln.CPU))
	defer m.Close()
	tr := must(kiln.NewTrainer(m))
	defer tr.Close()
	if err := tr.AttachCommunicator(comm); !errors.Is(err, kiln.ErrClosed) {
		t.Fatalf("attaching a closed communicator: %v", err)
	}
	t.Logf("MPI-OK: size %d, rank %d, local rank %d; one DDP epoch equals plain training (%d weights)", size, rank, local, len(plain))
}

// Two ranks of this test binary under mpirun, each with batch 8, train as
// one process with batch 16 (the same seed, a dataset size divisible by 2).
func TestMPITwoRanks(t *testing.T) {
	if os.Getenv("KILN_GO_MPI_CHILD") != "" {
		t.Skip("in the child")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("no mpirun")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, mpirun, "-np", "2", "--oversubscribe", "--allow-run-as-root",
		"-x", "KILN_GO_MPI_CHILD=2", "-x", "LD_LIBRARY_PATH", exe, "-test.run=^TestMPIRank$", "-test.v")
	out, err := cmd.CombinedOutput()
	text := string(out)
	if strings.Contains(text, "MPI-UNAVAILABLE:") {
		t.Skipf("no MPI communicator here: %s", firstLine(text[strings.Index(text, "MPI-UNAVAILABLE:"):]))
	}
	if err != nil || strings.Count(text, "--- PASS: TestMPIRank") != 2 {
		t.Fatalf("mpirun -np 2: %v\n%s", err, text)
	}
	t.Logf("two ranks: %s", firstLine(text[strings.Index(text, "MPI-RANK-OK:"):]))
}

func TestMPIRank(t *testing.T) {
	if os.Getenv("KILN_GO_MPI_CHILD") != "2" {
		t.Skip("run by TestMPITwoRanks under mpirun")
	}
	ctx := newContext(t)
	comm, err := ctx.NewMPICommunicator()
	if errors.Is(err, kiln.ErrDeviceUnavailable) {
		t.Logf("MPI-UNAVAILABLE: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Close()
	if size := must(comm.Size()); size != 2 {
		t.Fatalf("size %d", size)
	}
	rank := must(comm.Rank())
	if err := comm.SetTimeout(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	weights := func(batch int, comm *kiln.Communicator) []float32 {
		if err := ctx.SetSeed(5); err != nil {
			t.Fatal(err)
		}
		ds, _ := dataset(t, ctx, 64, 3)
		m := must(ctx.NewModelFromText("16-8-4", kiln.CPU))
		defer m.Close()
		tr := must(kiln.NewTrainer(m, kiln.WithBatchSize(batch), kiln.WithShuffleSeed(2)))
		defer tr.Close()
		if comm != nil {
			if err := tr.AttachCommunicator(comm); err != nil {
				t.Fatal(err)
			}
		}
		for e := 0; e < 2; e++ {
			must(tr.Epoch(ds))
		}
		w, _ := must2(m.Parameter(0))
		defer w.Close()
		return must(kiln.ToSlice[float32](w))
	}
	ddp := weights(8, comm)
	single := weights(16, nil)
	largest, worst := 0.0, 0.0
	for i := range single {
		largest = math.Max(largest, math.Abs(float64(single[i])))
		worst = math.Max(worst, math.Abs(float64(ddp[i]-single[i])))
	}
	if worst > 1e-5*largest {
		t.Fatalf("rank %d: weights differ by %g (largest weight %g) from one process with batch 16", rank, worst, largest)
	}
	t.Logf("MPI-RANK-OK: rank %d of 2, batch 8 each: 2 epochs within %.2g of one process with batch 16 (largest weight %.3g)",
		rank, worst, largest)
}
