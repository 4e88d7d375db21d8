package kiln

// #include <stdint.h>
// #include <kiln/kiln.h>
// int kilnGoProgressTrampoline(void *user, const kiln_progress *progress);
// int kilnGoLogTrampoline(void *user, const kiln_log_record *record);
import "C"

import (
	"runtime/cgo"
	"time"
	"unsafe"

	"github.com/kiln-ml/kiln/bindings/go/internal/capi"
)

// The trampolines' addresses, as the raw layer takes C function pointers.
var (
	progressTrampoline = uintptr(unsafe.Pointer(C.kilnGoProgressTrampoline))
	logTrampoline      = uintptr(unsafe.Pointer(C.kilnGoLogTrampoline))
)

//export kilnGoLog
func kilnGoLog(user C.uintptr_t, level C.int, message *C.char) {
	// A panic must not unwind through kiln's C++ frames: drop the record.
	defer func() { _ = recover() }()
	fn := cgo.Handle(user).Value().(func(LogLevel, string))
	fn(LogLevel(level), C.GoString(message))
}

//export kilnGoProgress
func kilnGoProgress(user C.uintptr_t, p *C.kiln_progress) C.int {
	run := cgo.Handle(user).Value().(*fitRun)
	if run.step(progressFromC(p)) {
		return 0
	}
	return 1
}

func progressFromC(p *C.kiln_progress) Progress {
	out := Progress{
		Phase: ProgressPhase(p.phase), Epoch: int(p.epoch), Epochs: int(p.epochs),
		Batch: int64(p.batch), Batches: int64(p.batches), Loss: float64(p.loss),
		SamplesPerSecond: float64(p.samples_per_second),
		Elapsed:          time.Duration(float64(p.elapsed_seconds) * float64(time.Second)),
	}
	if p.stats != nil {
		// capi.EpochStats is laid out as kiln_epoch_stats.
		stats := statsFromC((*capi.EpochStats)(unsafe.Pointer(p.stats)))
		out.Stats = &stats
	}
	return out
}
