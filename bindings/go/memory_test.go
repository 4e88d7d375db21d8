package kiln_test

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

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

// 8000 tensors of 256 KiB (2000 MiB in all) that are never closed: counting
// their native bytes makes the package collect, and the finalizers free them,
// so the process stays far below what they add up to.
func TestUnclosedTensorsStayBounded(t *testing.T) {
	ctx := newContext(t)
	runtime.GC()
	before := vmRSS(t)
	_, collectionsBefore := kiln.NativeMemory()
	var peak int64
	for i := 0; i < 8000; i++ {
		x, err := ctx.Zeros([]int64{64 * 1024}, kiln.F32, kiln.CPU) // 256 KiB
		if err != nil {
			t.Fatal(err)
		}
		_ = x // dropped without Close
		if i%100 == 0 {
			if rss := vmRSS(t); rss > peak {
				peak = rss
			}
		}
	}
	_, collections := kiln.NativeMemory()
	t.Logf("8000 x 256 KiB unclosed: VmRSS %d MiB before, peak %d MiB, %d collections forced",
		before>>20, peak>>20, collections-collectionsBefore)
	if peak > 300<<20 {
		t.Fatalf("peak VmRSS %d MiB, want under 300 MiB", peak>>20)
	}
	if collections == collectionsBefore {
		t.Fatal("no collection was forced")
	}
}
