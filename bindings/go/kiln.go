// Package kiln trains and runs multilayer perceptrons on NVIDIA GPUs or the
// CPU through libkiln's C API.
//
// Import it as
//
//	import kiln "github.com/kiln-ml/kiln/bindings/go"
//
// cgo finds libkiln with pkg-config (package "kiln"): an installed kiln needs
// only PKG_CONFIG_PATH pointing at its lib/pkgconfig directory, and a build
// tree's kiln.pc points at the build tree.
//
// Every object that holds native memory has Close; call it (usually with
// defer) to release the memory deterministically. Close may be called more
// than once and from several goroutines at once; calls on a closed object
// fail with ErrClosed. A finalizer releases objects that were never closed.
// Tensors, models, trainers and datasets read from files also tell the
// package how much native memory they hold until they are closed or
// finalized (see NativeMemory), and once that grows past twice the least it
// came down to since the last collection (and 32 MiB), the allocating
// goroutine runs a garbage collection, so that a loop that never closes its
// objects stays bounded (as GOGC=100 bounds the Go heap); a program that
// closes them never triggers one.
//
// Errors are *Error values carrying the kiln Status and the library's
// message; the Status constants (ErrShapeMismatch, ...) and ErrClosed are
// sentinels for errors.Is, and a file that does not exist also matches
// fs.ErrNotExist. A Context, a Model used for inference and tensors that are
// only read may be used by several goroutines at once; a Trainer, and a
// tensor being written, by one goroutine at a time.
package kiln

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/cgo"
	"sync/atomic"

	"github.com/kiln-ml/kiln/bindings/go/internal/capi"
)

// Error is a failed kiln call. Use errors.As to get at the Status and the
// message, or errors.Is(err, ErrNotSupported) to test the Status alone.
type Error = capi.Error

// Status is a kiln_status code. It prints as the library's name for it
// ("KILN_ERROR_NOT_SUPPORTED"); codes newer than this package still arrive
// as an *Error, with their number in Status.
type Status = capi.Status

// ABIVersion is the ABI this package was compiled against (KILN_ABI_VERSION
// of the kiln.h that cgo read).
const ABIVersion = abiVersion

// Version is the loaded library's version, "MAJOR.MINOR.PATCH".
func Version() string { return capi.Version_string() }

// LoadedABIVersion is the ABI version of the loaded library; it must equal
// ABIVersion.
func LoadedABIVersion() int { return capi.Abi_version() }

// The package refuses to start with another kiln than the one its raw layer
// was generated from: a changed signature or struct would otherwise be
// called wrongly, without an error.
func init() {
	if err := checkABI(capi.KILN_ABI_VERSION, abiVersion, LoadedABIVersion()); err != nil {
		panic(err)
	}
}

// checkABI compares the ABI version internal/capi was generated for with
// that of the kiln.h cgo compiled against and that of the loaded libkiln.
func checkABI(generated, header, loaded int) error {
	switch {
	case header != generated:
		return fmt.Errorf("kiln: this package was generated for kiln ABI %d, but cgo compiled it against a kiln.h "+
			"of ABI %d (the kiln.pc pkg-config found): install the kiln whose version this module has", generated, header)
	case loaded != generated:
		return fmt.Errorf("kiln: this package was generated for kiln ABI %d, but the libkiln loaded at run time "+
			"(version %s) has ABI %d: point the dynamic loader at the kiln it was built against", generated, Version(), loaded)
	}
	return nil
}

// withPath adds fs.ErrNotExist to an ErrIO failure about one of paths when
// that path does not exist, so that callers can test for a missing file the
// way they do for os.Open. kiln's message already names the file; this only
// makes the cause testable.
func withPath(err error, op string, paths ...string) error {
	var ke *Error
	if !errors.As(err, &ke) || ke.Status != ErrIO || ke.Err != nil {
		return err
	}
	for _, p := range paths {
		if _, serr := os.Stat(p); errors.Is(serr, fs.ErrNotExist) {
			ke.Err = &fs.PathError{Op: op, Path: p, Err: fs.ErrNotExist}
			break
		}
	}
	return err
}

// withWritePath is withPath for a file being written: it is the directory
// that must exist.
func withWritePath(err error, path string) error {
	return withPath(err, "create", filepath.Dir(path))
}

// textOf is s as a string argument of the raw layer, which takes only a
// capi.Text: a string with a NUL byte is refused, since C would read it only
// up to the NUL (another path, device or spec than the caller's). name is the
// parameter, as kiln's own messages name theirs.
func textOf(name, s string) (capi.Text, error) {
	t, ok := capi.TextOf(s)
	if !ok {
		return t, &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf("%s %q contains a NUL byte", name, s)}
	}
	return t, nil
}

// handle is a native handle released exactly once. The value itself never
// changes, so reading it needs no synchronisation: after Close, calls pass
// the released handle and kiln, whose handles are never reused, answers
// KILN_ERROR_INVALID_HANDLE (ErrClosed). Only the release is a race, and the
// atomic swap of closed decides it.
type handle struct {
	h      uintptr
	closed atomic.Bool
	// bytes is the native memory the object owns, as counted in native (see
	// owns); 0 for one that shares another's.
	bytes int64
}

// owns records that the new object owns n bytes of native memory, until it
// is released.
func (h *handle) owns(n int64) {
	h.bytes = n
	noteAlloc(n)
}

// release frees the handle with free unless that was done already; obj is
// the object whose finalizer is then cleared.
func (h *handle) release(obj any, free func(uintptr)) {
	if h.closed.Swap(true) {
		return
	}
	free(h.h)
	noteFree(h.bytes)
	runtime.SetFinalizer(obj, nil)
}

// The handles of arguments: a nil object passes NULL, which kiln refuses
// with ErrInvalidArgument and a message naming the parameter, as it does in
// C, instead of a nil-pointer panic here; so does the object of a
// package-level function (ToSlice's tensor, NewTrainer's model). (A nil
// receiver panics, as Go methods do.)
func (c *Context) ptr() uintptr {
	if c == nil {
		return 0
	}
	return c.h
}

func (t *Tensor) ptr() uintptr {
	if t == nil {
		return 0
	}
	return t.h
}

func (m *Model) ptr() uintptr {
	if m == nil {
		return 0
	}
	return m.h
}

func (d *Dataset) ptr() uintptr {
	if d == nil {
		return 0
	}
	return d.h
}

func (s *ModelSpec) ptr() uintptr {
	if s == nil {
		return 0
	}
	return s.h
}

func (comm *Communicator) ptr() uintptr {
	if comm == nil {
		return 0
	}
	return comm.h
}

// ContextOption configures NewContext.
type ContextOption func(*contextConfig) error

type contextConfig struct {
	opts   uintptr
	logger func(LogLevel, string)
}

// WithSeed seeds the context's generator (rand, randn, model initialisation).
func WithSeed(seed uint64) ContextOption {
	return func(c *contextConfig) error { return capi.Context_options_set_seed(c.opts, seed) }
}

// WithThreads sets the number of CPU threads (0: one per core).
func WithThreads(n int) ContextOption {
	return func(c *contextConfig) error { return capi.Context_options_set_num_threads(c.opts, int64(n)) }
}

// WithLogLevel sets the lowest level of the records the context logs (to
// stderr, or to the function of WithLogger).
func WithLogLevel(level LogLevel) ContextOption {
	return func(c *contextConfig) error { return capi.Context_options_set_log_level(c.opts, int(level)) }
}

// WithLogger sends the context's log records to fn instead of stderr. fn runs
// on the thread that produced the record, which may be one of kiln's worker
// threads and several at once, so it must be safe for concurrent use; it
// must not call kiln with objects of the same context. A panic in fn is
// recovered and the record dropped: it cannot unwind through C.
func WithLogger(fn func(level LogLevel, message string)) ContextOption {
	return func(c *contextConfig) error {
		c.logger = fn
		return nil
	}
}

// WithCUDA(false) skips loading the CUDA backend: the context is CPU-only.
func WithCUDA(enable bool) ContextOption {
	return func(c *contextConfig) error { return capi.Context_options_set_enable_cuda(c.opts, boolInt(enable)) }
}

// Context owns the backends and the random generator; everything else is
// created from one. Safe for concurrent use.
type Context struct {
	handle
	// log is the logger's cgo.Handle, or nil. Objects made from the context
	// point at the Context, so it (and log with its finalizer) outlives
	// every native object that may still log through the callback.
	log *logHandle
}

// logHandle owns the cgo.Handle of a context's logger. Its finalizer runs
// only after the Context and every object made from it were collected, that
// is once nothing native can call the logger any more.
type logHandle struct{ h cgo.Handle }

// NewContext creates a context: the CPU backend and, when it loads, CUDA.
func NewContext(opts ...ContextOption) (*Context, error) {
	var cfg contextConfig
	if err := capi.Context_options_create(&cfg.opts); err != nil {
		return nil, err
	}
	defer capi.Context_options_release(cfg.opts)
	for _, opt := range opts {
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	var log *logHandle
	if cfg.logger != nil {
		log = &logHandle{cgo.NewHandle(cfg.logger)}
		runtime.SetFinalizer(log, func(l *logHandle) { l.h.Delete() })
		if err := capi.Context_options_set_log_callback(cfg.opts, logTrampoline, uintptr(log.h)); err != nil {
			return nil, err
		}
	}
	var h uintptr
	if err := capi.Context_create(cfg.opts, &h); err != nil {
		return nil, err
	}
	c := &Context{handle: handle{h: h}, log: log}
	runtime.SetFinalizer(c, (*Context).Close)
	return c, nil
}

// String is "Context(default device cpu)" (cuda:0 where CUDA is usable),
// or "Context(closed)".
func (c *Context) String() string {
	dev, err := c.DefaultDevice()
	return closedOr("Context", "default device "+dev.String(), err)
}

// Close releases the caller's reference; objects created from the context
// keep it alive until they are closed too. Closing twice does nothing.
func (c *Context) Close() { c.release(c, capi.Context_release) }

// SetSeed reseeds the generator (torch.manual_seed).
func (c *Context) SetSeed(seed uint64) error {
	defer runtime.KeepAlive(c)
	return capi.Context_set_seed(c.h, seed)
}

// closedOr is "kind(text)", or "kind(closed)" when one of the calls that made
// text failed: the object was closed, perhaps by another goroutine meanwhile.
func closedOr(kind, text string, errs ...error) string {
	for _, err := range errs {
		if err != nil {
			return kind + "(closed)"
		}
	}
	return kind + "(" + text + ")"
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
