/*
 * kiln — train and run multilayer perceptrons on NVIDIA GPUs or the CPU.
 *
 * This is the whole public C API. Conventions that hold for every function
 * below unless its comment says otherwise:
 *
 *  - Fallible functions return kiln_status; KILN_OK (0) means success.
 *    On failure, every out-parameter is set to NULL / 0 (when the pointer
 *    itself is not NULL), nothing is left allocated, the objects passed in
 *    are unchanged (unless the comment says what a failure leaves) and stay
 *    usable, and kiln_last_error() describes what went wrong in one line of
 *    at most 1024 bytes of UTF-8: input it quotes (a spec, a name, a path,
 *    a model's description) is cut short, saying how many bytes were left
 *    out, and shows control characters and bytes that are not UTF-8 as '?';
 *    a message still too long keeps its start and its end (where the reason
 *    is) and says how much of its middle it left out. Ignoring the status is
 *    a compiler warning (KILN_NODISCARD).
 *  - Statuses every function may return, not repeated below:
 *      INVALID_ARGUMENT  a required pointer (handle, out-parameter, buffer,
 *                        string) is NULL, or an enum argument holds a value
 *                        outside its enumerators;
 *      INVALID_HANDLE    a handle that was released, never came from kiln,
 *                        or is of another type;
 *      OUT_OF_MEMORY     any function that allocates (host or device).
 *    Each comment lists the statuses particular to its function.
 *  - Ownership: a handle returned through `kiln_X **out` is new and the
 *    caller's, to release once with kiln_X_release, even when it refers to
 *    an object the caller already holds (kiln_tensor_to, the *_retain
 *    functions). Arguments are borrowed for the call only, unless the comment
 *    says the new object keeps them (a model its context, a dataset its
 *    tensors, a trainer its model).
 *  - Sizes, counts, dimensions and indices are int64_t. Booleans are int.
 *  - Handles are opaque and reference-counted inside: releasing a handle drops
 *    the caller's reference; objects that depend on it (a trainer on its model,
 *    a tensor on its context) keep it alive. kiln_*_release(NULL) does nothing,
 *    and so does releasing a handle twice. A released or foreign handle passed
 *    back yields KILN_ERROR_INVALID_HANDLE, always: handles are never-reused
 *    identifiers, not addresses, so a released handle can never come back as
 *    a new object. A process may create 2^48 - 1 handles in its life (8.9
 *    years at a million a second); past that, every function that returns a
 *    new handle fails with KILN_ERROR_OUT_OF_MEMORY. Every call holds a
 *    reference to the object of each handle it was given until it returns:
 *    a release while other threads (or a callback of the same call) are
 *    inside calls with the handle lets those calls finish with the object;
 *    later calls with that handle get KILN_ERROR_INVALID_HANDLE.
 *    To share an object between owners that release it on their own (one
 *    thread each), give each its own handle: kiln_context_retain,
 *    kiln_tensor_retain, kiln_model_retain, kiln_dataset_retain,
 *    kiln_trainer_retain, kiln_history_retain and kiln_communicator_retain
 *    return a new handle to the same object. Each handle is released once;
 *    releasing one leaves the others valid, and the object lives until the
 *    last handle (and every object that depends on it) is released. The
 *    builders (context and trainer options, model specs) have no retain:
 *    they are filled in by one thread and copied by the calls that use them.
 *  - Buffers are passed as (pointer, count) and copied during the call; kiln
 *    never keeps a caller's pointer after a call returns. The one exception
 *    is zero-copy DLPack exchange (kiln/dlpack.h): kiln_tensor_from_dlpack
 *    keeps the producer's memory and calls its deleter when done.
 *  - Files: readers open only regular files (a FIFO, device node or
 *    directory gives KILN_ERROR_IO "not a regular file" at once). Writers
 *    replace files atomically (temporary file, fsync, rename): a crash or a
 *    kill leaves the old file or the complete new one, and the next save of
 *    the same path removes temporaries that dead writers left. They replace
 *    only regular files (any other existing file type: KILN_ERROR_IO, left
 *    untouched); a symbolic link is followed and the file it names replaced.
 *  - Strings returned through `const char **` are owned by the object they
 *    came from and stay valid until that object is released.
 *  - No C++ exception, abort or exit crosses this boundary.
 *
 * Threads: a context, a model used for inference (kiln_model_forward,
 * kiln_model_predict), a dataset, a history and tensors that are only read
 * may be used by several threads at once. A trainer, a model being changed
 * (kiln_model_to, _set_training, _load_weights, writes to its parameters, a
 * trainer's steps), a tensor being written, and the builders (context
 * options, model specs, trainer options) are used by one thread at a time:
 * kiln does not lock them, and concurrent use is undefined. So is a
 * communicator together with the trainers attached to it (every rank must
 * make its collectives in the same order); different communicators may be
 * used by different threads at once (kiln_communicator_create_mpi says how).
 * Every release and retain function may be called from any thread. kiln's
 * own CPU worker threads are those a context asks for
 * (kiln_context_options_set_num_threads); OpenBLAS, which libkiln loads on
 * the first context, starts none (it runs single-threaded inside the calls
 * that use it). Other threads come only with what the host asks for: the
 * CUDA runtime's and Open MPI's.
 *
 * Limits, each refused with the status named before anything is allocated:
 *  - tensors: at most KILN_MAX_DIMS dimensions, each >= 0, and a size in
 *    bytes that fits int64, counted over the non-zero dimensions (so an
 *    empty tensor's other dimensions are bounded too; INVALID_ARGUMENT, for
 *    a view from kiln_tensor_reshape as well); on the CPU a matrix product
 *    with a dimension above 2^31 - 1 is NOT_SUPPORTED (OpenBLAS's int);
 *  - models: at most KILN_MAX_PARAMETERS parameters in all (INVALID_ARGUMENT,
 *    from a spec or a file), so layers and widths are bounded by that total;
 *  - files: a safetensors header of at most 100 MB and JSON nested at most
 *    16 deep (FORMAT); a torch.save pickle of at most 64 MiB building at
 *    most 2^21 objects (FORMAT); an IDX .gz file or a deflated zip record
 *    that claims more than 1032 times its size (deflate's limit) is FORMAT
 *    before it is inflated; a file is read in full, so its size is bounded
 *    by memory (OUT_OF_MEMORY);
 *  - counters: epochs and steps below 2^62 (fit: INVALID_ARGUMENT;
 *    checkpoints: FORMAT);
 *  - threads: at most 1024 per context (INVALID_ARGUMENT).
 */
#ifndef KILN_KILN_H
#define KILN_KILN_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) && defined(KILN_BUILDING_LIBRARY)
#  define KILN_API __declspec(dllexport)
#elif defined(_WIN32)
#  define KILN_API __declspec(dllimport)
#elif defined(KILN_BUILDING_LIBRARY)
#  define KILN_API __attribute__((visibility("default")))
#else
#  define KILN_API
#endif

/* Marks every function that returns a kiln_status: ignoring the status of a
 * call that can fail is a bug, and the compiler says so. [[nodiscard]] in
 * C23 and C++17 (a (void) cast silences it); GCC's and Clang's
 * warn_unused_result before that (GCC's is not silenced by a (void) cast:
 * test the status). An attribute only: symbols and calling convention are
 * the same with or without it. Define KILN_NODISCARD yourself before
 * including this header to override it. */
#ifndef KILN_NODISCARD
#  if defined(SWIG)
#    define KILN_NODISCARD
#  elif defined(__cplusplus) && (__cplusplus >= 201703L || (defined(_MSVC_LANG) && _MSVC_LANG >= 201703L))
#    define KILN_NODISCARD [[nodiscard]]
#  elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ > 201710L
#    define KILN_NODISCARD [[nodiscard]]
#  elif defined(__GNUC__) || defined(__clang__)
#    define KILN_NODISCARD __attribute__((__warn_unused_result__))
#  else
#    define KILN_NODISCARD
#  endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * Versions and status
 * ====================================================================== */

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
/* Bumped only when a published signature or struct layout breaks; equals the
 * number in the SONAME (libkiln.so.N). */
#define KILN_ABI_VERSION 1

/* The library's version as "MAJOR.MINOR.PATCH". Static storage, never to be
 * freed; never fails. Any thread, before or without a context. */
KILN_API const char *kiln_version_string(void);
/* The library's version numbers; NULL out-pointers are skipped. Never fails. */
KILN_API void kiln_version(int *major, int *minor, int *patch);
/* The ABI version of the loaded library; compare with KILN_ABI_VERSION.
 * Never fails; any thread. */
KILN_API int kiln_abi_version(void);

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1,   /* NULL pointer, bad value, bad string */
  KILN_ERROR_INVALID_HANDLE = 2,     /* released, foreign or wrong-type handle */
  KILN_ERROR_SHAPE_MISMATCH = 3,     /* shapes that do not fit together */
  KILN_ERROR_DTYPE_MISMATCH = 4,     /* dtypes that do not fit the operation */
  KILN_ERROR_DEVICE_UNAVAILABLE = 5, /* no such device, no driver, no plugin */
  KILN_ERROR_OUT_OF_MEMORY = 6,      /* host or device allocation failed */
  KILN_ERROR_IO = 7,                 /* a file could not be opened/read/written */
  KILN_ERROR_FORMAT = 8,             /* a file's contents are malformed */
  KILN_ERROR_NOT_SUPPORTED = 9,      /* valid request this build/device cannot do */
  KILN_ERROR_CANCELLED = 10,         /* a callback asked to stop */
  KILN_ERROR_BACKEND = 11,           /* CUDA, cuBLAS, cuDNN or BLAS failure */
  KILN_ERROR_INTERNAL = 12,          /* a bug in kiln: please report it */
  KILN_ERROR_BUSY = 13,              /* the object is inside another call (e.g. a
                                        trainer called from its own callback) */
  KILN_ERROR_NUMERIC = 14,           /* training diverged: a loss that is NaN or infinite */
  KILN_ERROR_COMMUNICATION = 15      /* a collective across ranks failed: a peer died or timed out */
} kiln_status;

/* A constant name for a status, e.g. "KILN_ERROR_SHAPE_MISMATCH". Static
 * storage, never to be freed; unknown values give "KILN_ERROR_UNKNOWN".
 * Never fails; any thread. */
KILN_API const char *kiln_status_name(kiln_status status);

/* The message of the last failed call on the calling thread ("" when none
 * failed yet). Thread-local storage, valid until the next kiln call on this
 * thread. Successful calls do not clear it. */
KILN_API const char *kiln_last_error(void);

/* ======================================================================
 * Context
 * ====================================================================== */

typedef struct kiln_context kiln_context;
typedef struct kiln_context_options kiln_context_options;

typedef enum kiln_log_level {
  KILN_LOG_DEBUG = 0,
  KILN_LOG_INFO = 1,
  KILN_LOG_WARNING = 2,
  KILN_LOG_ERROR = 3,
  KILN_LOG_OFF = 4
} kiln_log_level;

/* What a log callback receives. Valid only during the callback. */
typedef struct kiln_log_record {
  uint32_t struct_size; /* sizeof(kiln_log_record) of the library */
  kiln_log_level level;
  const char *message;  /* one line, no trailing newline */
} kiln_log_record;

/* Called for each log record at or above the context's level, on the thread
 * that produced it (any thread using the context); its return value is
 * ignored. It must not call back into kiln with the same context. */
typedef int (*kiln_log_fn)(void *user, const kiln_log_record *record);

/* Options for kiln_context_create, with defaults: seed 0, as many CPU threads
 * as cores, log level WARNING, no callback (records go to stderr), load the
 * CUDA plugin. The caller owns *out; release it with
 * kiln_context_options_release. The setters below change only the options
 * object (one thread at a time), never a context made from it before. */
KILN_NODISCARD KILN_API kiln_status kiln_context_options_create(kiln_context_options **out);
/* Drops the options; contexts made from them keep their copy. */
KILN_API void kiln_context_options_release(kiln_context_options *options);
/* Any seed is valid; the same seed gives the same draws on every device. */
KILN_NODISCARD KILN_API kiln_status kiln_context_options_set_seed(kiln_context_options *options, uint64_t seed);
/* The context's CPU worker threads, the caller's included: 1..1024, or 0 for
 * one per core the process may run on (INVALID_ARGUMENT otherwise). With
 * more than one, each compiled CPU step of a trainer (a training or
 * evaluation step) times itself now and then on all of them and on the
 * calling thread alone, and runs the faster way until the next trial: a
 * short step, or a machine busy with other work, can run faster on one.
 * The results are the same bits either way. */
KILN_NODISCARD KILN_API kiln_status kiln_context_options_set_num_threads(kiln_context_options *options,
                                                                         int64_t threads);
/* Records below level are dropped; KILN_LOG_OFF drops all. */
KILN_NODISCARD KILN_API kiln_status kiln_context_options_set_log_level(kiln_context_options *options,
                                                                       kiln_log_level level);
/* fn may be NULL to log to stderr again. user is passed back untouched. */
KILN_NODISCARD KILN_API kiln_status kiln_context_options_set_log_callback(kiln_context_options *options, kiln_log_fn fn,
                                                                          void *user);
/* enable = 0 makes the context CPU-only: it neither loads the CUDA plugin
 * nor uses the one another context loaded. */
KILN_NODISCARD KILN_API kiln_status kiln_context_options_set_enable_cuda(kiln_context_options *options, int enable);

/* Creates a context: its own CPU backend and, if it loads, the CUDA backend.
 * The CUDA plugin (libkiln_cuda.so from libkiln's own directory, or from the
 * directory in the environment variable KILN_BACKEND_PATH, read at that
 * moment) is loaded once per process, by the first context that asks for
 * CUDA, and stays loaded until the process exits, even when every context is
 * released. All contexts share one CUDA backend per device (one memory pool
 * per device), and all see the same availability and reason. options may be
 * NULL for defaults; it is copied. A missing plugin or driver is not an
 * error: the context is then CPU-only and kiln_cuda_unavailable_reason says
 * why. Until a context has loaded OpenBLAS, creating one loads it:
 * BACKEND when it cannot be found or lacks a function kiln needs,
 * OUT_OF_MEMORY when it does not fit under the process's address-space
 * limit (ulimit -v). */
KILN_NODISCARD KILN_API kiln_status kiln_context_create(const kiln_context_options *options, kiln_context **out);
/* Drops the caller's handle; the context lives on while tensors, models,
 * datasets or other handles (kiln_context_retain) refer to it. */
KILN_API void kiln_context_release(kiln_context *ctx);
/* A new handle to the same context, for another owner (a thread that keeps its
 * own reference): see "Handles" above. *out is the caller's, released
 * with kiln_context_release. INVALID_HANDLE for a released context, INVALID_ARGUMENT
 * for NULL out. Any thread. */
KILN_NODISCARD KILN_API kiln_status kiln_context_retain(kiln_context *ctx, kiln_context **out);
/* Reseeds the context's generator (torch.manual_seed). Affects rand, randn,
 * model initialisation and, through them, everything seeded from the context.
 * Any seed is valid. Not while another thread draws from the context (the
 * draws would then depend on the order of the calls). */
KILN_NODISCARD KILN_API kiln_status kiln_context_set_seed(kiln_context *ctx, uint64_t seed);

/* ======================================================================
 * Devices
 * ====================================================================== */

typedef enum kiln_device_kind { KILN_DEVICE_CPU = 0, KILN_DEVICE_CUDA = 1 } kiln_device_kind;

/* A device: {KILN_DEVICE_CPU, -1} ("cpu"; index 0 is taken as the same
 * device, as "cpu:0" is) or {KILN_DEVICE_CUDA, N} ("cuda:N", 0 <= N <=
 * 2^31 - 1). */
typedef struct kiln_device {
  kiln_device_kind kind;
  int64_t index;
} kiln_device;

/* Parses "cpu", "cpu:0", "cuda" (= "cuda:0"), "cuda:N" (N in decimal
 * without leading zeros, as PyTorch reads it: "cuda:01" is malformed) or
 * "auto". "auto" is the first usable CUDA device, else the CPU, and needs
 * ctx; for the others ctx may be NULL (syntax only). With a ctx, a CUDA device that is not there
 * fails with KILN_ERROR_DEVICE_UNAVAILABLE and a message that says why (no
 * plugin, no driver, index out of range and how many there are). Malformed
 * text gives KILN_ERROR_INVALID_ARGUMENT. */
KILN_NODISCARD KILN_API kiln_status kiln_device_parse(kiln_context *ctx, const char *text, kiln_device *out);
/* Writes "cpu" or "cuda:N" with a terminating NUL into buf (buf_size bytes;
 * 32 fit every device). KILN_ERROR_INVALID_ARGUMENT if the device is
 * malformed (an unknown kind, a CPU index other than -1 or 0, a CUDA index
 * outside [0, 2^31 - 1]) or buf too small; buf is then "" when buf_size > 0.
 * Every string it writes, kiln_device_parse reads back as the same device.
 * Any thread. */
KILN_NODISCARD KILN_API kiln_status kiln_device_format(kiln_device device, char *buf, int64_t buf_size);

/* *out = 1 when the CUDA backend loaded and sees at least one device. The
 * plugin is loaded once per process by the first context that asks and stays
 * loaded, so every context that did not disable CUDA gives the same answer. */
KILN_NODISCARD KILN_API kiln_status kiln_cuda_is_available(kiln_context *ctx, int *out);
/* Why CUDA is not usable ("" when it is): the loader's or driver's message,
 * found once per process and the same for every context (or, for a context
 * made with enable_cuda = 0, that it was disabled). Without a driver it says
 * which of the two happened: "no CUDA driver: libcuda.so.1 not found (...)"
 * or "no CUDA driver: <path> was found but cuInit failed with CUDA_ERROR_..."
 * The string is owned by ctx. */
KILN_NODISCARD KILN_API kiln_status kiln_cuda_unavailable_reason(kiln_context *ctx, const char **out);
/* Number of devices of a kind: 1 for the CPU, 0..N for CUDA (0 without a
 * plugin or driver: not an error). */
KILN_NODISCARD KILN_API kiln_status kiln_device_count(kiln_context *ctx, kiln_device_kind kind, int64_t *out);
/* The "auto" device: cuda:0 when CUDA is usable, else the CPU. */
KILN_NODISCARD KILN_API kiln_status kiln_default_device(kiln_context *ctx, kiln_device *out);

typedef struct kiln_device_info {
  uint32_t struct_size;        /* set by the caller to sizeof(kiln_device_info) */
  kiln_device device;
  char name[256];              /* GPU name, or CPU model */
  int64_t total_memory;        /* bytes */
  int64_t free_memory;         /* bytes, at the time of the call */
  int64_t compute_major;       /* CUDA compute capability; 0 on the CPU */
  int64_t compute_minor;
  int64_t multiprocessor_count;/* SMs; logical cores on the CPU */
  int64_t driver_version;      /* CUDA driver version, e.g. 13000; 0 on the CPU */
  int64_t runtime_version;     /* CUDA runtime version; 0 on the CPU */
  int64_t threads;             /* CPU threads kiln uses; 0 for CUDA */
} kiln_device_info;

/* Fills *out (whose struct_size the caller sets; a smaller, older struct is
 * filled up to its size; INVALID_ARGUMENT below 24 bytes, the struct_size
 * and device fields that every version has).
 * DEVICE_UNAVAILABLE for a device the context does not have. */
KILN_NODISCARD KILN_API kiln_status kiln_device_get_info(kiln_context *ctx, kiln_device device, kiln_device_info *out);
/* Waits until all work kiln queued on the device is done (at once on the
 * CPU, whose calls finish before they return). DEVICE_UNAVAILABLE for a
 * device the context does not have; BACKEND when queued work failed. */
KILN_NODISCARD KILN_API kiln_status kiln_device_synchronize(kiln_context *ctx, kiln_device device);

/* ======================================================================
 * Tensors
 * ====================================================================== */

typedef struct kiln_tensor kiln_tensor;

typedef enum kiln_dtype {
  KILN_F32 = 0,
  KILN_F16 = 1,
  KILN_BF16 = 2,
  KILN_F64 = 3,
  KILN_I32 = 4,
  KILN_I64 = 5,
  KILN_U8 = 6
} kiln_dtype;

#define KILN_MAX_DIMS 8
/* The most parameters (weights and biases, all layers) a model spec may
 * describe: larger specs, from a caller or a file, are refused with
 * KILN_ERROR_INVALID_ARGUMENT before anything is allocated. */
#define KILN_MAX_PARAMETERS (INT64_C(1) << 40)

/* "f32", "f16", ...; NULL for an unknown value. Static storage. Never fails;
 * any thread. */
KILN_API const char *kiln_dtype_name(kiln_dtype dtype);
/* Bytes per element; 0 for an unknown value. Never fails; any thread. */
KILN_API int64_t kiln_dtype_size(kiln_dtype dtype);

/* Creation. shape has ndim entries (0 <= ndim <= KILN_MAX_DIMS, each >= 0,
 * shape may be NULL when ndim is 0: a scalar); the tensor is contiguous,
 * row-major, on device, and owned by the caller. empty leaves the contents
 * undefined; zeros, ones and full fill them. Errors: INVALID_ARGUMENT (bad
 * shape/dtype, a full value that for an integer dtype is not finite or is
 * outside its range once truncated; a float dtype takes any value, NaN and
 * infinities included, rounded to it), DEVICE_UNAVAILABLE (a device the
 * context does not have), OUT_OF_MEMORY (the context stays usable). Any
 * thread. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_empty(kiln_context *ctx, const int64_t *shape, int64_t ndim,
                                                      kiln_dtype dtype, kiln_device device, kiln_tensor **out);
KILN_NODISCARD KILN_API kiln_status kiln_tensor_zeros(kiln_context *ctx, const int64_t *shape, int64_t ndim,
                                                      kiln_dtype dtype, kiln_device device, kiln_tensor **out);
KILN_NODISCARD KILN_API kiln_status kiln_tensor_ones(kiln_context *ctx, const int64_t *shape, int64_t ndim,
                                                     kiln_dtype dtype, kiln_device device, kiln_tensor **out);
KILN_NODISCARD KILN_API kiln_status kiln_tensor_full(kiln_context *ctx, const int64_t *shape, int64_t ndim,
                                                     kiln_dtype dtype, kiln_device device, double value,
                                                     kiln_tensor **out);
/* A 1-D tensor start, start+step, ... below end (above end for step < 0):
 * ceil((end - start) / step) elements, start + i * step each, as in
 * PyTorch, so a quotient that rounds up can take the last one to end
 * (arange(1, 1.3, 0.1) has 4 elements, the last 1.3). An end on the other
 * side of start than step goes gives no elements (as NumPy; PyTorch
 * refuses). INVALID_ARGUMENT for step 0, a non-finite argument, more than
 * 2^53 elements, or values an integer dtype cannot hold. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_arange(kiln_context *ctx, double start, double end, double step,
                                                       kiln_dtype dtype, kiln_device device, kiln_tensor **out);
/* Uniform in [0, 1) / standard normal, from the context's generator. The
 * values depend only on the seed and the draws before, not on the device.
 * Floating dtypes only (else DTYPE_MISMATCH). */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_rand(kiln_context *ctx, const int64_t *shape, int64_t ndim,
                                                     kiln_dtype dtype, kiln_device device, kiln_tensor **out);
KILN_NODISCARD KILN_API kiln_status kiln_tensor_randn(kiln_context *ctx, const int64_t *shape, int64_t ndim,
                                                      kiln_dtype dtype, kiln_device device, kiln_tensor **out);
/* Copies nbytes of host data (exactly numel * dtype size, else
 * INVALID_ARGUMENT) into a new tensor on device; data is not kept, and may
 * be NULL when nbytes is 0 (an empty tensor), as for the two copies below. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_from_host(kiln_context *ctx, const void *data, int64_t nbytes,
                                                          const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                                          kiln_device device, kiln_tensor **out);
/* A CPU tensor in page-locked memory (plain CPU memory when CUDA is not
 * usable): kiln_tensor_to from it to a CUDA device is asynchronous, so call
 * kiln_device_synchronize before changing its contents again. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_empty_pinned(kiln_context *ctx, const int64_t *shape, int64_t ndim,
                                                             kiln_dtype dtype, kiln_tensor **out);
/* Drops the caller's handle; the storage lives on while views, other handles
 * (kiln_tensor_retain, kiln_tensor_to on the same device), datasets or
 * exported DLPack tensors use it. */
KILN_API void kiln_tensor_release(kiln_tensor *tensor);
/* A new handle to the same tensor, for another owner (a thread that keeps its
 * own reference): see "Handles" above. *out is the caller's, released
 * with kiln_tensor_release. INVALID_HANDLE for a released tensor, INVALID_ARGUMENT
 * for NULL out. Any thread. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_retain(kiln_tensor *tensor, kiln_tensor **out);

/* Copies the tensor's elements into host memory (nbytes must equal numel *
 * dtype size, else INVALID_ARGUMENT). Waits for pending device work on the
 * tensor (BACKEND when it failed). Views copy their own elements only. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_copy_to_host(const kiln_tensor *tensor, void *data, int64_t nbytes);
/* Copies bytes from host memory into an existing tensor (nbytes must equal
 * numel * dtype size); views write through to the storage they share. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_copy_from_host(kiln_tensor *tensor, const void *data, int64_t nbytes);
/* The value of a one-element tensor (any dtype, any device) as a double;
 * SHAPE_MISMATCH for any other number of elements. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_item(const kiln_tensor *tensor, double *out);
/* The tensor on device (PyTorch's .to(device)): a copy, or a new handle to
 * the same tensor when it is already there (release it either way).
 * DEVICE_UNAVAILABLE for a device the context does not have. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_to(const kiln_tensor *tensor, kiln_device device, kiln_tensor **out);
/* A copy converted to dtype (PyTorch's .to(dtype)); float to int truncates
 * toward zero and saturates at the integer dtype's limits (NaN gives 0);
 * an integer to a narrower integer wraps. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_cast(const kiln_tensor *tensor, kiln_dtype dtype, kiln_tensor **out);
/* A contiguous copy on the same device. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_clone(const kiln_tensor *tensor, kiln_tensor **out);

/* Queries: they fail only on the common statuses (see the top). Any
 * thread. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_ndim(const kiln_tensor *tensor, int64_t *out);
/* Size of dimension dim; negative dims count from the end. INVALID_ARGUMENT
 * for dim outside [-ndim, ndim) (a scalar has none). */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_dim(const kiln_tensor *tensor, int64_t dim, int64_t *out);
/* Copies the shape into shape[0..ndim); capacity must be >= ndim
 * (INVALID_ARGUMENT; KILN_MAX_DIMS is always enough). */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_shape(const kiln_tensor *tensor, int64_t *shape, int64_t capacity);
KILN_NODISCARD KILN_API kiln_status kiln_tensor_numel(const kiln_tensor *tensor, int64_t *out);
KILN_NODISCARD KILN_API kiln_status kiln_tensor_dtype(const kiln_tensor *tensor, kiln_dtype *out);
KILN_NODISCARD KILN_API kiln_status kiln_tensor_device(const kiln_tensor *tensor, kiln_device *out);
/* PyTorch's get_device(): the CUDA index, or -1 for a CPU tensor. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_get_device(const kiln_tensor *tensor, int64_t *out);
/* 1 for a tensor made by kiln_tensor_empty_pinned (even when, without CUDA,
 * its memory is ordinary), else 0. Views share their source's answer. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_is_pinned(const kiln_tensor *tensor, int *out);

/* Views share storage with their source (writes show through both ways) and
 * keep it alive. reshape: same numel (else SHAPE_MISMATCH, and for two -1s
 * or a -1 that could be any size); one entry may be -1, a size below -1 is
 * INVALID_ARGUMENT. rows: rows [start, end) of dimension 0, 0 <= start <= end <= dim 0
 * (INVALID_ARGUMENT otherwise, and for a scalar). */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_reshape(const kiln_tensor *tensor, const int64_t *shape, int64_t ndim,
                                                        kiln_tensor **out);
KILN_NODISCARD KILN_API kiln_status kiln_tensor_rows(const kiln_tensor *tensor, int64_t start, int64_t end,
                                                     kiln_tensor **out);

/* Math. Inputs must be on one device (else INVALID_ARGUMENT) and, for two
 * tensors, of one dtype (no implicit promotion: DTYPE_MISMATCH). Results are
 * new contiguous tensors on that device, owned by the caller. Float ops
 * accept f32, f64, f16 and bf16 (computed in f32); integer dtypes are
 * accepted where marked, others give DTYPE_MISMATCH. Inputs are only read:
 * several threads may compute from the same tensors at once. */

typedef enum kiln_binary_op {
  KILN_ADD = 0, KILN_SUB = 1, KILN_MUL = 2, KILN_DIV = 3, /* all dtypes; int DIV truncates */
  KILN_MAXIMUM = 4, KILN_MINIMUM = 5,                     /* all dtypes */
  KILN_POW = 6,                                           /* float dtypes */
  /* The same ops under prefixed names, which collide with nothing else in
   * this header (KILN_MAXIMUM here vs KILN_MAX the reduction); prefer them. */
  KILN_BINARY_ADD = KILN_ADD, KILN_BINARY_SUB = KILN_SUB, KILN_BINARY_MUL = KILN_MUL, KILN_BINARY_DIV = KILN_DIV,
  KILN_BINARY_MAXIMUM = KILN_MAXIMUM, KILN_BINARY_MINIMUM = KILN_MINIMUM, KILN_BINARY_POW = KILN_POW
} kiln_binary_op;

/* Elementwise a op b with NumPy broadcasting (SHAPE_MISMATCH if the shapes
 * do not broadcast). Integer division by zero gives 0. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_binary(kiln_binary_op op, const kiln_tensor *a, const kiln_tensor *b,
                                                       kiln_tensor **out);
/* Elementwise a op scalar (scalar converted to a's dtype; for an integer
 * dtype it must be finite and in range once truncated, else INVALID_ARGUMENT). */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_scalar(kiln_binary_op op, const kiln_tensor *a, double scalar,
                                                       kiln_tensor **out);

typedef enum kiln_compare_op {
  KILN_EQ = 0, KILN_NE = 1, KILN_LT = 2, KILN_LE = 3, KILN_GT = 4, KILN_GE = 5,
  /* Prefixed names for the same ops; prefer them. */
  KILN_COMPARE_EQ = KILN_EQ, KILN_COMPARE_NE = KILN_NE, KILN_COMPARE_LT = KILN_LT, KILN_COMPARE_LE = KILN_LE,
  KILN_COMPARE_GT = KILN_GT, KILN_COMPARE_GE = KILN_GE
} kiln_compare_op;

/* Elementwise comparison with broadcasting; the result is u8 (0 or 1). */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_compare(kiln_compare_op op, const kiln_tensor *a, const kiln_tensor *b,
                                                        kiln_tensor **out);

typedef enum kiln_unary_op {
  KILN_NEG = 0, KILN_ABS = 1,                /* all dtypes */
  KILN_EXP = 2, KILN_LOG = 3, KILN_SQRT = 4, /* float dtypes */
  KILN_RELU = 5, KILN_GELU = 6, KILN_TANH = 7, KILN_SIGMOID = 8, KILN_LEAKY_RELU = 9, /* float dtypes */
  /* Prefixed names for the same ops (KILN_UNARY_LOG, unlike KILN_LOG, cannot
   * be taken for a log level); prefer them. */
  KILN_UNARY_NEG = KILN_NEG, KILN_UNARY_ABS = KILN_ABS, KILN_UNARY_EXP = KILN_EXP, KILN_UNARY_LOG = KILN_LOG,
  KILN_UNARY_SQRT = KILN_SQRT, KILN_UNARY_RELU = KILN_RELU, KILN_UNARY_GELU = KILN_GELU,
  KILN_UNARY_TANH = KILN_TANH, KILN_UNARY_SIGMOID = KILN_SIGMOID, KILN_UNARY_LEAKY_RELU = KILN_LEAKY_RELU
} kiln_unary_op;

/* Elementwise op(a). alpha is LeakyReLU's negative slope and ignored by the
 * others. GELU is the exact (erf) form, as PyTorch's default. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_unary(kiln_unary_op op, const kiln_tensor *a, double alpha,
                                                      kiln_tensor **out);

/* Softmax / log-softmax along dim (negative counts from the end;
 * INVALID_ARGUMENT outside [-ndim, ndim), except that a 0-d tensor takes 0
 * and -1, as in PyTorch). Float dtypes (DTYPE_MISMATCH). */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_softmax(const kiln_tensor *a, int64_t dim, kiln_tensor **out);
KILN_NODISCARD KILN_API kiln_status kiln_tensor_log_softmax(const kiln_tensor *a, int64_t dim, kiln_tensor **out);

typedef enum kiln_reduce_op {
  KILN_SUM = 0, KILN_MEAN = 1, KILN_MAX = 2, KILN_ARGMAX = 3,
  /* Prefixed names for the same reductions (KILN_REDUCE_MAX, unlike KILN_MAX,
   * cannot be taken for KILN_MAX_DIMS or KILN_MAXIMUM); prefer them. */
  KILN_REDUCE_SUM = KILN_SUM, KILN_REDUCE_MEAN = KILN_MEAN, KILN_REDUCE_MAX = KILN_MAX,
  KILN_REDUCE_ARGMAX = KILN_ARGMAX
} kiln_reduce_op;

/* Reduces dimension dim (negative counts from the end; INVALID_ARGUMENT
 * outside [-ndim, ndim), except that a 0-d tensor takes 0 and -1, as in
 * PyTorch); keepdim keeps it with size 1. ARGMAX gives i64 (first index of the maximum); MEAN needs a float
 * dtype; SUM/MAX/ARGMAX accept all. SUM keeps the input's dtype: float sums
 * accumulate in double; an integer sum wraps to the dtype's width, where
 * PyTorch would give i64 (cast to i64 first for that). Reducing an empty
 * dimension with MAX or ARGMAX is INVALID_ARGUMENT. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_reduce(kiln_reduce_op op, const kiln_tensor *a, int64_t dim,
                                                       int keepdim, kiln_tensor **out);

/* Matrix product of 2-D tensors [m, k] x [k, n] -> [m, n] (a 1-D operand is
 * treated as a row / column vector and that dimension dropped, as NumPy).
 * f32, f64, f16, bf16. f32 is computed in full fp32 precision. */
KILN_NODISCARD KILN_API kiln_status kiln_tensor_matmul(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor **out);

/* ======================================================================
 * Models
 * ====================================================================== */

typedef struct kiln_model_spec kiln_model_spec;
typedef struct kiln_model kiln_model;

typedef enum kiln_layer_kind {
  KILN_LAYER_LINEAR = 0,
  KILN_LAYER_RELU = 1,
  KILN_LAYER_LEAKY_RELU = 2,
  KILN_LAYER_GELU = 3,
  KILN_LAYER_TANH = 4,
  KILN_LAYER_SIGMOID = 5,
  KILN_LAYER_DROPOUT = 6,
  KILN_LAYER_ELU = 7,      /* torch.nn.ELU(alpha): x > 0 ? x : alpha (e^x - 1) */
  KILN_LAYER_SELU = 8,     /* torch.nn.SELU: its fixed scale and alpha */
  KILN_LAYER_SOFTPLUS = 9, /* torch.nn.Softplus(beta, threshold): log(1 + e^(beta x)) / beta,
                            * x where beta x > threshold */
  /* The output transforms: the last layer only, softmax or log-softmax over
   * each row of the logits (torch.nn.Softmax(dim=1), LogSoftmax(dim=1)); see
   * kiln_model_spec_parse for what they change. */
  KILN_LAYER_SOFTMAX = 10,
  KILN_LAYER_LOG_SOFTMAX = 11
} kiln_layer_kind;

/* A model spec is a list of layers, built up by one thread and then given
 * to kiln_model_create (which copies it). The caller owns *out. Sizes are
 * >= 1 and the whole spec within KILN_MAX_PARAMETERS (INVALID_ARGUMENT). */
KILN_NODISCARD KILN_API kiln_status kiln_model_spec_create(kiln_model_spec **out);
/* Drops the spec; models made from it keep their copy. */
KILN_API void kiln_model_spec_release(kiln_model_spec *spec);
/* Appends Linear(in_features, out_features), with a bias unless bias is 0;
 * in_features must equal the previous Linear's out_features
 * (SHAPE_MISMATCH); both >= 1 (INVALID_ARGUMENT). */
KILN_NODISCARD KILN_API kiln_status kiln_model_spec_add_linear(kiln_model_spec *spec, int64_t in_features,
                                                               int64_t out_features, int bias);
/* Appends a parameterless layer: RELU, GELU, TANH, SIGMOID, SELU,
 * LEAKY_RELU (arg = negative slope, PyTorch's default 0.01), ELU (arg =
 * alpha, PyTorch's default 1.0), SOFTPLUS (arg = beta, PyTorch's default
 * 1.0; threshold 20, PyTorch's default: kiln_model_spec_add_v2 sets another),
 * DROPOUT (arg = drop probability in [0, 1)), or an output transform, SOFTMAX
 * or LOG_SOFTMAX, which must stay the last layer. arg is ignored by the
 * others. INVALID_ARGUMENT for LINEAR (use kiln_model_spec_add_linear), an
 * unknown kind, a non-finite slope or alpha, a beta that is 0 or not finite,
 * a dropout probability outside [0, 1), or any layer after an output
 * transform (nothing is added then). One thread per spec. */
KILN_NODISCARD KILN_API kiln_status kiln_model_spec_add(kiln_model_spec *spec, kiln_layer_kind kind, double arg);
/* As kiln_model_spec_add, with the layer's second parameter arg2: SOFTPLUS's
 * threshold (finite; PyTorch's default is 20), ignored by every other kind.
 * Statuses as kiln_model_spec_add, and INVALID_ARGUMENT for a threshold that
 * is not finite. */
KILN_NODISCARD KILN_API kiln_status kiln_model_spec_add_v2(kiln_model_spec *spec, kiln_layer_kind kind, double arg,
                                                           double arg2);
/* Appends a whole MLP: Linear(sizes[0], sizes[1]), activation, ...,
 * Linear(sizes[n-2], sizes[n-1]) with biases; n >= 2. activation is RELU,
 * LEAKY_RELU (slope 0.01), GELU, TANH, SIGMOID, ELU (alpha 1), SELU or
 * SOFTPLUS (beta 1, threshold 20) (INVALID_ARGUMENT for the others and for
 * n < 2). */
KILN_NODISCARD KILN_API kiln_status kiln_model_spec_add_mlp(kiln_model_spec *spec, const int64_t *sizes, int64_t n,
                                                            kiln_layer_kind activation);
/* Parses a spec and appends its layers after the spec's last layer, with no
 * activation between (the first Linear's in_features must equal the last
 * Linear's out_features: KILN_ERROR_SHAPE_MISMATCH otherwise); parse into a
 * new spec to start over. Two forms (spaces around the parts are ignored):
 *
 *   compact     SIZES[:OPTION]...    "784-32-10", "784-256-256-10:gelu:dropout=0.2"
 *     SIZES     IN-HIDDEN-...-OUT, at least two: a Linear with bias between
 *               each two sizes
 *     OPTION    relu (the default), gelu, tanh, sigmoid, selu, leaky_relu or
 *               leaky_relu=SLOPE, elu or elu=ALPHA, softplus, softplus=BETA
 *               or softplus=BETA,THRESHOLD: the activation after each hidden
 *               Linear; dropout=P: a Dropout(P) after each hidden
 *               activation; flatten: an nn.Flatten() first; softmax or
 *               log_softmax: the output transform after the last Linear;
 *               each at most once, any order
 *   layer list  LAYER[;LAYER]...     "flatten;linear(784,32);relu;linear(32,10)"
 *     LAYER     linear(IN,OUT), linear(IN,OUT,nobias), relu, gelu, tanh,
 *               sigmoid, selu, leaky_relu or leaky_relu(SLOPE) (default
 *               0.01), elu or elu(ALPHA) (default 1), softplus,
 *               softplus(BETA) or softplus(BETA,THRESHOLD) (defaults 1 and
 *               20), dropout or dropout(P) (default 0.5), flatten, softmax
 *               and log_softmax (last only), input(N) (first only)
 *
 * softmax and log_softmax are the model's output transform, as a PyTorch
 * classifier ending in nn.Softmax(dim=1) or nn.LogSoftmax(dim=1):
 * kiln_model_forward and kiln_model_predict with KILN_PREDICT_LOGITS return
 * the transformed rows, KILN_PREDICT_PROBABILITIES the softmax and
 * KILN_PREDICT_CLASSES the argmax of the logits under it. A trainer trains
 * the logits under it with the cross-entropy loss, which takes logits: the
 * same as PyTorch's NLLLoss over the log-softmax (kiln_trainer_create refuses
 * the MSE and BCE losses for such a model, since they would not see the
 * transformed outputs). input(N) declares the features per sample of a model
 * without a Linear (e.g. "input(10);elu(2)", an activation imported from
 * ONNX); with Linears it must equal the first one's in_features. Such a
 * model has no parameters: it predicts, saves, loads and exports, but does
 * not train.
 *
 * Every layer takes the next index of PyTorch's nn.Sequential, which names
 * the parameters (kiln_model_parameter_name): 784-32-10 has 0.weight,
 * 0.bias, 2.weight and 2.bias. flatten is nn.Flatten(): it holds nothing and
 * computes nothing (every model takes [batch, ...] inputs of in_features
 * values per sample, such as [N, 1, 28, 28] images), but it takes an index,
 * so "784-32-10:flatten" has 1.weight, 1.bias, 3.weight, 3.bias, as
 * nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32,
 * 10)); input(N) takes none. kiln_model_describe writes the compact form
 * whenever it says the same. INVALID_ARGUMENT for malformed text, with the
 * offending part quoted (cut short), and for a layer after softmax or
 * log_softmax, or input(N) anywhere but first. */
KILN_NODISCARD KILN_API kiln_status kiln_model_spec_parse(kiln_model_spec *spec, const char *text);

/* Creates a model with f32 parameters on device, initialised from the
 * context's generator as PyTorch's nn.Linear (kaiming-uniform weights with
 * a = sqrt(5), uniform(+-1/sqrt(in)) biases). The model starts in training
 * mode. The model keeps ctx alive; the caller owns *out. Errors:
 * INVALID_ARGUMENT (an empty spec, or one with neither a Linear nor
 * input(N)), DEVICE_UNAVAILABLE, OOM. Any thread (each draws from ctx's
 * generator in turn). */
KILN_NODISCARD KILN_API kiln_status kiln_model_create(kiln_context *ctx, const kiln_model_spec *spec,
                                                      kiln_device device, kiln_model **out);
/* As kiln_model_create with parameters of dtype: f32, or f64 on the CPU
 * (NOT_SUPPORTED on CUDA; other dtypes are INVALID_ARGUMENT). */
KILN_NODISCARD KILN_API kiln_status kiln_model_create_dtype(kiln_context *ctx, const kiln_model_spec *spec,
                                                            kiln_device device, kiln_dtype dtype, kiln_model **out);
/* Drops the caller's handle; the model lives on while trainers or other
 * handles (kiln_model_retain) use it, and parameter tensors keep their
 * storage. */
KILN_API void kiln_model_release(kiln_model *model);
/* A new handle to the same model, for another owner (a thread that keeps its
 * own reference): see "Handles" above. *out is the caller's, released
 * with kiln_model_release. INVALID_HANDLE for a released model, INVALID_ARGUMENT
 * for NULL out. Any thread. */
KILN_NODISCARD KILN_API kiln_status kiln_model_retain(kiln_model *model, kiln_model **out);
/* Moves the parameters to device (PyTorch's model.to(device)). A trainer
 * created before the move fails with INVALID_ARGUMENT until recreated.
 * DEVICE_UNAVAILABLE for a device the context does not have; NOT_SUPPORTED
 * for an f64 model to CUDA. Not while other threads use the model. */
KILN_NODISCARD KILN_API kiln_status kiln_model_to(kiln_model *model, kiln_device device);
/* The device the parameters are on. */
KILN_NODISCARD KILN_API kiln_status kiln_model_device(const kiln_model *model, kiln_device *out);
/* training = 1 (Dropout active) or 0 (evaluation). Not while another thread
 * runs the model. */
KILN_NODISCARD KILN_API kiln_status kiln_model_set_training(kiln_model *model, int training);
/* *out = 1 in training mode, 0 in evaluation mode. */
KILN_NODISCARD KILN_API kiln_status kiln_model_is_training(const kiln_model *model, int *out);
/* Total number of scalar parameters (weights and biases). */
KILN_NODISCARD KILN_API kiln_status kiln_model_num_parameters(const kiln_model *model, int64_t *out);
/* Features the first Linear takes, and outputs the last gives. */
KILN_NODISCARD KILN_API kiln_status kiln_model_input_size(const kiln_model *model, int64_t *out);
KILN_NODISCARD KILN_API kiln_status kiln_model_output_size(const kiln_model *model, int64_t *out);
/* The spec as kiln_model_spec_parse reads it back. Owned by the model. */
KILN_NODISCARD KILN_API kiln_status kiln_model_describe(const kiln_model *model, const char **out);
/* Number of parameter tensors (2 per Linear with bias). */
KILN_NODISCARD KILN_API kiln_status kiln_model_num_parameter_tensors(const kiln_model *model, int64_t *out);
/* Parameter i (0 <= i < kiln_model_num_parameter_tensors, else
 * INVALID_ARGUMENT) as a tensor sharing the model's storage (writes change
 * the model; the caller owns the handle, which keeps the storage alive), and
 * its name as PyTorch's nn.Sequential state_dict calls it ("0.weight",
 * "0.bias", "2.weight", ...; weights are [out, in]; the string is owned by
 * the model). */
KILN_NODISCARD KILN_API kiln_status kiln_model_parameter(kiln_model *model, int64_t index, kiln_tensor **out);
KILN_NODISCARD KILN_API kiln_status kiln_model_parameter_name(const kiln_model *model, int64_t index, const char **out);

/* Forward pass without gradients: x is [batch, input_size] (any float dtype
 * or u8, converted to the model's dtype as it is: u8 pixels stay 0..255,
 * where a dataset's batches are normalized (kiln_dataset_set_normalization:
 * 1/255 by default for u8), so a model trained on those needs its input
 * normalized the same way first), on the model's device; *out is
 * [batch, output_size] logits, or the rows of the model's output transform
 * when it ends in softmax or log_softmax (kiln_model_spec_parse). x may come from any context (a tensor is
 * memory on a device; the model's context runs the pass and owns *out),
 * whereas a dataset's tensors must be of its own context. SHAPE_MISMATCH
 * unless x has >= 2 dimensions and input_size elements per row,
 * DTYPE_MISMATCH for integer x other than u8, INVALID_ARGUMENT for x on
 * another device. Safe from several threads at once. */
KILN_NODISCARD KILN_API kiln_status kiln_model_forward(kiln_model *model, const kiln_tensor *x, kiln_tensor **out);

typedef enum kiln_predict_kind {
  KILN_PREDICT_LOGITS = 0,        /* the model's output: logits, or its output transform's rows */
  KILN_PREDICT_PROBABILITIES = 1, /* softmax of the logits (under any output transform) */
  KILN_PREDICT_CLASSES = 2        /* argmax of the logits, i64 [batch] */
} kiln_predict_kind;

/* Evaluation-mode forward pass (Dropout off, whatever the model's mode): x
 * may be on any device (it is moved to the model's) and of any context;
 * *out is on the model's device. Errors as kiln_model_forward. Safe from
 * several threads. */
KILN_NODISCARD KILN_API kiln_status kiln_model_predict(kiln_model *model, const kiln_tensor *x, kiln_predict_kind kind,
                                                       kiln_tensor **out);

/* Writes the weights as a safetensors file (names as kiln_model_parameter_name,
 * the spec in the metadata) atomically: a crash leaves any old file intact
 * (see "Files" above for symbolic links and special files). IO when the file
 * cannot be written, with the path and the system's reason. Not while
 * another thread changes the model. */
KILN_NODISCARD KILN_API kiln_status kiln_model_save(const kiln_model *model, const char *path);
/* Creates a model from a file kiln_model_save wrote; the caller owns *out.
 * FORMAT for a malformed, truncated or hostile file (never read past its
 * end; limits above), IO for an unreadable one, DEVICE_UNAVAILABLE. A
 * state_dict PyTorch saved (safetensors or torch.save) holds no spec: FORMAT,
 * saying so and which spec fits its tensors, for kiln_model_load_with_spec;
 * an empty file is FORMAT saying it is empty. Loading is linear in the
 * file's size and in the model's layers (so are kiln_model_load_weights,
 * kiln_model_load_with_spec and kiln_trainer_load_checkpoint). Any thread. */
KILN_NODISCARD KILN_API kiln_status kiln_model_load(kiln_context *ctx, const char *path, kiln_device device,
                                                    kiln_model **out);
/* Loads weights into an existing model from a file of its parameters under
 * their names (kiln_model_parameter_name): safetensors (a kiln model file or
 * a PyTorch state_dict) or a torch.save state_dict, told apart by their
 * content (PyTorch's model.load_state_dict, which also widens f16 and bf16
 * tensors to the model's f32 or f64, and f32 to f64, exactly);
 * SHAPE_MISMATCH if the file holds another architecture, DTYPE_MISMATCH for
 * a dtype that would narrow or is not a float, FORMAT / IO
 * as kiln_model_load_with_spec. On failure the model's weights are
 * unchanged. Not while other threads use the model. */
KILN_NODISCARD KILN_API kiln_status kiln_model_load_weights(kiln_model *model, const char *path);
/* Creates a model of spec on device from a state_dict file that holds its
 * parameters under the names PyTorch's nn.Sequential of the same layers
 * gives them ("0.weight" [out, in], "0.bias" [out], "2.weight", ...;
 * parameterless layers such as ReLU, Dropout and Flatten take an index but
 * hold nothing: see kiln_model_spec_parse). The format is told from the
 * content, never the name:
 *   - safetensors, e.g. safetensors.torch.save_file(model.state_dict(),
 *     path) or kiln_model_save;
 *   - torch.save(model.state_dict(), path): the zip archive PyTorch writes
 *     since 1.6, little- or big-endian, its tensors views (sizes, strides,
 *     offsets) of storages they may share, records stored or deflated,
 *     zip64 or not. Its pickle is read by kiln's own restricted unpickler,
 *     which never runs code: only the globals a state_dict of tensors needs
 *     (collections.OrderedDict, torch._utils._rebuild_tensor_v2 and
 *     _rebuild_parameter, the torch.*Storage types) are accepted, anything
 *     else (os.system, a pickled model class) is FORMAT naming it. The
 *     legacy formats (_use_new_zipfile_serialization=False, tar) are FORMAT
 *     saying how to save the file again.
 * The file's metadata is ignored: spec alone decides the layers (so
 * "784-32-10" and "784-32-10:gelu" both load the same file). The model's
 * dtype is the file's: f32, or f64 (CPU only: NOT_SUPPORTED on CUDA), and
 * f32 for f16 and bf16 tensors, which widen exactly (as
 * model.load_state_dict copies them into an f32 model); it
 * starts in training mode, as kiln_model_create. spec is copied; the caller
 * owns *out. The file is read once and not kept open.
 * Errors, each message naming the offending tensor:
 *   SHAPE_MISMATCH  a parameter the spec needs is missing, has another
 *                   shape, or the file holds a tensor the spec has no
 *                   parameter for; the message then says which layers the
 *                   file's names and shapes show (a BatchNorm, a module
 *                   prefix) and the spec that fits it when one does;
 *   DTYPE_MISMATCH  a parameter that is not a float (integers) or that
 *                   would narrow to the model's dtype (f64 in an f32
 *                   model: f16 and bf16 widen to f32 and f64, f32 to f64);
 *                   in a torch.save file, any tensor of a dtype kiln lacks
 *                   (bool, int8, complex);
 *   FORMAT          a malformed, truncated, damaged (a CRC) or hostile
 *                   file (never read past its end), an empty one; IO an
 *                   unreadable one;
 *   INVALID_ARGUMENT NULL ctx/path/spec/out, or a spec that is empty or
 *                   has neither a Linear nor input(N);
 *   INVALID_HANDLE  a released ctx or spec; DEVICE_UNAVAILABLE; OOM.
 * Thread: any (ctx may be shared; spec must not be changed meanwhile). */
KILN_NODISCARD KILN_API kiln_status kiln_model_load_with_spec(kiln_context *ctx, const char *path,
                                                              const kiln_model_spec *spec, kiln_device device,
                                                              kiln_model **out);

/* ======================================================================
 * ONNX export and import
 *
 * A kiln model runs in ONNX Runtime, and an ONNX MLP trains or serves in
 * kiln. The protobuf work lives in the plugin libkiln_onnx.so (Debian's
 * libonnx_proto and libprotobuf), loaded on the first call from libkiln's
 * directory or KILN_BACKEND_PATH; libkiln.so links neither. Both functions
 * return KILN_ERROR_NOT_SUPPORTED, saying why, when kiln was built without
 * libonnx-dev or the plugin cannot be loaded.
 * ====================================================================== */

/* The largest ONNX model file kiln reads or writes, in bytes (protobuf's own
 * limit is 2 GiB); a larger model keeps its weights in a data file beside it
 * (external data, below). Reading is linear in the files' sizes and
 * allocates a small multiple of them: before protobuf parses a file, kiln
 * counts its nodes and the memory its messages would take from the bytes
 * themselves, and refuses (NOT_SUPPORTED) a graph of more than
 * KILN_ONNX_MAX_NODES nodes or a file that would take more than 16 MiB plus
 * 4 times its size once parsed (many small messages: protobuf allocates an
 * object for each); the values its nodes read from constants (folded ones
 * included) may add up to twice the size of the model file and the
 * external data files it names at most; and no tensor may claim more than
 * KILN_ONNX_MAX_FILE_BYTES elements. */
#define KILN_ONNX_MAX_FILE_BYTES (INT64_C(1) << 30)
/* The most nodes (Constant nodes included) a graph kiln reads may have. */
#define KILN_ONNX_MAX_NODES 4096

/* Writes model as an ONNX file (IR version 8, opset 13 of the ONNX domain)
 * that onnx.checker accepts and ONNX Runtime runs: one input "input"
 * [batch, in] and one output [batch, out] of the model's dtype (FLOAT for
 * f32, DOUBLE for f64), batch a symbolic dimension, named "logits", or
 * "probabilities" / "log_probabilities" after a softmax / log_softmax output
 * transform (Softmax / LogSoftmax, axis 1). Each Linear is a Gemm with
 * transB = 1 over an initializer in kiln's [out, in] layout named as
 * kiln_model_parameter_name ("0.weight", "0.bias"); ReLU, LeakyReLU, Tanh,
 * Sigmoid, ELU and SELU are Relu, LeakyRelu, Tanh, Sigmoid, Elu and Selu;
 * GELU is its erf form (Div, Erf, Add, Mul, Mul, as torch.onnx.export writes
 * it); Softplus is Softplus for PyTorch's defaults (beta 1, threshold 20:
 * ONNX's Softplus has no threshold, and differs from kiln's by less than
 * 2e-9 past it), Mul(x, beta) -> Softplus -> Div(beta) for another beta (as
 * torch.onnx.export writes it), and that under Where(Greater(beta x,
 * threshold), x, .) for another threshold, which is exact; Dropout is
 * Dropout of its ratio (a DOUBLE initializer) without training_mode, the
 * identity in inference; a flatten is Flatten (axis 1) at its place, taking
 * its index; a model without a Linear is its activations (an Identity when
 * it has none). kiln_model_import_onnx reads the file back as the same
 * model, with the same parameter names. ONNX Runtime's CPU kernels of Elu, Selu,
 * Softplus, LeakyRelu and Erf are float only: an f64 model with those
 * layers is valid ONNX that ONNX Runtime does not run. The parameters are
 * inline unless the file would exceed KILN_ONNX_MAX_FILE_BYTES: then they go
 * to a data file beside it, as kiln_model_export_onnx_v2 with
 * KILN_ONNX_EXPORT_EXTERNAL_DATA writes it. The files are written
 * atomically, like kiln_model_save: a crash leaves any old file intact. The
 * model is only read (its weights are copied to the host when it lives on a
 * GPU). Every error message starts "cannot export 'path' as ONNX".
 * Errors: INVALID_ARGUMENT for NULL model/path; INVALID_HANDLE for a
 * released model; NOT_SUPPORTED without the plugin; IO when a file cannot
 * be written.
 * Thread: any; the model may be used by other threads meanwhile, but its
 * weights should not be changed (a concurrent training step may be half
 * seen). */
KILN_NODISCARD KILN_API kiln_status kiln_model_export_onnx(const kiln_model *model, const char *path);

/* Flags of kiln_model_export_onnx_v2 (bits). */
typedef enum kiln_onnx_export_flags {
  KILN_ONNX_EXPORT_DEFAULT = 0,
  /* Every parameter (Linear weights and biases) in a data file beside the
   * model, named after it ("mlp.onnx" -> "mlp.onnx.data", as PyTorch's
   * exporter names it), which the model refers to by that relative name,
   * offset, length and the file's SHA-1 (ONNX's external data): move the
   * two files together. Without this flag a model goes that way only when
   * its file would exceed KILN_ONNX_MAX_FILE_BYTES (protobuf's own limit is
   * 2 GiB). */
  KILN_ONNX_EXPORT_EXTERNAL_DATA = 1
} kiln_onnx_export_flags;

/* As kiln_model_export_onnx, with flags (kiln_onnx_export_flags bits, 0 for
 * the defaults). The data file is written (atomically) before the model
 * file, so a model file never names a data file that is not there; a crash
 * between the two leaves the old model file, whose checksum then tells its
 * old data file from the new one at import. Statuses as
 * kiln_model_export_onnx, and INVALID_ARGUMENT for unknown flag bits. Thread:
 * as kiln_model_export_onnx. */
KILN_NODISCARD KILN_API kiln_status kiln_model_export_onnx_v2(const kiln_model *model, const char *path,
                                                              uint32_t flags);
/* Creates a CPU model (move it with kiln_model_to) from an ONNX file holding
 * an MLP: one graph input [batch, features...] of FLOAT or DOUBLE, one
 * output, and between them a chain of nodes, each reading the previous one's
 * output, with constants for every other input. Constants are initializers,
 * Constant nodes (value, value_float(s), value_int(s)), and what Transpose,
 * Reshape, Cast (to FLOAT, DOUBLE, INT64), Unsqueeze, Squeeze and Identity
 * compute from constants, which the import does (older exporters write a
 * Linear without bias as Transpose(W) -> MatMul). Read: Gemm (transB 0 or
 * 1, alpha, beta; C of [out], [1, out] or a scalar), MatMul by an [in, out]
 * constant with an optional Add of a bias right after it, Relu, LeakyRelu,
 * Elu, Selu (PyTorch's alpha and scale only), Softplus (as PyTorch's with
 * threshold 20; Mul(x, beta) -> Softplus -> Div(beta) as Softplus(beta);
 * Where(Greater(beta x, t), x, that) as Softplus(beta, t)), Gelu (the exact
 * form) and GELU's erf form as above (its two products in either order),
 * Tanh, Sigmoid, Identity, Dropout (kept as kiln's Dropout of its ratio, so
 * the model trains as it was built; training_mode true is refused), Flatten
 * (axis 1) or Reshape to [-1 or 0, features] before the first layer (or to
 * [B, features] where the graph's input fixes its batch at B, as
 * torch.onnx.export writes it without dynamic axes: the model then takes
 * any batch, or to the input's own batch read by Shape -> Gather(0) ->
 * Unsqueeze -> Concat with [features or -1], as the TorchScript exporter
 * writes x.view(x.size(0), -1) with dynamic axes) and Flatten (axis 1) of a
 * [batch, features] value after it,
 * each the spec's flatten (nn.Flatten()), and
 * Softmax or LogSoftmax as the last node, over each sample's features, as
 * the model's output transform (axis 1 before opset 13; axis 1 or -1 of a
 * rank-2 value from 13). Each layer and flatten takes the next index of
 * nn.Sequential (kiln_model_parameter_name), except where a Linear's weight
 * is named as PyTorch's state_dict names it ("3.weight",
 * "linear_relu_stack.3.weight") with an index that keeps them in order:
 * the Linear then takes that index, so the parameters keep the names of
 * the nn.Sequential's own state_dict (a prefix is not kept:
 * "linear_relu_stack.3.weight" imports as "3.weight"). Up to 16 indices the names skip (layers the exporter left out, as
 * torch.onnx.export leaves out an nn.Dropout in eval mode) become flattens,
 * which compute nothing, and a Flatten or Reshape at the input whose index
 * the first weight's name does not count (a model that flattens outside
 * its nn.Sequential, as PyTorch's quickstart does) takes none. A graph without Gemm or MatMul is a model without
 * a Linear (input(N) in kiln_model_spec_parse), its width the input's
 * declared features (at most KILN_ONNX_MAX_FILE_BYTES). Opsets 7 to 28 of
 * the ONNX domain (older ones: convert them with onnx.version_converter),
 * IR versions 3 to 14. The model's dtype is the input's; every parameter
 * must have it. A tensor may keep its data in a file beside the model
 * (TensorProto.external_data: location, offset, length, checksum, the
 * file's SHA-1 in hex), as PyTorch's exporter and
 * kiln_model_export_onnx_v2 write it: the location is a path relative to
 * the model's folder that must stay in it (FORMAT for an absolute path, a
 * ".." component or a symbolic link that leads out of the folder; IO when
 * the file is missing), every range is checked against the file's size
 * before it is read (FORMAT), and a checksum that differs from the file's is
 * FORMAT. The model starts in training mode, as kiln_model_create; the
 * caller owns *out (kiln_model_release). The files are read once and not
 * kept open; a model file larger than KILN_ONNX_MAX_FILE_BYTES is refused
 * before it is read. Every error message starts "cannot import 'path'".
 * Errors, each message naming the node (by name, or "#index" and op type):
 *   NOT_SUPPORTED  any other op or domain, an opset or IR version outside
 *                  the range, a graph that is not one chain (a value read by
 *                  two nodes, a node off the path, several inputs or
 *                  outputs, a Softmax before the end), a parameter type
 *                  other than FLOAT/DOUBLE, a fold kiln does not compute,
 *                  an external data key other than the four, a file or
 *                  graph over the limits above, or no plugin;
 *   FORMAT         a file protobuf cannot parse (truncated, corrupt, not
 *                  ONNX), a constant whose data does not match its shape or
 *                  with a dimension larger than any file holds, an empty
 *                  weight, an omitted ("") input the op needs, shapes that
 *                  do not chain (an input's declared features are taken as
 *                  symbolic when a dimension is not positive or their
 *                  product passes KILN_MAX_PARAMETERS: the first Linear
 *                  decides), a parameter whose type differs from the
 *                  input's, non-finite values, bad attributes, an op the
 *                  file's opset does not have, external data as above;
 *   IO             a file cannot be opened or read, or is not a regular file;
 *   INVALID_ARGUMENT NULL ctx/path/out; INVALID_HANDLE a released ctx; OOM.
 * On failure *out is NULL and nothing else changes.
 * Thread: any (ctx may be shared). */
KILN_NODISCARD KILN_API kiln_status kiln_model_import_onnx(kiln_context *ctx, const char *path, kiln_model **out);

/* ======================================================================
 * Datasets
 * ====================================================================== */

typedef struct kiln_dataset kiln_dataset;

/* A dataset from tensors: x [N, features...] (float or u8) and y [N] integer
 * class labels (i32/i64/u8, all >= 0) or [N, k] float targets, both of ctx.
 * The tensors are referenced, not copied (the dataset keeps them alive; do
 * not write to them while it is used). SHAPE_MISMATCH when the first
 * dimensions differ or y has another rank; DTYPE_MISMATCH for other dtypes;
 * INVALID_ARGUMENT for N = 0, samples without features, a negative label or
 * tensors of another context than ctx (unlike kiln_model_forward, a dataset
 * lives in one context). The caller owns *out. */
KILN_NODISCARD KILN_API kiln_status kiln_dataset_from_tensors(kiln_context *ctx, const kiln_tensor *x,
                                                              const kiln_tensor *y, kiln_dataset **out);
/* Reads an IDX image file and an IDX label file, raw or gzip (told apart by
 * their first bytes, not their names), as MNIST and Fashion-MNIST ship
 * them. u8 images stay u8 and are scaled to [0, 1] when batched; f32 and
 * f64 images (IDX types 0x0D, 0x0E) are taken as they are; signed integer
 * images are FORMAT. IO for a missing, unreadable or special file; FORMAT
 * for a malformed or hostile one (wrong magic, sizes that disagree with the
 * file or each other, no samples, a gzip file that claims more than deflate
 * can hold), never allocating more than the file can hold. */
KILN_NODISCARD KILN_API kiln_status kiln_dataset_load_idx(kiln_context *ctx, const char *images_path,
                                                          const char *labels_path, kiln_dataset **out);
/* Loads the "train" or "test" split of an MNIST-layout directory
 * (train-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz], ...).
 * INVALID_ARGUMENT for another split; IO when dir is not a directory or
 * lacks the files (the message names them); then as kiln_dataset_load_idx. */
KILN_NODISCARD KILN_API kiln_status kiln_dataset_load_mnist(kiln_context *ctx, const char *dir, const char *split,
                                                            kiln_dataset **out);
/* Drops the caller's handle; splits and trainers in a fit keep the data. */
KILN_API void kiln_dataset_release(kiln_dataset *dataset);
/* A new handle to the same dataset, for another owner (a thread that keeps its
 * own reference): see "Handles" above. *out is the caller's, released
 * with kiln_dataset_release. INVALID_HANDLE for a released dataset, INVALID_ARGUMENT
 * for NULL out. Any thread. */
KILN_NODISCARD KILN_API kiln_status kiln_dataset_retain(kiln_dataset *dataset, kiln_dataset **out);
/* Number of samples (>= 1). */
KILN_NODISCARD KILN_API kiln_status kiln_dataset_size(const kiln_dataset *dataset, int64_t *out);
/* Features per sample (product of x's dimensions after the first). */
KILN_NODISCARD KILN_API kiln_status kiln_dataset_num_features(const kiln_dataset *dataset, int64_t *out);
/* 1 + the largest label for class datasets; the target width otherwise. */
KILN_NODISCARD KILN_API kiln_status kiln_dataset_num_classes(const kiln_dataset *dataset, int64_t *out);
/* Batched features become (x * scale - mean) / std. Defaults: scale 1/255
 * for u8, 1 for floats; mean 0; std 1. All finite, std > 0 and scale / std
 * and mean / std finite too, else INVALID_ARGUMENT. Splits made before keep their own normalisation. Not
 * while another thread batches from the dataset. */
KILN_NODISCARD KILN_API kiln_status kiln_dataset_set_normalization(kiln_dataset *dataset, double scale, double mean,
                                                                   double std);
/* Seeded random split into a training part and a validation part holding
 * round(size * validation_fraction) samples (0 < fraction < 1, and both
 * parts non-empty, else INVALID_ARGUMENT). Both share the source's data and
 * are the caller's; train and validation must be two different pointers. */
KILN_NODISCARD KILN_API kiln_status kiln_dataset_split(const kiln_dataset *dataset, double validation_fraction,
                                                       uint64_t seed, kiln_dataset **train, kiln_dataset **validation);
/* Samples [start, start + count) as float x [count, features] (model dtype
 * f32) and labels y [count] i64 (or float targets), normalised, on device;
 * both the caller's. INVALID_ARGUMENT unless 0 <= start, count >= 1 and
 * start + count <= size, or when x and y are one pointer. Any thread. */
KILN_NODISCARD KILN_API kiln_status kiln_dataset_batch(const kiln_dataset *dataset, int64_t start, int64_t count,
                                                       kiln_device device, kiln_tensor **x, kiln_tensor **y);

/* ======================================================================
 * Training
 * ====================================================================== */

typedef struct kiln_trainer_options kiln_trainer_options;
typedef struct kiln_trainer kiln_trainer;
typedef struct kiln_history kiln_history;

typedef enum kiln_loss_kind {
  KILN_LOSS_CROSS_ENTROPY = 0,  /* logits [B, C], labels [B] integer */
  KILN_LOSS_MSE = 1,            /* pred [B, K], target [B, K] float */
  KILN_LOSS_BCE_WITH_LOGITS = 2 /* logits [B, K], target [B, K] in [0, 1] (not checked,
                                 * as PyTorch does not: outside it the loss is no
                                 * longer a cross-entropy and can be negative) */
} kiln_loss_kind;

typedef enum kiln_optimizer_kind { KILN_OPTIM_SGD = 0, KILN_OPTIM_ADAM = 1, KILN_OPTIM_ADAMW = 2 } kiln_optimizer_kind;

typedef enum kiln_lr_schedule {
  KILN_LR_CONSTANT = 0,
  KILN_LR_STEP = 1,   /* lr * gamma^(floor(step / step_size)) */
  KILN_LR_COSINE = 2  /* from lr to min_lr over total_steps (cosine annealing) */
} kiln_lr_schedule;

/* The mean loss of pred against target, as the trainer computes it (mean
 * over the batch; MSE and BCE also over the elements). Both on one device
 * (INVALID_ARGUMENT); shapes as the loss kind's comment says
 * (SHAPE_MISMATCH). */
KILN_NODISCARD KILN_API kiln_status kiln_loss(kiln_loss_kind kind, const kiln_tensor *pred, const kiln_tensor *target,
                                              double *out);

/* Trainer options, with PyTorch's defaults: cross-entropy, SGD, lr 0.01,
 * momentum 0, dampening 0, nesterov off, weight decay 0 (AdamW 0.01), betas
 * (0.9, 0.999), eps 1e-8, batch 64, no label smoothing, no clipping, constant
 * lr, no warmup, shuffle seed from the context, progress every 0 batches (end
 * of epoch only).
 * The caller owns *out. The setters change only the options object (one
 * thread at a time; trainers made from it before keep their copy), and each
 * refuses a value outside the range written at it with INVALID_ARGUMENT,
 * naming the value, leaving the option as it was. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_create(kiln_trainer_options **out);
/* Drops the options; trainers made from them keep their copy. */
KILN_API void kiln_trainer_options_release(kiln_trainer_options *options);
/* One of kiln_loss_kind. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_loss(kiln_trainer_options *options, kiln_loss_kind loss);
/* One of kiln_optimizer_kind. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_optimizer(kiln_trainer_options *options,
                                                                       kiln_optimizer_kind kind);
/* lr >= 0 and finite (0 leaves the weights as they are). */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_lr(kiln_trainer_options *options, double lr);
/* SGD's momentum: >= 0 and finite. Values of 1 and more are accepted, as
 * PyTorch does, and usually diverge (fit then returns KILN_ERROR_NUMERIC). */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_momentum(kiln_trainer_options *options, double momentum);
/* SGD's Nesterov momentum: any non-zero value turns it on. Never fails on
 * the value. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_nesterov(kiln_trainer_options *options, int nesterov);
/* L2 penalty (SGD, Adam) or decoupled decay (AdamW): >= 0 and finite. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_weight_decay(kiln_trainer_options *options,
                                                                          double weight_decay);
/* Adam's and AdamW's betas: each in [0, 1). */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_betas(kiln_trainer_options *options, double beta1,
                                                                   double beta2);
/* Adam's and AdamW's eps: > 0 and finite. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_eps(kiln_trainer_options *options, double eps);
/* Samples per step on each device: >= 1 (a batch larger than the dataset is
 * one partial batch per epoch). The same for data parallel training over N
 * devices (kiln_trainer_options_set_devices) or N ranks
 * (kiln_trainer_attach_communicator): each device or rank computes
 * batch_size samples per step, so a step trains on N * batch_size samples,
 * as one device with batch N * batch_size. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_batch_size(kiln_trainer_options *options,
                                                                        int64_t batch_size);
/* Cross-entropy's label smoothing, as PyTorch's CrossEntropyLoss
 * (label_smoothing=): in [0, 1] (default 0, none). The target of a sample
 * with label y becomes (1 - smoothing) on y plus smoothing / C on each of the
 * C classes, so its loss is (1 - smoothing) * -log p_y + smoothing * the mean
 * over the classes of -log p_c; losses reported (steps, epochs, evaluation)
 * are this smoothed loss. kiln_trainer_create returns
 * KILN_ERROR_INVALID_ARGUMENT for a non-zero value with another loss.
 * KILN_ERROR_INVALID_ARGUMENT here for a value outside [0, 1] or not finite.
 * Every data-parallel rank must use the same value. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_label_smoothing(kiln_trainer_options *options,
                                                                             double label_smoothing);
/* Clip the global gradient norm to max_norm before each update (0 = off);
 * max_norm >= 0 and finite. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_grad_clip(kiln_trainer_options *options, double max_norm);
/* step_size: STEP's period in steps, >= 1 for STEP (ignored otherwise);
 * gamma: STEP's factor, > 0 and finite for STEP (ignored otherwise);
 * total_steps: COSINE's length in steps, >= 0 (0 = the fit's total, so
 * kiln_trainer_step and _epoch need it > 0: INVALID_ARGUMENT there);
 * min_lr: COSINE's floor, >= 0 and finite. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_schedule(kiln_trainer_options *options,
                                                                      kiln_lr_schedule schedule, int64_t step_size,
                                                                      double gamma, int64_t total_steps, double min_lr);
/* Linear warmup over the first steps steps: step t (counted from 0) takes
 * (t + 1) / steps of the scheduled lr, so the first is not 0 and step
 * steps - 1 takes all of it; steps >= 0 (0 = none). */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_warmup(kiln_trainer_options *options, int64_t steps);
/* The seed of the epochs' shuffles (any value); unset, it is drawn from the
 * model's context when the trainer is created. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_shuffle_seed(kiln_trainer_options *options, uint64_t seed);
/* Call the progress callback every n batches (0 = once per epoch; n >= 0):
 * a KILN_PROGRESS_BATCH call after every n-th batch within an epoch, and
 * after its last batch the KILN_PROGRESS_EPOCH call instead. Each call
 * reads the loss back from the device. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_progress_interval(kiln_trainer_options *options,
                                                                               int64_t batches);

/* DataParallel, as PyTorch's nn.DataParallel: one trainer over several GPUs
 * of this process. devices[0..count) are CUDA devices, distinct; the model
 * must be on devices[0] when the trainer is created. The trainer then holds
 * a replica of the model on each other device, each computing the batch size
 * B of samples per step (per device, as per rank in DDP), replica r training
 * on positions r, r + count, ... of each epoch's shuffled order, so the
 * result is that of batch count * B on one device up to the order of
 * floating-point sums. Gradients are averaged every step with
 * NCCL (kiln_communicator_create_local's communicators, one thread per
 * replica); loss, accuracy and evaluation are over the whole batch or
 * dataset. kiln_trainer_step splits its x and y into count contiguous chunks
 * (their rows must be a multiple of count). The model (replica 0) holds the
 * trained weights; the other replicas take its parameters at the start of
 * every step, epoch, fit and evaluate call. The progress callback runs on the
 * calling thread, and a cancel stops every replica. kiln_trainer_save_checkpoint
 * writes replica 0's state (also from inside the callback).
 * One device listed is plain training on it (it must be the model's device);
 * count 0 (devices may be NULL) clears the list: the model's device.
 * KILN_ERROR_INVALID_ARGUMENT here for count outside
 * [0, KILN_MAX_DATA_PARALLEL_DEVICES], a bad device, a device listed twice,
 * or the CPU with other devices; kiln_trainer_create returns
 * KILN_ERROR_INVALID_ARGUMENT when the model is not on devices[0],
 * KILN_ERROR_DEVICE_UNAVAILABLE for a
 * GPU that does not exist or a missing libkiln_dist.so, and
 * KILN_ERROR_NOT_SUPPORTED when that plugin was built without NCCL. A
 * replica that fails alone (out of memory on its GPU) makes the call fail on
 * every replica at once; the trainer's communicators are then broken, and
 * later training calls return KILN_ERROR_COMMUNICATION: create a new trainer.
 * A DataParallel trainer cannot also be attached to a communicator
 * (KILN_ERROR_NOT_SUPPORTED): DDP runs one device per rank. */
#define KILN_MAX_DATA_PARALLEL_DEVICES 64
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_devices(kiln_trainer_options *options,
                                                                    const kiln_device *devices, int64_t count);

/* Gradient buckets of data parallel training (DataParallel, and DDP over an
 * attached communicator); no effect on a trainer of one device and rank.
 * 0 (the default): the gradients are averaged with one allreduce over all of
 * them after the whole backward. bytes > 0: the backward, which runs from
 * the last layer to the first, starts an allreduce as soon as the layers it
 * has finished hold at least `bytes` of gradients (in the model's dtype) not
 * yet in one, and
 * the update waits for them all: on GPUs NCCL averages the upper layers'
 * gradients while the lower layers' backward runs (PyTorch DDP's
 * bucket_cap_mb, 25 MiB there). A bucket holds whole layers, so a layer
 * larger than `bytes` is a bucket of its own. On the CPU the buckets are
 * averaged one after another, with no overlap (Open MPI makes no progress on
 * a nonblocking collective while kiln computes). The trained weights are
 * the same up to the engine's order of summation (with 2 ranks, exactly).
 * Every rank must use the same value (kiln_trainer_attach_communicator
 * compares it). KILN_ERROR_INVALID_ARGUMENT for bytes < 0. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_bucket_bytes(kiln_trainer_options *options,
                                                                         int64_t bytes);

/* Numeric precision of a trainer's steps (kiln_trainer_options_set_precision):
 *  FP32  the model's dtype throughout, f32 products computed exactly (the
 *        default, and what PyTorch computes with TF32 off);
 *  TF32  f32 products on CUDA's TF32 tensor cores (10-bit mantissa inputs,
 *        f32 accumulation). A CUDA mode: kiln_trainer_create on a CPU model
 *        returns KILN_ERROR_NOT_SUPPORTED saying so;
 *  BF16  mixed precision on every device: batch, activations and products
 *        in bf16 (f32 accumulation), with f32 master weights, gradients,
 *        optimizer state and loss, as PyTorch's autocast to bfloat16.
 * TF32 and BF16 need an f32 model (KILN_ERROR_NOT_SUPPORTED otherwise). */
typedef enum kiln_precision {
  KILN_PRECISION_FP32 = 0,
  KILN_PRECISION_TF32 = 1,
  KILN_PRECISION_BF16 = 2
} kiln_precision;
/* KILN_ERROR_INVALID_ARGUMENT for a value outside kiln_precision. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_precision(kiln_trainer_options *options,
                                                                       kiln_precision precision);

/* The parts of a backend's fast path, each of which can be switched off to
 * bisect a failure: fused epilogues (on CUDA, cuBLASLt's bias, activation
 * and gradient epilogues; on the CPU, plain f32 SGD without momentum folded
 * into the weight-gradient products), CUDA graphs, cuDNN's fused graphs
 * (for Linear layers in bf16, f16 or with TF32; strict f32 products stay on
 * cuBLAS, exact f32), and on CUDA the narrow step: the forward, loss and
 * backward of a one-hidden-layer f32 MLP (not TF32) with at most 64 hidden
 * units and 32 classes trained with cross-entropy (the tutorial's
 * 784-32-10) as two kernels of kiln's own instead of a dozen library
 * kernels. A backend
 * ignores the bits it has no part for, and results agree with every part off
 * within float rounding. */
typedef enum kiln_fast_path {
  KILN_FAST_PATH_EPILOGUES = 1,
  KILN_FAST_PATH_GRAPHS = 2,
  KILN_FAST_PATH_CUDNN = 4,
  KILN_FAST_PATH_NARROW = 8,
  KILN_FAST_PATH_ALL = 15
} kiln_fast_path;
/* The kiln_fast_path bits a trainer may use (default KILN_FAST_PATH_EPILOGUES
 * | KILN_FAST_PATH_GRAPHS: cuDNN and the narrow step stay off until a GPU run
 * shows them correct and faster; 0 runs every step as the plain sequence of
 * kernels). When the trainer is created, the environment variable
 * KILN_ENABLE adds the parts it names and KILN_DISABLE removes those it
 * names (disabling wins); each is a comma-separated list of "epilogues",
 * "graphs", "cudnn", "narrow" or "all"
 * (KILN_ERROR_INVALID_ARGUMENT there for an unknown name).
 * KILN_ERROR_INVALID_ARGUMENT for bits outside KILN_FAST_PATH_ALL. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_options_set_fast_path(kiln_trainer_options *options, uint32_t enabled);

/* A trainer for model on the model's device; it keeps the model alive and
 * copies options (NULL = defaults); the caller owns *out. NOT_SUPPORTED for
 * TF32 on the CPU and TF32/BF16 with an f64 model; INVALID_ARGUMENT for an
 * unknown name in KILN_ENABLE or KILN_DISABLE, a model without parameters
 * (no Linear: nothing to train), and the MSE or BCE loss for a model with an
 * output transform (softmax, log_softmax: see kiln_model_spec_parse; the
 * cross-entropy loss trains the logits under it). Used by one thread at a time, and while it
 * trains, no other thread may change or run the model. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_create(kiln_model *model, const kiln_trainer_options *options,
                                                        kiln_trainer **out);
/* Drops the caller's handle; a call running with the trainer (a fit, from
 * its own callback) keeps it alive until it returns. */
KILN_API void kiln_trainer_release(kiln_trainer *trainer);
/* A new handle to the same trainer, for another owner (a thread that keeps its
 * own reference): see "Handles" above. *out is the caller's, released
 * with kiln_trainer_release. INVALID_HANDLE for a released trainer, INVALID_ARGUMENT
 * for NULL out. Any thread. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_retain(kiln_trainer *trainer, kiln_trainer **out);

/* One optimisation step on a batch (x [B, in], or [B, ...] with `in`
 * elements per sample as kiln_model_forward takes it; y labels [B] or
 * targets [B, K]; any device: moved to the model's). *loss (may be NULL: then the
 * loss is not read back) is the batch's mean loss before the update. x and
 * y have been copied when the call returns, so the caller may refill them at
 * once, pinned host tensors included (for those the call waits for the
 * copy, and so for the steps queued before it). Without a loss to read, the
 * step itself may still be running on a GPU when the call returns.
 * SHAPE_MISMATCH for x without `in` elements per sample, an empty batch
 * (B = 0) or y not of B samples; DTYPE_MISMATCH for labels that are not
 * integers (cross-entropy)
 * or targets that are not float; INVALID_ARGUMENT for labels outside the
 * model's classes; BUSY from the trainer's own callback; NUMERIC is not
 * raised here (a NaN loss is returned as it is). */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_step(kiln_trainer *trainer, const kiln_tensor *x, const kiln_tensor *y,
                                                      double *loss);

typedef struct kiln_epoch_stats {
  uint32_t struct_size;   /* set by the caller (or the library, in callbacks) */
  int64_t epoch;          /* 1-based */
  double train_loss;      /* mean over the epoch's samples */
  double train_accuracy;  /* classification only, else 0 */
  double val_loss;        /* 0 (and has_validation 0) without validation data */
  double val_accuracy;
  int has_validation;
  double seconds;
  double samples_per_second;
  double lr;              /* the learning rate at the epoch's end */
} kiln_epoch_stats;

/* One shuffled pass over dataset in batches of the options' batch size, the
 * last one partial. *out (struct_size set by the caller, at least
 * sizeof(uint32_t); an older, smaller struct is filled up to its size) gets
 * the training statistics; no validation. Errors as kiln_trainer_step, and
 * NUMERIC as kiln_trainer_fit. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_epoch(kiln_trainer *trainer, const kiln_dataset *dataset,
                                                       kiln_epoch_stats *out);

typedef enum kiln_progress_phase {
  KILN_PROGRESS_BATCH = 0, /* every progress_interval batches, but the last */
  KILN_PROGRESS_EPOCH = 1  /* at the end of each epoch, after validation */
} kiln_progress_phase;

typedef struct kiln_progress {
  uint32_t struct_size;
  kiln_progress_phase phase;
  int64_t epoch;            /* 1-based */
  int64_t epochs;
  int64_t batch;            /* batches done in this epoch */
  int64_t batches;          /* batches per epoch */
  double loss;              /* mean training loss so far in this epoch */
  double samples_per_second;
  double elapsed_seconds;   /* since the epoch began */
  const kiln_epoch_stats *stats; /* the finished epoch (phase EPOCH), else NULL */
} kiln_progress;

/* Progress callback: runs on the thread that called kiln_trainer_fit; a
 * non-zero return stops training after the current batch and makes fit
 * return KILN_ERROR_CANCELLED (the model keeps the updates done so far).
 * Inside it, the trainer may be read (epochs_done, current_lr,
 * save_checkpoint) and released (fit keeps it alive until it returns);
 * kiln_trainer_step, _epoch, _fit, _evaluate, _load_checkpoint and
 * kiln_trainer_attach_communicator on the same trainer return
 * KILN_ERROR_BUSY. The model may be used there too: read, saved, switched
 * between training and evaluation mode or changed by another trainer, each
 * taking effect from the next batch; moved to another device
 * (kiln_model_to), it ends the fit with INVALID_ARGUMENT once the callback
 * returns. */
typedef int (*kiln_progress_fn)(void *user, const kiln_progress *progress);

/* Trains for epochs more epochs (after kiln_trainer_load_checkpoint too:
 * they follow the epochs it restored), evaluating validation (may be NULL)
 * after each, and returns the history (caller releases). callback may be
 * NULL.
 * KILN_ERROR_NUMERIC, naming the epoch and its figures, when an epoch's mean
 * loss is NaN or infinite (the updates done so far stay in the model; the
 * same for kiln_trainer_epoch); KILN_ERROR_INVALID_ARGUMENT when epochs < 1
 * or the total step count would pass 2^62. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_fit(kiln_trainer *trainer, const kiln_dataset *train,
                                                     const kiln_dataset *validation, int64_t epochs,
                                                     kiln_progress_fn callback, void *user, kiln_history **out);
/* Mean loss and accuracy (0 for non-class targets) of the model over dataset,
 * in evaluation mode. loss and
 * accuracy may each be NULL when not wanted; on failure the non-NULL ones
 * are 0. BUSY from the trainer's own callback; shapes and dtypes as
 * kiln_trainer_step. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_evaluate(kiln_trainer *trainer, const kiln_dataset *dataset,
                                                          double *loss, double *accuracy);
/* Epochs and optimisation steps done so far (checkpoints restore them). */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_epochs_done(const kiln_trainer *trainer, int64_t *out);
KILN_NODISCARD KILN_API kiln_status kiln_trainer_steps_done(const kiln_trainer *trainer, int64_t *out);
/* The learning rate the next step will use (schedule and warmup applied);
 * INVALID_ARGUMENT for a cosine schedule with total_steps 0 outside a fit. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_current_lr(const kiln_trainer *trainer, double *out);

/* Writes a training checkpoint (weights, optimizer state, epoch and step
 * counters, shuffle generator) as safetensors, atomically, as
 * kiln_model_save writes (IO on failure, the old file intact). Allowed from
 * the trainer's own progress callback. It records where an epoch stands
 * (see kiln_trainer_load_checkpoint) when written from that callback within
 * an epoch, or after loading such a checkpoint before training took it up. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_save_checkpoint(const kiln_trainer *trainer, const char *path);
/* Restores a checkpoint written for the same architecture (the model's spec
 * as the file records it, activations and dropout included, and the same
 * tensors: else SHAPE_MISMATCH) and optimizer kind (else INVALID_ARGUMENT);
 * training then continues exactly as the run that wrote it. One written
 * from a progress callback within an epoch (phase BATCH) records where the
 * epoch stood: the next epoch (kiln_trainer_epoch, or the first of
 * kiln_trainer_fit's, which counts it) finishes it, in its order, with its
 * statistics so far, when it runs over a dataset of the same size with the
 * same batch size; otherwise, after a kiln_trainer_step in between, and in
 * data-parallel training (whose ranks' statistics differ), training resumes
 * with a new epoch. The trainer keeps its own options (lr,
 * momentum, betas, schedule, ...): the file's copies of them are a record,
 * not applied. So SGD's momentum may differ from the writer's: a trainer
 * with momentum starts its buffers at zero from a file without them (the
 * next update takes the gradient as its buffer, as torch.optim's first
 * does), and one without leaves a file's buffers unread. On failure the
 * trainer is unchanged. FORMAT for a malformed file: counters that are not
 * decimal digits, of 2^62 and more, or that no run could count (more
 * optimizer updates or epochs than steps), an optimizer or a spec kiln does
 * not know; IO for an unreadable file, BUSY from the trainer's own
 * callback. */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_load_checkpoint(kiln_trainer *trainer, const char *path);

/* Drops the caller's handle to a history (kiln_trainer_fit's result). */
KILN_API void kiln_history_release(kiln_history *history);
/* A new handle to the same history, for another owner (a thread that keeps its
 * own reference): see "Handles" above. *out is the caller's, released
 * with kiln_history_release. INVALID_HANDLE for a released history, INVALID_ARGUMENT
 * for NULL out. Any thread. */
KILN_NODISCARD KILN_API kiln_status kiln_history_retain(kiln_history *history, kiln_history **out);
/* Number of epochs recorded (those the fit completed). */
KILN_NODISCARD KILN_API kiln_status kiln_history_size(const kiln_history *history, int64_t *out);
/* Epoch i (0-based) of the history; out->struct_size set by the caller (as
 * for kiln_trainer_epoch). INVALID_ARGUMENT for i outside [0, size). */
KILN_NODISCARD KILN_API kiln_status kiln_history_get(const kiln_history *history, int64_t index, kiln_epoch_stats *out);

/* ---- Distributed data parallel (DDP) ------------------------------------
 * Training across processes and machines, one process (rank) per device,
 * started by Open MPI's mpirun. Every rank creates a communicator and a
 * trainer for the same model spec and options, attaches the communicator,
 * and makes the same training calls; kiln then:
 *  - starts every rank from rank 0's weights, optimizer state and counters;
 *  - gives rank r of N positions r, r + N, r + 2N, ... of each epoch's
 *    shuffled order (the same permutation on every rank: PyTorch's
 *    DistributedSampler), padded by wrapping around to a multiple of N so
 *    every rank runs the same steps; with a dataset size divisible by N, N
 *    ranks with batch b train exactly like one process with batch N*b;
 *  - averages the gradients over the ranks every step (one allreduce over
 *    the flat gradient buffer, or one per bucket started during the backward:
 *    kiln_trainer_options_set_bucket_bytes) before clipping and the update;
 *  - reduces the epoch's loss, accuracy and samples/s, and shards and reduces
 *    evaluation and validation (every rank gets the same numbers);
 *  - writes checkpoints from rank 0 only (kiln_trainer_save_checkpoint on
 *    every rank; the others wait for rank 0's outcome and return it). Model
 *    files are written by whoever calls kiln_model_save: call it on rank 0.
 * The engines, Open MPI (process start-up, CPU buffers) and NCCL (CUDA
 * buffers, its unique id sent over MPI), live in the plugin libkiln_dist.so,
 * loaded on first use from libkiln's directory or KILN_BACKEND_PATH;
 * libkiln.so links neither. A collective that fails (a peer died) or takes
 * longer than the communicator's timeout returns KILN_ERROR_COMMUNICATION,
 * and so does every later call on that communicator. */
typedef struct kiln_communicator kiln_communicator;

/* A communicator over every process of the MPI job (a duplicate of
 * MPI_COMM_WORLD; MPI is initialized with MPI_Init_thread when the host
 * program has not, and finalized at exit). Collective: every process of the
 * job calls it, and creates its communicators in the same order (from one
 * thread, or one after another). A process not started by mpirun is a job of
 * one rank.
 * Threads: MPI's thread level is the whole process's. kiln asks for
 * MPI_THREAD_MULTIPLE when it initializes MPI, and makes its own MPI calls
 * one at a time in the process, so communicators may be used from any
 * thread, and different ones from different threads at once, whenever MPI
 * runs at MPI_THREAD_SERIALIZED or above. A host program that initialized
 * MPI at MPI_THREAD_FUNNELED or MPI_THREAD_SINGLE (MPI_Init) allows only
 * MPI's main thread: from another thread this call, and a trainer call that
 * would exchange over such a communicator, return KILN_ERROR_NOT_SUPPORTED
 * before any MPI call, naming the level; that communicator is then broken
 * (KILN_ERROR_COMMUNICATION afterwards). kiln's lock does not cover the host
 * program's own MPI calls: below MPI_THREAD_MULTIPLE the host makes none
 * while a kiln call with a communicator runs on another thread.
 * KILN_ERROR_DEVICE_UNAVAILABLE when libkiln_dist.so or Open MPI's libmpi
 * cannot be loaded (the message has the loader's reason) or MPI cannot be
 * initialized. The timeout starts at KILN_DIST_TIMEOUT seconds (environment;
 * default 600) and bounds the creation too: when a process of the job never
 * creates its communicator, the others' calls return KILN_ERROR_COMMUNICATION
 * after that long (MPI_Init itself waits for every process mpirun started;
 * mpirun bounds that). *out is released with kiln_communicator_release; a trainer
 * it is attached to keeps it alive. */
KILN_NODISCARD KILN_API kiln_status kiln_communicator_create_mpi(kiln_context *ctx, kiln_communicator **out);
/* One communicator per GPU of devices[0..count), over NCCL alone (no MPI):
 * out[i] (an array of count pointers the caller provides) is rank i of count
 * and runs on devices[i]. For DDP inside one process: one thread per GPU, each
 * with its own model on its GPU and its own trainer attached to its
 * communicator; the ranks meet in every collective, so each must be driven by
 * a thread of its own. KILN_ERROR_INVALID_ARGUMENT for count outside
 * [1, KILN_MAX_DATA_PARALLEL_DEVICES] (out is then left untouched), a CPU
 * device or a device listed twice; KILN_ERROR_DEVICE_UNAVAILABLE for a GPU
 * that does not exist or a missing plugin; KILN_ERROR_NOT_SUPPORTED when the
 * plugin was built without NCCL. On any other failure every out[i] is NULL.
 * Each out[i] is released with kiln_communicator_release. */
KILN_NODISCARD KILN_API kiln_status kiln_communicator_create_local(kiln_context *ctx, const kiln_device *devices,
                                                                   int64_t count, kiln_communicator **out);
/* Drops the caller's handle; a trainer it is attached to keeps it alive. */
KILN_API void kiln_communicator_release(kiln_communicator *comm);
/* A new handle to the same communicator, for another owner (a thread that keeps its
 * own reference): see "Handles" above. *out is the caller's, released
 * with kiln_communicator_release. INVALID_HANDLE for a released communicator, INVALID_ARGUMENT
 * for NULL out. Any thread. */
KILN_NODISCARD KILN_API kiln_status kiln_communicator_retain(kiln_communicator *comm, kiln_communicator **out);
/* This process's rank in [0, size), the number of ranks, and the rank among
 * the ranks of the same machine (the GPU to use: cuda:<local rank>). */
KILN_NODISCARD KILN_API kiln_status kiln_communicator_rank(const kiln_communicator *comm, int64_t *out);
KILN_NODISCARD KILN_API kiln_status kiln_communicator_size(const kiln_communicator *comm, int64_t *out);
KILN_NODISCARD KILN_API kiln_status kiln_communicator_local_rank(const kiln_communicator *comm, int64_t *out);
/* Seconds any one collective may take before it fails with
 * KILN_ERROR_COMMUNICATION (a dead or stuck peer). KILN_ERROR_INVALID_ARGUMENT
 * unless seconds > 0 and finite. Not while a trainer it is attached to runs. */
KILN_NODISCARD KILN_API kiln_status kiln_communicator_set_timeout(kiln_communicator *comm, double seconds);

/* Makes trainer one rank of DDP training over comm (see above); the trainer
 * keeps comm alive. Collective: every rank calls it. KILN_ERROR_INVALID_ARGUMENT
 * on every rank when the model spec, dtype or options that shape a step
 * (every option but the progress interval, fast path and devices) differ
 * between ranks, naming the ranks and what differs; KILN_ERROR_NOT_SUPPORTED when comm cannot reduce
 * buffers of the trainer's device (a CUDA model with a plugin built without
 * NCCL); KILN_ERROR_COMMUNICATION when the exchange fails; KILN_ERROR_BUSY
 * from the trainer's own progress callback. From then on
 * kiln_trainer_step also averages gradients (every rank must call it, each
 * with its own batch; the loss returned is this rank's batch's). */
KILN_NODISCARD KILN_API kiln_status kiln_trainer_attach_communicator(kiln_trainer *trainer, kiln_communicator *comm);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KILN_H */
