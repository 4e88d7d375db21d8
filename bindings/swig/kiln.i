/*
 * The SWIG interface of kiln's Go binding (C# calls libkiln.so directly
 * through P/Invoke: bindings/csharp/generate.py).
 *
 * It produces a raw layer that mirrors kiln.h function for function; the
 * idiomatic layer (bindings/go/*.go) is written by hand over it. What this file guarantees to them:
 *
 *  - A failed kiln_status becomes the language's error inside the same
 *    native call: the C wrapper reads kiln_last_error() right after the
 *    failing function, on the same OS thread (the message is thread-local,
 *    and Go may move a goroutine to another thread between two cgo calls).
 *  - Handles cross as plain pointers (Go: uintptr), out-handles as pointers
 *    to them.
 *  - Buffers cross without per-element marshalling: Go slices pass their
 *    backing array.
 *  - int64_t stays 64-bit (Go: -intgosize 64 and int64).
 *  - Go: callbacks cross as a C function pointer and a cgo.Handle value
 *    (both uintptr), so C never holds a Go pointer.
 *
 * Regenerate with bindings/generate.sh; bindings/test.sh fails when the
 * committed output differs.
 */
%module kiln

%{
#include <string.h>
#include <kiln/kiln.h>
%}

%include <stdint.i>

/* The library's own export macro means nothing to SWIG. */
#define KILN_API

/* Raw names without the prefix: Go's capi.Tensor_ones. */
%rename("%(strip:[kiln_])s") "";

/* Callbacks (log records, fit progress) and communicators (data parallel
 * training) cross through the typemaps below: C function pointers and
 * cgo.Handle values, and communicators are handles like the others. */

/* Formatting a {kind, index} pair is done by each language itself; the
 * version triple is available as kiln_version_string. */
%ignore kiln_device_format;
%ignore kiln_version;

/* Enums and structs are written by hand in each language (idiomatic names;
 * the values and layouts are fixed by the ABI; Go's package reads the enum
 * values from kiln.h through cgo), so SWIG emits no types. */
%ignore kiln_status;
%ignore kiln_log_level;
%ignore kiln_device_kind;
%ignore kiln_device;
%ignore kiln_device_info;
%ignore kiln_dtype;
%ignore kiln_binary_op;
%ignore kiln_compare_op;
%ignore kiln_unary_op;
%ignore kiln_reduce_op;
%ignore kiln_layer_kind;
%ignore kiln_predict_kind;
%ignore kiln_loss_kind;
%ignore kiln_optimizer_kind;
%ignore kiln_lr_schedule;
%ignore kiln_precision;
%ignore kiln_fast_path;
%ignore kiln_progress_phase;
%ignore kiln_progress;
%ignore kiln_log_record;
%ignore kiln_epoch_stats;
%rename("$ignore", %$isenumitem) "";

%define KILN_ENUMS kiln_log_level, kiln_device_kind, kiln_dtype, kiln_binary_op, kiln_compare_op, kiln_unary_op,
  kiln_reduce_op, kiln_layer_kind, kiln_predict_kind, kiln_loss_kind, kiln_optimizer_kind, kiln_lr_schedule,
  kiln_precision, kiln_status status
%enddef

/* ===================================================================== Go */
#ifdef SWIGGO

/* pkg-config finds libkiln and kiln.h: an installed kiln's kiln.pc, or the
 * build tree's (which points at the build tree) through PKG_CONFIG_PATH. */
%insert(cgo_comment_typedefs) %{
#cgo pkg-config: kiln
%}

%insert(go_wrapper) %{
// Status is a kiln_status code. Its String and Error are the library's
// name for it (kiln_status_name), "KILN_ERROR_UNKNOWN" for a code newer than
// the loaded library. A Status is an error so that errors.Is(err, status)
// can match an *Error by its code.
type Status int

// String is the library's name for s, e.g. "KILN_ERROR_BUSY".
func (s Status) String() string { return Status_name(int(s)) }

// Error is String: a Status is the target of errors.Is.
func (s Status) Error() string { return s.String() }

// Error is a failed kiln call: its kiln_status code and the message
// kiln_last_error() gave right after it, on the same thread.
type Error struct {
	Status  Status
	Message string
	// Err is the Go error behind the failure where the binding knows one,
	// else nil: an *fs.PathError wrapping fs.ErrNotExist when a file that
	// kiln could not open does not exist.
	Err error
}

// Unwrap is Err, so errors.Is(err, fs.ErrNotExist) sees through an *Error.
func (e *Error) Unwrap() error { return e.Err }

// Error is "STATUS_NAME: message".
func (e *Error) Error() string {
	return e.Status.String() + ": " + e.Message
}

// Is reports whether target is the Status of e, for errors.Is.
func (e *Error) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.Status
}

// Device mirrors struct kiln_device (same field sizes and alignment).
type Device struct {
	Kind  int32
	Index int64
}

// DeviceInfo mirrors struct kiln_device_info.
type DeviceInfo struct {
	StructSize          uint32
	Device              Device
	Name                [256]byte
	TotalMemory         int64
	FreeMemory          int64
	ComputeMajor        int64
	ComputeMinor        int64
	MultiprocessorCount int64
	DriverVersion       int64
	RuntimeVersion      int64
	Threads             int64
}

// EpochStats mirrors struct kiln_epoch_stats.
type EpochStats struct {
	StructSize       uint32
	Epoch            int64
	TrainLoss        float64
	TrainAccuracy    float64
	ValLoss          float64
	ValAccuracy      float64
	HasValidation    int32
	Seconds          float64
	SamplesPerSecond float64
	Lr               float64
}
%}

/* kiln_status: "" on success, else one byte of status code followed by the
 * message, copied from kiln_last_error() before the wrapper returns. */
%typemap(gotype) kiln_status "error"
%typemap(imtype) kiln_status "string"
%typemap(out, fragment="AllocateString") kiln_status %{
  if ($1 == KILN_OK) {
    $result.p = NULL;
    $result.n = 0;
  } else {
    const char *swig_msg = kiln_last_error();
    size_t swig_len = strlen(swig_msg);
    char *swig_buf = (char *)malloc(swig_len + 1);
    if (swig_buf) {
      swig_buf[0] = (char)$1;
      memcpy(swig_buf + 1, swig_msg, swig_len);
      $result.p = swig_buf;
      $result.n = (intgo)(swig_len + 1);
    } else {
      static char swig_oom[1];
      swig_oom[0] = (char)KILN_ERROR_OUT_OF_MEMORY;
      $result.p = swig_oom; /* not freed: see goout's len check below */
      $result.n = 1;
    }
  }
%}
%typemap(goout, fragment="CopyString") kiln_status %{
	if len($1) == 0 {
		$result = nil
	} else if len($1) == 1 {
		$result = &Error{Status: Status($1[0]), Message: "out of memory reporting an error"}
	} else {
		swig_s := swigCopyString($1)
		$result = &Error{Status: Status(swig_s[0]), Message: swig_s[1:]}
	}
%}

/* Enums by value are ints; enum out-parameters are int32 (C's enum size). */
%apply int { KILN_ENUMS };
%typemap(imtype) kiln_status status "int"
%typemap(gotype) kiln_dtype *out "*int32"
%typemap(in) kiln_dtype *out %{ $1 = ($1_ltype)$input; %}

/* A bit set of kiln_fast_path values: uint32, not SWIG's default uint (64-bit
 * with -intgosize 64), so no Go value is silently truncated on the way in. */
%typemap(gotype) uint32_t enabled "uint32"

/* Handles are uintptr (never Go pointers, so cgocheck has nothing to object
 * to); out-handles are *uintptr into Go memory that holds no Go pointer. */
%define KILN_GO_HANDLE(T)
%typemap(gotype) T *, const T * "uintptr"
%typemap(in) T *, const T * %{ $1 = ($1_ltype)$input; %}
%typemap(gotype) T ** "*uintptr"
%typemap(in) T ** %{ $1 = ($1_ltype)$input; %}
%enddef
KILN_GO_HANDLE(kiln_context_options)
KILN_GO_HANDLE(kiln_context)
KILN_GO_HANDLE(kiln_tensor)
KILN_GO_HANDLE(kiln_model_spec)
KILN_GO_HANDLE(kiln_model)
KILN_GO_HANDLE(kiln_dataset)
KILN_GO_HANDLE(kiln_trainer_options)
KILN_GO_HANDLE(kiln_trainer)
KILN_GO_HANDLE(kiln_history)
KILN_GO_HANDLE(kiln_communicator)

/* Callbacks: a C function pointer (a cgo trampoline of package kiln) and a
 * cgo.Handle as the user pointer, both uintptr; no Go pointer reaches C. */
%typemap(gotype) kiln_progress_fn callback, kiln_log_fn fn, void *user "uintptr"
%typemap(in) kiln_progress_fn callback, kiln_log_fn fn, void *user %{ $1 = ($1_ltype)$input; %}

/* An array of devices: a slice of Device, whose layout is kiln_device's. */
%typemap(gotype) (const kiln_device *devices, int64_t count) "[]Device"
%typemap(in) (const kiln_device *devices, int64_t count) %{ $1 = ($1_ltype)$input.array; $2 = ($2_ltype)$input.len; %}

/* A device by value crosses as a two-element []int64 {kind, index}: SWIG's
 * cgo mode has no by-value struct parameter, and a slice is the one way to
 * hand C a pointer to Go memory that cgo knows about. Out-structs are
 * pointers to Go structs laid out as the C ones. */
%typemap(gotype) kiln_device "Device"
%typemap(imtype) kiln_device "[]int64"
%typemap(goin) kiln_device "$result = []int64{int64($input.Kind), $input.Index}"
%typemap(in) kiln_device %{
  $1.kind = (kiln_device_kind)((const int64_t *)$input.array)[0];
  $1.index = ((const int64_t *)$input.array)[1];
%}
%typemap(gotype) kiln_device *out "*Device"
%typemap(in) kiln_device *out %{ $1 = ($1_ltype)$input; %}
%typemap(gotype) kiln_device_info *out "*DeviceInfo"
%typemap(in) kiln_device_info *out %{ $1 = ($1_ltype)$input; %}
%typemap(gotype) kiln_epoch_stats *out "*EpochStats"
%typemap(in) kiln_epoch_stats *out %{ $1 = ($1_ltype)$input; %}

/* Scalar out-parameters: pointers to Go variables (nil allowed where kiln.h
 * allows NULL). */
%typemap(gotype) int64_t *out "*int64"
%typemap(gotype) double *out, double *loss, double *accuracy "*float64"
%typemap(gotype) int *out "*int32"
%typemap(in) int64_t *out, double *out, double *loss, double *accuracy, int *out %{ $1 = ($1_ltype)$input; %}

/* String arguments are a Text, which only TextOf makes, and only of a
 * string without a NUL byte: C would read such a string up to the NUL, which
 * is another path, device or spec than the caller's. So no string argument,
 * today's or one a new kiln.h adds, reaches C unchecked. The strings that
 * kiln returns stay strings (for a return value SWIG matches the function's
 * name; a new function returning one fails to compile until it is named
 * here). */
%insert(go_wrapper) %{
// Text is a string argument of a kiln function: made by TextOf alone.
type Text struct{ s string }

// TextOf is s as a Text, and false where s holds a NUL byte.
func TextOf(s string) (Text, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return Text{}, false
		}
	}
	return Text{s}, true
}
%}
%typemap(gotype) const char * "Text"
%typemap(imtype) const char * "string"
%typemap(goin) const char * "$result = $input.s"
%typemap(gotype) const char *kiln_version_string, const char *kiln_status_name, const char *kiln_last_error,
                 const char *kiln_dtype_name "string"

/* Owned strings: copied into Go memory within the call. */
%typemap(gotype) const char **out "*string"
%typemap(in) const char **out (const char *swig_str = NULL) %{ $1 = ($1_ltype)&swig_str; %}
%typemap(argout, fragment="AllocateString") const char **out %{
  if (swig_str$argnum && *swig_str$argnum) {
    *(_gostring_ *)$input = Swig_AllocateString(swig_str$argnum, strlen(swig_str$argnum));
  } else {
    ((_gostring_ *)$input)->p = NULL;
    ((_gostring_ *)$input)->n = 0;
  }
%}
%typemap(goargout, fragment="CopyString") const char **out %{
	if len(*$input) > 0 {
		*$input = swigCopyString(*$input)
	}
%}

/* Arrays: slices, passed as their backing array and length. */
%typemap(gotype) (const int64_t *shape, int64_t ndim), (int64_t *shape, int64_t capacity),
                 (const int64_t *sizes, int64_t n) "[]int64"
%typemap(gotype) (const void *data, int64_t nbytes), (void *data, int64_t nbytes) "[]byte"
%typemap(in) (const int64_t *shape, int64_t ndim), (int64_t *shape, int64_t capacity),
             (const int64_t *sizes, int64_t n), (const void *data, int64_t nbytes), (void *data, int64_t nbytes)
%{ $1 = ($1_ltype)$input.array; $2 = ($2_ltype)$input.len; %}

#endif /* SWIGGO */

/* ===================================================================== C# */
#ifdef SWIGCSHARP

%pragma(csharp) moduleclassmodifiers="internal static class"

/* With SWIGWORDSIZE64, int64_t is C long, which SWIG's C# maps to a 32-bit
 * int: keep it 64-bit. */
%apply long long { int64_t };
%apply unsigned long long { uint64_t };
/* A kiln_fast_path bit set is the [Flags] enum FastPath (Native.cs), whose
 * underlying type is uint like uint32_t's. */
%typemap(ctype) uint32_t enabled "uint32_t"
%typemap(imtype) uint32_t enabled "FastPath"
%typemap(cstype) uint32_t enabled "FastPath"
%typemap(csin) uint32_t enabled "$csinput"
%pragma(csharp) imclassclassmodifiers="internal class"

/* kiln_status: a KilnException set as SWIG's pending exception inside the
 * native call (with kiln_last_error() read there) and thrown on return. */
%insert(runtime) %{
typedef void (SWIGSTDCALL *KilnExceptionCallback)(int status, const char *message);
static KilnExceptionCallback kiln_exception_callback = NULL;

#ifdef __cplusplus
extern "C"
#endif
SWIGEXPORT void SWIGSTDCALL KilnRegisterExceptionCallback(KilnExceptionCallback callback) {
  kiln_exception_callback = callback;
}
%}

%pragma(csharp) imclasscode=%{
  protected class KilnExceptionHelper {
    public delegate void KilnExceptionDelegate(int status, string message);
    static KilnExceptionDelegate kilnDelegate = new KilnExceptionDelegate(SetPending);

    [global::System.Runtime.InteropServices.DllImport("$dllimport", EntryPoint="KilnRegisterExceptionCallback")]
    public static extern void KilnRegisterExceptionCallback(KilnExceptionDelegate callback);

    static void SetPending(int status, string message) {
      SWIGPendingException.Set(new KilnException((Status)status, message));
    }

    static KilnExceptionHelper() {
      KilnRegisterExceptionCallback(kilnDelegate);
    }
  }
  static protected KilnExceptionHelper kilnExceptionHelper = new KilnExceptionHelper();
%}

%typemap(ctype) kiln_status "int"
%typemap(imtype) kiln_status "int"
%typemap(cstype) kiln_status "void"
%typemap(out, canthrow=1) kiln_status %{
  $result = (int)$1;
  if ($1 != KILN_OK) kiln_exception_callback((int)$1, kiln_last_error());
%}
%typemap(csout, excode=SWIGEXCODE) kiln_status {
    $imcall;$excode
  }

/* Enums: the hand-written C# enums, marshalled as their int values. */
%define KILN_CS_ENUM(T, E)
%typemap(ctype) T "int"
%typemap(imtype) T "E"
%typemap(cstype) T "E"
%typemap(csin) T "$csinput"
%typemap(in) T %{ $1 = ($1_ltype)$input; %}
%enddef
KILN_CS_ENUM(kiln_log_level, LogLevel)
KILN_CS_ENUM(kiln_device_kind, DeviceKind)
KILN_CS_ENUM(kiln_dtype, DType)
KILN_CS_ENUM(kiln_binary_op, BinaryOp)
KILN_CS_ENUM(kiln_compare_op, CompareOp)
KILN_CS_ENUM(kiln_unary_op, UnaryOp)
KILN_CS_ENUM(kiln_reduce_op, ReduceOp)
KILN_CS_ENUM(kiln_layer_kind, LayerKind)
KILN_CS_ENUM(kiln_predict_kind, PredictKind)
KILN_CS_ENUM(kiln_loss_kind, LossKind)
KILN_CS_ENUM(kiln_optimizer_kind, OptimizerKind)
KILN_CS_ENUM(kiln_lr_schedule, LrSchedule)
KILN_CS_ENUM(kiln_precision, Precision)
KILN_CS_ENUM(kiln_status status, Status)

/* Handles: SafeHandle subclasses (Handles.cs), which the marshaller keeps
 * alive and referenced for the duration of each call. */
%define KILN_CS_HANDLE(T, H)
%typemap(ctype) T *, const T * "void *"
%typemap(imtype) T *, const T * "H"
%typemap(cstype) T *, const T * "H"
%typemap(csin) T *, const T * "$csinput"
%typemap(in) T *, const T * %{ $1 = ($1_ltype)$input; %}
%typemap(ctype) T ** "void **"
%typemap(imtype) T ** "out H"
%typemap(cstype) T ** "out H"
%typemap(csin) T ** "out $csinput"
%typemap(in) T ** %{ $1 = ($1_ltype)$input; %}
%enddef
KILN_CS_HANDLE(kiln_context_options, ContextOptionsHandle)
KILN_CS_HANDLE(kiln_context, ContextHandle)
KILN_CS_HANDLE(kiln_tensor, TensorHandle)
KILN_CS_HANDLE(kiln_model_spec, ModelSpecHandle)
KILN_CS_HANDLE(kiln_model, ModelHandle)
KILN_CS_HANDLE(kiln_dataset, DatasetHandle)
KILN_CS_HANDLE(kiln_trainer_options, TrainerOptionsHandle)
KILN_CS_HANDLE(kiln_trainer, TrainerHandle)
KILN_CS_HANDLE(kiln_history, HistoryHandle)

/* Release functions are declared in Handles.cs straight from libkiln: a
 * SafeHandle calls them with its raw pointer once it can no longer be
 * marshalled itself, and they cannot fail. */
%ignore kiln_context_options_release;
%ignore kiln_context_release;
%ignore kiln_tensor_release;
%ignore kiln_model_spec_release;
%ignore kiln_model_release;
%ignore kiln_dataset_release;
%ignore kiln_trainer_options_release;
%ignore kiln_trainer_release;
%ignore kiln_history_release;

/* Structs: blittable C# structs (Structs.cs) by value, out or ref. */
%define KILN_CS_STRUCT(T, S, DIR)
%typemap(ctype) T "T"
%typemap(imtype) T "S"
%typemap(cstype) T "S"
%typemap(csin) T "$csinput"
%typemap(in) T %{ $1 = $input; %}
%typemap(ctype) T *out "T *"
%typemap(imtype) T *out "DIR S"
%typemap(cstype) T *out "DIR S"
%typemap(csin) T *out "DIR $csinput"
%typemap(in) T *out %{ $1 = $input; %}
%enddef
KILN_CS_STRUCT(kiln_device, Device, out)
/* struct_size is set by the caller, so these go in and out. */
KILN_CS_STRUCT(kiln_device_info, DeviceInfo, ref)
KILN_CS_STRUCT(kiln_epoch_stats, EpochStats, ref)

/* Scalar out-parameters. */
%define KILN_CS_OUT(CT, NAME, CS)
%typemap(ctype) CT *NAME "CT *"
%typemap(imtype) CT *NAME "out CS"
%typemap(cstype) CT *NAME "out CS"
%typemap(csin) CT *NAME "out $csinput"
%typemap(in) CT *NAME %{ $1 = $input; %}
%enddef
KILN_CS_OUT(int64_t, out, long)
KILN_CS_OUT(double, out, double)
KILN_CS_OUT(double, loss, double)
KILN_CS_OUT(double, accuracy, double)
KILN_CS_OUT(int, out, int)
KILN_CS_OUT(kiln_dtype, out, DType)

/* Owned strings: the pointer comes back and the post-call code copies it
 * while the owner is still referenced (the caller keeps it alive). */
%typemap(ctype) const char **out "const char **"
%typemap(imtype) const char **out "out global::System.IntPtr"
%typemap(cstype) const char **out "out string"
%typemap(csin, pre="    global::System.IntPtr swig_$csinput = global::System.IntPtr.Zero;",
         post="      $csinput = global::System.Runtime.InteropServices.Marshal.PtrToStringAnsi(swig_$csinput);")
  const char **out "out swig_$csinput"
%typemap(in) const char **out %{ $1 = ($1_ltype)$input; %}

/* Arrays: int64 arrays are pinned by the marshaller (blittable); raw data
 * is an IntPtr the hand-written layer pins (Tensor.cs). */
%define KILN_CS_LONGS(name)
%typemap(ctype) int64_t *name, const int64_t *name "int64_t *"
%typemap(imtype) int64_t *name, const int64_t *name "long[]"
%typemap(cstype) int64_t *name, const int64_t *name "long[]"
%typemap(csin) int64_t *name, const int64_t *name "$csinput"
%typemap(in) int64_t *name, const int64_t *name %{ $1 = ($1_ltype)$input; %}
%enddef
KILN_CS_LONGS(shape)
KILN_CS_LONGS(sizes)
%apply void *VOID_INT_PTR { void *data, const void *data };

#endif /* SWIGCSHARP */

%include <kiln/kiln.h>
