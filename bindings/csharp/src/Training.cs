using System;

namespace Kiln
{
    /// <summary>Samples x [N, features...] and labels or targets y.</summary>
    public sealed class Dataset : IDisposable
    {
        internal readonly DatasetHandle Handle;

        Dataset(DatasetHandle handle) { Handle = handle; }

        /// <summary>References x (float or byte) and y (integer labels [N] or float
        /// targets [N, k]) without copying them.</summary>
        public Dataset(Context ctx, Tensor x, Tensor y)
        {
            NativeMethods.dataset_from_tensors(ctx.Handle, x.Handle, y.Handle, out Handle);
        }

        /// <summary>The "train" or "test" split of an MNIST-layout directory.</summary>
        public static Dataset LoadMnist(Context ctx, string dir, string split)
        {
            NativeMethods.dataset_load_mnist(ctx.Handle, dir, split, out DatasetHandle h);
            return new Dataset(h);
        }

        /// <summary>An IDX image file and label file (raw or .gz).</summary>
        public static Dataset LoadIdx(Context ctx, string images, string labels)
        {
            NativeMethods.dataset_load_idx(ctx.Handle, images, labels, out DatasetHandle h);
            return new Dataset(h);
        }

        public void Dispose() => Handle.Dispose();

        public long Count { get { NativeMethods.dataset_size(Handle, out long n); return n; } }
        public long NumFeatures { get { NativeMethods.dataset_num_features(Handle, out long n); return n; } }
        public long NumClasses { get { NativeMethods.dataset_num_classes(Handle, out long n); return n; } }

        /// <summary>Batched features become (x * scale - mean) / std.</summary>
        public void SetNormalization(double scale, double mean, double std) =>
            NativeMethods.dataset_set_normalization(Handle, scale, mean, std);

        /// <summary>A seeded random split; both parts share the data.</summary>
        public (Dataset Train, Dataset Validation) Split(double validationFraction, ulong seed)
        {
            NativeMethods.dataset_split(Handle, validationFraction, seed, out DatasetHandle t, out DatasetHandle v);
            return (new Dataset(t), new Dataset(v));
        }

        /// <summary>Samples [start, start+count) as normalised f32 x and labels y on device.</summary>
        public (Tensor X, Tensor Y) Batch(long start, long count, Device device)
        {
            NativeMethods.dataset_batch(Handle, start, count, device, out TensorHandle x, out TensorHandle y);
            return (new Tensor(x), new Tensor(y));
        }
    }

    /// <summary>Trainer settings; the defaults are PyTorch's (SGD, lr 0.01,
    /// cross-entropy, batch 64). Unset nullable fields keep kiln's defaults.</summary>
    public sealed class TrainerOptions
    {
        public LossKind Loss { get; set; } = LossKind.CrossEntropy;
        public OptimizerKind Optimizer { get; set; } = OptimizerKind.Sgd;
        public double Lr { get; set; } = 0.01;
        public double Momentum { get; set; }
        public bool Nesterov { get; set; }
        public double? WeightDecay { get; set; }
        public double Beta1 { get; set; } = 0.9;
        public double Beta2 { get; set; } = 0.999;
        public double Eps { get; set; } = 1e-8;
        public long BatchSize { get; set; } = 64;
        /// <summary>Max global gradient norm (0: off).</summary>
        public double GradClip { get; set; }
        public LrSchedule Schedule { get; set; } = LrSchedule.Constant;
        public long StepSize { get; set; }
        public double Gamma { get; set; } = 0.1;
        /// <summary>Cosine's length in steps (0: the fit's total).</summary>
        public long TotalSteps { get; set; }
        public double MinLr { get; set; }
        public long WarmupSteps { get; set; }
        public ulong? ShuffleSeed { get; set; }
        /// <summary>The precision of the steps; null keeps kiln's default, FP32.
        /// TF32 and BF16 need an f32 model (NotSupported otherwise).</summary>
        public Precision? Precision { get; set; }
        /// <summary>The fast-path parts the trainer may use; null keeps kiln's default,
        /// All. Bits outside All throw InvalidArgument. The environment variable
        /// KILN_DISABLE (a comma-separated list of "epilogues", "graphs", "cudnn"
        /// or "all") removes more when the trainer is created.</summary>
        public FastPath? FastPath { get; set; }

        internal TrainerOptionsHandle ToNative()
        {
            NativeMethods.trainer_options_create(out TrainerOptionsHandle h);
            try
            {
                NativeMethods.trainer_options_set_loss(h, Loss);
                NativeMethods.trainer_options_set_optimizer(h, Optimizer);
                NativeMethods.trainer_options_set_lr(h, Lr);
                NativeMethods.trainer_options_set_momentum(h, Momentum);
                NativeMethods.trainer_options_set_nesterov(h, Nesterov ? 1 : 0);
                if (WeightDecay.HasValue) NativeMethods.trainer_options_set_weight_decay(h, WeightDecay.Value);
                NativeMethods.trainer_options_set_betas(h, Beta1, Beta2);
                NativeMethods.trainer_options_set_eps(h, Eps);
                NativeMethods.trainer_options_set_batch_size(h, BatchSize);
                NativeMethods.trainer_options_set_grad_clip(h, GradClip);
                if (Schedule != LrSchedule.Constant)
                    NativeMethods.trainer_options_set_schedule(h, Schedule, StepSize, Gamma, TotalSteps, MinLr);
                NativeMethods.trainer_options_set_warmup(h, WarmupSteps);
                if (ShuffleSeed.HasValue) NativeMethods.trainer_options_set_shuffle_seed(h, ShuffleSeed.Value);
                if (Precision.HasValue) NativeMethods.trainer_options_set_precision(h, Precision.Value);
                if (FastPath.HasValue) NativeMethods.trainer_options_set_fast_path(h, FastPath.Value);
                return h;
            }
            catch
            {
                h.Dispose();
                throw;
            }
        }
    }

    /// <summary>Optimises a model (which it keeps alive). One thread at a time.</summary>
    public sealed class Trainer : IDisposable
    {
        readonly TrainerHandle handle;

        public Trainer(Model model, TrainerOptions options = null)
        {
            using (var o = (options ?? new TrainerOptions()).ToNative())
                NativeMethods.trainer_create(model.Handle, o, out handle);
        }

        public void Dispose() => handle.Dispose();

        /// <summary>One optimisation step; the batch's mean loss before the update.</summary>
        public double Step(Tensor x, Tensor y)
        {
            NativeMethods.trainer_step(handle, x.Handle, y.Handle, out double loss);
            return loss;
        }

        /// <summary>One shuffled pass over data: the pull form of progress reporting.</summary>
        public EpochStats Epoch(Dataset data)
        {
            var stats = EpochStats.Create();
            NativeMethods.trainer_epoch(handle, data.Handle, ref stats);
            return stats;
        }

        /// <summary>Trains for epochs epochs, evaluating validation (may be null)
        /// after each; returns the history.</summary>
        public EpochStats[] Fit(Dataset train, Dataset validation, long epochs)
        {
            NativeMethods.trainer_fit(handle, train.Handle, validation?.Handle ?? DatasetHandle.Null, epochs,
                                      out HistoryHandle history);
            using (history)
            {
                NativeMethods.history_size(history, out long n);
                var result = new EpochStats[n];
                for (long i = 0; i < n; i++)
                {
                    result[i] = EpochStats.Create();
                    NativeMethods.history_get(history, i, ref result[i]);
                }
                return result;
            }
        }

        /// <summary>The model's mean loss and accuracy over data, in evaluation mode.</summary>
        public (double Loss, double Accuracy) Evaluate(Dataset data)
        {
            NativeMethods.trainer_evaluate(handle, data.Handle, out double loss, out double accuracy);
            return (loss, accuracy);
        }

        public long EpochsDone { get { NativeMethods.trainer_epochs_done(handle, out long n); return n; } }
        public long StepsDone { get { NativeMethods.trainer_steps_done(handle, out long n); return n; } }
        public double CurrentLr { get { NativeMethods.trainer_current_lr(handle, out double v); return v; } }

        public void SaveCheckpoint(string path) => NativeMethods.trainer_save_checkpoint(handle, path);
        public void LoadCheckpoint(string path) => NativeMethods.trainer_load_checkpoint(handle, path);

        /// <summary>The mean loss of pred against target, as a trainer computes it.</summary>
        public static double Loss(LossKind kind, Tensor pred, Tensor target)
        {
            NativeMethods.loss(kind, pred.Handle, target.Handle, out double v);
            return v;
        }
    }
}
