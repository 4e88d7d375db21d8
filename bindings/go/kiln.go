// Package kiln trains and runs multilayer perceptrons on NVIDIA GPUs or the
// CPU through libkiln's C API.
//
// Every object that holds native memory has Close; call it (usually with
// defer) to release the memory deterministically. A finalizer releases
// objects that were never closed, as a safety net only: the garbage
// collector does not see native memory and may run late.
//
// Errors are *Error values carrying the kiln status and the library's
// message. A Context, a Model used for inference and tensors that are only
// read may be used by several goroutines at once; a Trainer, and a tensor
// being written, by one goroutine at a time.
package kiln

import (
	"runtime"

	"kiln/internal/capi"
)

// Error is a failed kiln call. Use errors.As to get at the Status and the
// message, or errors.Is(err, ErrNotSupported) to test the Status alone.
type Error = capi.Error

// Status is a kiln_status code. It prints as the library's name for it
// ("KILN_ERROR_NOT_SUPPORTED"); codes newer than this package still arrive
// as an *Error, with their number in Status.
type Status = capi.Status

// The statuses of a failed call, as Error.Status carries them; each is also
// an error for errors.Is.
const (
	ErrInvalidArgument   Status = 1  // a NULL pointer, bad value or bad string
	ErrInvalidHandle     Status = 2  // a closed, foreign or wrong-type handle
	ErrShapeMismatch     Status = 3  // tensor shapes that do not fit together
	ErrDTypeMismatch     Status = 4  // a dtype the operation does not take
	ErrDeviceUnavailable Status = 5  // no such device, no driver, no plugin
	ErrOutOfMemory       Status = 6  // host or device memory exhausted
	ErrIO                Status = 7  // a file could not be read or written
	ErrFormat            Status = 8  // a file's contents are malformed
	ErrNotSupported      Status = 9  // a valid request this build or device cannot do
	ErrCancelled         Status = 10 // a callback asked to stop
	ErrBackend           Status = 11 // CUDA, cuBLAS, cuDNN or BLAS failure
	ErrInternal          Status = 12 // a bug in kiln
	ErrBusy              Status = 13 // the object is inside another call
	ErrNumeric           Status = 14 // training diverged: a NaN or infinite loss
)

// ABIVersion is the ABI this package was written against (KILN_ABI_VERSION).
const ABIVersion = 1

// Version is the loaded library's version, "MAJOR.MINOR.PATCH".
func Version() string { return capi.Version_string() }

// LoadedABIVersion is the ABI version of the loaded library; it must equal
// ABIVersion.
func LoadedABIVersion() int { return capi.Abi_version() }

// LogLevel is the minimum level of the records a context logs to stderr.
type LogLevel int

const (
	LogDebug LogLevel = iota
	LogInfo
	LogWarning
	LogError
	LogOff
)

// ContextOption configures NewContext.
type ContextOption func(opts uintptr) error

// WithSeed seeds the context's generator (rand, randn, model initialisation).
func WithSeed(seed uint64) ContextOption {
	return func(o uintptr) error { return capi.Context_options_set_seed(o, seed) }
}

// WithThreads sets the number of CPU threads (0: one per core).
func WithThreads(n int) ContextOption {
	return func(o uintptr) error { return capi.Context_options_set_num_threads(o, int64(n)) }
}

// WithLogLevel sets the level from which records go to stderr.
func WithLogLevel(level LogLevel) ContextOption {
	return func(o uintptr) error { return capi.Context_options_set_log_level(o, int(level)) }
}

// WithCUDA(false) skips loading the CUDA backend: the context is CPU-only.
func WithCUDA(enable bool) ContextOption {
	return func(o uintptr) error { return capi.Context_options_set_enable_cuda(o, boolInt(enable)) }
}

// Context owns the backends and the random generator; everything else is
// created from one. Safe for concurrent use.
type Context struct{ h uintptr }

// NewContext creates a context: the CPU backend and, when it loads, CUDA.
func NewContext(opts ...ContextOption) (*Context, error) {
	var o uintptr
	if err := capi.Context_options_create(&o); err != nil {
		return nil, err
	}
	defer capi.Context_options_release(o)
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	var h uintptr
	if err := capi.Context_create(o, &h); err != nil {
		return nil, err
	}
	c := &Context{h}
	runtime.SetFinalizer(c, (*Context).Close)
	return c, nil
}

// Close releases the caller's reference; objects created from the context
// keep it alive until they are closed too. Closing twice does nothing.
func (c *Context) Close() {
	if c.h != 0 {
		capi.Context_release(c.h)
		c.h = 0
		runtime.SetFinalizer(c, nil)
	}
}

// SetSeed reseeds the generator (torch.manual_seed).
func (c *Context) SetSeed(seed uint64) error {
	defer runtime.KeepAlive(c)
	return capi.Context_set_seed(c.h, seed)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
