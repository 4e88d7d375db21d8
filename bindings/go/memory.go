package kiln

import (
	"runtime"
	"sync/atomic"
)

// The garbage collector sees a Tensor as a few words of Go memory, not the
// native buffer behind it, so a loop that drops tensors without Close would
// run for gigabytes before a collection ran their finalizers. Tensors count
// the bytes they allocate here, and the goroutine whose allocation pushes
// the bytes allocated since the last collection past both minGCBytes and
// half of all outstanding tensor bytes runs one: garbage then stays within
// about the live tensor memory plus minGCBytes, as GOGC=100 keeps the heap.
var native struct {
	outstanding atomic.Int64 // bytes of counted tensors not yet released
	sinceGC     atomic.Int64 // bytes allocated since the last forced collection
	collections atomic.Int64 // collections forced so far
}

// minGCBytes keeps small programs from collecting on every few tensors. It
// is small because RSS runs several times ahead of it: the finalizers free
// on their own thread, and glibc keeps freed blocks in the arena of the
// thread that allocated them, one per OS thread the allocating goroutine
// ran on (8000 unclosed 256 KiB tensors peaked at about 150 MiB of RSS with
// 32 MiB here, 280 MiB with 64 MiB).
const minGCBytes = 32 << 20

func noteAlloc(n int64) {
	if n <= 0 {
		return
	}
	out := native.outstanding.Add(n)
	since := native.sinceGC.Add(n)
	limit := out / 2
	if limit < minGCBytes {
		limit = minGCBytes
	}
	// Only the goroutine that resets the counter collects; the others go on.
	if since >= limit && native.sinceGC.CompareAndSwap(since, 0) {
		native.collections.Add(1)
		runtime.GC()
	}
}

func noteFree(n int64) {
	if n > 0 {
		native.outstanding.Add(-n)
	}
}

// NativeMemory reports the bytes held by tensors not yet closed or
// finalized (views count nothing: they share their source's storage) and
// the number of garbage collections this package has run because of them.
func NativeMemory() (outstanding int64, collections int64) {
	return native.outstanding.Load(), native.collections.Load()
}
