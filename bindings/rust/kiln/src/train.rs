use std::marker::PhantomData;
use std::path::Path;
use std::ptr::NonNull;
use std::time::Duration;

use kiln_sys as sys;

use crate::context::{Context, Device};
use crate::error::{check, Result};
use crate::model::Model;
use crate::tensor::Tensor;
use crate::{create, cstring, get};

/// Samples and labels. A dataset made from tensors borrows them (`'a`):
/// kiln references their storage instead of copying it.
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

impl<'a> Dataset<'a> {
    fn wrap(raw: NonNull<sys::kiln_dataset>) -> Dataset<'a> {
        Dataset { raw, _data: PhantomData }
    }

    /// x [N, features...] (float or U8) with integer labels [N] or float
    /// targets [N, k].
    pub fn from_tensors(ctx: &Context, x: &'a Tensor, y: &'a Tensor) -> Result<Dataset<'a>> {
        create(|p| unsafe { sys::kiln_dataset_from_tensors(ctx.ptr(), x.ptr(), y.ptr(), p) }).map(Dataset::wrap)
    }

    /// An IDX image file and label file (raw or .gz).
    pub fn load_idx(ctx: &Context, images: &str, labels: &str) -> Result<Dataset<'static>> {
        let (images, labels) = (cstring(images)?, cstring(labels)?);
        create(|p| unsafe { sys::kiln_dataset_load_idx(ctx.ptr(), images.as_ptr(), labels.as_ptr(), p) }).map(Dataset::wrap)
    }

    /// The "train" or "test" split of an MNIST-layout directory.
    pub fn load_mnist(ctx: &Context, dir: impl AsRef<Path>, split: &str) -> Result<Dataset<'static>> {
        let dir = cstring(&dir.as_ref().to_string_lossy())?;
        let split = cstring(split)?;
        create(|p| unsafe { sys::kiln_dataset_load_mnist(ctx.ptr(), dir.as_ptr(), split.as_ptr(), p) }).map(Dataset::wrap)
    }

    pub fn len(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_dataset_size(self.raw.as_ptr(), p) })
    }

    pub fn num_features(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_dataset_num_features(self.raw.as_ptr(), p) })
    }

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

    /// Samples [start, start + count) as normalised F32 x and labels y on device.
    pub fn batch(&self, start: i64, count: i64, device: Device) -> Result<(Tensor, Tensor)> {
        let (mut x, mut y) = (std::ptr::null_mut(), std::ptr::null_mut());
        check(unsafe { sys::kiln_dataset_batch(self.raw.as_ptr(), start, count, device.raw(), &mut x, &mut y) })?;
        unsafe { Ok((Tensor(NonNull::new_unchecked(x)), Tensor(NonNull::new_unchecked(y)))) }
    }
}

/// A training loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossKind {
    /// Logits [B, C], integer labels [B].
    CrossEntropy = 0,
    Mse = 1,
    BceWithLogits = 2,
}

/// The mean loss of `pred` against `target`, as a trainer computes it.
pub fn loss(kind: LossKind, pred: &Tensor, target: &Tensor) -> Result<f64> {
    get(|p| unsafe { sys::kiln_loss(kind as u32, pred.ptr(), target.ptr(), p) })
}

/// An update rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    Sgd { momentum: f64, nesterov: bool },
    Adam { beta1: f64, beta2: f64, eps: f64 },
    AdamW { beta1: f64, beta2: f64, eps: f64 },
}

/// A learning-rate schedule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Schedule {
    Constant,
    /// lr * gamma^floor(step / step_size).
    Step { step_size: i64, gamma: f64 },
    /// From lr to min_lr over total_steps (0: the fit's total).
    Cosine { total_steps: i64, min_lr: f64 },
}

/// The numeric precision of a trainer's steps (kiln_precision).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// The model's dtype throughout, f32 products computed exactly (kiln's
    /// default, and PyTorch's with TF32 off).
    Fp32,
    /// f32 products on CUDA's TF32 tensor cores (10-bit mantissa inputs, f32
    /// accumulation). CUDA only: a trainer for a CPU model fails with
    /// `Status::NotSupported`.
    Tf32,
    /// Mixed precision on every device: batch, activations and products in
    /// bf16 (f32 accumulation) with f32 master weights, gradients, optimizer
    /// state and loss, as PyTorch's autocast to bfloat16.
    Bf16,
}

impl Precision {
    fn raw(self) -> sys::kiln_precision {
        match self {
            Precision::Fp32 => sys::kiln_precision_KILN_PRECISION_FP32,
            Precision::Tf32 => sys::kiln_precision_KILN_PRECISION_TF32,
            Precision::Bf16 => sys::kiln_precision_KILN_PRECISION_BF16,
        }
    }
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
    /// Every part: kiln's default.
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

/// Trainer settings. `Default` is PyTorch's: SGD without momentum, lr 0.01,
/// cross-entropy, batch 64.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainerOptions {
    pub loss: LossKind,
    pub optimizer: Optimizer,
    pub lr: f64,
    /// None: the optimizer's default (AdamW 0.01, else 0).
    pub weight_decay: Option<f64>,
    pub batch_size: i64,
    /// Max global gradient norm (0: off).
    pub grad_clip: f64,
    pub schedule: Schedule,
    pub warmup_steps: i64,
    /// None: seeded from the context.
    pub shuffle_seed: Option<u64>,
    /// None: kiln's default, `Precision::Fp32`. Tf32 and Bf16 need an F32
    /// model (`Status::NotSupported` otherwise).
    pub precision: Option<Precision>,
    /// The fast-path parts the trainer may use. None: kiln's default,
    /// `FastPath::ALL`. The environment variable KILN_DISABLE (a comma-separated
    /// list of "epilogues", "graphs", "cudnn" or "all") removes
    /// more when the trainer is made.
    pub fast_path: Option<FastPath>,
}

impl Default for TrainerOptions {
    fn default() -> TrainerOptions {
        TrainerOptions {
            loss: LossKind::CrossEntropy,
            optimizer: Optimizer::Sgd { momentum: 0.0, nesterov: false },
            lr: 0.01,
            weight_decay: None,
            batch_size: 64,
            grad_clip: 0.0,
            schedule: Schedule::Constant,
            warmup_steps: 0,
            shuffle_seed: None,
            precision: None,
            fast_path: None,
        }
    }
}

impl Optimizer {
    /// Adam with PyTorch's betas (0.9, 0.999) and eps 1e-8.
    pub fn adam() -> Optimizer {
        Optimizer::Adam { beta1: 0.9, beta2: 0.999, eps: 1e-8 }
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
        unsafe {
            check(sys::kiln_trainer_options_set_loss(p, self.loss as u32))?;
            match self.optimizer {
                Optimizer::Sgd { momentum, nesterov } => {
                    check(sys::kiln_trainer_options_set_optimizer(p, sys::kiln_optimizer_kind_KILN_OPTIM_SGD))?;
                    check(sys::kiln_trainer_options_set_momentum(p, momentum))?;
                    check(sys::kiln_trainer_options_set_nesterov(p, nesterov as i32))?;
                }
                Optimizer::Adam { beta1, beta2, eps } | Optimizer::AdamW { beta1, beta2, eps } => {
                    let kind = if matches!(self.optimizer, Optimizer::Adam { .. }) {
                        sys::kiln_optimizer_kind_KILN_OPTIM_ADAM
                    } else {
                        sys::kiln_optimizer_kind_KILN_OPTIM_ADAMW
                    };
                    check(sys::kiln_trainer_options_set_optimizer(p, kind))?;
                    check(sys::kiln_trainer_options_set_betas(p, beta1, beta2))?;
                    check(sys::kiln_trainer_options_set_eps(p, eps))?;
                }
            }
            check(sys::kiln_trainer_options_set_lr(p, self.lr))?;
            if let Some(wd) = self.weight_decay {
                check(sys::kiln_trainer_options_set_weight_decay(p, wd))?;
            }
            check(sys::kiln_trainer_options_set_batch_size(p, self.batch_size))?;
            check(sys::kiln_trainer_options_set_grad_clip(p, self.grad_clip))?;
            match self.schedule {
                Schedule::Constant => {}
                Schedule::Step { step_size, gamma } => check(sys::kiln_trainer_options_set_schedule(
                    p, sys::kiln_lr_schedule_KILN_LR_STEP, step_size, gamma, 0, 0.0))?,
                Schedule::Cosine { total_steps, min_lr } => check(sys::kiln_trainer_options_set_schedule(
                    p, sys::kiln_lr_schedule_KILN_LR_COSINE, 0, 1.0, total_steps, min_lr))?,
            }
            check(sys::kiln_trainer_options_set_warmup(p, self.warmup_steps))?;
            if let Some(seed) = self.shuffle_seed {
                check(sys::kiln_trainer_options_set_shuffle_seed(p, seed))?;
            }
            if let Some(precision) = self.precision {
                check(sys::kiln_trainer_options_set_precision(p, precision.raw()))?;
            }
            if let Some(fast_path) = self.fast_path {
                check(sys::kiln_trainer_options_set_fast_path(p, fast_path.bits()))?;
            }
        }
        Ok(o)
    }
}

/// The statistics of one epoch.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochStats {
    pub epoch: i64,
    pub train_loss: f64,
    pub train_accuracy: f64,
    /// (loss, accuracy) on the validation data, when there was some.
    pub validation: Option<(f64, f64)>,
    pub duration: Duration,
    pub samples_per_second: f64,
    pub lr: f64,
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
            validation: (s.has_validation != 0).then_some((s.val_loss, s.val_accuracy)),
            duration: Duration::from_secs_f64(s.seconds.max(0.0)),
            samples_per_second: s.samples_per_second,
            lr: s.lr,
        }
    }
}

/// Trains a model it borrows mutably, so nothing else runs or changes the
/// model meanwhile. `Send`, not `Sync`: one thread at a time.
pub struct Trainer<'m> {
    raw: NonNull<sys::kiln_trainer>,
    _model: PhantomData<&'m mut Model>,
}

// SAFETY: kiln.h: a trainer is used by one thread at a time (no Sync) and
// may be released from any thread.
unsafe impl Send for Trainer<'_> {}

impl Drop for Trainer<'_> {
    fn drop(&mut self) {
        unsafe { sys::kiln_trainer_release(self.raw.as_ptr()) }
    }
}

impl<'m> Trainer<'m> {
    pub fn new(model: &'m mut Model, options: &TrainerOptions) -> Result<Trainer<'m>> {
        let o = options.to_raw()?;
        let raw = create(|p| unsafe { sys::kiln_trainer_create(model.ptr(), o.0.as_ptr(), p) })?;
        Ok(Trainer { raw, _model: PhantomData })
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

    /// `epochs` epochs, evaluating `validation` after each; the history.
    pub fn fit(&mut self, train: &Dataset, validation: Option<&Dataset>, epochs: i64) -> Result<Vec<EpochStats>> {
        let val = validation.map_or(std::ptr::null(), |v| v.raw.as_ptr() as *const _);
        let history = create(|p| unsafe {
            sys::kiln_trainer_fit(self.ptr(), train.raw.as_ptr(), val, epochs, None, std::ptr::null_mut(), p)
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

    pub fn epochs_done(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_trainer_epochs_done(self.ptr(), p) })
    }

    pub fn steps_done(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_trainer_steps_done(self.ptr(), p) })
    }

    /// The learning rate of the next step.
    pub fn current_lr(&self) -> Result<f64> {
        get(|p| unsafe { sys::kiln_trainer_current_lr(self.ptr(), p) })
    }

    pub fn save_checkpoint(&self, path: &str) -> Result<()> {
        let path = cstring(path)?;
        check(unsafe { sys::kiln_trainer_save_checkpoint(self.ptr(), path.as_ptr()) })
    }

    pub fn load_checkpoint(&mut self, path: &str) -> Result<()> {
        let path = cstring(path)?;
        check(unsafe { sys::kiln_trainer_load_checkpoint(self.ptr(), path.as_ptr()) })
    }
}
