using System;
using System.Collections.Generic;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Threading;

namespace Kiln
{
    /// <summary>A learning-rate schedule: constant, step or cosine.</summary>
    public readonly struct Schedule
    {
        Schedule(LrSchedule kind, long stepSize, double gamma, long totalSteps, double minLr)
        {
            Kind = kind; StepSize = stepSize; Gamma = gamma; TotalSteps = totalSteps; MinLr = minLr;
        }

        /// <summary>Which schedule.</summary>
        public LrSchedule Kind { get; }
        /// <summary>Step's period in steps.</summary>
        public long StepSize { get; }
        /// <summary>Step's factor.</summary>
        public double Gamma { get; }
        /// <summary>Cosine's length in steps (0: the fit's total).</summary>
        public long TotalSteps { get; }
        /// <summary>Cosine's floor.</summary>
        public double MinLr { get; }

        /// <summary>The same learning rate throughout.</summary>
        public static Schedule Constant => new Schedule(LrSchedule.Constant, 0, 0, 0, 0);
        /// <summary>lr * gamma^(floor(step / stepSize)).</summary>
        public static Schedule Step(long stepSize, double gamma) => new Schedule(LrSchedule.Step, stepSize, gamma, 0, 0);
        /// <summary>Cosine annealing from lr to minLr over totalSteps (0: the fit's total).</summary>
        public static Schedule Cosine(long totalSteps, double minLr) => new Schedule(LrSchedule.Cosine, 0, 0, totalSteps, minLr);
    }

    /// <summary>Trainer settings. Every property left null keeps libkiln's default
    /// (PyTorch's: cross-entropy, SGD, lr 0.01, batch 64, ...); the trainer copies them.</summary>
    public sealed class TrainerOptions
    {
        /// <summary>The loss.</summary>
        public LossKind? Loss { get; set; }
        /// <summary>The optimizer.</summary>
        public OptimizerKind? Optimizer { get; set; }
        /// <summary>The learning rate.</summary>
        public double? Lr { get; set; }
        /// <summary>SGD's momentum.</summary>
        public double? Momentum { get; set; }
        /// <summary>SGD's Nesterov momentum.</summary>
        public bool? Nesterov { get; set; }
        /// <summary>Weight decay (AdamW's is decoupled).</summary>
        public double? WeightDecay { get; set; }
        /// <summary>Adam's beta1 and beta2.</summary>
        public (double Beta1, double Beta2)? Betas { get; set; }
        /// <summary>Adam's epsilon.</summary>
        public double? Eps { get; set; }
        /// <summary>Cross-entropy's label smoothing in [0, 1], as PyTorch's
        /// CrossEntropyLoss(label_smoothing=): each target mixes the label with the
        /// uniform distribution over the classes (null or 0: none). Another loss with a
        /// non-zero value makes the trainer's constructor throw.</summary>
        public double? LabelSmoothing { get; set; }
        /// <summary>Samples per step of Epoch and Fit.</summary>
        public long? BatchSize { get; set; }
        /// <summary>Max global gradient norm (0: off).</summary>
        public double? GradClip { get; set; }
        /// <summary>The learning-rate schedule.</summary>
        public Schedule? Schedule { get; set; }
        /// <summary>Steps of linear warmup from 0.</summary>
        public long? WarmupSteps { get; set; }
        /// <summary>The shuffling seed (default: from the context).</summary>
        public ulong? ShuffleSeed { get; set; }
        /// <summary>Fit reports an IProgress&lt;BatchProgress&gt; and checks its
        /// CancellationToken every this many batches (0: at each epoch's end only).
        /// Each report reads the loss back from the device.</summary>
        public long? ProgressInterval { get; set; }
        /// <summary>The precision of the steps. TF32 (CUDA only) and BF16 need an f32
        /// model (NotSupportedException otherwise).</summary>
        public Precision? Precision { get; set; }
        /// <summary>The fast-path parts the trainer may use (default Epilogues | Graphs:
        /// cuDNN stays off until a GPU run shows it correct and faster; bits outside All:
        /// ArgumentException). KILN_ENABLE in the environment adds parts, KILN_DISABLE
        /// removes them.</summary>
        public FastPath? FastPath { get; set; }
        /// <summary>DataParallel, as PyTorch's nn.DataParallel: train over these GPUs of this
        /// process, a replica per device, each computing BatchSize samples per step (per device,
        /// as per rank in DDP). The model must be on the first one. One device is plain
        /// training there; null or empty: the model's device.</summary>
        public Device[] Devices { get; set; }
        /// <summary>Data parallel training (Devices, or DDP over a Communicator): start
        /// averaging gradients in buckets of at least this many bytes during the backward,
        /// overlapped with it on GPUs (PyTorch DDP's bucket_cap_mb). Null or 0: one allreduce
        /// after the backward. Every rank must use the same value.</summary>
        public long? BucketBytes { get; set; }

        /// <summary>Copies of the parameters the optimizer keeps: Adam's two
        /// moments, the momentum buffer of SGD with momentum.</summary>
        internal int StateCopies =>
            Optimizer == OptimizerKind.Adam || Optimizer == OptimizerKind.AdamW ? 2 : (Momentum ?? 0) != 0 ? 1 : 0;

        internal TrainerOptionsHandle ToNative()
        {
            Native.Check(NativeMethods.kiln_trainer_options_create(out TrainerOptionsHandle h));
            try
            {
                if (Loss.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_loss(h, Loss.Value));
                if (Optimizer.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_optimizer(h, Optimizer.Value));
                if (Lr.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_lr(h, Lr.Value));
                if (Momentum.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_momentum(h, Momentum.Value));
                if (Nesterov.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_nesterov(h, Nesterov.Value ? 1 : 0));
                if (WeightDecay.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_weight_decay(h, WeightDecay.Value));
                if (Betas.HasValue)
                    Native.Check(NativeMethods.kiln_trainer_options_set_betas(h, Betas.Value.Beta1, Betas.Value.Beta2));
                if (Eps.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_eps(h, Eps.Value));
                if (LabelSmoothing.HasValue)
                    Native.Check(NativeMethods.kiln_trainer_options_set_label_smoothing(h, LabelSmoothing.Value));
                if (BatchSize.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_batch_size(h, BatchSize.Value));
                if (GradClip.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_grad_clip(h, GradClip.Value));
                if (Schedule.HasValue)
                {
                    var s = Schedule.Value;
                    Native.Check(NativeMethods.kiln_trainer_options_set_schedule(h, s.Kind, s.StepSize, s.Gamma, s.TotalSteps, s.MinLr));
                }
                if (WarmupSteps.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_warmup(h, WarmupSteps.Value));
                if (ShuffleSeed.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_shuffle_seed(h, ShuffleSeed.Value));
                if (ProgressInterval.HasValue)
                    Native.Check(NativeMethods.kiln_trainer_options_set_progress_interval(h, ProgressInterval.Value));
                if (Precision.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_precision(h, Precision.Value));
                if (FastPath.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_fast_path(h, (uint)FastPath.Value));
                if (Devices != null && Devices.Length > 0)
                    Native.Check(NativeMethods.kiln_trainer_options_set_devices(h, Devices, Devices.Length));
                if (BucketBytes.HasValue) Native.Check(NativeMethods.kiln_trainer_options_set_bucket_bytes(h, BucketBytes.Value));
                return h;
            }
            catch
            {
                h.Dispose();
                throw;
            }
        }
    }

    /// <summary>One epoch's statistics (struct kiln_epoch_stats).</summary>
    public readonly struct EpochStats
    {
        internal EpochStats(in kiln_epoch_stats s)
        {
            Epoch = s.epoch;
            TrainLoss = s.train_loss;
            TrainAccuracy = s.train_accuracy;
            ValLoss = s.val_loss;
            ValAccuracy = s.val_accuracy;
            HasValidation = s.has_validation != 0;
            Duration = TimeSpan.FromTicks((long)(s.seconds * TimeSpan.TicksPerSecond));
            SamplesPerSecond = s.samples_per_second;
            Lr = s.lr;
        }

        internal static unsafe kiln_epoch_stats Raw() => new kiln_epoch_stats { struct_size = (uint)sizeof(kiln_epoch_stats) };

        /// <summary>The epoch, from 1.</summary>
        public long Epoch { get; }
        /// <summary>The mean training loss over the epoch's samples.</summary>
        public double TrainLoss { get; }
        /// <summary>Training accuracy (classification; else 0).</summary>
        public double TrainAccuracy { get; }
        /// <summary>Validation loss (0 without validation data).</summary>
        public double ValLoss { get; }
        /// <summary>Validation accuracy (0 without validation data).</summary>
        public double ValAccuracy { get; }
        /// <summary>Whether ValLoss and ValAccuracy were measured.</summary>
        public bool HasValidation { get; }
        /// <summary>How long the epoch took.</summary>
        public TimeSpan Duration { get; }
        /// <summary>Training throughput.</summary>
        public double SamplesPerSecond { get; }
        /// <summary>The learning rate at the epoch's end.</summary>
        public double Lr { get; }

        /// <summary>"epoch 3: loss 0.4123, accuracy 0.8512, ...".</summary>
        public override string ToString() =>
            $"epoch {Epoch}: loss {TrainLoss:F4}, accuracy {TrainAccuracy:F4}" +
            (HasValidation ? $", validation loss {ValLoss:F4}, accuracy {ValAccuracy:F4}" : "") +
            $", {Duration.TotalSeconds:F2} s, {SamplesPerSecond:F0} samples/s, lr {Lr:G4}";
    }

    /// <summary>Fit's progress within an epoch, every ProgressInterval batches.</summary>
    public readonly struct BatchProgress
    {
        internal BatchProgress(in kiln_progress p)
        {
            Epoch = p.epoch; Epochs = p.epochs; Batch = p.batch; Batches = p.batches; Loss = p.loss;
            SamplesPerSecond = p.samples_per_second;
            Elapsed = TimeSpan.FromTicks((long)(p.elapsed_seconds * TimeSpan.TicksPerSecond));
        }

        /// <summary>The epoch, from 1.</summary>
        public long Epoch { get; }
        /// <summary>The epochs Fit runs.</summary>
        public long Epochs { get; }
        /// <summary>Batches done in this epoch.</summary>
        public long Batch { get; }
        /// <summary>Batches per epoch.</summary>
        public long Batches { get; }
        /// <summary>The mean training loss so far in this epoch.</summary>
        public double Loss { get; }
        /// <summary>Throughput so far in this epoch.</summary>
        public double SamplesPerSecond { get; }
        /// <summary>Time since the epoch began.</summary>
        public TimeSpan Elapsed { get; }

        /// <summary>"epoch 1/3, batch 100/938: loss 0.5123".</summary>
        public override string ToString() => $"epoch {Epoch}/{Epochs}, batch {Batch}/{Batches}: loss {Loss:F4}";
    }

    /// <summary>One step of Trainer.Steps, the pull form of training.</summary>
    public readonly struct StepResult
    {
        internal StepResult(long batch, long batches, long samples, double loss)
        {
            Batch = batch; Batches = batches; Samples = samples; Loss = loss;
        }

        /// <summary>The batch just trained on, from 1.</summary>
        public long Batch { get; }
        /// <summary>Batches in the pass.</summary>
        public long Batches { get; }
        /// <summary>Samples in the batch.</summary>
        public long Samples { get; }
        /// <summary>The batch's mean loss before the update.</summary>
        public double Loss { get; }

        /// <summary>"batch 3/16: loss 0.5123".</summary>
        public override string ToString() => $"batch {Batch}/{Batches}: loss {Loss:F4}";
    }

    /// <summary>Optimises a model (which it keeps alive). One thread at a time.</summary>
    public sealed class Trainer : IDisposable
    {
        readonly TrainerHandle handle;
        readonly Device device;

        /// <summary>A trainer for model on the model's device; options null keeps every default.</summary>
        public Trainer(Model model, TrainerOptions options = null)
        {
            device = Arg.NotNull(model, nameof(model)).Device;
            options = options ?? new TrainerOptions();
            using (var o = options.ToNative())
                Native.Check(NativeMethods.kiln_trainer_create(Arg.Of(model, nameof(model)), o, out handle));
            // Gradients as large as the parameters and the optimizer's state,
            // counted as a tensor's storage is, since kiln tells neither; the
            // copies a lower precision keeps are left out.
            handle.Track(model.ParameterBytes * (1 + options.StateCopies));
        }

        TrainerHandle Handle => Arg.Live(handle, this);

        /// <summary>Releases the trainer (a Fit in progress keeps it until it returns).</summary>
        public void Dispose() => handle.Dispose();

        /// <summary>One optimisation step on x and y (any device); the batch's mean
        /// loss before the update.</summary>
        public unsafe double Step(Tensor x, Tensor y)
        {
            double loss;
            Native.Check(NativeMethods.kiln_trainer_step(Handle, Arg.Of(x, nameof(x)), Arg.Of(y, nameof(y)), &loss));
            return loss;
        }

        /// <summary>One optimisation step without reading the loss back, so on a GPU
        /// it may still be running when this returns. x and y may be refilled at once.</summary>
        public unsafe void StepWithoutLoss(Tensor x, Tensor y) =>
            Native.Check(NativeMethods.kiln_trainer_step(Handle, Arg.Of(x, nameof(x)), Arg.Of(y, nameof(y)), null));

        /// <summary>The pull form of an epoch: a step per batch of batchSize samples of
        /// data, in order (not shuffled), made as the enumeration asks for it; stop
        /// enumerating to stop training. Each batch is disposed after its step.</summary>
        public IEnumerable<StepResult> Steps(Dataset data, long batchSize)
        {
            if (data == null) throw new ArgumentNullException(nameof(data));
            if (batchSize < 1) throw new ArgumentOutOfRangeException(nameof(batchSize), batchSize, "must be at least 1");
            long count = data.Count;
            // Not (count + batchSize - 1) / batchSize, which overflows for a batchSize near long.MaxValue.
            return StepsFrom(data, batchSize, count / batchSize + (count % batchSize != 0 ? 1 : 0));
        }

        IEnumerable<StepResult> StepsFrom(Dataset data, long batchSize, long batches)
        {
            long i = 0;
            foreach (var batch in data.Batches(batchSize, device))
            {
                double loss;
                long n;
                using (batch)
                {
                    n = batch.X.Dim(0);
                    loss = Step(batch.X, batch.Y);
                }
                yield return new StepResult(++i, batches, n, loss);
            }
        }

        /// <summary>One shuffled pass over data with the options' batch size.</summary>
        public EpochStats Epoch(Dataset data)
        {
            var stats = EpochStats.Raw();
            Native.Check(NativeMethods.kiln_trainer_epoch(Handle, Arg.Of(data, nameof(data)), ref stats));
            return new EpochStats(stats);
        }

        sealed class FitState
        {
            internal IProgress<EpochStats> Epochs;
            internal IProgress<BatchProgress> Batches;
            internal CancellationToken Token;
            internal ExceptionDispatchInfo Failure;
        }

        static readonly kiln_progress_fn ProgressThunk = OnProgress;

        static unsafe int OnProgress(IntPtr user, IntPtr progress)
        {
            var state = (FitState)GCHandle.FromIntPtr(user).Target;
            Callbacks.Depth++;
            try
            {
                var p = (kiln_progress*)progress;
                if (p->phase == ProgressPhase.Epoch && p->stats != IntPtr.Zero)
                    state.Epochs?.Report(new EpochStats(*(kiln_epoch_stats*)p->stats));
                else if (p->phase == ProgressPhase.Batch)
                    state.Batches?.Report(new BatchProgress(*p));
                return state.Token.IsCancellationRequested ? 1 : 0;
            }
            catch (Exception e)
            {
                // Stops training; Fit rethrows it once kiln has returned.
                state.Failure = ExceptionDispatchInfo.Capture(e);
                return 1;
            }
            finally
            {
                Callbacks.Depth--;
            }
        }

        /// <summary>Trains for epochs epochs, evaluating validation (may be null) after
        /// each, and returns the history. epochProgress gets each finished epoch,
        /// batchProgress every TrainerOptions.ProgressInterval batches, on this thread
        /// (Progress&lt;T&gt; posts them to its synchronization context). A cancelled
        /// token stops training at the next report (the model keeps the updates made)
        /// with OperationCanceledException; an exception a report throws stops it too
        /// and is rethrown. Inside a report the trainer may be read, not trained
        /// (InvalidOperationException, Busy).</summary>
        public IReadOnlyList<EpochStats> Fit(Dataset train, Dataset validation, long epochs,
                                             IProgress<EpochStats> epochProgress = null,
                                             IProgress<BatchProgress> batchProgress = null,
                                             CancellationToken cancellationToken = default(CancellationToken))
        {
            cancellationToken.ThrowIfCancellationRequested();
            var state = new FitState { Epochs = epochProgress, Batches = batchProgress, Token = cancellationToken };
            bool report = epochProgress != null || batchProgress != null || cancellationToken.CanBeCanceled;
            var pin = GCHandle.Alloc(state);
            HistoryHandle history;
            Status status;
            try
            {
                status = NativeMethods.kiln_trainer_fit(Handle, Arg.Of(train, nameof(train)), validation == null ? DatasetHandle.Null : Arg.Of(validation, nameof(validation)), epochs,
                                                        report ? ProgressThunk : null, GCHandle.ToIntPtr(pin), out history);
            }
            finally
            {
                pin.Free();
            }
            using (history)
            {
                state.Failure?.Throw();
                if (status == Status.Cancelled)
                    throw KilnErrors.Create(status, Native.Utf8(NativeMethods.kiln_last_error()), token: cancellationToken);
                Native.Check(status);
                Native.Check(NativeMethods.kiln_history_size(history, out long n));
                var result = new EpochStats[n];
                for (long i = 0; i < n; i++)
                {
                    var raw = EpochStats.Raw();
                    Native.Check(NativeMethods.kiln_history_get(history, i, ref raw));
                    result[i] = new EpochStats(raw);
                }
                return result;
            }
        }

        /// <summary>The model's mean loss and accuracy over data, in evaluation mode.</summary>
        public (double Loss, double Accuracy) Evaluate(Dataset data)
        {
            Native.Check(NativeMethods.kiln_trainer_evaluate(Handle, Arg.Of(data, nameof(data)), out double loss, out double accuracy));
            return (loss, accuracy);
        }

        /// <summary>"Trainer(2 epochs, 1876 steps done, lr 0.001)", or
        /// "Trainer(disposed)".</summary>
        public override string ToString() =>
            handle.IsClosed ? "Trainer(disposed)"
                            : "Trainer(" + EpochsDone + " epochs, " + StepsDone + " steps done, lr " +
                              CurrentLr.ToString(System.Globalization.CultureInfo.InvariantCulture) + ")";

        /// <summary>Epochs done (checkpoints restore it).</summary>
        public long EpochsDone { get { Native.Check(NativeMethods.kiln_trainer_epochs_done(Handle, out long n)); return n; } }
        /// <summary>Optimisation steps done (checkpoints restore it).</summary>
        public long StepsDone { get { Native.Check(NativeMethods.kiln_trainer_steps_done(Handle, out long n)); return n; } }
        /// <summary>The learning rate the next step uses.</summary>
        public double CurrentLr { get { Native.Check(NativeMethods.kiln_trainer_current_lr(Handle, out double v)); return v; } }

        /// <summary>Writes weights, optimizer state, counters and the shuffle generator, atomically.</summary>
        public void SaveCheckpoint(string path) => Native.Check(NativeMethods.kiln_trainer_save_checkpoint(Handle, Arg.Text(path, nameof(path))), written: path);

        /// <summary>Restores a checkpoint of the same architecture and optimizer; training
        /// then continues exactly as the run that wrote it. On failure nothing changes.</summary>
        public void LoadCheckpoint(string path) => Native.Check(NativeMethods.kiln_trainer_load_checkpoint(Handle, Arg.Text(path, nameof(path))), path);

        /// <summary>Makes this trainer one rank of data-parallel training over
        /// communicator (collective: every rank calls it); the trainer keeps it alive.
        /// ArgumentException when the ranks' models or options differ.</summary>
        public void AttachCommunicator(Communicator communicator) =>
            Native.Check(NativeMethods.kiln_trainer_attach_communicator(Handle, Arg.Of(communicator, nameof(communicator))));

        /// <summary>The mean loss of pred against target, as a trainer computes it.</summary>
        public static double Loss(LossKind kind, Tensor pred, Tensor target)
        {
            Native.Check(NativeMethods.kiln_loss(kind, Arg.Of(pred, nameof(pred)), Arg.Of(target, nameof(target)), out double v));
            return v;
        }
    }
}
