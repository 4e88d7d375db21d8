package kiln

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/cgo"
	"time"
	"unsafe"

	"github.com/kiln-ml/kiln/bindings/go/internal/capi"
)

// Loss is the mean loss of pred against target, as a trainer computes it.
func Loss(kind LossKind, pred, target *Tensor) (float64, error) {
	defer runtime.KeepAlive(pred)
	defer runtime.KeepAlive(target)
	var v float64
	return v, capi.Loss(int(kind), pred.ptr(), target.ptr(), &v)
}

// TrainerOption configures NewTrainer. An option that is not given keeps
// libkiln's default (PyTorch's; see kiln_trainer_options_create in kiln.h).
type TrainerOption func(opts uintptr) error

// WithLoss sets the loss.
func WithLoss(l LossKind) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_loss(o, int(l)) }
}

// WithOptimizer sets the update rule.
func WithOptimizer(opt Optimizer) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_optimizer(o, int(opt)) }
}

// WithLR sets the (initial) learning rate.
func WithLR(lr float64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_lr(o, lr) }
}

// WithMomentum sets SGD's momentum and whether it is Nesterov's.
func WithMomentum(m float64, nesterov bool) TrainerOption {
	return func(o uintptr) error {
		if err := capi.Trainer_options_set_momentum(o, m); err != nil {
			return err
		}
		return capi.Trainer_options_set_nesterov(o, boolInt(nesterov))
	}
}

// WithWeightDecay sets the weight decay (L2 for SGD and Adam, decoupled for
// AdamW).
func WithWeightDecay(wd float64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_weight_decay(o, wd) }
}

// WithBetas sets Adam's and AdamW's moment decay rates.
func WithBetas(beta1, beta2 float64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_betas(o, beta1, beta2) }
}

// WithEps sets Adam's and AdamW's denominator term.
func WithEps(eps float64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_eps(o, eps) }
}

// WithBatchSize sets the batch size of Epoch and Fit.
func WithBatchSize(n int) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_batch_size(o, int64(n)) }
}

// WithLabelSmoothing sets cross-entropy's label smoothing in [0, 1], as
// PyTorch's CrossEntropyLoss(label_smoothing=): each target mixes the label
// with the uniform distribution over the classes (0, the default: none).
// Another loss with a non-zero value makes NewTrainer fail.
func WithLabelSmoothing(s float64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_label_smoothing(o, s) }
}

// WithGradClip clips the global gradient norm to maxNorm (0: off).
func WithGradClip(maxNorm float64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_grad_clip(o, maxNorm) }
}

// WithSchedule sets the learning-rate schedule: stepSize and gamma are
// ScheduleStep's period (in steps) and factor, totalSteps and minLR
// ScheduleCosine's length (0: the fit's total) and floor.
func WithSchedule(s Schedule, stepSize int64, gamma float64, totalSteps int64, minLR float64) TrainerOption {
	return func(o uintptr) error {
		return capi.Trainer_options_set_schedule(o, int(s), stepSize, gamma, totalSteps, minLR)
	}
}

// WithWarmup ramps the learning rate linearly from 0 over the first steps.
func WithWarmup(steps int64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_warmup(o, steps) }
}

// WithShuffleSeed seeds the order of each epoch's samples (otherwise drawn
// from the context).
func WithShuffleSeed(seed uint64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_shuffle_seed(o, seed) }
}

// WithProgressInterval makes Fit report progress (OnProgress) and check its
// context for cancellation every n batches as well as at the end of each
// epoch (n = 0, libkiln's default: only there). Each report reads the loss
// back from the device.
func WithProgressInterval(n int64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_progress_interval(o, n) }
}

// WithPrecision sets the precision of the trainer's steps. TF32 and BF16
// need an F32 model (ErrNotSupported otherwise).
func WithPrecision(p Precision) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_precision(o, int(p)) }
}

// WithDevices makes the trainer DataParallel over these GPUs of this
// process, as PyTorch's nn.DataParallel: a replica of the model per device,
// each computing the batch size of samples per step (per device, as per rank
// in DDP). The model must be on the first device when NewTrainer runs
// (ErrInvalidArgument otherwise). One device is plain training there; none
// clears the list.
func WithDevices(devices ...Device) TrainerOption {
	devs := make([]capi.Device, len(devices))
	for i, d := range devices {
		devs[i] = d.c()
	}
	return func(o uintptr) error { return capi.Trainer_options_set_devices(o, devs) }
}

// WithBucketBytes makes data parallel training (WithDevices, or DDP over a
// Communicator) start averaging gradients in buckets of at least n bytes
// during the backward, overlapped with it on GPUs (PyTorch DDP's
// bucket_cap_mb). 0, the default, is one allreduce after the backward.
// Every rank must use the same value; n < 0 is ErrInvalidArgument.
func WithBucketBytes(n int64) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_bucket_bytes(o, n) }
}

// WithFastPath sets the fast-path parts the trainer may use (default
// FastPathEpilogues|FastPathGraphs: cuDNN stays off until a GPU run shows it
// correct and faster); bits outside FastPathAll are ErrInvalidArgument. When
// the trainer is created the environment variable KILN_ENABLE adds parts and
// KILN_DISABLE removes them (each a comma-separated list of "epilogues",
// "graphs", "cudnn" or "all"; disabling wins).
func WithFastPath(enabled FastPath) TrainerOption {
	return func(o uintptr) error { return capi.Trainer_options_set_fast_path(o, uint32(enabled)) }
}

// Trainer optimises a model; it keeps the model alive. One goroutine at a time.
type Trainer struct {
	handle
	ctx *Context
}

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
	if err := capi.Trainer_create(m.ptr(), o, &h); err != nil {
		return nil, err
	}
	t := &Trainer{handle{h: h}, m.ctx}
	// Its gradients, as large as the model's parameters: the least a trainer
	// holds. kiln does not tell the rest (the optimizer's state: none for
	// plain SGD, twice the parameters for Adam; a lower precision's copies).
	t.owns(m.bytes)
	runtime.SetFinalizer(t, (*Trainer).Close)
	return t, nil
}

// String is "Trainer(2 epochs, 1876 steps done, lr 0.001)", or
// "Trainer(closed)".
func (t *Trainer) String() string {
	epochs, err1 := t.EpochsDone()
	steps, err2 := t.StepsDone()
	lr, err3 := t.CurrentLR()
	return closedOr("Trainer", fmt.Sprintf("%d epochs, %d steps done, lr %g", epochs, steps, lr), err1, err2, err3)
}

// Close releases the trainer. It may be called more than once, from any
// goroutine.
func (t *Trainer) Close() { t.release(t, capi.Trainer_release) }

// Step is one optimisation step on a batch; it returns the batch's mean
// loss before the update.
func (t *Trainer) Step(x, y *Tensor) (float64, error) {
	defer runtime.KeepAlive(t)
	defer runtime.KeepAlive(x)
	defer runtime.KeepAlive(y)
	var loss float64
	return loss, capi.Trainer_step(t.h, x.ptr(), y.ptr(), &loss)
}

// EpochStats are the statistics of one epoch.
type EpochStats struct {
	Epoch                    int     // 1-based
	TrainLoss, TrainAccuracy float64 // accuracy: classification only, else 0
	ValLoss, ValAccuracy     float64 // 0 without validation data
	HasValidation            bool
	Duration                 time.Duration
	SamplesPerSecond, LR     float64 // LR: the learning rate at the epoch's end
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
	if err := capi.Trainer_epoch(t.h, ds.ptr(), &s); err != nil {
		return EpochStats{}, err
	}
	return statsFromC(&s), nil
}

// Progress is a report from Fit (see OnProgress).
type Progress struct {
	Phase            ProgressPhase
	Epoch, Epochs    int     // Epoch is 1-based
	Batch, Batches   int64   // batches done in this epoch, and per epoch
	Loss             float64 // mean training loss so far in this epoch
	SamplesPerSecond float64
	Elapsed          time.Duration // since the epoch began
	Stats            *EpochStats   // the finished epoch (PhaseEpoch), else nil
}

// FitOption configures one Fit.
type FitOption func(*fitRun)

// OnProgress calls fn with each progress report, on the goroutine that
// called Fit: at the end of every epoch, and every n batches with
// WithProgressInterval(n). A non-nil error from fn stops training after the
// current batch and Fit returns that error. Inside fn the trainer may be
// read (EpochsDone, CurrentLR, SaveCheckpoint); Step, Epoch, Fit, Evaluate
// and LoadCheckpoint fail with ErrBusy. A panic in fn stops training and is
// raised again by Fit once kiln has returned.
func OnProgress(fn func(Progress) error) FitOption {
	return func(r *fitRun) { r.fn = fn }
}

// fitRun is what the progress trampoline reaches through its cgo.Handle.
type fitRun struct {
	ctx      context.Context
	fn       func(Progress) error
	err      error // why training was stopped: ctx's error or fn's
	panicked bool
	panicVal any
}

// step handles one report and says whether training goes on.
func (r *fitRun) step(p Progress) (goOn bool) {
	if err := r.ctx.Err(); err != nil {
		r.err = err
		return false
	}
	if r.fn == nil {
		return true
	}
	defer func() {
		// A panic must not unwind through kiln's C++ frames: stop, and let
		// Fit raise it again.
		if v := recover(); v != nil {
			r.panicked, r.panicVal = true, v
			goOn = false
		}
	}()
	if err := r.fn(p); err != nil {
		r.err = err
		return false
	}
	// fn may have cancelled ctx itself: stop now, not a report later.
	if err := r.ctx.Err(); err != nil {
		r.err = err
		return false
	}
	return true
}

// Fit trains for epochs epochs, evaluating validation (may be nil) after
// each, and returns the history. Cancelling ctx stops training at the next
// progress report (the end of the epoch, or within WithProgressInterval's
// batches) and Fit returns ctx.Err(); the model keeps the updates done so
// far, as it does when an OnProgress function stops training.
func (t *Trainer) Fit(ctx context.Context, train, validation *Dataset, epochs int, opts ...FitOption) ([]EpochStats, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	run := &fitRun{ctx: ctx}
	for _, opt := range opts {
		opt(run)
	}
	user := cgo.NewHandle(run)
	defer user.Delete()
	defer runtime.KeepAlive(t)
	defer runtime.KeepAlive(train)
	defer runtime.KeepAlive(validation)
	var hist uintptr
	err := capi.Trainer_fit(t.h, train.ptr(), validation.ptr(), int64(epochs), progressTrampoline, uintptr(user), &hist)
	if run.panicked {
		panic(run.panicVal)
	}
	if err != nil {
		if run.err != nil && errors.Is(err, ErrCancelled) {
			return nil, run.err
		}
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
	err = capi.Trainer_evaluate(t.h, ds.ptr(), &loss, &accuracy)
	return
}

// EpochsDone is the number of epochs trained so far (checkpoints restore it).
func (t *Trainer) EpochsDone() (int64, error) {
	defer runtime.KeepAlive(t)
	var n int64
	return n, capi.Trainer_epochs_done(t.h, &n)
}

// StepsDone is the number of optimisation steps so far (checkpoints restore
// it).
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
	cPath, err := textOf("path", path)
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(t)
	return withWritePath(capi.Trainer_save_checkpoint(t.h, cPath), path)
}

// LoadCheckpoint restores a checkpoint of the same architecture and optimizer.
func (t *Trainer) LoadCheckpoint(path string) error {
	cPath, err := textOf("path", path)
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(t)
	return withPath(capi.Trainer_load_checkpoint(t.h, cPath), "open", path)
}
