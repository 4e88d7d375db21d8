package kiln

import (
	"runtime"
	"time"
	"unsafe"

	"kiln/internal/capi"
)

// Dataset is samples x [N, features...] with labels or targets y [N, ...].
type Dataset struct{ h uintptr }

func datasetResult(h *uintptr, err error) (*Dataset, error) {
	if err != nil {
		return nil, err
	}
	d := &Dataset{*h}
	runtime.SetFinalizer(d, (*Dataset).Close)
	return d, nil
}

// NewDataset references x (float or U8) and y (integer class labels [N] or
// float targets [N, k]); they are not copied.
func (c *Context) NewDataset(x, y *Tensor) (*Dataset, error) {
	defer runtime.KeepAlive(c)
	defer runtime.KeepAlive(x)
	defer runtime.KeepAlive(y)
	var h uintptr
	return datasetResult(&h, capi.Dataset_from_tensors(c.h, x.h, y.h, &h))
}

// LoadIDX reads an IDX image file and label file (raw or .gz).
func (c *Context) LoadIDX(imagesPath, labelsPath string) (*Dataset, error) {
	defer runtime.KeepAlive(c)
	var h uintptr
	return datasetResult(&h, capi.Dataset_load_idx(c.h, imagesPath, labelsPath, &h))
}

// LoadMNIST reads the "train" or "test" split of an MNIST-layout directory
// (MNIST, Fashion-MNIST).
func (c *Context) LoadMNIST(dir, split string) (*Dataset, error) {
	defer runtime.KeepAlive(c)
	var h uintptr
	return datasetResult(&h, capi.Dataset_load_mnist(c.h, dir, split, &h))
}

// Close releases the dataset (its tensors live on while others use them).
func (d *Dataset) Close() {
	if d.h != 0 {
		capi.Dataset_release(d.h)
		d.h = 0
		runtime.SetFinalizer(d, nil)
	}
}

func (d *Dataset) count(f func(uintptr, *int64) error) (int64, error) {
	defer runtime.KeepAlive(d)
	var n int64
	return n, f(d.h, &n)
}

// Size is the number of samples.
func (d *Dataset) Size() (int64, error) { return d.count(capi.Dataset_size) }

// NumFeatures is the number of features per sample.
func (d *Dataset) NumFeatures() (int64, error) { return d.count(capi.Dataset_num_features) }

// NumClasses is 1 + the largest label (the target width for float targets).
func (d *Dataset) NumClasses() (int64, error) { return d.count(capi.Dataset_num_classes) }

// SetNormalization makes batched features (x * scale - mean) / std.
func (d *Dataset) SetNormalization(scale, mean, std float64) error {
	defer runtime.KeepAlive(d)
	return capi.Dataset_set_normalization(d.h, scale, mean, std)
}

// Split divides the samples at random (seeded) into a training part and a
// validation part of round(size * fraction) samples; both share the data.
func (d *Dataset) Split(fraction float64, seed uint64) (train, validation *Dataset, err error) {
	defer runtime.KeepAlive(d)
	var ht, hv uintptr
	if err = capi.Dataset_split(d.h, fraction, seed, &ht, &hv); err != nil {
		return nil, nil, err
	}
	train, _ = datasetResult(&ht, nil)
	validation, _ = datasetResult(&hv, nil)
	return train, validation, nil
}

// Batch is samples [start, start+count) as normalised F32 features and
// labels (or targets) on dev.
func (d *Dataset) Batch(start, count int64, dev Device) (x, y *Tensor, err error) {
	defer runtime.KeepAlive(d)
	var hx, hy uintptr
	if err = capi.Dataset_batch(d.h, start, count, dev.c(), &hx, &hy); err != nil {
		return nil, nil, err
	}
	return newTensor(hx), newTensor(hy), nil
}

// LossKind is a training loss.
type LossKind int

const (
	CrossEntropy  LossKind = iota // logits [B, C], integer labels [B]
	MSE                           // pred [B, K], float target [B, K]
	BCEWithLogits                 // logits [B, K], target [B, K] in [0, 1]
)

// Loss is the mean loss of pred against target, as a trainer computes it.
func Loss(kind LossKind, pred, target *Tensor) (float64, error) {
	defer runtime.KeepAlive(pred)
	defer runtime.KeepAlive(target)
	var v float64
	return v, capi.Loss(int(kind), pred.h, target.h, &v)
}

// Optimizer is the update rule of a trainer.
type Optimizer int

const (
	SGD Optimizer = iota
	Adam
	AdamW
)

// Schedule is a learning-rate schedule.
type Schedule int

const (
	ScheduleConstant Schedule = iota
	ScheduleStep              // lr * gamma^floor(step / stepSize)
	ScheduleCosine            // lr to minLR over totalSteps
)

// TrainerOption configures NewTrainer; the defaults are PyTorch's (SGD, lr
// 0.01, cross-entropy, batch 64).
type TrainerOption func(opts uintptr) error

func WithLoss(l LossKind) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_loss(o, int(l)) }
}
func WithOptimizer(opt Optimizer) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_optimizer(o, int(opt)) }
}
func WithLR(lr float64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_lr(o, lr) }
}
func WithMomentum(m float64, nesterov bool) TrainerOption {
	return func(o uintptr) error {
		if err := capi.Trainer_options_set_momentum(o, m); err != nil {
			return err
		}
		return capi.Trainer_options_set_nesterov(o, boolInt(nesterov))
	}
}
func WithWeightDecay(wd float64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_weight_decay(o, wd) }
}
func WithBetas(beta1, beta2 float64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_betas(o, beta1, beta2) }
}
func WithEps(eps float64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_eps(o, eps) }
}
func WithBatchSize(n int) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_batch_size(o, int64(n)) }
}

// WithGradClip clips the global gradient norm to maxNorm (0: off).
func WithGradClip(maxNorm float64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_grad_clip(o, maxNorm) }
}
func WithSchedule(s Schedule, stepSize int64, gamma float64, totalSteps int64, minLR float64) TrainerOption {
	return func(o uintptr) error {
		return capi.Trainer_options_set_schedule(o, int(s), stepSize, gamma, totalSteps, minLR)
	}
}
func WithWarmup(steps int64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_warmup(o, steps) }
}
func WithShuffleSeed(seed uint64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_shuffle_seed(o, seed) }
}

// Precision is the numeric precision of a trainer's steps (kiln_precision).
type Precision int

const (
	// PrecisionFP32 computes in the model's dtype, f32 products exactly
	// (the default, and PyTorch's with TF32 off).
	PrecisionFP32 Precision = iota
	// PrecisionTF32 runs f32 products on CUDA's TF32 tensor cores (10-bit
	// mantissa inputs, f32 accumulation). CUDA only: NewTrainer fails with
	// ErrNotSupported for a CPU model.
	PrecisionTF32
	// PrecisionBF16 is mixed precision on every device: batch, activations
	// and products in bf16 (f32 accumulation) with f32 master weights,
	// gradients, optimizer state and loss, as PyTorch's autocast to bfloat16.
	PrecisionBF16
)

// WithPrecision sets the precision of the trainer's steps. TF32 and BF16
// need an F32 model (ErrNotSupported otherwise). Without it the library's
// default applies (PrecisionFP32).
func WithPrecision(p Precision) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_precision(o, int(p)) }
}

// FastPath is a set of the parts of a backend's fast path (kiln_fast_path
// bits), each of which can be switched off to bisect a failure. Backends
// without them, the CPU's, ignore the bits; results agree with every part
// off within float rounding.
type FastPath uint32

const (
	// FastPathEpilogues uses fused GEMM epilogues (cuBLASLt).
	FastPathEpilogues FastPath = 1 << iota
	// FastPathGraphs replays each step as a CUDA graph.
	FastPathGraphs
	// FastPathCuDNN runs cuDNN's fused graphs.
	FastPathCuDNN

	// FastPathNone runs every step as the plain sequence of kernels.
	FastPathNone FastPath = 0
	// FastPathAll is every part: the library's default.
	FastPathAll = FastPathEpilogues | FastPathGraphs | FastPathCuDNN
)

// WithFastPath sets the fast-path parts the trainer may use; bits outside
// FastPathAll are ErrInvalidArgument. Without it the library's default
// applies (FastPathAll). The environment variable KILN_DISABLE removes more
// when the trainer is created (a comma-separated list of "epilogues",
// "graphs", "cudnn" or "all").
func WithFastPath(enabled FastPath) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_fast_path(o, uint32(enabled)) }
}

// Trainer optimises a model; it keeps the model alive. One goroutine at a time.
type Trainer struct{ h uintptr }

// NewTrainer creates a trainer for m on m's device.
func NewTrainer(m *Model, opts ...TrainerOption) (*Trainer, error) {
	var o uintptr
	if err := capi.Trainer_options_create(&o); err != nil {
		return nil, err
	}
	defer capi.Trainer_options_release(o)
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	defer runtime.KeepAlive(m)
	var h uintptr
	if err := capi.Trainer_create(m.h, o, &h); err != nil {
		return nil, err
	}
	t := &Trainer{h}
	runtime.SetFinalizer(t, (*Trainer).Close)
	return t, nil
}

// Close releases the trainer.
func (t *Trainer) Close() {
	if t.h != 0 {
		capi.Trainer_release(t.h)
		t.h = 0
		runtime.SetFinalizer(t, nil)
	}
}

// Step is one optimisation step on a batch; it returns the batch's mean
// loss before the update.
func (t *Trainer) Step(x, y *Tensor) (float64, error) {
	defer runtime.KeepAlive(t)
	defer runtime.KeepAlive(x)
	defer runtime.KeepAlive(y)
	var loss float64
	return loss, capi.Trainer_step(t.h, x.h, y.h, &loss)
}

// EpochStats are the statistics of one epoch.
type EpochStats struct {
	Epoch                    int
	TrainLoss, TrainAccuracy float64
	ValLoss, ValAccuracy     float64
	HasValidation            bool
	Duration                 time.Duration
	SamplesPerSecond, LR     float64
}

func newEpochStats() capi.EpochStats {
	var s capi.EpochStats
	s.StructSize = uint32(unsafe.Sizeof(s))
	return s
}

func statsFromC(s *capi.EpochStats) EpochStats {
	return EpochStats{
		Epoch: int(s.Epoch), TrainLoss: s.TrainLoss, TrainAccuracy: s.TrainAccuracy,
		ValLoss: s.ValLoss, ValAccuracy: s.ValAccuracy, HasValidation: s.HasValidation != 0,
		Duration:         time.Duration(s.Seconds * float64(time.Second)),
		SamplesPerSecond: s.SamplesPerSecond, LR: s.Lr,
	}
}

// Epoch is one shuffled pass over ds: the pull form of progress reporting.
func (t *Trainer) Epoch(ds *Dataset) (EpochStats, error) {
	defer runtime.KeepAlive(t)
	defer runtime.KeepAlive(ds)
	s := newEpochStats()
	if err := capi.Trainer_epoch(t.h, ds.h, &s); err != nil {
		return EpochStats{}, err
	}
	return statsFromC(&s), nil
}

// Fit trains for epochs epochs, evaluating validation (may be nil) after
// each, and returns the history.
func (t *Trainer) Fit(train, validation *Dataset, epochs int) ([]EpochStats, error) {
	defer runtime.KeepAlive(t)
	defer runtime.KeepAlive(train)
	defer runtime.KeepAlive(validation)
	var val uintptr
	if validation != nil {
		val = validation.h
	}
	var hist uintptr
	if err := capi.Trainer_fit(t.h, train.h, val, int64(epochs), &hist); err != nil {
		return nil, err
	}
	defer capi.History_release(hist)
	var n int64
	if err := capi.History_size(hist, &n); err != nil {
		return nil, err
	}
	out := make([]EpochStats, n)
	for i := range out {
		s := newEpochStats()
		if err := capi.History_get(hist, int64(i), &s); err != nil {
			return nil, err
		}
		out[i] = statsFromC(&s)
	}
	return out, nil
}

// Evaluate is the model's mean loss and accuracy over ds, in evaluation mode.
func (t *Trainer) Evaluate(ds *Dataset) (loss, accuracy float64, err error) {
	defer runtime.KeepAlive(t)
	defer runtime.KeepAlive(ds)
	err = capi.Trainer_evaluate(t.h, ds.h, &loss, &accuracy)
	return
}

// EpochsDone and StepsDone count the work so far (checkpoints restore them).
func (t *Trainer) EpochsDone() (int64, error) {
	defer runtime.KeepAlive(t)
	var n int64
	return n, capi.Trainer_epochs_done(t.h, &n)
}

func (t *Trainer) StepsDone() (int64, error) {
	defer runtime.KeepAlive(t)
	var n int64
	return n, capi.Trainer_steps_done(t.h, &n)
}

// CurrentLR is the learning rate the next step will use.
func (t *Trainer) CurrentLR() (float64, error) {
	defer runtime.KeepAlive(t)
	var lr float64
	return lr, capi.Trainer_current_lr(t.h, &lr)
}

// SaveCheckpoint writes weights, optimizer state and counters atomically.
func (t *Trainer) SaveCheckpoint(path string) error {
	defer runtime.KeepAlive(t)
	return capi.Trainer_save_checkpoint(t.h, path)
}

// LoadCheckpoint restores a checkpoint of the same architecture and optimizer.
func (t *Trainer) LoadCheckpoint(path string) error {
	defer runtime.KeepAlive(t)
	return capi.Trainer_load_checkpoint(t.h, path)
}
