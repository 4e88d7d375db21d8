use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::ptr::NonNull;
use std::time::Duration;

use kiln_sys as sys;

use crate::context::{Context, Device};
use crate::dist::Communicator;
use crate::error::{check, Error, Result, Status};
use crate::model::Model;
use crate::tensor::{op_enum, Tensor};
use crate::{create, cstring, get, path_cstring};

/// Samples and labels. A dataset made from tensors borrows them (`'a`):
/// kiln references their storage instead of copying it. Displays as
/// `dataset (60000 samples, 784 features, 10 classes)`.
pub struct Dataset<'a> {
    raw: NonNull<sys::kiln_dataset>,
    _data: PhantomData<&'a Tensor>,
}

// SAFETY: only read after creation except through &mut self; release
// works from any thread.
unsafe impl Send for Dataset<'_> {}
unsafe impl Sync for Dataset<'_> {}

impl Drop for Dataset<'_> {
    fn drop(&mut self) {
        unsafe { sys::kiln_dataset_release(self.raw.as_ptr()) }
    }
}

impl fmt::Display for Dataset<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.len(), self.num_features(), self.num_classes()) {
            (Ok(n), Ok(k), Ok(c)) => write!(f, "dataset ({n} samples, {k} features, {c} classes)"),
            (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => write!(f, "dataset (<{e}>)"),
        }
    }
}

impl fmt::Debug for Dataset<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dataset")
            .field("len", &self.len().ok())
            .field("num_features", &self.num_features().ok())
            .field("num_classes", &self.num_classes().ok())
            .finish()
    }
}

impl<'a> Dataset<'a> {
    fn wrap(raw: NonNull<sys::kiln_dataset>) -> Dataset<'a> {
        Dataset { raw, _data: PhantomData }
    }

    /// x `[N, features...]` (float or U8) with integer labels `[N]` or float
    /// targets `[N, k]`.
    pub fn from_tensors(ctx: &Context, x: &'a Tensor, y: &'a Tensor) -> Result<Dataset<'a>> {
        create(|p| unsafe { sys::kiln_dataset_from_tensors(ctx.ptr(), x.ptr(), y.ptr(), p) }).map(Dataset::wrap)
    }

    /// An IDX image file and label file (raw or .gz).
    pub fn load_idx(ctx: &Context, images: impl AsRef<Path>, labels: impl AsRef<Path>) -> Result<Dataset<'static>> {
        let (images, labels) = (path_cstring(images.as_ref())?, path_cstring(labels.as_ref())?);
        create(|p| unsafe { sys::kiln_dataset_load_idx(ctx.ptr(), images.as_ptr(), labels.as_ptr(), p) }).map(Dataset::wrap)
    }

    /// The "train" or "test" split of an MNIST-layout directory.
    pub fn load_mnist(ctx: &Context, dir: impl AsRef<Path>, split: &str) -> Result<Dataset<'static>> {
        let dir = path_cstring(dir.as_ref())?;
        let split = cstring(split)?;
        create(|p| unsafe { sys::kiln_dataset_load_mnist(ctx.ptr(), dir.as_ptr(), split.as_ptr(), p) }).map(Dataset::wrap)
    }

    /// The number of samples (never 0: kiln refuses empty datasets, so there
    /// is no `is_empty`).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_dataset_size(self.raw.as_ptr(), p) })
    }

    /// Features per sample.
    pub fn num_features(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_dataset_num_features(self.raw.as_ptr(), p) })
    }

    /// 1 + the largest label, or the target width.
    pub fn num_classes(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_dataset_num_classes(self.raw.as_ptr(), p) })
    }

    /// Batched features become (x * scale - mean) / std.
    pub fn set_normalization(&mut self, scale: f64, mean: f64, std: f64) -> Result<()> {
        check(unsafe { sys::kiln_dataset_set_normalization(self.raw.as_ptr(), scale, mean, std) })
    }

    /// A seeded random split into (train, validation) sharing the data.
    pub fn split(&self, validation_fraction: f64, seed: u64) -> Result<(Dataset<'a>, Dataset<'a>)> {
        let (mut t, mut v) = (std::ptr::null_mut(), std::ptr::null_mut());
        check(unsafe { sys::kiln_dataset_split(self.raw.as_ptr(), validation_fraction, seed, &mut t, &mut v) })?;
        // SAFETY: on success kiln sets both to valid handles.
        unsafe { Ok((Dataset::wrap(NonNull::new_unchecked(t)), Dataset::wrap(NonNull::new_unchecked(v)))) }
    }

    /// Samples [start, start + count) as normalised F32 x and labels y on
    /// `device` (new tensors of their own).
    pub fn batch(&self, start: i64, count: i64, device: Device) -> Result<(Tensor, Tensor)> {
        let (mut x, mut y) = (std::ptr::null_mut(), std::ptr::null_mut());
        check(unsafe { sys::kiln_dataset_batch(self.raw.as_ptr(), start, count, device.raw(), &mut x, &mut y) })?;
        unsafe { Ok((Tensor(NonNull::new_unchecked(x)), Tensor(NonNull::new_unchecked(y)))) }
    }

    /// The dataset in order, `batch_size` samples at a time (the last batch
    /// partial), as (x, y) on `device`: the pull form for step-wise
    /// training with `Trainer::step`. `Status::InvalidArgument` for a batch
    /// size below 1.
    pub fn batches(&self, batch_size: i64, device: Device) -> Result<Batches<'_, 'a>> {
        if batch_size < 1 {
            return Err(Error::new(Status::InvalidArgument, format!("batch size {batch_size} is not positive")));
        }
        Ok(Batches { data: self, batch_size, device, next: 0, len: self.len()? })
    }
}

/// The iterator `Dataset::batches` returns: `Result<(x, y)>` per batch.
pub struct Batches<'d, 'a> {
    data: &'d Dataset<'a>,
    batch_size: i64,
    device: Device,
    next: i64,
    len: i64,
}

impl Iterator for Batches<'_, '_> {
    type Item = Result<(Tensor, Tensor)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.len {
            return None;
        }
        let count = self.batch_size.min(self.len - self.next);
        let batch = self.data.batch(self.next, count, self.device);
        // After a failure the iterator ends, so `collect` and `for` stop.
        self.next = if batch.is_ok() { self.next + count } else { self.len };
        Some(batch)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // Not (left + batch_size - 1) / batch_size: that overflows for a
        // batch size near i64::MAX, and len() then said 0 for one batch.
        let left = (self.len - self.next).max(0);
        let n = left / self.batch_size + i64::from(left % self.batch_size != 0);
        (n as usize, Some(n as usize))
    }
}

impl ExactSizeIterator for Batches<'_, '_> {}

impl fmt::Debug for Batches<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batches")
            .field("batch_size", &self.batch_size)
            .field("device", &self.device)
            .field("next", &self.next)
            .field("len", &self.len)
            .finish()
    }
}

impl fmt::Display for Batches<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batches of {} on {}, {} of {} samples done", self.batch_size, self.device, self.next, self.len)
    }
}

op_enum! {
    /// A training loss (kiln_loss_kind).
    LossKind:
    /// Logits `[B, C]`, integer labels `[B]`.
    CrossEntropy = sys::kiln_loss_kind_KILN_LOSS_CROSS_ENTROPY, "cross_entropy";
    /// Mean squared error: pred and target [B, K].
    Mse = sys::kiln_loss_kind_KILN_LOSS_MSE, "mse";
    /// Binary cross-entropy from logits, targets in [0, 1].
    BceWithLogits = sys::kiln_loss_kind_KILN_LOSS_BCE_WITH_LOGITS, "bce_with_logits";
}

/// The mean loss of `pred` against `target`, as a trainer computes it.
pub fn loss(kind: LossKind, pred: &Tensor, target: &Tensor) -> Result<f64> {
    get(|p| unsafe { sys::kiln_loss(kind.raw(), pred.ptr(), target.ptr(), p) })
}

op_enum! {
    /// An update rule (kiln_optimizer_kind); its hyper-parameters are
    /// `TrainerOptions` fields.
    Optimizer:
    /// SGD, with optional momentum and Nesterov.
    Sgd = sys::kiln_optimizer_kind_KILN_OPTIM_SGD, "sgd";
    /// Adam.
    Adam = sys::kiln_optimizer_kind_KILN_OPTIM_ADAM, "adam";
    /// AdamW (decoupled weight decay).
    AdamW = sys::kiln_optimizer_kind_KILN_OPTIM_ADAMW, "adamw";
}

/// A learning-rate schedule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Schedule {
    /// lr throughout.
    Constant,
    /// lr * gamma^floor(step / step_size).
    Step {
        /// The period in steps.
        step_size: i64,
        /// The factor per period.
        gamma: f64,
    },
    /// From lr to min_lr over total_steps (0: the fit's total).
    Cosine {
        /// The length in steps (0: the whole fit).
        total_steps: i64,
        /// The floor.
        min_lr: f64,
    },
}
crate::display_as_debug!(Schedule);

op_enum! {
    /// The numeric precision of a trainer's steps (kiln_precision).
    Precision:
    /// The model's dtype throughout, f32 products computed exactly (kiln's
    /// default, and PyTorch's with TF32 off).
    Fp32 = sys::kiln_precision_KILN_PRECISION_FP32, "fp32";
    /// f32 products on CUDA's TF32 tensor cores (10-bit mantissa inputs, f32
    /// accumulation). CUDA only: a trainer for a CPU model fails with
    /// `Status::NotSupported`.
    Tf32 = sys::kiln_precision_KILN_PRECISION_TF32, "tf32";
    /// Mixed precision on every device: batch, activations and products in
    /// bf16 (f32 accumulation) with f32 master weights, gradients, optimizer
    /// state and loss, as PyTorch's autocast to bfloat16.
    Bf16 = sys::kiln_precision_KILN_PRECISION_BF16, "bf16";
}

/// A set of the parts of a backend's fast path (kiln_fast_path bits), each
/// of which can be switched off to bisect a failure. Backends without them,
/// the CPU's, ignore the bits; results agree with every part off within
/// float rounding. Combine with `|`, remove with `-`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FastPath(u32);

impl FastPath {
    /// No part: every step runs as the plain sequence of kernels.
    pub const NONE: FastPath = FastPath(0);
    /// Fused GEMM epilogues (cuBLASLt).
    pub const EPILOGUES: FastPath = FastPath(sys::kiln_fast_path_KILN_FAST_PATH_EPILOGUES);
    /// Steps replayed as CUDA graphs.
    pub const GRAPHS: FastPath = FastPath(sys::kiln_fast_path_KILN_FAST_PATH_GRAPHS);
    /// cuDNN's fused graphs.
    pub const CUDNN: FastPath = FastPath(sys::kiln_fast_path_KILN_FAST_PATH_CUDNN);
    /// A narrow one-hidden-layer step as two of kiln's own CUDA kernels.
    pub const NARROW: FastPath = FastPath(sys::kiln_fast_path_KILN_FAST_PATH_NARROW);
    /// Every part (kiln's default is `EPILOGUES | GRAPHS`: cuDNN and the
    /// narrow step stay off until a GPU run shows them correct and faster).
    pub const ALL: FastPath = FastPath(sys::kiln_fast_path_KILN_FAST_PATH_ALL);

    /// The kiln_fast_path bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// A set of exactly these bits, unknown ones included: kiln refuses bits
    /// outside `ALL` with `Status::InvalidArgument` when the trainer is made.
    pub const fn from_bits_retain(bits: u32) -> FastPath {
        FastPath(bits)
    }

    /// Whether every part of `other` is in `self`.
    pub const fn contains(self, other: FastPath) -> bool {
        self.0 & other.0 == other.0
    }
}

impl fmt::Display for FastPath {
    /// The parts joined by '|' ("epilogues|graphs|cudnn"), "none" for none,
    /// unknown bits in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [(FastPath::EPILOGUES, "epilogues"), (FastPath::GRAPHS, "graphs"), (FastPath::CUDNN, "cudnn")];
        let mut parts: Vec<String> =
            names.iter().filter(|(p, _)| self.contains(*p)).map(|(_, n)| (*n).to_owned()).collect();
        let unknown = self.0 & !FastPath::ALL.0;
        if unknown != 0 {
            parts.push(format!("{unknown:#x}"));
        }
        f.write_str(if parts.is_empty() { "none".to_owned() } else { parts.join("|") }.as_str())
    }
}

impl std::ops::BitOr for FastPath {
    type Output = FastPath;
    fn bitor(self, rhs: FastPath) -> FastPath {
        FastPath(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for FastPath {
    fn bitor_assign(&mut self, rhs: FastPath) {
        self.0 |= rhs.0;
    }
}

impl std::ops::BitAnd for FastPath {
    type Output = FastPath;
    fn bitand(self, rhs: FastPath) -> FastPath {
        FastPath(self.0 & rhs.0)
    }
}

impl std::ops::Sub for FastPath {
    type Output = FastPath;
    /// The parts of `self` that are not in `rhs`.
    fn sub(self, rhs: FastPath) -> FastPath {
        FastPath(self.0 & !rhs.0)
    }
}

/// Trainer settings. Every field is optional: `None` keeps libkiln's default
/// (PyTorch's: cross-entropy, SGD, lr 0.01, batch 64, ...; kiln.h lists
/// them), so the defaults live in one place. Set fields directly or chain:
/// `TrainerOptions::default().optimizer(Optimizer::Adam).lr(1e-3)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainerOptions {
    /// The loss.
    pub loss: Option<LossKind>,
    /// The update rule.
    pub optimizer: Option<Optimizer>,
    /// The learning rate.
    pub lr: Option<f64>,
    /// SGD's momentum.
    pub momentum: Option<f64>,
    /// SGD's Nesterov momentum.
    pub nesterov: Option<bool>,
    /// Weight decay (AdamW's default 0.01, else 0).
    pub weight_decay: Option<f64>,
    /// Adam's and AdamW's (beta1, beta2).
    pub betas: Option<(f64, f64)>,
    /// Cross-entropy's label smoothing in [0, 1], as PyTorch's
    /// `CrossEntropyLoss(label_smoothing=)`: each target mixes the label with
    /// the uniform distribution over the classes (`None` or 0: none).
    /// Another loss with a non-zero value makes the trainer fail.
    pub label_smoothing: Option<f64>,
    /// Adam's and AdamW's epsilon.
    pub eps: Option<f64>,
    /// Samples per step.
    pub batch_size: Option<i64>,
    /// Max global gradient norm (0: off).
    pub grad_clip: Option<f64>,
    /// The learning-rate schedule.
    pub schedule: Option<Schedule>,
    /// Steps of linear warmup.
    pub warmup_steps: Option<i64>,
    /// The shuffle seed (default: from the context).
    pub shuffle_seed: Option<u64>,
    /// Fp32 by default; Tf32 and Bf16 need an F32 model.
    pub precision: Option<Precision>,
    /// The fast-path parts the trainer may use (default `EPILOGUES | GRAPHS`).
    /// When the trainer is made the environment variable KILN_ENABLE adds
    /// parts and KILN_DISABLE removes them (each a comma-separated list of
    /// "epilogues", "graphs", "cudnn" or "all"; disabling wins).
    pub fast_path: Option<FastPath>,
    /// `Trainer::fit_with`'s callback runs every this many batches (default
    /// 0: once per epoch only).
    pub progress_interval: Option<i64>,
    /// DataParallel, as PyTorch's nn.DataParallel: train over these GPUs of
    /// this process, a replica of the model per device, each computing
    /// `batch_size` samples per step (per device, as per rank in DDP). The
    /// model must be on the first one when the trainer is made. One device is
    /// plain training there; `None` or empty: the model's device.
    pub devices: Option<Vec<Device>>,
    /// Data parallel training (DataParallel, or DDP over a communicator):
    /// start averaging gradients in buckets of at least this many bytes
    /// during the backward, overlapped with it on GPUs (PyTorch DDP's
    /// `bucket_cap_mb`). `None` or 0: one allreduce after the backward. Every
    /// rank must use the same value.
    pub bucket_bytes: Option<i64>,
}
crate::display_as_debug!(TrainerOptions);

crate::setters! {
    TrainerOptions {
        /// Sets `loss`.
        loss: LossKind;
        /// Sets `optimizer`.
        optimizer: Optimizer;
        /// Sets `lr`.
        lr: f64;
        /// Sets `momentum`.
        momentum: f64;
        /// Sets `nesterov`.
        nesterov: bool;
        /// Sets `weight_decay`.
        weight_decay: f64;
        /// Sets `betas`.
        betas: (f64, f64);
        /// Sets `label_smoothing`.
        label_smoothing: f64;
        /// Sets `eps`.
        eps: f64;
        /// Sets `batch_size`.
        batch_size: i64;
        /// Sets `grad_clip`.
        grad_clip: f64;
        /// Sets `schedule`.
        schedule: Schedule;
        /// Sets `warmup_steps`.
        warmup_steps: i64;
        /// Sets `shuffle_seed`.
        shuffle_seed: u64;
        /// Sets `precision`.
        precision: Precision;
        /// Sets `fast_path`.
        fast_path: FastPath;
        /// Sets `progress_interval`.
        progress_interval: i64;
        /// Sets `devices`.
        devices: Vec<Device>;
        /// Sets `bucket_bytes`.
        bucket_bytes: i64;
    }
}

struct RawOptions(NonNull<sys::kiln_trainer_options>);
impl Drop for RawOptions {
    fn drop(&mut self) {
        unsafe { sys::kiln_trainer_options_release(self.0.as_ptr()) }
    }
}

impl TrainerOptions {
    fn to_raw(&self) -> Result<RawOptions> {
        let o = RawOptions(create(|p| unsafe { sys::kiln_trainer_options_create(p) })?);
        let p = o.0.as_ptr();
        // Only what is set is passed on; the rest stays at libkiln's default.
        fn set<T: Copy>(value: Option<T>, f: impl FnOnce(T) -> sys::kiln_status) -> Result<()> {
            value.map_or(Ok(()), |v| check(f(v)))
        }
        unsafe {
            set(self.loss, |v| sys::kiln_trainer_options_set_loss(p, v.raw()))?;
            set(self.optimizer, |v| sys::kiln_trainer_options_set_optimizer(p, v.raw()))?;
            set(self.lr, |v| sys::kiln_trainer_options_set_lr(p, v))?;
            set(self.momentum, |v| sys::kiln_trainer_options_set_momentum(p, v))?;
            set(self.nesterov, |v| sys::kiln_trainer_options_set_nesterov(p, v as c_int))?;
            set(self.weight_decay, |v| sys::kiln_trainer_options_set_weight_decay(p, v))?;
            set(self.betas, |(b1, b2)| sys::kiln_trainer_options_set_betas(p, b1, b2))?;
            set(self.label_smoothing, |v| sys::kiln_trainer_options_set_label_smoothing(p, v))?;
            set(self.eps, |v| sys::kiln_trainer_options_set_eps(p, v))?;
            set(self.batch_size, |v| sys::kiln_trainer_options_set_batch_size(p, v))?;
            set(self.grad_clip, |v| sys::kiln_trainer_options_set_grad_clip(p, v))?;
            set(self.schedule, |v| match v {
                Schedule::Constant => {
                    sys::kiln_trainer_options_set_schedule(p, sys::kiln_lr_schedule_KILN_LR_CONSTANT, 0, 1.0, 0, 0.0)
                }
                Schedule::Step { step_size, gamma } => {
                    sys::kiln_trainer_options_set_schedule(p, sys::kiln_lr_schedule_KILN_LR_STEP, step_size, gamma, 0, 0.0)
                }
                Schedule::Cosine { total_steps, min_lr } => sys::kiln_trainer_options_set_schedule(
                    p, sys::kiln_lr_schedule_KILN_LR_COSINE, 0, 1.0, total_steps, min_lr),
            })?;
            set(self.warmup_steps, |v| sys::kiln_trainer_options_set_warmup(p, v))?;
            set(self.shuffle_seed, |v| sys::kiln_trainer_options_set_shuffle_seed(p, v))?;
            set(self.precision, |v| sys::kiln_trainer_options_set_precision(p, v.raw()))?;
            set(self.fast_path, |v| sys::kiln_trainer_options_set_fast_path(p, v.bits()))?;
            set(self.progress_interval, |v| sys::kiln_trainer_options_set_progress_interval(p, v))?;
            set(self.bucket_bytes, |v| sys::kiln_trainer_options_set_bucket_bytes(p, v))?;
            if let Some(devices) = self.devices.as_ref().filter(|d| !d.is_empty()) {
                let raw: Vec<sys::kiln_device> = devices.iter().map(|d| d.raw()).collect();
                check(sys::kiln_trainer_options_set_devices(p, raw.as_ptr(), raw.len() as i64))?;
            }
        }
        Ok(o)
    }
}

/// The statistics of one epoch.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochStats {
    /// 1-based.
    pub epoch: i64,
    /// Mean over the epoch's samples.
    pub train_loss: f64,
    /// Classification only, else 0.
    pub train_accuracy: f64,
    /// Loss and accuracy on the validation data, when there was some.
    pub validation: Option<Validation>,
    /// Wall time of the epoch.
    pub duration: Duration,
    /// Training throughput.
    pub samples_per_second: f64,
    /// The learning rate at the epoch's end.
    pub lr: f64,
}

/// An epoch's figures on the validation data (`EpochStats::validation`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Validation {
    /// Mean loss over the validation samples.
    pub loss: f64,
    /// Classification only, else 0.
    pub accuracy: f64,
}

impl fmt::Display for EpochStats {
    /// "epoch 3: loss 0.4123, accuracy 0.8512, validation loss 0.4500
    /// accuracy 0.8400, 1.20 s, 50000 samples/s".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "epoch {}: ", self.epoch)?;
        self.write_figures(f)
    }
}

impl EpochStats {
    fn write_figures(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "loss {:.4}, accuracy {:.4}", self.train_loss, self.train_accuracy)?;
        if let Some(v) = self.validation {
            write!(f, ", validation loss {:.4} accuracy {:.4}", v.loss, v.accuracy)?;
        }
        write!(f, ", {:.2} s, {:.0} samples/s", self.duration.as_secs_f64(), self.samples_per_second)
    }
}

/// A duration from kiln's seconds, total: negative or NaN is zero, too large
/// (or infinite) is `Duration::MAX`.
fn seconds(s: f64) -> Duration {
    // Written out rather than `try_from_secs_f64`, which needs Rust 1.66 and
    // Debian 12 ships 1.63. `f64::max` maps NaN to 0.
    let s = s.max(0.0);
    if s < Duration::MAX.as_secs_f64() {
        Duration::from_secs_f64(s)
    } else {
        Duration::MAX
    }
}

fn raw_stats() -> sys::kiln_epoch_stats {
    // SAFETY: all-zero is a valid value of this plain-data struct.
    let mut s: sys::kiln_epoch_stats = unsafe { std::mem::zeroed() };
    s.struct_size = std::mem::size_of::<sys::kiln_epoch_stats>() as u32;
    s
}

impl From<&sys::kiln_epoch_stats> for EpochStats {
    fn from(s: &sys::kiln_epoch_stats) -> EpochStats {
        EpochStats {
            epoch: s.epoch,
            train_loss: s.train_loss,
            train_accuracy: s.train_accuracy,
            validation: (s.has_validation != 0).then_some(Validation { loss: s.val_loss, accuracy: s.val_accuracy }),
            duration: seconds(s.seconds),
            samples_per_second: s.samples_per_second,
            lr: s.lr,
        }
    }
}

op_enum! {
    /// When a progress callback runs (kiln_progress_phase).
    ProgressPhase:
    /// Every `progress_interval` batches.
    Batch = sys::kiln_progress_phase_KILN_PROGRESS_BATCH, "batch";
    /// At the end of each epoch, after validation.
    Epoch = sys::kiln_progress_phase_KILN_PROGRESS_EPOCH, "epoch";
}

/// What `Trainer::fit_with`'s callback receives.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// Batch or epoch.
    pub phase: ProgressPhase,
    /// 1-based epoch.
    pub epoch: i64,
    /// Epochs in the fit.
    pub epochs: i64,
    /// Batches done in this epoch.
    pub batch: i64,
    /// Batches per epoch.
    pub batches: i64,
    /// Mean training loss so far in this epoch.
    pub loss: f64,
    /// Training throughput so far.
    pub samples_per_second: f64,
    /// Since the epoch began.
    pub elapsed: Duration,
    /// The finished epoch's statistics (phase `Epoch`), else None.
    pub stats: Option<EpochStats>,
}

impl fmt::Display for Progress {
    /// "epoch 2/5, batch 300/938: loss 0.5123, 41000 samples/s", or at an
    /// epoch's end "epoch 2/5 done: " and the epoch's statistics.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.stats {
            Some(stats) => {
                write!(f, "epoch {}/{} done: ", self.epoch, self.epochs)?;
                stats.write_figures(f)
            }
            None => write!(f, "epoch {}/{}, batch {}/{}: loss {:.4}, {:.0} samples/s", self.epoch, self.epochs,
                           self.batch, self.batches, self.loss, self.samples_per_second),
        }
    }
}

impl Progress {
    fn from_raw(p: &sys::kiln_progress) -> Progress {
        Progress {
            phase: if p.phase == ProgressPhase::Epoch.raw() { ProgressPhase::Epoch } else { ProgressPhase::Batch },
            epoch: p.epoch,
            epochs: p.epochs,
            batch: p.batch,
            batches: p.batches,
            loss: p.loss,
            samples_per_second: p.samples_per_second,
            elapsed: seconds(p.elapsed_seconds),
            // SAFETY: valid for the duration of the callback when not NULL.
            stats: unsafe { p.stats.as_ref() }.map(EpochStats::from),
        }
    }
}

/// The closure `fit_with` passes through kiln's `void *user`, and the panic
/// it caught, if any, to resume once kiln has returned.
struct ProgressState<'f> {
    callback: &'f mut dyn FnMut(&Progress) -> ControlFlow<()>,
    panic: Option<Box<dyn Any + Send>>,
}

extern "C" fn progress_trampoline(user: *mut c_void, progress: *const sys::kiln_progress) -> c_int {
    // SAFETY: user is the &mut ProgressState fit_with passed, alive for the
    // whole fit; kiln calls back on fit's own thread, one call at a time.
    let state = unsafe { &mut *(user as *mut ProgressState) };
    // A panic must not unwind into C: catch it, stop training, and resume it
    // in fit_with after kiln has returned.
    match catch_unwind(AssertUnwindSafe(|| (state.callback)(&Progress::from_raw(unsafe { &*progress })))) {
        Ok(ControlFlow::Continue(())) => 0,
        Ok(ControlFlow::Break(())) => 1,
        Err(payload) => {
            state.panic = Some(payload);
            1
        }
    }
}

/// Trains a model it borrows mutably, so nothing else runs or changes the
/// model meanwhile; `Trainer::model` lends it back for reading (save,
/// predict) between steps. `Send`, not `Sync`: one thread at a time.
pub struct Trainer<'m> {
    raw: NonNull<sys::kiln_trainer>,
    communicator: Option<Communicator>,
    model: &'m mut Model,
}

// SAFETY: kiln.h: a trainer is used by one thread at a time (no Sync) and
// may be released from any thread.
unsafe impl Send for Trainer<'_> {}

impl Drop for Trainer<'_> {
    fn drop(&mut self) {
        unsafe { sys::kiln_trainer_release(self.raw.as_ptr()) }
    }
}

impl fmt::Display for Trainer<'_> {
    /// "trainer (2 epochs, 1876 steps done, lr 0.001)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.epochs_done(), self.steps_done(), self.current_lr()) {
            (Ok(e), Ok(s), Ok(lr)) => write!(f, "trainer ({e} epochs, {s} steps done, lr {lr})"),
            (Err(err), ..) | (_, Err(err), _) | (.., Err(err)) => write!(f, "trainer (<{err}>)"),
        }
    }
}

impl fmt::Debug for Trainer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trainer")
            .field("epochs_done", &self.epochs_done().ok())
            .field("steps_done", &self.steps_done().ok())
            .field("current_lr", &self.current_lr().ok())
            .field("communicator", &self.communicator)
            .finish()
    }
}

impl<'m> Trainer<'m> {
    /// A trainer for `model` on the model's device.
    pub fn new(model: &'m mut Model, options: &TrainerOptions) -> Result<Trainer<'m>> {
        let o = options.to_raw()?;
        let raw = create(|p| unsafe { sys::kiln_trainer_create(model.ptr(), o.0.as_ptr(), p) })?;
        Ok(Trainer { raw, communicator: None, model })
    }

    /// The model being trained, to save, evaluate or predict with between
    /// steps and epochs (no step can run while this borrow lives):
    ///
    /// ```no_run
    /// # use kiln::*;
    /// # let ctx = Context::new()?;
    /// # let (train, test) = (Dataset::load_mnist(&ctx, "data", "train")?, Dataset::load_mnist(&ctx, "data", "test")?);
    /// let mut model = Model::from_text(&ctx, "784-32-10", Device::Cpu)?;
    /// let mut trainer = Trainer::new(&mut model, &TrainerOptions::default())?;
    /// for epoch in 1..=3 {
    ///     let stats = trainer.epoch(&train)?;
    ///     trainer.model().save(format!("epoch{epoch}.safetensors"))?;
    ///     let (loss, accuracy) = trainer.evaluate(&test)?;
    ///     println!("{stats}; test loss {loss:.4}, accuracy {accuracy:.4}");
    /// }
    /// drop(trainer);
    /// model.save("final.safetensors")?; // the borrow ends with the trainer
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn model(&self) -> &Model {
        self.model
    }

    fn ptr(&self) -> *mut sys::kiln_trainer {
        self.raw.as_ptr()
    }

    /// One optimisation step; the batch's mean loss before the update.
    pub fn step(&mut self, x: &Tensor, y: &Tensor) -> Result<f64> {
        get(|p| unsafe { sys::kiln_trainer_step(self.ptr(), x.ptr(), y.ptr(), p) })
    }

    /// One shuffled pass over `data` (the pull form of progress reporting).
    pub fn epoch(&mut self, data: &Dataset) -> Result<EpochStats> {
        let mut s = raw_stats();
        check(unsafe { sys::kiln_trainer_epoch(self.ptr(), data.raw.as_ptr(), &mut s) })?;
        Ok(EpochStats::from(&s))
    }

    /// `count` epochs over `data` as an iterator of their statistics, each
    /// run when pulled, so the caller decides between epochs whether to go
    /// on (evaluate, save a checkpoint, stop early). It ends after the first
    /// error.
    pub fn epochs<'t, 'd, 'a>(&'t mut self, data: &'d Dataset<'a>, count: i64) -> Epochs<'t, 'm, 'd, 'a> {
        Epochs { trainer: self, data, left: count.max(0) }
    }

    /// `epochs` epochs, evaluating `validation` after each; the history.
    pub fn fit(&mut self, train: &Dataset, validation: Option<&Dataset>, epochs: i64) -> Result<Vec<EpochStats>> {
        self.fit_raw(train, validation, epochs, None, std::ptr::null_mut())
    }

    /// `fit`, calling `on_progress` on this thread at the end of each epoch
    /// and every `progress_interval` batches. `ControlFlow::Break(())` stops
    /// training after the current batch: the result is then
    /// `Status::Cancelled` (the model keeps the updates done so far). A panic
    /// in the callback stops training too and is resumed here once kiln has
    /// returned, so it never unwinds through C.
    pub fn fit_with(&mut self, train: &Dataset, validation: Option<&Dataset>, epochs: i64,
                    mut on_progress: impl FnMut(&Progress) -> ControlFlow<()>) -> Result<Vec<EpochStats>> {
        let mut state = ProgressState { callback: &mut on_progress, panic: None };
        let result = self.fit_raw(train, validation, epochs, Some(progress_trampoline),
                                  &mut state as *mut ProgressState as *mut c_void);
        if let Some(payload) = state.panic {
            resume_unwind(payload);
        }
        result
    }

    fn fit_raw(&mut self, train: &Dataset, validation: Option<&Dataset>, epochs: i64, callback: sys::kiln_progress_fn,
               user: *mut c_void) -> Result<Vec<EpochStats>> {
        let val = validation.map_or(std::ptr::null(), |v| v.raw.as_ptr() as *const _);
        let history = create(|p| unsafe {
            sys::kiln_trainer_fit(self.ptr(), train.raw.as_ptr(), val, epochs, callback, user, p)
        })?;
        struct History(NonNull<sys::kiln_history>);
        impl Drop for History {
            fn drop(&mut self) {
                unsafe { sys::kiln_history_release(self.0.as_ptr()) }
            }
        }
        let history = History(history);
        let n: i64 = get(|p| unsafe { sys::kiln_history_size(history.0.as_ptr(), p) })?;
        (0..n)
            .map(|i| {
                let mut s = raw_stats();
                check(unsafe { sys::kiln_history_get(history.0.as_ptr(), i, &mut s) })?;
                Ok(EpochStats::from(&s))
            })
            .collect()
    }

    /// The model's (loss, accuracy) over `data` in evaluation mode.
    pub fn evaluate(&mut self, data: &Dataset) -> Result<(f64, f64)> {
        let (mut loss, mut acc) = (0.0, 0.0);
        check(unsafe { sys::kiln_trainer_evaluate(self.ptr(), data.raw.as_ptr(), &mut loss, &mut acc) })?;
        Ok((loss, acc))
    }

    /// Epochs done (checkpoints restore it).
    pub fn epochs_done(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_trainer_epochs_done(self.ptr(), p) })
    }

    /// Optimisation steps done (checkpoints restore it).
    pub fn steps_done(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_trainer_steps_done(self.ptr(), p) })
    }

    /// The learning rate of the next step.
    pub fn current_lr(&self) -> Result<f64> {
        get(|p| unsafe { sys::kiln_trainer_current_lr(self.ptr(), p) })
    }

    /// Writes weights, optimizer state, counters and the shuffle generator
    /// as safetensors, atomically.
    pub fn save_checkpoint(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_cstring(path.as_ref())?;
        check(unsafe { sys::kiln_trainer_save_checkpoint(self.ptr(), path.as_ptr()) })
    }

    /// Restores a checkpoint of the same architecture and optimizer; training
    /// then continues exactly as the run that wrote it. Unchanged on failure.
    pub fn load_checkpoint(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_cstring(path.as_ref())?;
        check(unsafe { sys::kiln_trainer_load_checkpoint(self.ptr(), path.as_ptr()) })
    }

    /// Makes this trainer one rank of data-parallel training over `comm`
    /// (collective: every rank calls it). The trainer keeps the
    /// communicator, so its timeout changes only through
    /// `communicator_mut`, never while a step runs; on failure the
    /// communicator is released.
    pub fn attach_communicator(&mut self, comm: Communicator) -> Result<()> {
        check(unsafe { sys::kiln_trainer_attach_communicator(self.ptr(), comm.ptr()) })?;
        self.communicator = Some(comm);
        Ok(())
    }

    /// The attached communicator, if any.
    pub fn communicator(&self) -> Option<&Communicator> {
        self.communicator.as_ref()
    }

    /// The attached communicator, to change its timeout between steps.
    pub fn communicator_mut(&mut self) -> Option<&mut Communicator> {
        self.communicator.as_mut()
    }
}

/// The iterator `Trainer::epochs` returns.
pub struct Epochs<'t, 'm, 'd, 'a> {
    trainer: &'t mut Trainer<'m>,
    data: &'d Dataset<'a>,
    left: i64,
}

impl Iterator for Epochs<'_, '_, '_, '_> {
    type Item = Result<EpochStats>;

    fn next(&mut self) -> Option<Result<EpochStats>> {
        if self.left == 0 {
            return None;
        }
        let stats = self.trainer.epoch(self.data);
        self.left = if stats.is_ok() { self.left - 1 } else { 0 };
        Some(stats)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}

impl fmt::Debug for Epochs<'_, '_, '_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Epochs").field("trainer", &self.trainer).field("left", &self.left).finish()
    }
}

impl fmt::Display for Epochs<'_, '_, '_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} epochs left for {}", self.left, self.trainer)
    }
}
