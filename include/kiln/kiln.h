/*
 * kiln — train and run multilayer perceptrons on NVIDIA GPUs or the CPU.
 *
 * This is the whole public C API. Conventions that hold for every function
 * below unless its comment says otherwise:
 *
 *  - Fallible functions return kiln_status; KILN_OK (0) means success.
 *    On failure, every out-parameter is set to NULL / 0 (when the pointer
 *    itself is not NULL) and kiln_last_error() describes what went wrong.
 *  - Sizes, counts, dimensions and indices are int64_t. Booleans are int.
 *  - Handles are opaque and reference-counted inside: releasing a handle drops
 *    the caller's reference; objects that depend on it (a trainer on its model,
 *    a tensor on its context) keep it alive. kiln_*_release(NULL) does nothing.
 *    A released or foreign handle passed back yields KILN_ERROR_INVALID_HANDLE,
 *    always: handles are never-reused identifiers, not addresses, so a
 *    released handle can never come back as a new object. A release while
 *    other threads (or a callback of the same call) are inside calls with the
 *    handle lets those calls finish with the object; later calls get
 *    KILN_ERROR_INVALID_HANDLE.
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
 * kiln_model_predict) and tensors that are only read may be used by several
 * threads at once. A trainer, and a tensor being written, are used by one
 * thread at a time. Every release function may be called from any thread.
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

/* The library's version as "MAJOR.MINOR.PATCH". Static storage; never fails. */
KILN_API const char *kiln_version_string(void);
/* The library's version numbers; NULL out-pointers are skipped. Never fails. */
KILN_API void kiln_version(int *major, int *minor, int *patch);
/* The ABI version of the loaded library; compare with KILN_ABI_VERSION. */
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
 * storage; unknown values give "KILN_ERROR_UNKNOWN". Never fails. */
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
 * kiln_context_options_release. */
KILN_API kiln_status kiln_context_options_create(kiln_context_options **out);
KILN_API void kiln_context_options_release(kiln_context_options *options);
KILN_API kiln_status kiln_context_options_set_seed(kiln_context_options *options, uint64_t seed);
/* threads >= 1, or 0 for one per core. */
KILN_API kiln_status kiln_context_options_set_num_threads(kiln_context_options *options, int64_t threads);
KILN_API kiln_status kiln_context_options_set_log_level(kiln_context_options *options, kiln_log_level level);
/* fn may be NULL to log to stderr again. user is passed back untouched. */
KILN_API kiln_status kiln_context_options_set_log_callback(kiln_context_options *options, kiln_log_fn fn,
                                                           void *user);
/* enable = 0 makes the context CPU-only: it neither loads the CUDA plugin
 * nor uses the one another context loaded. */
KILN_API kiln_status kiln_context_options_set_enable_cuda(kiln_context_options *options, int enable);

/* Creates a context: its own CPU backend and, if it loads, the CUDA backend.
 * The CUDA plugin (libkiln_cuda.so from libkiln's own directory, or from the
 * directory in the environment variable KILN_BACKEND_PATH, read at that
 * moment) is loaded once per process, by the first context that asks for
 * CUDA, and stays loaded until the process exits, even when every context is
 * released. All contexts share one CUDA backend per device (one memory pool
 * per device), and all see the same availability and reason. options may be
 * NULL for defaults; it is copied. A missing plugin or driver is not an
 * error: the context is then CPU-only and kiln_cuda_unavailable_reason says
 * why. */
KILN_API kiln_status kiln_context_create(const kiln_context_options *options, kiln_context **out);
KILN_API void kiln_context_release(kiln_context *ctx);
/* Reseeds the context's generator (torch.manual_seed). Affects rand, randn,
 * model initialisation and, through them, everything seeded from the context. */
KILN_API kiln_status kiln_context_set_seed(kiln_context *ctx, uint64_t seed);

/* ======================================================================
 * Devices
 * ====================================================================== */

typedef enum kiln_device_kind { KILN_DEVICE_CPU = 0, KILN_DEVICE_CUDA = 1 } kiln_device_kind;

/* A device: {KILN_DEVICE_CPU, -1} ("cpu") or {KILN_DEVICE_CUDA, N} ("cuda:N"). */
typedef struct kiln_device {
  kiln_device_kind kind;
  int64_t index;
} kiln_device;

/* Parses "cpu", "cpu:0", "cuda" (= "cuda:0"), "cuda:N" or "auto". "auto" is
 * the first usable CUDA device, else the CPU, and needs ctx; for the others
 * ctx may be NULL (syntax only). With a ctx, a CUDA device that is not there
 * fails with KILN_ERROR_DEVICE_UNAVAILABLE and a message that says why (no
 * plugin, no driver, index out of range and how many there are). Malformed
 * text gives KILN_ERROR_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_device_parse(kiln_context *ctx, const char *text, kiln_device *out);
/* Writes "cpu" or "cuda:N" with a terminating NUL into buf (buf_size bytes).
 * KILN_ERROR_INVALID_ARGUMENT if the device is malformed or buf too small. */
KILN_API kiln_status kiln_device_format(kiln_device device, char *buf, int64_t buf_size);

/* *out = 1 when the CUDA backend loaded and sees at least one device. The
 * plugin is loaded once per process by the first context that asks and stays
 * loaded, so every context that did not disable CUDA gives the same answer. */
KILN_API kiln_status kiln_cuda_is_available(kiln_context *ctx, int *out);
/* Why CUDA is not usable ("" when it is): the loader's or driver's message,
 * found once per process and the same for every context (or, for a context
 * made with enable_cuda = 0, that it was disabled). The string is owned by
 * ctx. */
KILN_API kiln_status kiln_cuda_unavailable_reason(kiln_context *ctx, const char **out);
/* Number of devices of a kind: 1 for the CPU, 0..N for CUDA. */
KILN_API kiln_status kiln_device_count(kiln_context *ctx, kiln_device_kind kind, int64_t *out);
/* The "auto" device: cuda:0 when CUDA is usable, else the CPU. */
KILN_API kiln_status kiln_default_device(kiln_context *ctx, kiln_device *out);

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
 * filled up to its size). */
KILN_API kiln_status kiln_device_get_info(kiln_context *ctx, kiln_device device, kiln_device_info *out);
/* Waits until all work kiln queued on the device is done. */
KILN_API kiln_status kiln_device_synchronize(kiln_context *ctx, kiln_device device);

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

/* "f32", "f16", ...; NULL for an unknown value. Never fails. */
KILN_API const char *kiln_dtype_name(kiln_dtype dtype);
/* Bytes per element; 0 for an unknown value. Never fails. */
KILN_API int64_t kiln_dtype_size(kiln_dtype dtype);

/* Creation. shape has ndim entries (0 <= ndim <= KILN_MAX_DIMS, each >= 0);
 * the tensor is contiguous, row-major, on device, and owned by the caller.
 * Errors: INVALID_ARGUMENT (bad shape/dtype, a full value outside an integer
 * dtype), DEVICE_UNAVAILABLE, OUT_OF_MEMORY (the context stays usable). */
KILN_API kiln_status kiln_tensor_empty(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                       kiln_device device, kiln_tensor **out);
KILN_API kiln_status kiln_tensor_zeros(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                       kiln_device device, kiln_tensor **out);
KILN_API kiln_status kiln_tensor_ones(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                      kiln_device device, kiln_tensor **out);
KILN_API kiln_status kiln_tensor_full(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                      kiln_device device, double value, kiln_tensor **out);
/* A 1-D tensor start, start+step, ... below end (above end for step < 0). */
KILN_API kiln_status kiln_tensor_arange(kiln_context *ctx, double start, double end, double step, kiln_dtype dtype,
                                        kiln_device device, kiln_tensor **out);
/* Uniform in [0, 1) / standard normal, from the context's generator. The
 * values depend only on the seed and the draws before, not on the device.
 * Floating dtypes only (else DTYPE_MISMATCH). */
KILN_API kiln_status kiln_tensor_rand(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                      kiln_device device, kiln_tensor **out);
KILN_API kiln_status kiln_tensor_randn(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                       kiln_device device, kiln_tensor **out);
/* Copies nbytes of host data (exactly numel * dtype size, else
 * INVALID_ARGUMENT) into a new tensor on device. */
KILN_API kiln_status kiln_tensor_from_host(kiln_context *ctx, const void *data, int64_t nbytes, const int64_t *shape,
                                           int64_t ndim, kiln_dtype dtype, kiln_device device, kiln_tensor **out);
/* A CPU tensor in page-locked memory (plain CPU memory when CUDA is not
 * usable): kiln_tensor_to from it to a CUDA device is asynchronous, so call
 * kiln_device_synchronize before changing its contents again. */
KILN_API kiln_status kiln_tensor_empty_pinned(kiln_context *ctx, const int64_t *shape, int64_t ndim, kiln_dtype dtype,
                                              kiln_tensor **out);
KILN_API void kiln_tensor_release(kiln_tensor *tensor);

/* Copies the tensor's elements into host memory (nbytes must equal numel *
 * dtype size). Waits for pending device work on the tensor. */
KILN_API kiln_status kiln_tensor_copy_to_host(const kiln_tensor *tensor, void *data, int64_t nbytes);
/* Copies bytes from host memory into an existing tensor (nbytes must equal
 * numel * dtype size); views write through to the storage they share. */
KILN_API kiln_status kiln_tensor_copy_from_host(kiln_tensor *tensor, const void *data, int64_t nbytes);
/* The value of a one-element tensor as a double. */
KILN_API kiln_status kiln_tensor_item(const kiln_tensor *tensor, double *out);
/* The tensor on device (PyTorch's .to(device)): a copy, or a new handle to
 * the same tensor when it is already there. */
KILN_API kiln_status kiln_tensor_to(const kiln_tensor *tensor, kiln_device device, kiln_tensor **out);
/* A copy converted to dtype (PyTorch's .to(dtype)); float to int truncates
 * toward zero. */
KILN_API kiln_status kiln_tensor_cast(const kiln_tensor *tensor, kiln_dtype dtype, kiln_tensor **out);
/* A contiguous copy on the same device. */
KILN_API kiln_status kiln_tensor_clone(const kiln_tensor *tensor, kiln_tensor **out);

/* Queries. */
KILN_API kiln_status kiln_tensor_ndim(const kiln_tensor *tensor, int64_t *out);
/* Size of dimension dim; negative dims count from the end. */
KILN_API kiln_status kiln_tensor_dim(const kiln_tensor *tensor, int64_t dim, int64_t *out);
/* Copies the shape into shape[0..ndim); capacity must be >= ndim. */
KILN_API kiln_status kiln_tensor_shape(const kiln_tensor *tensor, int64_t *shape, int64_t capacity);
KILN_API kiln_status kiln_tensor_numel(const kiln_tensor *tensor, int64_t *out);
KILN_API kiln_status kiln_tensor_dtype(const kiln_tensor *tensor, kiln_dtype *out);
KILN_API kiln_status kiln_tensor_device(const kiln_tensor *tensor, kiln_device *out);
/* PyTorch's get_device(): the CUDA index, or -1 for a CPU tensor. */
KILN_API kiln_status kiln_tensor_get_device(const kiln_tensor *tensor, int64_t *out);
/* 1 for a tensor made by kiln_tensor_empty_pinned (even when, without CUDA,
 * its memory is ordinary), else 0. Views share their source's answer. */
KILN_API kiln_status kiln_tensor_is_pinned(const kiln_tensor *tensor, int *out);

/* Views share storage with their source (writes show through both ways) and
 * keep it alive. reshape: same numel, one entry may be -1. rows: rows
 * [start, end) of dimension 0. */
KILN_API kiln_status kiln_tensor_reshape(const kiln_tensor *tensor, const int64_t *shape, int64_t ndim,
                                         kiln_tensor **out);
KILN_API kiln_status kiln_tensor_rows(const kiln_tensor *tensor, int64_t start, int64_t end, kiln_tensor **out);

/* Math. Inputs must be on one device (else INVALID_ARGUMENT) and, for two
 * tensors, of one dtype (no implicit promotion: DTYPE_MISMATCH). Results are
 * new contiguous tensors on that device. Float ops accept f32, f64, f16 and
 * bf16 (computed in f32); integer dtypes are accepted where marked. */

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
KILN_API kiln_status kiln_tensor_binary(kiln_binary_op op, const kiln_tensor *a, const kiln_tensor *b,
                                        kiln_tensor **out);
/* Elementwise a op scalar (scalar converted to a's dtype; for an integer
 * dtype it must be finite and in range once truncated, else INVALID_ARGUMENT). */
KILN_API kiln_status kiln_tensor_scalar(kiln_binary_op op, const kiln_tensor *a, double scalar, kiln_tensor **out);

typedef enum kiln_compare_op {
  KILN_EQ = 0, KILN_NE = 1, KILN_LT = 2, KILN_LE = 3, KILN_GT = 4, KILN_GE = 5,
  /* Prefixed names for the same ops; prefer them. */
  KILN_COMPARE_EQ = KILN_EQ, KILN_COMPARE_NE = KILN_NE, KILN_COMPARE_LT = KILN_LT, KILN_COMPARE_LE = KILN_LE,
  KILN_COMPARE_GT = KILN_GT, KILN_COMPARE_GE = KILN_GE
} kiln_compare_op;

/* Elementwise comparison with broadcasting; the result is u8 (0 or 1). */
KILN_API kiln_status kiln_tensor_compare(kiln_compare_op op, const kiln_tensor *a, const kiln_tensor *b,
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
KILN_API kiln_status kiln_tensor_unary(kiln_unary_op op, const kiln_tensor *a, double alpha, kiln_tensor **out);

/* Softmax / log-softmax along dim (negative counts from the end). Float. */
KILN_API kiln_status kiln_tensor_softmax(const kiln_tensor *a, int64_t dim, kiln_tensor **out);
KILN_API kiln_status kiln_tensor_log_softmax(const kiln_tensor *a, int64_t dim, kiln_tensor **out);

typedef enum kiln_reduce_op {
  KILN_SUM = 0, KILN_MEAN = 1, KILN_MAX = 2, KILN_ARGMAX = 3,
  /* Prefixed names for the same reductions (KILN_REDUCE_MAX, unlike KILN_MAX,
   * cannot be taken for KILN_MAX_DIMS or KILN_MAXIMUM); prefer them. */
  KILN_REDUCE_SUM = KILN_SUM, KILN_REDUCE_MEAN = KILN_MEAN, KILN_REDUCE_MAX = KILN_MAX,
  KILN_REDUCE_ARGMAX = KILN_ARGMAX
} kiln_reduce_op;

/* Reduces dimension dim (negative counts from the end); keepdim keeps it with
 * size 1. ARGMAX gives i64 (first index of the maximum); MEAN needs a float
 * dtype; SUM/MAX/ARGMAX accept all. Reducing an empty dimension with MAX or
 * ARGMAX is INVALID_ARGUMENT. */
KILN_API kiln_status kiln_tensor_reduce(kiln_reduce_op op, const kiln_tensor *a, int64_t dim, int keepdim,
                                        kiln_tensor **out);

/* Matrix product of 2-D tensors [m, k] x [k, n] -> [m, n] (a 1-D operand is
 * treated as a row / column vector and that dimension dropped, as NumPy).
 * f32, f64, f16, bf16. f32 is computed in full fp32 precision. */
KILN_API kiln_status kiln_tensor_matmul(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor **out);

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
  KILN_LAYER_DROPOUT = 6
} kiln_layer_kind;

/* A model spec is a list of layers, built up and then given to
 * kiln_model_create (which copies it). */
KILN_API kiln_status kiln_model_spec_create(kiln_model_spec **out);
KILN_API void kiln_model_spec_release(kiln_model_spec *spec);
/* Appends Linear(in_features, out_features); in_features must equal the
 * previous Linear's out_features (SHAPE_MISMATCH). */
KILN_API kiln_status kiln_model_spec_add_linear(kiln_model_spec *spec, int64_t in_features, int64_t out_features,
                                                int bias);
/* Appends a parameterless layer: RELU, GELU, TANH, SIGMOID, LEAKY_RELU
 * (arg = negative slope, PyTorch's default 0.01) or DROPOUT (arg = drop
 * probability in [0, 1)). arg is ignored by the others. */
KILN_API kiln_status kiln_model_spec_add(kiln_model_spec *spec, kiln_layer_kind kind, double arg);
/* Appends a whole MLP: Linear(sizes[0], sizes[1]), activation, ...,
 * Linear(sizes[n-2], sizes[n-1]) with biases; n >= 2. activation is one of the
 * parameterless kinds above (LEAKY_RELU uses 0.01). */
KILN_API kiln_status kiln_model_spec_add_mlp(kiln_model_spec *spec, const int64_t *sizes, int64_t n,
                                             kiln_layer_kind activation);
/* Parses a compact spec such as "784-32-10" (ReLU between layers),
 * "784-1024-1024-10:gelu" or "784-256-10:relu:dropout=0.2" and appends its
 * layers after the spec's last layer, with no activation between (the first
 * size must equal the last Linear's out_features: KILN_ERROR_SHAPE_MISMATCH
 * otherwise); parse into a new spec to start over. */
KILN_API kiln_status kiln_model_spec_parse(kiln_model_spec *spec, const char *text);

/* Creates a model with f32 parameters on device, initialised from the
 * context's generator as PyTorch's nn.Linear (kaiming-uniform weights with
 * a = sqrt(5), uniform(+-1/sqrt(in)) biases). The model starts in training
 * mode. Errors: INVALID_ARGUMENT (empty spec), DEVICE_UNAVAILABLE, OOM. */
KILN_API kiln_status kiln_model_create(kiln_context *ctx, const kiln_model_spec *spec, kiln_device device,
                                       kiln_model **out);
/* As kiln_model_create with parameters of dtype (f32 or f64; f64 on the CPU). */
KILN_API kiln_status kiln_model_create_dtype(kiln_context *ctx, const kiln_model_spec *spec, kiln_device device,
                                             kiln_dtype dtype, kiln_model **out);
KILN_API void kiln_model_release(kiln_model *model);
/* Moves the parameters to device (PyTorch's model.to(device)). A trainer
 * created before the move fails with INVALID_ARGUMENT until recreated. */
KILN_API kiln_status kiln_model_to(kiln_model *model, kiln_device device);
KILN_API kiln_status kiln_model_device(const kiln_model *model, kiln_device *out);
/* training = 1 (Dropout active) or 0 (evaluation). Not while another thread
 * runs the model. */
KILN_API kiln_status kiln_model_set_training(kiln_model *model, int training);
KILN_API kiln_status kiln_model_is_training(const kiln_model *model, int *out);
/* Total number of scalar parameters (weights and biases). */
KILN_API kiln_status kiln_model_num_parameters(const kiln_model *model, int64_t *out);
KILN_API kiln_status kiln_model_input_size(const kiln_model *model, int64_t *out);
KILN_API kiln_status kiln_model_output_size(const kiln_model *model, int64_t *out);
/* The spec as kiln_model_spec_parse reads it back. Owned by the model. */
KILN_API kiln_status kiln_model_describe(const kiln_model *model, const char **out);
/* Number of parameter tensors (2 per Linear with bias). */
KILN_API kiln_status kiln_model_num_parameter_tensors(const kiln_model *model, int64_t *out);
/* Parameter i as a tensor sharing the model's storage (writes change the
 * model), and its name as PyTorch's nn.Sequential state_dict calls it
 * ("0.weight", "0.bias", "2.weight", ...; weights are [out, in]). */
KILN_API kiln_status kiln_model_parameter(kiln_model *model, int64_t index, kiln_tensor **out);
KILN_API kiln_status kiln_model_parameter_name(const kiln_model *model, int64_t index, const char **out);

/* Forward pass without gradients: x is [batch, input_size] (any float dtype
 * or u8, converted to the model's dtype), on the model's device; *out is
 * [batch, output_size] logits. Safe from several threads at once. */
KILN_API kiln_status kiln_model_forward(kiln_model *model, const kiln_tensor *x, kiln_tensor **out);

typedef enum kiln_predict_kind {
  KILN_PREDICT_LOGITS = 0,
  KILN_PREDICT_PROBABILITIES = 1, /* softmax of the logits */
  KILN_PREDICT_CLASSES = 2        /* argmax, i64 [batch] */
} kiln_predict_kind;

/* Evaluation-mode forward pass: x may be on any device (it is moved to the
 * model's); *out is on the model's device. Safe from several threads. */
KILN_API kiln_status kiln_model_predict(kiln_model *model, const kiln_tensor *x, kiln_predict_kind kind,
                                        kiln_tensor **out);

/* Writes the weights as a safetensors file (names as kiln_model_parameter_name,
 * the spec in the metadata) atomically: a crash leaves any old file intact. */
KILN_API kiln_status kiln_model_save(const kiln_model *model, const char *path);
/* Creates a model from a file kiln_model_save wrote. FORMAT for a malformed
 * file, IO for an unreadable one. */
KILN_API kiln_status kiln_model_load(kiln_context *ctx, const char *path, kiln_device device, kiln_model **out);
/* Loads weights from a safetensors file into an existing model;
 * SHAPE_MISMATCH if the file holds another architecture. On failure the
 * model's weights are unchanged. */
KILN_API kiln_status kiln_model_load_weights(kiln_model *model, const char *path);
/* Creates a model of spec on device from a safetensors file that holds its
 * parameters under the names PyTorch's nn.Sequential of the same layers
 * gives them in its state_dict ("0.weight" [out, in], "0.bias" [out],
 * "2.weight", ...; parameterless layers such as ReLU and Dropout take an
 * index but hold nothing), e.g. one written by
 * safetensors.torch.save_file(model.state_dict(), path) or by
 * kiln_model_save. The file's metadata is ignored: spec alone decides the
 * layers (so "784-32-10" and "784-32-10:gelu" both load the same file). The
 * model's dtype is the file's: f32, or f64 (CPU only: NOT_SUPPORTED on
 * CUDA); it starts in training mode, as kiln_model_create. spec is copied;
 * the caller owns *out. The file is read once and not kept open.
 * Errors, each message naming the offending tensor:
 *   SHAPE_MISMATCH  a parameter the spec needs is missing, has another
 *                   shape, or the file holds a tensor the spec has no
 *                   parameter for;
 *   DTYPE_MISMATCH  a parameter that is not f32/f64 (f16, bf16, integers:
 *                   convert with .float() first) or whose dtype differs
 *                   from the first parameter's;
 *   FORMAT          a malformed, truncated or hostile file (never read past
 *                   its end); IO an unreadable one;
 *   INVALID_ARGUMENT NULL ctx/path/spec/out or a spec without a Linear;
 *   INVALID_HANDLE  a released ctx or spec; DEVICE_UNAVAILABLE; OOM.
 * Thread: any (ctx may be shared; spec must not be changed meanwhile). */
KILN_API kiln_status kiln_model_load_with_spec(kiln_context *ctx, const char *path, const kiln_model_spec *spec,
                                               kiln_device device, kiln_model **out);

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

/* The largest ONNX file kiln reads or writes, in bytes (protobuf's own limit
 * is 2 GiB). Reading is linear in the file's size and allocates a small
 * multiple of it. */
#define KILN_ONNX_MAX_FILE_BYTES (INT64_C(1) << 30)
/* The most nodes (Constant nodes included) a graph kiln reads may have. */
#define KILN_ONNX_MAX_NODES 4096

/* Writes model as an ONNX file (IR version 8, opset 13 of the ONNX domain)
 * that onnx.checker accepts and ONNX Runtime runs: one input "input"
 * [batch, in] and one output "logits" [batch, out] of the model's dtype
 * (FLOAT for f32, DOUBLE for f64), batch a symbolic dimension. Each Linear is
 * a Gemm with transB = 1 over an initializer in kiln's [out, in] layout named
 * as kiln_model_parameter_name ("0.weight", "0.bias"); ReLU, LeakyReLU, Tanh
 * and Sigmoid are Relu, LeakyRelu, Tanh and Sigmoid; GELU is its erf form
 * (Div, Erf, Add, Mul, Mul, as torch.onnx.export writes it); Dropout is left
 * out (the inference form). The file is written atomically, like
 * kiln_model_save: a crash leaves any old file intact. The model is only
 * read (its weights are copied to the host when it lives on a GPU).
 * Errors: INVALID_ARGUMENT for NULL model/path; INVALID_HANDLE for a
 * released model; NOT_SUPPORTED without the plugin, or for a model larger
 * than KILN_ONNX_MAX_FILE_BYTES as ONNX; IO when the file cannot be written.
 * Thread: any; the model may be used by other threads meanwhile, but its
 * weights should not be changed (a concurrent training step may be half
 * seen). */
KILN_API kiln_status kiln_model_export_onnx(const kiln_model *model, const char *path);
/* Creates a CPU model (move it with kiln_model_to) from an ONNX file holding
 * an MLP: one graph input [batch, features...] of FLOAT or DOUBLE, one
 * output, and between them a chain of nodes, each reading the previous one's
 * output, with constants (initializers or Constant nodes) for every other
 * input. Read: Gemm (transB 0 or 1, alpha, beta; C of [out], [1, out] or a
 * scalar), MatMul by an [in, out] constant with an optional Add of a bias
 * right after it, Relu, LeakyRelu, Gelu (the exact form) and GELU's erf form
 * as above, Tanh, Sigmoid, Identity, Dropout (kept as kiln's Dropout of its
 * ratio, so the model trains as it was built), and Flatten (axis 1) or
 * Reshape to [-1 or 0, features] before the first layer. Opsets 9 to 23 of
 * the ONNX domain, IR versions 3 to 12. The model's dtype is the input's; every parameter must
 * have it. It starts in training mode, as kiln_model_create; the caller owns
 * *out (kiln_model_release). The file is read once and not kept open; a file
 * larger than KILN_ONNX_MAX_FILE_BYTES is refused before it is read.
 * Errors, each message naming the node (by name, or "#index" and op type):
 *   NOT_SUPPORTED  any other op or domain, an opset or IR version outside
 *                  the range, a graph that is not one chain (a value read by
 *                  two nodes, a node off the path, several inputs or
 *                  outputs), a constant keeping its data in an external
 *                  file, a parameter type other than FLOAT/DOUBLE, a file
 *                  or graph over the limits above, or no plugin;
 *   FORMAT         a file protobuf cannot parse (truncated, corrupt, not
 *                  ONNX), a constant whose data does not match its shape,
 *                  shapes that do not chain, a parameter whose type differs
 *                  from the input's, non-finite values, bad attributes;
 *   IO             the file cannot be opened or read, or is not a regular file;
 *   INVALID_ARGUMENT NULL ctx/path/out; INVALID_HANDLE a released ctx; OOM.
 * On failure *out is NULL and nothing else changes.
 * Thread: any (ctx may be shared). */
KILN_API kiln_status kiln_model_import_onnx(kiln_context *ctx, const char *path, kiln_model **out);

/* ======================================================================
 * Datasets
 * ====================================================================== */

typedef struct kiln_dataset kiln_dataset;

/* A dataset from tensors: x [N, features...] (float or u8) and y [N] integer
 * class labels (i32/i64/u8, all >= 0) or [N, k] float targets, both of ctx.
 * The tensors are referenced, not copied. SHAPE_MISMATCH when the first
 * dimensions differ; INVALID_ARGUMENT for N = 0 or a negative label. */
KILN_API kiln_status kiln_dataset_from_tensors(kiln_context *ctx, const kiln_tensor *x, const kiln_tensor *y,
                                               kiln_dataset **out);
/* Reads an IDX image file and an IDX label file (raw, or gzip when the name
 * ends in .gz), as MNIST and Fashion-MNIST ship them. Images stay u8 and are
 * scaled to [0, 1] when batched. IO / FORMAT on a bad file. */
KILN_API kiln_status kiln_dataset_load_idx(kiln_context *ctx, const char *images_path, const char *labels_path,
                                           kiln_dataset **out);
/* Loads the "train" or "test" split of an MNIST-layout directory
 * (train-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz], ...). */
KILN_API kiln_status kiln_dataset_load_mnist(kiln_context *ctx, const char *dir, const char *split,
                                             kiln_dataset **out);
KILN_API void kiln_dataset_release(kiln_dataset *dataset);
KILN_API kiln_status kiln_dataset_size(const kiln_dataset *dataset, int64_t *out);
/* Features per sample (product of x's dimensions after the first). */
KILN_API kiln_status kiln_dataset_num_features(const kiln_dataset *dataset, int64_t *out);
/* 1 + the largest label for class datasets; the target width otherwise. */
KILN_API kiln_status kiln_dataset_num_classes(const kiln_dataset *dataset, int64_t *out);
/* Batched features become (x * scale - mean) / std. Defaults: scale 1/255
 * for u8, 1 for floats; mean 0; std 1. std must be > 0. */
KILN_API kiln_status kiln_dataset_set_normalization(kiln_dataset *dataset, double scale, double mean, double std);
/* Seeded random split into a training part and a validation part holding
 * round(size * validation_fraction) samples (0 < fraction < 1). Both share
 * the source's data. */
KILN_API kiln_status kiln_dataset_split(const kiln_dataset *dataset, double validation_fraction, uint64_t seed,
                                        kiln_dataset **train, kiln_dataset **validation);
/* Samples [start, start + count) as float x [count, features] (model dtype
 * f32) and labels y [count] i64 (or float targets), normalised, on device. */
KILN_API kiln_status kiln_dataset_batch(const kiln_dataset *dataset, int64_t start, int64_t count,
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
  KILN_LOSS_BCE_WITH_LOGITS = 2 /* logits [B, K], target [B, K] in [0, 1] */
} kiln_loss_kind;

typedef enum kiln_optimizer_kind { KILN_OPTIM_SGD = 0, KILN_OPTIM_ADAM = 1, KILN_OPTIM_ADAMW = 2 } kiln_optimizer_kind;

typedef enum kiln_lr_schedule {
  KILN_LR_CONSTANT = 0,
  KILN_LR_STEP = 1,   /* lr * gamma^(floor(step / step_size)) */
  KILN_LR_COSINE = 2  /* from lr to min_lr over total_steps (cosine annealing) */
} kiln_lr_schedule;

/* The mean loss of pred against target, as the trainer computes it (mean
 * over the batch; MSE and BCE also over the elements). Both on one device. */
KILN_API kiln_status kiln_loss(kiln_loss_kind kind, const kiln_tensor *pred, const kiln_tensor *target, double *out);

/* Trainer options, with PyTorch's defaults: cross-entropy, SGD, lr 0.01,
 * momentum 0, dampening 0, nesterov off, weight decay 0 (AdamW 0.01), betas
 * (0.9, 0.999), eps 1e-8, batch 64, no clipping, constant lr, no warmup,
 * shuffle seed from the context, progress every 0 batches (end of epoch only). */
KILN_API kiln_status kiln_trainer_options_create(kiln_trainer_options **out);
KILN_API void kiln_trainer_options_release(kiln_trainer_options *options);
KILN_API kiln_status kiln_trainer_options_set_loss(kiln_trainer_options *options, kiln_loss_kind loss);
KILN_API kiln_status kiln_trainer_options_set_optimizer(kiln_trainer_options *options, kiln_optimizer_kind kind);
KILN_API kiln_status kiln_trainer_options_set_lr(kiln_trainer_options *options, double lr);
KILN_API kiln_status kiln_trainer_options_set_momentum(kiln_trainer_options *options, double momentum);
KILN_API kiln_status kiln_trainer_options_set_nesterov(kiln_trainer_options *options, int nesterov);
KILN_API kiln_status kiln_trainer_options_set_weight_decay(kiln_trainer_options *options, double weight_decay);
KILN_API kiln_status kiln_trainer_options_set_betas(kiln_trainer_options *options, double beta1, double beta2);
KILN_API kiln_status kiln_trainer_options_set_eps(kiln_trainer_options *options, double eps);
KILN_API kiln_status kiln_trainer_options_set_batch_size(kiln_trainer_options *options, int64_t batch_size);
/* Clip the global gradient norm to max_norm before each update (0 = off). */
KILN_API kiln_status kiln_trainer_options_set_grad_clip(kiln_trainer_options *options, double max_norm);
/* step_size: STEP's period in steps; gamma: STEP's factor; total_steps:
 * COSINE's length in steps (0 = the fit's total); min_lr: COSINE's floor. */
KILN_API kiln_status kiln_trainer_options_set_schedule(kiln_trainer_options *options, kiln_lr_schedule schedule,
                                                       int64_t step_size, double gamma, int64_t total_steps,
                                                       double min_lr);
/* Linear warmup from 0 to the scheduled lr over the first steps steps. */
KILN_API kiln_status kiln_trainer_options_set_warmup(kiln_trainer_options *options, int64_t steps);
KILN_API kiln_status kiln_trainer_options_set_shuffle_seed(kiln_trainer_options *options, uint64_t seed);
/* Call the progress callback every n batches (0 = once per epoch). Each call
 * reads the loss back from the device. */
KILN_API kiln_status kiln_trainer_options_set_progress_interval(kiln_trainer_options *options, int64_t batches);

/* DataParallel, as PyTorch's nn.DataParallel: one trainer over several GPUs
 * of this process. devices[0..count) are CUDA devices, distinct; the model
 * must be on devices[0] when the trainer is created. The trainer then holds
 * a replica of the model on each other device and splits every batch over
 * the replicas: batch size B gives each B / count rows (B must be a multiple
 * of count), replica r training on positions r, r + count, ... of each
 * epoch's shuffled order, so the result is that of batch B on one device up
 * to the order of floating-point sums. Gradients are averaged every step with
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
 * KILN_ERROR_INVALID_ARGUMENT when the model is not on devices[0] or the
 * batch size is not a multiple of count, KILN_ERROR_DEVICE_UNAVAILABLE for a
 * GPU that does not exist or a missing libkiln_dist.so, and
 * KILN_ERROR_NOT_SUPPORTED when that plugin was built without NCCL. A
 * replica that fails alone (out of memory on its GPU) makes the call fail on
 * every replica at once; the trainer's communicators are then broken, and
 * later training calls return KILN_ERROR_COMMUNICATION: create a new trainer.
 * A DataParallel trainer cannot also be attached to a communicator
 * (KILN_ERROR_NOT_SUPPORTED): DDP runs one device per rank. */
#define KILN_MAX_DATA_PARALLEL_DEVICES 64
KILN_API kiln_status kiln_trainer_options_set_devices(kiln_trainer_options *options, const kiln_device *devices,
                                                      int64_t count);

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
KILN_API kiln_status kiln_trainer_options_set_precision(kiln_trainer_options *options, kiln_precision precision);

/* The parts of a backend's fast path, each of which can be switched off to
 * bisect a failure: fused cuBLASLt epilogues, CUDA graphs, cuDNN's fused
 * graphs. Backends without them (the CPU) ignore the bits, and results agree
 * with every part off within float rounding. */
typedef enum kiln_fast_path {
  KILN_FAST_PATH_EPILOGUES = 1,
  KILN_FAST_PATH_GRAPHS = 2,
  KILN_FAST_PATH_CUDNN = 4,
  KILN_FAST_PATH_ALL = 7
} kiln_fast_path;
/* The kiln_fast_path bits a trainer may use (default KILN_FAST_PATH_ALL; 0
 * runs every step as the plain sequence of kernels). The environment
 * variable KILN_DISABLE, a comma-separated list of "epilogues", "graphs",
 * "cudnn" or "all", removes more when the trainer is created
 * (KILN_ERROR_INVALID_ARGUMENT there for an unknown name).
 * KILN_ERROR_INVALID_ARGUMENT for bits outside KILN_FAST_PATH_ALL. */
KILN_API kiln_status kiln_trainer_options_set_fast_path(kiln_trainer_options *options, uint32_t enabled);

/* A trainer for model on the model's device; it keeps the model alive and
 * copies options (NULL = defaults). Used by one thread at a time. */
KILN_API kiln_status kiln_trainer_create(kiln_model *model, const kiln_trainer_options *options, kiln_trainer **out);
KILN_API void kiln_trainer_release(kiln_trainer *trainer);

/* One optimisation step on a batch (x [B, in], or [B, ...] with `in`
 * elements per sample as kiln_model_forward takes it; y labels [B] or
 * targets [B, K]; any device: moved to the model's). *loss (may be NULL: then the
 * loss is not read back) is the batch's mean loss before the update. x and
 * y have been copied when the call returns, so the caller may refill them at
 * once, pinned host tensors included (for those the call waits for the
 * copy, and so for the steps queued before it). Without a loss to read, the
 * step itself may still be running on a GPU when the call returns. */
KILN_API kiln_status kiln_trainer_step(kiln_trainer *trainer, const kiln_tensor *x, const kiln_tensor *y,
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
 * last one partial. *out (struct_size set by the caller) gets the training
 * statistics; no validation. */
KILN_API kiln_status kiln_trainer_epoch(kiln_trainer *trainer, const kiln_dataset *dataset, kiln_epoch_stats *out);

typedef enum kiln_progress_phase {
  KILN_PROGRESS_BATCH = 0, /* every progress_interval batches */
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
 * kiln_trainer_step, _epoch, _fit, _evaluate and _load_checkpoint on the same
 * trainer return KILN_ERROR_BUSY. */
typedef int (*kiln_progress_fn)(void *user, const kiln_progress *progress);

/* Trains for epochs epochs, evaluating validation (may be NULL) after each,
 * and returns the history (caller releases). callback may be NULL.
 * KILN_ERROR_NUMERIC, naming the epoch and its figures, when an epoch's mean
 * loss is NaN or infinite (the updates done so far stay in the model; the
 * same for kiln_trainer_epoch); KILN_ERROR_INVALID_ARGUMENT when epochs < 1
 * or the total step count would pass 2^62. */
KILN_API kiln_status kiln_trainer_fit(kiln_trainer *trainer, const kiln_dataset *train,
                                      const kiln_dataset *validation, int64_t epochs, kiln_progress_fn callback,
                                      void *user, kiln_history **out);
/* Mean loss and accuracy (0 for non-class targets) of the model over dataset,
 * in evaluation mode. loss and accuracy may each be NULL when not wanted. */
KILN_API kiln_status kiln_trainer_evaluate(kiln_trainer *trainer, const kiln_dataset *dataset, double *loss,
                                           double *accuracy);
/* Epochs and optimisation steps done so far (checkpoints restore them). */
KILN_API kiln_status kiln_trainer_epochs_done(const kiln_trainer *trainer, int64_t *out);
KILN_API kiln_status kiln_trainer_steps_done(const kiln_trainer *trainer, int64_t *out);
/* The learning rate the next step will use. */
KILN_API kiln_status kiln_trainer_current_lr(const kiln_trainer *trainer, double *out);

/* Writes a training checkpoint (weights, optimizer state, epoch and step
 * counters, shuffle generator) as safetensors, atomically. */
KILN_API kiln_status kiln_trainer_save_checkpoint(const kiln_trainer *trainer, const char *path);
/* Restores a checkpoint written for the same architecture and optimizer
 * (else SHAPE_MISMATCH / INVALID_ARGUMENT); training then continues exactly
 * as the run that wrote it. On failure the trainer is unchanged. */
KILN_API kiln_status kiln_trainer_load_checkpoint(kiln_trainer *trainer, const char *path);

KILN_API void kiln_history_release(kiln_history *history);
KILN_API kiln_status kiln_history_size(const kiln_history *history, int64_t *out);
/* Epoch i (0-based) of the history; out->struct_size set by the caller. */
KILN_API kiln_status kiln_history_get(const kiln_history *history, int64_t index, kiln_epoch_stats *out);

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
 *    the flat gradient buffer) before clipping and the update;
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
 * job calls it. A process not started by mpirun is a job of one rank.
 * KILN_ERROR_DEVICE_UNAVAILABLE when libkiln_dist.so or Open MPI's libmpi
 * cannot be loaded (the message has the loader's reason) or MPI cannot be
 * initialized. The timeout starts at KILN_DIST_TIMEOUT seconds (environment;
 * default 600) and bounds the creation too: when a process of the job never
 * creates its communicator, the others' calls return KILN_ERROR_COMMUNICATION
 * after that long (MPI_Init itself waits for every process mpirun started;
 * mpirun bounds that). *out is released with kiln_communicator_release; a trainer
 * it is attached to keeps it alive. */
KILN_API kiln_status kiln_communicator_create_mpi(kiln_context *ctx, kiln_communicator **out);
/* One communicator per GPU of devices[0..count), over NCCL alone (no MPI):
 * out[i] (an array of count pointers the caller provides) is rank i of count
 * and runs on devices[i]. For DDP inside one process: one thread per GPU, each
 * with its own model on its GPU and its own trainer attached to its
 * communicator; the ranks meet in every collective, so each must be driven by
 * a thread of its own. KILN_ERROR_INVALID_ARGUMENT for count < 1, a CPU
 * device or a device listed twice; KILN_ERROR_DEVICE_UNAVAILABLE for a GPU
 * that does not exist or a missing plugin; KILN_ERROR_NOT_SUPPORTED when the
 * plugin was built without NCCL. On failure every out[i] is NULL. Each
 * out[i] is released with kiln_communicator_release. */
KILN_API kiln_status kiln_communicator_create_local(kiln_context *ctx, const kiln_device *devices, int64_t count,
                                                    kiln_communicator **out);
KILN_API void kiln_communicator_release(kiln_communicator *comm);
/* This process's rank in [0, size), the number of ranks, and the rank among
 * the ranks of the same machine (the GPU to use: cuda:<local rank>). */
KILN_API kiln_status kiln_communicator_rank(const kiln_communicator *comm, int64_t *out);
KILN_API kiln_status kiln_communicator_size(const kiln_communicator *comm, int64_t *out);
KILN_API kiln_status kiln_communicator_local_rank(const kiln_communicator *comm, int64_t *out);
/* Seconds any one collective may take before it fails with
 * KILN_ERROR_COMMUNICATION (a dead or stuck peer). KILN_ERROR_INVALID_ARGUMENT
 * unless seconds > 0 and finite. Not while a trainer it is attached to runs. */
KILN_API kiln_status kiln_communicator_set_timeout(kiln_communicator *comm, double seconds);

/* Makes trainer one rank of DDP training over comm (see above); the trainer
 * keeps comm alive. Collective: every rank calls it. KILN_ERROR_INVALID_ARGUMENT
 * on every rank when the model spec, dtype or options (loss, lr, optimizer,
 * batch size, clipping, schedule, shuffle seed, precision) differ between
 * ranks, naming the ranks; KILN_ERROR_NOT_SUPPORTED when comm cannot reduce
 * buffers of the trainer's device (a CUDA model with a plugin built without
 * NCCL); KILN_ERROR_COMMUNICATION when the exchange fails. From then on
 * kiln_trainer_step also averages gradients (every rank must call it, each
 * with its own batch; the loss returned is this rank's batch's). */
KILN_API kiln_status kiln_trainer_attach_communicator(kiln_trainer *trainer, kiln_communicator *comm);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KILN_H */
