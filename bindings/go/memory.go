package kiln

import (
	"runtime"
	"sync/atomic"
)

// The garbage collector sees a Tensor, a Model, a Trainer or a Dataset as a
// few words of Go memory, not the native memory behind it, so a loop that
// drops them without Close would run for gigabytes before a collection ran
// their finalizers. Go has no AddMemoryPressure, so the package keeps that
// count itself: the bytes those objects own now (handle.owns: added when one
// is made, taken off when it is closed or finalized), and runs a collection
// when they grow past twice the least they came down to since the last one,
// and at least minGCBytes: as GOGC=100 lets the heap grow to twice what the
// last collection left. What the finalizers free after a collection lowers
// that least value, so the next limit follows the objects really in use; and
// a program that closes its objects never grows the count, so it never pays
// for a collection.
var native struct {
	held        atomic.Int64 // bytes of counted objects not yet released
	least       atomic.Int64 // the smallest held has been since the last forced collection
	collecting  atomic.Bool  // a goroutine is running the forced collection
	collections atomic.Int64 // collections forced so far
}

// minGCBytes keeps small programs from collecting on every few tensors. It
// is small because RSS runs several times ahead of it: the finalizers free
// on their own thread, and glibc keeps freed blocks in the arena of the
// thread that allocated them, one per OS thread the allocating goroutine
// ran on (8000 unclosed 256 KiB tensors peaked at about 150 MiB of RSS with
// 32 MiB here, 280 MiB with 64 MiB).
const minGCBytes = 32 << 20

// gcLimit is the count of held bytes at which noteAlloc collects, given the
// least count since the last collection.
func gcLimit(least int64) int64 {
	if limit := 2 * least; limit > minGCBytes {
		return limit
	}
	return minGCBytes
}

func noteAlloc(n int64) {
	if n <= 0 {
		return
	}
	held := native.held.Add(n)
	// One goroutine collects; the others go on meanwhile.
	if held < gcLimit(native.least.Load()) || !native.collecting.CompareAndSwap(false, true) {
		return
	}
	native.collections.Add(1)
	runtime.GC()
	// The finalizers the collection queued run later and lower least.
	native.least.Store(native.held.Load())
	native.collecting.Store(false)
}

func noteFree(n int64) {
	if n <= 0 {
		return
	}
	held := native.held.Add(-n)
	for {
		least := native.least.Load()
		if held >= least || native.least.CompareAndSwap(least, held) {
			return
		}
	}
}

// NativeMemory reports the bytes held by objects not yet closed or
// finalized: tensors (views count nothing: they share their source's
// storage), models (their parameters), trainers (their gradients) and
// datasets read from files (their samples, a byte per feature); and the
// number of garbage collections this package has run because of them.
func NativeMemory() (held int64, collections int64) {
	return native.held.Load(), native.collections.Load()
}
