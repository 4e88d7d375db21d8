// Tests of what the binding adds around the C API: progress and cancellation,
// the pull form, Dispose against finalizers, memory the collector knows about,
// dispose scopes, log callbacks, communicators and the coverage of kiln.h.
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Text.RegularExpressions;
using System.Threading;
using System.Threading.Tasks;
using Kiln;

static partial class Tests
{
    /// Records the reports a SynchronousProgress gets, and runs Then after each.
    sealed class Recorder<T>
    {
        internal readonly List<T> Reports = new List<T>();
        internal Action<T> Then;
        internal IProgress<T> Progress => new SynchronousProgress<T>(value => { Reports.Add(value); Then?.Invoke(value); });
    }

    public static void FitReportsProgress()
    {
        using (var ctx = new Context(seed: 42))
        using (var data = BlobData(ctx))
        using (var model = new Model(ctx, "16-32-4", Device.Cpu))
        {
            var (train, val) = data.Split(0.25, 1);
            using (train)
            using (val)
            using (var trainer = new Trainer(model, new TrainerOptions { BatchSize = 32, ProgressInterval = 4 }))
            {
                var epochs = new Recorder<EpochStats>();
                var batches = new Recorder<BatchProgress>();
                var history = trainer.Fit(train, val, 3, epochs.Progress, batches.Progress);
                // 768 training samples in batches of 32: 24 batches, a report after
                // batches 4, 8, ..., 20 (the epoch's end is the epoch report).
                Check(epochs.Reports.Count == 3 && batches.Reports.Count == 3 * 5, $"{epochs.Reports.Count} epoch and {batches.Reports.Count} batch reports");
                for (int i = 0; i < 3; i++)
                {
                    var r = epochs.Reports[i];
                    Check(r.Epoch == i + 1 && r.TrainLoss == history[i].TrainLoss && r.ValAccuracy == history[i].ValAccuracy &&
                          r.HasValidation && r.Duration == history[i].Duration, "epoch report " + r + " vs " + history[i]);
                }
                var b = batches.Reports;
                Check(b.All(p => p.Batches == 24 && p.Epochs == 3 && p.Batch % 4 == 0 && p.Loss > 0 && p.Elapsed > TimeSpan.Zero),
                      "batch reports " + b[0]);
                Check(b[4].Batch == 20 && b[5].Epoch == 2 && b[5].Batch == 4, "batch order: " + b[4] + ", " + b[5]);
                Check(b.Last().Loss < b.First().Loss, "loss falls: " + b.First() + " ... " + b.Last());
            }
        }
    }

    public static void FitCancels()
    {
        using (var ctx = new Context(seed: 42))
        using (var data = BlobData(ctx))
        using (var model = new Model(ctx, "16-32-4", Device.Cpu))
        using (var trainer = new Trainer(model, new TrainerOptions { BatchSize = 32, ProgressInterval = 4 }))
        using (var cts = new CancellationTokenSource())
        {
            var batches = new Recorder<BatchProgress> { Then = p => { if (p.Batch == 8) cts.Cancel(); } };
            var e = Throws<OperationCanceledException>(() => trainer.Fit(data, null, 5, null, batches.Progress, cts.Token));
            Check(e.CancellationToken == cts.Token && StatusOf(e) == Status.Cancelled, "the caller's token: " + e.Message);
            Check(trainer.StepsDone == 8 && trainer.EpochsDone == 0, "stopped after batch 8: " + trainer.StepsDone + " steps");
            // A token cancelled before Fit: nothing runs.
            Throws<OperationCanceledException>(() => trainer.Fit(data, null, 1, cancellationToken: cts.Token));
            Check(trainer.StepsDone == 8, "no step after a cancelled token");
            // Without reports, the token is still checked at the end of each epoch.
            using (var late = new CancellationTokenSource())
            {
                var epochs = new Recorder<EpochStats> { Then = _ => late.Cancel() };
                Throws<OperationCanceledException>(() => trainer.Fit(data, null, 5, epochs.Progress, null, late.Token));
                Check(epochs.Reports.Count == 1 && trainer.EpochsDone == 1, "one epoch, then cancelled");
            }
            // The trainer inside its own report: Busy, rethrown from Fit as the report threw it.
            var busy = new Recorder<EpochStats> { Then = _ => trainer.Epoch(data) };
            var b = Throws<InvalidOperationException>(() => trainer.Fit(data, null, 2, busy.Progress));
            Check(StatusOf(b) == Status.Busy && trainer.EpochsDone == 2, "busy: " + b.Message);
            var own = new Recorder<EpochStats> { Then = _ => throw new TimeoutException("mine") };
            Check(Throws<TimeoutException>(() => trainer.Fit(data, null, 2, own.Progress)).Message == "mine", "the report's exception");
            Throws<ArgumentException>(() => trainer.Fit(data, null, 0));
            Check(trainer.Fit(data, null, 1).Count == 1, "usable after all that");
        }
    }

    /// What the README does: SynchronousProgress prints each report in order, on
    /// the thread that called Fit, and a cancel made in epoch 1 stops training
    /// after epoch 1. (With Progress<T>, in a console program, lines came out of
    /// order in 2 of 6 runs and such a cancel stopped after epoch 2 in 6 of 6.)
    public static void SynchronousProgressKeepsOrderAndCancelsInTime()
    {
        for (int run = 0; run < 6; run++)
            using (var ctx = new Context(seed: 42))
            using (var data = BlobData(ctx))
            using (var model = new Model(ctx, "16-32-4", Device.Cpu))
            using (var trainer = new Trainer(model, new TrainerOptions { BatchSize = 32, ProgressInterval = 4 }))
            using (var cts = new CancellationTokenSource())
            {
                int fitThread = Thread.CurrentThread.ManagedThreadId;
                var lines = new List<string>();
                bool elsewhere = false;
                var epochs = new SynchronousProgress<EpochStats>(s =>
                {
                    elsewhere |= Thread.CurrentThread.ManagedThreadId != fitThread;
                    lines.Add("epoch " + s.Epoch);
                    if (s.Epoch == 1) cts.Cancel();
                });
                var batches = new SynchronousProgress<BatchProgress>(p =>
                {
                    elsewhere |= Thread.CurrentThread.ManagedThreadId != fitThread;
                    lines.Add($"epoch {p.Epoch} batch {p.Batch}");
                });
                Throws<OperationCanceledException>(() => trainer.Fit(data, null, 5, epochs, batches, cts.Token));
                // 1024 samples in batches of 32: 32 batches, a report after batches 4, ..., 28.
                var want = Enumerable.Range(1, 7).Select(k => "epoch 1 batch " + 4 * k).Concat(new[] { "epoch 1" });
                Check(!elsewhere, "a report on another thread than Fit's");
                Check(lines.SequenceEqual(want), "reports: " + string.Join("; ", lines));
                Check(trainer.EpochsDone == 1 && trainer.StepsDone == 32, $"stopped after {trainer.EpochsDone} epochs");
            }
        Throws<ArgumentNullException>(() => new SynchronousProgress<EpochStats>(null));
    }

    public static void PullFormStepsInOrder()
    {
        using (var ctx = new Context(seed: 42))
        using (var data = BlobData(ctx, 100))
        using (var model = new Model(ctx, "16-32-4", Device.Cpu))
        using (var twin = new Model(ctx, "16-32-4", Device.Cpu))
        using (var trainer = new Trainer(model, new TrainerOptions { Lr = 0.05 }))
        {
            double want;
            using (var first = data.Batch(0, 32, Device.Cpu))
            using (var logits = model.Forward(first.X))
                want = Trainer.Loss(LossKind.CrossEntropy, logits, first.Y);
            var steps = new List<StepResult>();
            foreach (var s in trainer.Steps(data, 32)) steps.Add(s);
            Check(steps.Count == 4 && steps.Select(s => s.Samples).SequenceEqual(new long[] { 32, 32, 32, 4 }), "4 batches, the last partial");
            Check(steps.All(s => s.Batches == 4) && steps[3].Batch == 4, steps[3].ToString());
            Check(Math.Abs(steps[0].Loss - want) < 1e-6, $"first loss {steps[0].Loss} vs the loss before the step {want}");
            Check(trainer.StepsDone == 4, "4 steps");
            // Stopping the enumeration stops training.
            Check(trainer.Steps(data, 10).Take(3).Count() == 3 && trainer.StepsDone == 7, "3 more steps");
            Throws<ArgumentOutOfRangeException>(() => trainer.Steps(data, 0));
            Throws<ArgumentOutOfRangeException>(() => data.Batches(-1, Device.Cpu));
            int n = 0;
            foreach (var batch in data.Batches(64, Device.Cpu))
                using (batch)
                    n += (int)batch.Y.NumEl;
            Check(n == 100, "Batches covers the data once");
            // StepWithoutLoss trains the same as Step.
            using (var t2 = new Trainer(twin, new TrainerOptions { Lr = 0.05 }))
            {
                var b = data.Batch(0, 32, Device.Cpu);
                t2.StepWithoutLoss(b.X, b.Y);
                Check(t2.StepsDone == 1, "step without loss");
                var e = Throws<ArgumentException>(() => t2.Step(b.Y, b.X));
                Check(StatusOf(e) != Status.Ok, "x and y swapped: " + e.Message);
            }
        }
    }

    /// A batch size past the data is one batch of all of it, up to long.MaxValue,
    /// whose count (n + b - 1) / b overflowed to "batch 1/0".
    public static void HugeBatchSizesAreOneBatch()
    {
        using (var ctx = new Context(seed: 42))
        using (var data = BlobData(ctx, 100))
        using (var model = new Model(ctx, "16-4", Device.Cpu))
        using (var trainer = new Trainer(model))
            foreach (long size in new[] { 100, 101, 1L << 62, long.MaxValue - 1, long.MaxValue })
            {
                var steps = trainer.Steps(data, size).ToList();
                Check(steps.Count == 1 && steps[0].Batch == 1 && steps[0].Batches == 1 && steps[0].Samples == 100,
                      $"batch size {size}: " + string.Join(", ", steps));
                var batches = data.Batches(size, Device.Cpu).ToList();
                Check(batches.Count == 1 && batches[0].Y.NumEl == 100, $"batch size {size}: {batches.Count} batches");
                batches[0].Dispose();
            }
    }

    public static void LogCallback()
    {
        var records = new List<(LogLevel, string, int)>();
        using (var ctx = new Context(logLevel: LogLevel.Debug, log: (level, message) =>
               { lock (records) records.Add((level, message, Thread.CurrentThread.ManagedThreadId)); }))
        using (var model = new Model(ctx, "4-2", Device.Cpu))
        using (var trainer = new Trainer(model))
        {
            Throws<ArgumentException>(() => ctx.ParseDevice("nonsense"));
        }
        lock (records)
        {
            Check(records.Count > 0, "some debug records");
            Check(records.All(r => r.Item1 >= LogLevel.Debug && r.Item1 < LogLevel.Off && r.Item2.Length > 0 && !r.Item2.EndsWith("\n")),
                  "records: " + string.Join(" | ", records.Select(r => r.Item1 + " " + r.Item2)));
        }
        // A throwing callback does not unwind into kiln.
        using (var ctx = new Context(logLevel: LogLevel.Debug, log: (l, m) => throw new Exception("dropped")))
        using (var model = new Model(ctx, "4-2", Device.Cpu))
            Check(model.NumParameters == 10, "still works");
        Throws<ArgumentException>(() => new Context(threads: -1, log: (l, m) => { }));
    }

    static long RssBytes()
    {
        foreach (var line in File.ReadAllLines("/proc/self/status"))
            if (line.StartsWith("VmRSS:"))
                return long.Parse(Regex.Match(line, @"\d+").Value) * 1024;
        throw new Exception("no VmRSS in /proc/self/status");
    }

    /// Issue 13's test: 8000 tensors of 256 KiB (2000 MiB in all), none disposed,
    /// must not take the process past 300 MB of RSS.
    public static void UndisposedTensorsStayUnder300MB()
    {
        using (var ctx = new Context())
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            long before = RssBytes(), peak = before;
            int collections = GC.CollectionCount(2);
            for (int i = 0; i < 8000; i++)
            {
                Tensor.Ones(ctx, DType.F32, Device.Cpu, 64 * 1024);
                if (i % 100 == 0) peak = Math.Max(peak, RssBytes());
            }
            peak = Math.Max(peak, RssBytes());
            Console.WriteLine($"  8000 x 256 KiB undisposed: RSS {before >> 20} MiB before, peak {peak >> 20} MiB, " +
                              $"{GC.CollectionCount(2) - collections} full collections");
            Check(peak < 300L * 1000 * 1000, $"peak RSS {peak >> 20} MiB");
            GC.Collect();
            GC.WaitForPendingFinalizers();
            Check(NativeMemory.Live < NativeMemory.Budget, "storage left after collection: " + NativeMemory.Live);
        }
    }

    /// Models count their parameters, trainers their gradients and optimizer
    /// state (moments for Adam, a momentum buffer for SGD with momentum), and
    /// datasets read from files their samples (a byte per feature), as tensors
    /// count their storage: until they are disposed or finalized.
    public static void ModelsTrainersAndDatasetsCountTheirMemory()
    {
        string images = Temp("count-images"), labels = Temp("count-labels");
        // 3 images of 2 x 5 pixels.
        File.WriteAllBytes(images, new byte[] { 0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 5 }.Concat(new byte[30]).ToArray());
        File.WriteAllBytes(labels, new byte[] { 0, 0, 8, 1, 0, 0, 0, 3, 0, 1, 2 });
        try
        {
            using (var ctx = new Context())
            {
                // Each change is measured around what makes it: an earlier test's
                // garbage may be finalized by any collection.
                var made = new List<(IDisposable, long)>();
                Func<Func<IDisposable>, long, IDisposable> counted = (make, bytes) =>
                {
                    long before = NativeMemory.Live;
                    var obj = make();
                    Check(NativeMemory.Live - before == bytes, $"{obj}: {NativeMemory.Live - before} bytes counted, not {bytes}");
                    made.Add((obj, bytes));
                    return obj;
                };
                const long parameters = 16 * 32 + 32 + 32 * 4 + 4;
                var model = (Model)counted(() => new Model(ctx, "16-32-4", Device.Cpu), 4 * parameters);
                counted(() => new Model(ctx, "16-32-4", Device.Cpu, DType.F64), 8 * parameters);
                counted(() => new Model(ctx, "input(4);relu", Device.Cpu), 0);
                counted(() => new Trainer(model), 4 * parameters);
                counted(() => new Trainer(model, new TrainerOptions { Momentum = 0.9 }), 2 * 4 * parameters);
                counted(() => new Trainer(model, new TrainerOptions { Optimizer = OptimizerKind.AdamW }), 3 * 4 * parameters);
                var loaded = (Dataset)counted(() => Dataset.LoadIdx(ctx, images, labels), 3 * 10);
                long held = NativeMemory.Live;
                var (train, validation) = loaded.Split(0.5, 1);
                train.Dispose();
                validation.Dispose();
                Check(NativeMemory.Live == held, "splits share the samples: " + (NativeMemory.Live - held));
                foreach (var entry in made)
                {
                    var (obj, bytes) = entry;
                    string what = obj.ToString();
                    held = NativeMemory.Live;
                    obj.Dispose();
                    Check(held - NativeMemory.Live == bytes, $"{what} disposed: {held - NativeMemory.Live} bytes taken off, not {bytes}");
                }
            }
        }
        finally
        {
            File.Delete(images);
            File.Delete(labels);
        }
    }

    /// The audit's case: 784-4000-4000-10 models (73 MiB of parameters) with an
    /// SGD trainer each (as much again in gradients), none disposed. Uncounted,
    /// 12 of them grew RSS by 1.7 GB without a collection; counted, by under 600 MiB.
    public static void UndisposedModelsStayBounded()
    {
        using (var ctx = new Context())
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            long before = RssBytes(), peak = before;
            int collections = GC.CollectionCount(GC.MaxGeneration);
            var clock = System.Diagnostics.Stopwatch.StartNew();
            // On a thread of its own, so that no stack slot keeps one alive.
            var maker = new Thread(() =>
            {
                for (int i = 0; i < 12; i++)
                {
                    new Trainer(new Model(ctx, "784-4000-4000-10", Device.Cpu));
                    peak = Math.Max(peak, RssBytes());
                }
            });
            maker.Start();
            maker.Join();
            Console.WriteLine($"  12 undisposed 784-4000-4000-10 models and trainers: RSS {before >> 20} MiB before, peak {peak >> 20} MiB, " +
                              $"{GC.CollectionCount(GC.MaxGeneration) - collections} full collections, {clock.Elapsed.TotalSeconds:F1} s");
            Check(peak - before < 600L << 20, $"RSS grew by {(peak - before) >> 20} MiB");
            GC.Collect();
            GC.WaitForPendingFinalizers();
        }
    }

    sealed class HeapNode { internal HeapNode Next; internal readonly long[] Padding = new long[2]; }

    /// About mib MiB of managed objects that point at each other, so that a full
    /// collection has real marking to do, as in a program with a working set.
    static HeapNode LiveManagedHeap(int mib)
    {
        HeapNode head = null;
        for (long i = 0; i < ((long)mib << 20) / 64; i++) head = new HeapNode { Next = head };
        return head;
    }

    /// Disposed tensors hold no native memory, so making and disposing them must
    /// cost no full collection, however many there are and however large the live
    /// heap (issue 25: 156 forced collections for 10,000 disposed 1 MiB tensors,
    /// and 2000 of them beside a 250 MB heap took 8.9-12.7 s).
    public static void DisposedTensorsCostNoCollections()
    {
        using (var ctx = new Context())
        {
            var heap = LiveManagedHeap(250);
            var live = Enumerable.Range(0, 64).Select(_ => Tensor.Zeros(ctx, DType.F32, Device.Cpu, 256 * 1024)).ToList();
            GC.Collect();
            GC.WaitForPendingFinalizers();
            int full = GC.MaxGeneration;
            Func<int, (int, TimeSpan)> disposeLoop = n =>
            {
                int before = GC.CollectionCount(full);
                var clock = System.Diagnostics.Stopwatch.StartNew();
                for (int i = 0; i < n; i++) Tensor.Empty(ctx, DType.F32, Device.Cpu, 256 * 1024).Dispose(); // 1 MiB
                return (GC.CollectionCount(full) - before, clock.Elapsed);
            };
            var beside = disposeLoop(2000);
            Console.WriteLine($"  2000 disposed 1 MiB tensors beside a 250 MiB heap and 64 MiB of live tensors: " +
                              $"{beside.Item1} full collections, {beside.Item2.TotalSeconds:F2} s");
            Check(beside.Item1 == 0, beside.Item1 + " full collections for disposed tensors");
            GC.KeepAlive(heap);
            heap = null;
            var many = disposeLoop(10000);
            Console.WriteLine($"  10,000 disposed 1 MiB tensors: {many.Item1} full collections, {many.Item2.TotalSeconds:F2} s");
            Check(many.Item1 == 0, many.Item1 + " full collections for disposed tensors");
            long held = NativeMemory.Live;
            foreach (var t in live) t.Dispose();
            Check(held - NativeMemory.Live == 64L << 20, "64 MiB held by the live tensors: " + held);
        }
    }

    public static void DisposeRacesFinalizers()
    {
        using (var ctx = new Context())
        {
            long live;
            // Dispose from many threads at once, while others read: one release,
            // the size reported once and removed once, reads either succeed or throw
            // ObjectDisposedException.
            // (Baselines are taken round by round: an earlier test's garbage may be
            // finalized by any collection.)
            for (int round = 0; round < 50; round++)
            {
                live = NativeMemory.Live;
                var t = Tensor.Ones(ctx, DType.F32, Device.Cpu, 1024);
                Check(NativeMemory.Live == live + 4096, "4 KiB reported");
                using (var go = new ManualResetEventSlim())
                {
                    var threads = Enumerable.Range(0, 8).Select(k => new Thread(() =>
                    {
                        go.Wait();
                        if (k % 2 == 0) t.Dispose();
                        else
                            try { Check(t.NumEl == 1024 && t.ToArray<float>().All(v => v == 1), "read"); }
                            catch (ObjectDisposedException) { }
                    })).ToArray();
                    foreach (var th in threads) th.Start();
                    go.Set();
                    foreach (var th in threads) th.Join();
                }
                Check(t.IsDisposed && NativeMemory.Live == live, "released once: " + (NativeMemory.Live - live));
            }
            // Dispose during a call: the marshaller's reference keeps the tensors
            // until kiln returns, and the result is right.
            var a = Tensor.Ones(ctx, DType.F32, Device.Cpu, 512, 512);
            var b = Tensor.Full(ctx, 2, DType.F32, Device.Cpu, 512, 512);
            var product = Task.Run(() => a.Matmul(b));
            a.Dispose();
            b.Dispose();
            try
            {
                using (var p = product.Result) Check(p.ToArray<float>().All(v => v == 1024), "product of disposed operands");
            }
            catch (AggregateException e) when (e.InnerException is ObjectDisposedException)
            {
                // Disposed before the call began: also correct.
            }
            // A disposed operand after a live one: refused before the call, so the
            // live one's reference is not leaked (Mono's marshaller would leak it).
            live = NativeMemory.Live;
            var operand = Tensor.Ones(ctx, DType.F32, Device.Cpu, 256);
            var gone = Tensor.Ones(ctx, DType.F32, Device.Cpu, 256);
            gone.Dispose();
            Throws<ObjectDisposedException>(() => operand.Matmul(gone));
            Throws<ObjectDisposedException>(() => Trainer.Loss(LossKind.Mse, operand, gone));
            operand.Dispose();
            Check(NativeMemory.Live == live, "the live operand was released: " + (NativeMemory.Live - live));
            // A borrowed string is copied under a reference too.
            for (int round = 0; round < 20; round++)
            {
                var model = new Model(ctx, "4-3-2", Device.Cpu);
                var readers = Enumerable.Range(0, 4).Select(_ => Task.Run(() =>
                {
                    for (int i = 0; i < 50; i++)
                        try { Check(model.Describe() == "4-3-2", "describe"); }
                        catch (ObjectDisposedException) { }
                })).ToArray();
                model.Dispose();
                Task.WaitAll(readers);
            }
            // Disposed, then finalized: nothing more happens. Never disposed: the
            // finalizer thread releases (trainers keep models, models contexts).
            GC.Collect();
            GC.WaitForPendingFinalizers();
            live = NativeMemory.Live;
            var maker = new Thread(() => LeaveHalfUndisposed(ctx));
            maker.Start();
            maker.Join();
            GC.Collect();
            GC.WaitForPendingFinalizers();
            Check(NativeMemory.Live <= live, "every tensor released: " + (NativeMemory.Live - live));
        }
        var other = new Context();
        var tensors = Enumerable.Range(0, 16).Select(_ => Tensor.Randn(other, DType.F32, Device.Cpu, 64, 64)).ToArray();
        var disposers = tensors.Select(t => new Thread(() => t.Dispose())).ToArray();
        foreach (var th in disposers) th.Start();
        foreach (var th in disposers) th.Join();
        var last = new Thread(() => other.Dispose());
        last.Start();
        last.Join();
    }

    // Run on a thread of its own, so that no stack slot still points at the
    // tensors when the test collects (Mono scans stacks conservatively).
    static void LeaveHalfUndisposed(Context ctx)
    {
        for (int i = 0; i < 100; i++)
        {
            var t = Tensor.Zeros(ctx, DType.F32, Device.Cpu, 128);
            if (i % 2 == 0) t.Dispose();
        }
        new Trainer(new Model(ctx, "8-4-2", Device.Cpu));
    }

    public static void DisposeScopes()
    {
        using (var ctx = new Context())
        {
            var a = Tensor.Full(ctx, 1, DType.F32, Device.Cpu, 4);
            var b = Tensor.Full(ctx, 2, DType.F32, Device.Cpu, 4);
            var c = Tensor.Full(ctx, 3, DType.F32, Device.Cpu, 4);
            Tensor kept, dropped, detached;
            Check(DisposeScope.Current == null, "no scope");
            using (var outer = new DisposeScope())
            {
                using (var inner = new DisposeScope())
                {
                    Check(DisposeScope.Current == inner, "inner is current");
                    dropped = b * c;
                    kept = (a + dropped).MoveToOuterDisposeScope();
                    detached = (a - b).DetachFromDisposeScope();
                    Check(inner.Count == 1 && outer.Count == 1, $"inner {inner.Count}, outer {outer.Count}");
                    Throws<InvalidOperationException>(() => outer.Dispose());
                }
                Check(dropped.IsDisposed && !kept.IsDisposed, "the intermediate is gone, the result is in the outer scope");
                Check(kept.ToArray<float>().All(v => v == 7), "a + b * c");
                Check(DisposeScope.Current == outer, "outer is current again");
            }
            Check(kept.IsDisposed && !detached.IsDisposed && !a.IsDisposed, "outer disposed its tensor only");
            Check(detached.ToArray<float>().All(v => v == -1), "detached survives");
            detached.Dispose();
            // Tensors made on another thread are not in this thread's scope.
            using (var scope = new DisposeScope())
            {
                var elsewhere = Task.Run(() => a * 2).Result;
                Check(scope.Count == 0, "other threads' tensors are theirs");
                elsewhere.Dispose();
            }
            a.Dispose(); b.Dispose(); c.Dispose();
        }
    }

    /// Whether libkiln_dist.so and Open MPI load here: a singleton MPI job.
    public static void Communicators()
    {
        using (var ctx = new Context(seed: 42))
        {
            Communicator comm;
            try
            {
                comm = Communicator.CreateMpi(ctx);
            }
            catch (KilnException e) when (e.Status == Status.DeviceUnavailable)
            {
                Console.WriteLine("  SKIP CreateMpi (no plugin or Open MPI here): " + e.Message);
                comm = null;
            }
            var cpu = Throws<ArgumentException>(() => Communicator.CreateLocal(ctx, Device.Cpu));
            Check(StatusOf(cpu) == Status.InvalidArgument, "a CPU device for NCCL: " + cpu.Message);
            Throws<ArgumentException>(() => Communicator.CreateLocal(ctx));
            if (ctx.DeviceCount(DeviceKind.Cuda) == 0)
            {
                var e = Throws<Exception>(() => Communicator.CreateLocal(ctx, Device.Cuda(0)));
                Check(StatusOf(e) == Status.DeviceUnavailable || StatusOf(e) == Status.NotSupported, "cuda:0 without GPU: " + e.Message);
            }
            if (comm == null) return;
            using (comm)
            {
                Check(comm.Rank == 0 && comm.Size == 1 && comm.LocalRank == 0, comm.ToString());
                Check(comm.ToString() == "Communicator(rank 0 of 1)", comm.ToString());
                comm.SetTimeout(TimeSpan.FromSeconds(30));
                Throws<ArgumentException>(() => comm.SetTimeout(TimeSpan.Zero));
                Throws<ArgumentException>(() => comm.SetTimeout(TimeSpan.FromSeconds(-1)));
                // One rank trains exactly as no communicator.
                Func<Communicator, double[]> Losses = c =>
                {
                    ctx.SetSeed(5);
                    using (var data = BlobData(ctx, 256))
                    using (var model = new Model(ctx, "16-8-4", Device.Cpu))
                    using (var trainer = new Trainer(model, new TrainerOptions { BatchSize = 32, ShuffleSeed = 1 }))
                    {
                        if (c != null) trainer.AttachCommunicator(c);
                        return trainer.Fit(data, null, 2).Select(s => s.TrainLoss).ToArray();
                    }
                };
                var alone = Losses(null);
                var attached = Losses(comm);
                Check(alone.SequenceEqual(attached), $"losses {string.Join(",", alone)} vs {string.Join(",", attached)}");
            }
            Throws<ObjectDisposedException>(() => Console.Write(comm.Rank));
        }
    }

    /// Functions of kiln.h the binding does not call, and why. Add one here only
    /// with a reason a C# user would accept.
    static readonly Dictionary<string, string> DeliberatelyUnbound = new Dictionary<string, string>
    {
        ["kiln_tensor_to_dlpack"] = "DLPack hands tensors to Python and C tools (PyTorch, CuPy, JAX); no .NET library " +
                                    "takes a DLManagedTensorVersioned, so C# has no one to hand it to",
        ["kiln_communicator_retain"] = "a C# object is shared by reference; a second native handle to the same object adds nothing",
        ["kiln_context_retain"] = "a C# object is shared by reference; a second native handle to the same object adds nothing",
        ["kiln_dataset_retain"] = "a C# object is shared by reference; a second native handle to the same object adds nothing",
        ["kiln_history_retain"] = "a C# object is shared by reference; a second native handle to the same object adds nothing",
        ["kiln_model_retain"] = "a C# object is shared by reference; a second native handle to the same object adds nothing",
        ["kiln_tensor_retain"] = "a C# object is shared by reference; a second native handle to the same object adds nothing",
        ["kiln_trainer_retain"] = "a C# object is shared by reference; a second native handle to the same object adds nothing",
        ["kiln_tensor_from_dlpack"] = "the same: no .NET library produces DLPack tensors (FromArray copies managed memory)",
    };

    /// Every KILN_API function of the public headers (kiln.h, dlpack.h) has a
    /// DllImport (generated) and is called by the hand-written layer, or is
    /// listed above with its reason.
    public static void CoverageOfTheCApi()
    {
        string root = Environment.GetEnvironmentVariable("KILN_SOURCE_DIR");
        Check(root != null, "KILN_SOURCE_DIR names the repository root");
        string header = string.Join("\n", Directory.GetFiles(Path.Combine(root, "include/kiln"), "*.h").Select(File.ReadAllText));
        var functions = Regex.Matches(header, @"KILN_API[^;(]*?\b(kiln_\w+)\s*\(").Cast<Match>().Select(m => m.Groups[1].Value).ToList();
        Check(functions.Count > 100, functions.Count + " functions in kiln.h");
        var imported = new HashSet<string>(typeof(Tensor).Assembly.GetType("Kiln.NativeMethods")
            .GetMethods(System.Reflection.BindingFlags.NonPublic | System.Reflection.BindingFlags.Static).Select(m => m.Name));
        string src = Path.Combine(root, "bindings/csharp/src");
        string handWritten = string.Join("\n", Directory.GetFiles(src, "*.cs").Where(f => !f.EndsWith(".g.cs")).Select(File.ReadAllText));
        string generated = File.ReadAllText(Path.Combine(src, "Native.g.cs"));
        var missing = new List<string>();
        foreach (var f in functions)
        {
            if (!imported.Contains(f) && !DeliberatelyUnbound.ContainsKey(f)) missing.Add(f + " (no DllImport: run bindings/generate.sh)");
            var use = new Regex(@"NativeMethods\." + f + @"\b");
            bool called = use.IsMatch(handWritten) || (f.EndsWith("_release") && use.IsMatch(generated));
            if (!called && !DeliberatelyUnbound.ContainsKey(f)) missing.Add(f);
            if (called && DeliberatelyUnbound.ContainsKey(f)) missing.Add(f + " (bound, yet listed as unbound)");
        }
        Check(DeliberatelyUnbound.Keys.All(functions.Contains), "an unbound entry for a function kiln no longer has");
        Console.WriteLine($"  {functions.Count} C functions: {functions.Count - DeliberatelyUnbound.Count} bound, {DeliberatelyUnbound.Count} deliberately not");
        Check(missing.Count == 0, "not bound: " + string.Join(", ", missing));
        string readme = Regex.Replace(File.ReadAllText(Path.Combine(root, "bindings/csharp/README.md")), @"\s+", " ");
        Check(readme.Contains($"but {DeliberatelyUnbound.Count} functions deliberately unbound"),
              $"README.md should say \"but {DeliberatelyUnbound.Count} functions deliberately unbound\"");
    }
}
