package kiln_test

import (
	"bufio"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	kiln "github.com/kiln-ml/kiln/bindings/go"
)

// vmRSS is the process's resident set in bytes, from /proc/self/status.
func vmRSS(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest := strings.TrimPrefix(sc.Text(), "VmRSS:"); rest != sc.Text() {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS line %q: %v", sc.Text(), err)
			}
			return kb << 10
		}
	}
	t.Skip("no VmRSS in /proc/self/status")
	return 0
}

// unclosedPeak calls make n times, each dropping what it made without Close,
// and returns the peak VmRSS (sampled every `every` calls) and the number of
// collections the package forced meanwhile.
func unclosedPeak(t *testing.T, n, every int, make func() error) (peak, collections int64) {
	t.Helper()
	_, before := kiln.NativeMemory()
	for i := 0; i < n; i++ {
		if err := make(); err != nil {
			t.Fatal(err)
		}
		if i%every == 0 {
			if rss := vmRSS(t); rss > peak {
				peak = rss
			}
		}
	}
	_, after := kiln.NativeMemory()
	return peak, after - before
}

// 8000 tensors of 256 KiB (2000 MiB in all) that are never closed: counting
// their native bytes makes the package collect, and the finalizers free them,
// so the process stays far below what they add up to.
func TestUnclosedTensorsStayBounded(t *testing.T) {
	ctx := newContext(t)
	runtime.GC()
	before := vmRSS(t)
	peak, collections := unclosedPeak(t, 8000, 100, func() error {
		_, err := ctx.Zeros([]int64{64 * 1024}, kiln.F32, kiln.CPU) // 256 KiB
		return err
	})
	t.Logf("8000 x 256 KiB unclosed: VmRSS %d MiB before, peak %d MiB, %d collections forced",
		before>>20, peak>>20, collections)
	if peak > 300<<20 {
		t.Fatalf("peak VmRSS %d MiB, want under 300 MiB", peak>>20)
	}
	if collections == 0 {
		t.Fatal("no collection was forced")
	}
}

// Models, trainers and loaded datasets hold native memory as tensors do, and
// count it the same way: a model its parameters, a trainer its gradients, a
// dataset read from files its samples. 30 of each that are never closed stay
// far below the 2.1 GiB (the datasets: 1.3 GiB) they add up to.
func TestUnclosedObjectsStayBounded(t *testing.T) {
	ctx := newContext(t)
	const spec = "784-4000-4000-10" // 19.2 million parameters: 73 MiB
	images, labels := writeMNIST(t, t.TempDir(), 60000)
	model := must(ctx.NewModelFromText(spec, kiln.CPU))
	defer model.Close()
	for _, c := range []struct {
		name string
		make func() error
	}{
		{"models", func() error { return second(ctx.NewModelFromText(spec, kiln.CPU)) }},
		{"trainers", func() error { return second(kiln.NewTrainer(model)) }},
		{"datasets", func() error { return second(ctx.LoadIDX(images, labels)) }}, // 45 MiB
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.GC()
			before := vmRSS(t)
			peak, collections := unclosedPeak(t, 30, 1, c.make)
			t.Logf("30 unclosed %s: VmRSS %d MiB before, peak %d MiB, %d collections forced",
				c.name, before>>20, peak>>20, collections)
			if peak-before > 600<<20 {
				t.Errorf("VmRSS grew by %d MiB, want under 600 MiB", (peak-before)>>20)
			}
			if collections == 0 {
				t.Error("no collection was forced")
			}
		})
	}
}

// writeMNIST writes n 28x28 images and their labels as the IDX files of an
// MNIST directory's train split, and returns their paths.
func writeMNIST(t *testing.T, dir string, n int) (images, labels string) {
	t.Helper()
	write := func(name string, header []uint32, size int) string {
		buf := make([]byte, 4*len(header)+size)
		for i, v := range header {
			binary.BigEndian.PutUint32(buf[4*i:], v)
		}
		for i := 4 * len(header); i < len(buf); i++ {
			buf[i] = byte(i % 10)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, buf, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// IDX magic numbers: unsigned bytes, of three dimensions and of one.
	images = write("train-images-idx3-ubyte", []uint32{0x803, uint32(n), 28, 28}, n*28*28)
	labels = write("train-labels-idx1-ubyte", []uint32{0x801, uint32(n)}, n)
	return images, labels
}

// liveGoHeap is about mib MiB of pointer-holding Go objects, so that a
// collection has real marking to do, as in a program with a working set.
type heapNode struct {
	next    *heapNode
	payload [56]byte
}

func liveGoHeap(mib int) *heapNode {
	var head *heapNode
	for i := 0; i < mib<<20/64; i++ {
		head = &heapNode{next: head}
	}
	return head
}

// Tensors that are closed hold no native memory, so making and closing them
// must cost no garbage collection, however many there are and however large
// the live heap (issue 25: 312 forced collections for 10,000 closed 1 MiB
// tensors, and 2000 of them beside a 250 MiB heap took 9.5-14.6 s). The
// runtime's own collector is switched off meanwhile, so that every
// collection NumGC counts is one this package forced.
func TestClosedTensorsCostNoCollections(t *testing.T) {
	ctx := newContext(t)
	heap := liveGoHeap(250)
	live := make([]*kiln.Tensor, 0, 64)
	for i := 0; i < 64; i++ { // 64 MiB of live tensors too
		live = append(live, must(ctx.Zeros([]int64{256 * 1024}, kiln.F32, kiln.CPU)))
	}
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	closeLoop := func(n int) (gcs uint32, took time.Duration) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		for i := 0; i < n; i++ {
			x := must(ctx.Empty([]int64{256 * 1024}, kiln.F32, kiln.CPU)) // 1 MiB
			x.Close()
		}
		took = time.Since(start)
		runtime.ReadMemStats(&after)
		return after.NumGC - before.NumGC, took
	}
	gcs, took := closeLoop(2000)
	t.Logf("2000 closed 1 MiB tensors beside a 250 MiB Go heap and 64 MiB of live tensors: %d collections, %.2f s",
		gcs, took.Seconds())
	if gcs != 0 {
		t.Errorf("closed tensors forced %d collections, want 0", gcs)
	}
	runtime.KeepAlive(heap)
	heap = nil
	gcs10k, took10k := closeLoop(10000)
	t.Logf("10,000 closed 1 MiB tensors: %d collections, %.2f s", gcs10k, took10k.Seconds())
	if gcs10k != 0 {
		t.Errorf("closed tensors forced %d collections, want 0", gcs10k)
	}
	for _, x := range live {
		x.Close()
	}
	if held, _ := kiln.NativeMemory(); held != 0 {
		t.Errorf("%d bytes still counted with every tensor closed", held)
	}
}
