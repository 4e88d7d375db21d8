package kiln

// The values of every enumeration below are kiln.h's own, read by cgo at
// compile time: nothing here restates a number.

// #cgo pkg-config: kiln
// #include <kiln/kiln.h>
import "C"

const abiVersion = C.KILN_ABI_VERSION

// MaxDims is the most dimensions a tensor may have (KILN_MAX_DIMS).
const MaxDims = C.KILN_MAX_DIMS

// The statuses of a failed call, as Error.Status carries them; each is also
// an error for errors.Is.
const (
	ErrInvalidArgument   Status = C.KILN_ERROR_INVALID_ARGUMENT   // a NULL pointer, bad value or bad string
	ErrInvalidHandle     Status = C.KILN_ERROR_INVALID_HANDLE     // a closed object (see ErrClosed)
	ErrShapeMismatch     Status = C.KILN_ERROR_SHAPE_MISMATCH     // tensor shapes that do not fit together
	ErrDTypeMismatch     Status = C.KILN_ERROR_DTYPE_MISMATCH     // a dtype the operation does not take
	ErrDeviceUnavailable Status = C.KILN_ERROR_DEVICE_UNAVAILABLE // no such device, no driver, no plugin
	ErrOutOfMemory       Status = C.KILN_ERROR_OUT_OF_MEMORY      // host or device memory exhausted
	ErrIO                Status = C.KILN_ERROR_IO                 // a file could not be read or written
	ErrFormat            Status = C.KILN_ERROR_FORMAT             // a file's contents are malformed
	ErrNotSupported      Status = C.KILN_ERROR_NOT_SUPPORTED      // a valid request this build or device cannot do
	ErrCancelled         Status = C.KILN_ERROR_CANCELLED          // a callback asked to stop
	ErrBackend           Status = C.KILN_ERROR_BACKEND            // CUDA, cuBLAS, cuDNN or BLAS failure
	ErrInternal          Status = C.KILN_ERROR_INTERNAL           // a bug in kiln
	ErrBusy              Status = C.KILN_ERROR_BUSY               // the object is inside another call
	ErrNumeric           Status = C.KILN_ERROR_NUMERIC            // training diverged: a NaN or infinite loss
	ErrCommunication     Status = C.KILN_ERROR_COMMUNICATION      // a collective across ranks failed: a peer died or timed out
)

// ErrClosed is what a call on a closed object fails with: kiln answers a
// released handle with KILN_ERROR_INVALID_HANDLE, and since this package's
// typed wrappers cannot hold a foreign or wrong-type handle, in Go that
// status means exactly "closed". Test it with errors.Is(err, ErrClosed).
const ErrClosed = ErrInvalidHandle

// LogLevel is the level of a log record, and the lowest level a context
// logs (WithLogLevel).
type LogLevel int

// The log levels, lowest first.
const (
	LogDebug   LogLevel = C.KILN_LOG_DEBUG
	LogInfo    LogLevel = C.KILN_LOG_INFO
	LogWarning LogLevel = C.KILN_LOG_WARNING
	LogError   LogLevel = C.KILN_LOG_ERROR
	LogOff     LogLevel = C.KILN_LOG_OFF // as a context's level: log nothing
)

// DeviceKind is the kind of a Device.
type DeviceKind int32

// The device kinds.
const (
	KindCPU  DeviceKind = C.KILN_DEVICE_CPU
	KindCUDA DeviceKind = C.KILN_DEVICE_CUDA
)

// DType is a tensor's element type.
type DType int32

// The element types.
const (
	F32  DType = C.KILN_F32
	F16  DType = C.KILN_F16
	BF16 DType = C.KILN_BF16
	F64  DType = C.KILN_F64
	I32  DType = C.KILN_I32
	I64  DType = C.KILN_I64
	U8   DType = C.KILN_U8
)

// BinaryOp is an elementwise operation of two tensors (or a tensor and a scalar).
type BinaryOp int

// The binary operations: all dtypes (integer division truncates) except
// OpPow, which takes float dtypes.
const (
	OpAdd     BinaryOp = C.KILN_BINARY_ADD
	OpSub     BinaryOp = C.KILN_BINARY_SUB
	OpMul     BinaryOp = C.KILN_BINARY_MUL
	OpDiv     BinaryOp = C.KILN_BINARY_DIV
	OpMaximum BinaryOp = C.KILN_BINARY_MAXIMUM
	OpMinimum BinaryOp = C.KILN_BINARY_MINIMUM
	OpPow     BinaryOp = C.KILN_BINARY_POW
)

// CompareOp is an elementwise comparison.
type CompareOp int

// The comparisons; results are U8 tensors of 0 and 1.
const (
	OpEq CompareOp = C.KILN_COMPARE_EQ
	OpNe CompareOp = C.KILN_COMPARE_NE
	OpLt CompareOp = C.KILN_COMPARE_LT
	OpLe CompareOp = C.KILN_COMPARE_LE
	OpGt CompareOp = C.KILN_COMPARE_GT
	OpGe CompareOp = C.KILN_COMPARE_GE
)

// UnaryOp is an elementwise function.
type UnaryOp int

// The unary functions: OpNeg and OpAbs take every dtype, the others float
// dtypes. OpGELU is the exact (erf) form.
const (
	OpNeg       UnaryOp = C.KILN_UNARY_NEG
	OpAbs       UnaryOp = C.KILN_UNARY_ABS
	OpExp       UnaryOp = C.KILN_UNARY_EXP
	OpLog       UnaryOp = C.KILN_UNARY_LOG
	OpSqrt      UnaryOp = C.KILN_UNARY_SQRT
	OpReLU      UnaryOp = C.KILN_UNARY_RELU
	OpGELU      UnaryOp = C.KILN_UNARY_GELU
	OpTanh      UnaryOp = C.KILN_UNARY_TANH
	OpSigmoid   UnaryOp = C.KILN_UNARY_SIGMOID
	OpLeakyReLU UnaryOp = C.KILN_UNARY_LEAKY_RELU
)

// ReduceOp reduces one dimension.
type ReduceOp int

// The reductions: OpArgmax gives I64 indices, OpMean needs a float dtype.
const (
	OpSum    ReduceOp = C.KILN_REDUCE_SUM
	OpMean   ReduceOp = C.KILN_REDUCE_MEAN
	OpMax    ReduceOp = C.KILN_REDUCE_MAX
	OpArgmax ReduceOp = C.KILN_REDUCE_ARGMAX
)

// LayerKind is a layer of a sequential model.
type LayerKind int

// The layer kinds.
const (
	LayerLinear    LayerKind = C.KILN_LAYER_LINEAR
	LayerReLU      LayerKind = C.KILN_LAYER_RELU
	LayerLeakyReLU LayerKind = C.KILN_LAYER_LEAKY_RELU
	LayerGELU      LayerKind = C.KILN_LAYER_GELU
	LayerTanh      LayerKind = C.KILN_LAYER_TANH
	LayerSigmoid   LayerKind = C.KILN_LAYER_SIGMOID
	LayerDropout   LayerKind = C.KILN_LAYER_DROPOUT
	LayerELU       LayerKind = C.KILN_LAYER_ELU      // arg: alpha (PyTorch's default 1)
	LayerSELU      LayerKind = C.KILN_LAYER_SELU     // PyTorch's fixed constants
	LayerSoftplus  LayerKind = C.KILN_LAYER_SOFTPLUS // arg: beta, arg2: threshold (AddWith; defaults 1, 20)
	// The output transforms: the last layer; Forward and PredictLogits
	// return their rows, training takes the logits under them.
	LayerSoftmax    LayerKind = C.KILN_LAYER_SOFTMAX
	LayerLogSoftmax LayerKind = C.KILN_LAYER_LOG_SOFTMAX
)

// ONNXExportFlags choose how ExportONNXWith writes a model (bits).
type ONNXExportFlags uint

// The ONNX export flags.
const (
	ONNXExportDefault ONNXExportFlags = C.KILN_ONNX_EXPORT_DEFAULT
	// The weights in PATH.data beside the model (ONNX's external data).
	ONNXExportExternalData ONNXExportFlags = C.KILN_ONNX_EXPORT_EXTERNAL_DATA
)

// PredictKind selects what Predict returns.
type PredictKind int

// The prediction kinds.
const (
	PredictLogits        PredictKind = C.KILN_PREDICT_LOGITS
	PredictProbabilities PredictKind = C.KILN_PREDICT_PROBABILITIES // softmax of the logits
	PredictClasses       PredictKind = C.KILN_PREDICT_CLASSES       // argmax, I64 [batch]
)

// LossKind is a training loss.
type LossKind int

// The losses.
const (
	CrossEntropy  LossKind = C.KILN_LOSS_CROSS_ENTROPY   // logits [B, C], integer labels [B]
	MSE           LossKind = C.KILN_LOSS_MSE             // pred [B, K], float target [B, K]
	BCEWithLogits LossKind = C.KILN_LOSS_BCE_WITH_LOGITS // logits [B, K], target [B, K] in [0, 1]
)

// Optimizer is the update rule of a trainer.
type Optimizer int

// The optimizers.
const (
	SGD   Optimizer = C.KILN_OPTIM_SGD
	Adam  Optimizer = C.KILN_OPTIM_ADAM
	AdamW Optimizer = C.KILN_OPTIM_ADAMW
)

// Schedule is a learning-rate schedule.
type Schedule int

// The schedules (see WithSchedule for their parameters).
const (
	ScheduleConstant Schedule = C.KILN_LR_CONSTANT
	ScheduleStep     Schedule = C.KILN_LR_STEP   // lr * gamma^floor(step / stepSize)
	ScheduleCosine   Schedule = C.KILN_LR_COSINE // lr to minLR over totalSteps
)

// Precision is the numeric precision of a trainer's steps (kiln_precision).
type Precision int

const (
	// PrecisionFP32 computes in the model's dtype, f32 products exactly
	// (PyTorch's with TF32 off).
	PrecisionFP32 Precision = C.KILN_PRECISION_FP32
	// PrecisionTF32 runs f32 products on CUDA's TF32 tensor cores (10-bit
	// mantissa inputs, f32 accumulation). CUDA only: NewTrainer fails with
	// ErrNotSupported for a CPU model.
	PrecisionTF32 Precision = C.KILN_PRECISION_TF32
	// PrecisionBF16 is mixed precision on every device: batch, activations
	// and products in bf16 (f32 accumulation) with f32 master weights,
	// gradients, optimizer state and loss, as PyTorch's autocast to bfloat16.
	PrecisionBF16 Precision = C.KILN_PRECISION_BF16
)

// FastPath is a set of the parts of a backend's fast path (kiln_fast_path
// bits), each of which can be switched off to bisect a failure. Backends
// without them, the CPU's, ignore the bits; results agree with every part
// off within float rounding.
type FastPath uint32

const (
	// FastPathEpilogues uses fused GEMM epilogues (cuBLASLt).
	FastPathEpilogues FastPath = C.KILN_FAST_PATH_EPILOGUES
	// FastPathGraphs replays each step as a CUDA graph.
	FastPathGraphs FastPath = C.KILN_FAST_PATH_GRAPHS
	// FastPathCuDNN runs cuDNN's fused graphs.
	FastPathCuDNN FastPath = C.KILN_FAST_PATH_CUDNN
	// FastPathNarrow runs a narrow one-hidden-layer step as two of kiln's
	// own CUDA kernels.
	FastPathNarrow FastPath = C.KILN_FAST_PATH_NARROW
	// FastPathNone runs every step as the plain sequence of kernels.
	FastPathNone FastPath = 0
	// FastPathAll is every part.
	FastPathAll FastPath = C.KILN_FAST_PATH_ALL
)

// ProgressPhase says when a progress callback runs.
type ProgressPhase int

// The progress phases.
const (
	// PhaseBatch: every n batches, n set by WithProgressInterval.
	PhaseBatch ProgressPhase = C.KILN_PROGRESS_BATCH
	// PhaseEpoch: at the end of each epoch, after validation.
	PhaseEpoch ProgressPhase = C.KILN_PROGRESS_EPOCH
)
