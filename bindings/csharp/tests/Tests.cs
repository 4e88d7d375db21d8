// A dependency-free console test runner: every public static void method of
// Tests is a test; the exit code is the number of failures.
using System;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Threading;
using System.Threading.Tasks;
using Kiln;

static class Tests
{
    static int Main()
    {
        int failed = 0, passed = 0;
        foreach (var m in typeof(Tests).GetMethods(BindingFlags.Public | BindingFlags.Static))
        {
            try { m.Invoke(null, null); passed++; Console.WriteLine("PASS " + m.Name); }
            catch (TargetInvocationException e) { failed++; Console.WriteLine("FAIL " + m.Name + ": " + e.InnerException); }
        }
        Console.WriteLine($"csharp: {passed} passed, {failed} failed");
        return failed;
    }

    static void Check(bool condition, string what)
    {
        if (!condition) throw new Exception("check failed: " + what);
    }

    static KilnException Throws(Action action)
    {
        try { action(); }
        catch (KilnException e) { return e; }
        throw new Exception("no KilnException");
    }

    public static void Version()
    {
        Check(Context.AbiVersion == 1, "ABI version 1");
        Check(Context.Version.Length > 0, "version string");
    }

    public static void Devices()
    {
        using (var ctx = new Context(seed: 42))
        {
            var devices = ctx.Devices();
            Check(devices[0].Device == Device.Cpu, "CPU first");
            Check(devices[0].Name.Length > 0 && devices[0].MultiprocessorCount >= 1, "CPU info " + devices[0].Name);
            long gpus = ctx.DeviceCount(DeviceKind.Cuda);
            Check(devices.Length == gpus + 1, "one entry per device");
            Check(ctx.CudaAvailable == (gpus > 0), "CudaAvailable");
            Check(ctx.CudaAvailable || ctx.CudaUnavailableReason.Length > 0, "a reason without CUDA");
            Check(ctx.DefaultDevice == (gpus > 0 ? Device.Cuda(0) : Device.Cpu), "default device");
            Check(ctx.ParseDevice("cpu").ToString() == "cpu", "parse cpu");
        }
    }

    public static void TensorRoundTrip()
    {
        using (var ctx = new Context(seed: 42))
        {
            var dev = ctx.DefaultDevice;
            var data = new float[] { 1, 2, 3, 4, 5, 6 };
            using (var host = new Tensor(ctx, data, 2, 3))
            using (var moved = host.To(dev))
            using (var sum = moved + moved)
            using (var back = sum.To(Device.Cpu))
            using (var ones = Tensor.Ones(ctx, DType.F32, dev, 3, 1))
            using (var prod = moved.Matmul(ones))
            using (var row = host.Rows(1, 2))
            {
                Check(moved.Device == dev, "moved");
                Check(moved.Shape.SequenceEqual(new long[] { 2, 3 }) && moved.DType == DType.F32, "shape and dtype");
                Check(back.ToArray<float>().SequenceEqual(data.Select(v => 2 * v)), "doubled values");
                using (var p = prod.To(Device.Cpu)) Check(p.ToArray<float>().SequenceEqual(new float[] { 6, 15 }), "matmul");
                Check(row.ToArray<float>().SequenceEqual(new float[] { 4, 5, 6 }), "row view");
                Check(Throws(() => host.ToArray<long>()).Status == Status.DTypeMismatch, "ToArray<long> of f32");
            }
        }
    }

    public static void Errors()
    {
        using (var ctx = new Context())
        {
            var e = Throws(() => new Tensor(ctx, new float[5], 2, 3));
            Check(e.Status == Status.InvalidArgument && e.Message.Length > 20, "5 floats as [2,3]: " + e.Message);
            using (var a = Tensor.Zeros(ctx, DType.F32, Device.Cpu, 2, 3))
            {
                e = Throws(() => a.Matmul(a));
                Check(e.Status == Status.ShapeMismatch, "[2,3]x[2,3]: " + e.Message);
            }
            e = Throws(() => ctx.ParseDevice("gpu:0"));
            Check(e.Status == Status.InvalidArgument && e.Message.Length > 20, "gpu:0: " + e.Message);
            if (ctx.DeviceCount(DeviceKind.Cuda) == 0)
                Check(Throws(() => ctx.ParseDevice("cuda:0")).Status == Status.DeviceUnavailable, "cuda:0 without GPU");
            Check(Throws(() => Model.Load(ctx, "/nonexistent/m.safetensors", Device.Cpu)).Status == Status.IO, "missing file");
            var t = Tensor.Ones(ctx, DType.F32, Device.Cpu, 4);
            t.Dispose();
            // Use after Dispose is .NET's ObjectDisposedException, raised by the
            // SafeHandle before kiln is called.
            try { Console.Write(t.NumEl); throw new Exception("disposed tensor accepted"); }
            catch (ObjectDisposedException) { }
        }
    }

    static (float[] X, long[] Y) Blobs(int n, int features, int classes, int seed)
    {
        var r = new Random(seed);
        Func<double> normal = () => Math.Sqrt(-2 * Math.Log(1 - r.NextDouble())) * Math.Cos(2 * Math.PI * r.NextDouble());
        var centers = Enumerable.Range(0, classes * features).Select(_ => normal() * 3).ToArray();
        var x = new float[n * features];
        var y = new long[n];
        for (int i = 0; i < n; i++)
        {
            int c = i % classes;
            y[i] = c;
            for (int j = 0; j < features; j++) x[i * features + j] = (float)(centers[c * features + j] + normal());
        }
        return (x, y);
    }

    static (Model, Tensor) Trained(Context ctx)
    {
        var (xs, ys) = Blobs(1024, 16, 4, 7);
        var x = new Tensor(ctx, xs, 1024, 16);
        var model = new Model(ctx, "16-32-4", ctx.DefaultDevice);
        using (var y = new Tensor(ctx, ys, 1024))
        using (var data = new Dataset(ctx, x, y))
        {
            var (train, test) = data.Split(0.25, 1);
            using (train)
            using (test)
            using (var trainer = new Trainer(model, new TrainerOptions { Optimizer = OptimizerKind.Adam, Lr = 0.01, BatchSize = 32 }))
            {
                var history = trainer.Fit(train, test, 4);
                var last = trainer.Epoch(train);
                Check(history.Length == 4 && history[3].HasValidation && history[3].ValAccuracy > 0.9, "fit history");
                Check(last.Epoch == 5 && last.TrainAccuracy > 0.9, "5th epoch: " + last.TrainAccuracy);
                double acc = trainer.Evaluate(test).Accuracy;
                Check(acc > 0.9, "accuracy " + acc + " (chance 0.25)");
            }
        }
        return (model, x);
    }

    static float[] Logits(Model model, Tensor x)
    {
        using (var out_ = model.Predict(x))
        using (var host = out_.To(Device.Cpu))
            return host.ToArray<float>();
    }

    public static void TrainSaveLoad()
    {
        using (var ctx = new Context(seed: 42))
        {
            var (model, x) = Trained(ctx);
            using (model)
            using (x)
            {
                Check(model.NumParameters == 16 * 32 + 32 + 32 * 4 + 4, "parameter count");
                Check(model.ParameterName(0) == "0.weight", "parameter name");
                string path = Path.Combine(Path.GetTempPath(), $"kiln-cs-{System.Diagnostics.Process.GetCurrentProcess().Id}.safetensors");
                model.Save(path);
                using (var loaded = Model.Load(ctx, path, ctx.DefaultDevice))
                {
                    File.Delete(path);
                    Check(loaded.Describe() == model.Describe(), "describe");
                    Check(Logits(loaded, x).SequenceEqual(Logits(model, x)), "same logits after load");
                }
            }
        }
    }

    public static void ConcurrentInference()
    {
        using (var ctx = new Context(seed: 42))
        {
            var (model, x) = Trained(ctx);
            using (model)
            using (x)
            {
                var want = Logits(model, x);
                var tasks = Enumerable.Range(0, 8).Select(_ => Task.Run(() =>
                    Enumerable.Range(0, 10).All(i => Logits(model, x).SequenceEqual(want)))).ToArray();
                Task.WaitAll(tasks);
                Check(tasks.All(t => t.Result), "concurrent logits equal single-threaded ones");
            }
        }
    }

    public static void ReleaseOnOtherThreads()
    {
        var ctx = new Context();
        var tensors = Enumerable.Range(0, 16).Select(_ => Tensor.Randn(ctx, DType.F32, Device.Cpu, 64, 64)).ToArray();
        var threads = tensors.Select(t => new Thread(() => t.Dispose())).ToArray();
        foreach (var th in threads) th.Start();
        foreach (var th in threads) th.Join();
        // Never disposed: the finalizer thread releases them.
        for (int i = 0; i < 100; i++) Tensor.Zeros(ctx, DType.F32, Device.Cpu, 128);
        new Trainer(new Model(ctx, "8-4-2", Device.Cpu));
        GC.Collect();
        GC.WaitForPendingFinalizers();
        using (var t = Tensor.Ones(ctx, DType.F32, Device.Cpu, 3)) Check(t.NumEl == 3, "still works");
        var other = new Thread(() => ctx.Dispose());
        other.Start();
        other.Join();
    }

    /// Trains a fresh 16-32-4 model for 5 epochs (SGD, lr 0.003, batch 32, a fixed
    /// shuffle seed) at precision, from the same seed each time; the last epoch's
    /// training loss and validation accuracy. The slow lr leaves the loss well
    /// above zero, so losses of two precisions compare meaningfully.
    static (double Loss, double Accuracy) FitBlobs(Precision precision)
    {
        var (xs, ys) = Blobs(1024, 16, 4, 7);
        using (var ctx = new Context(seed: 42))
        using (var x = new Tensor(ctx, xs, 1024, 16))
        using (var y = new Tensor(ctx, ys, 1024))
        using (var data = new Dataset(ctx, x, y))
        using (var model = new Model(ctx, "16-32-4", ctx.DefaultDevice))
        {
            var (train, val) = data.Split(0.25, 1);
            var options = new TrainerOptions
            {
                Lr = 0.003, BatchSize = 32, ShuffleSeed = 3, Precision = precision,
            };
            using (train)
            using (val)
            using (var trainer = new Trainer(model, options))
            {
                var last = trainer.Fit(train, val, 5).Last();
                return (last.TrainLoss, last.ValAccuracy);
            }
        }
    }

    public static void Bf16LearnsLikeFp32()
    {
        var fp32 = FitBlobs(Precision.FP32);
        var bf16 = FitBlobs(Precision.BF16);
        Console.WriteLine($"  fp32: loss {fp32.Loss:F6} accuracy {fp32.Accuracy:F3}; bf16: loss {bf16.Loss:F6} accuracy {bf16.Accuracy:F3}");
        Check(bf16.Accuracy > 0.9, "bf16 accuracy " + bf16.Accuracy + " (chance 0.25)");
        Check(fp32.Loss > 0.05 && Math.Abs(bf16.Loss - fp32.Loss) <= 0.05 * fp32.Loss,
              $"final loss bf16 {bf16.Loss}, fp32 {fp32.Loss}: want fp32 above 0.05 and bf16 within 5% of it");
    }

    public static void Tf32NotSupportedOnCpu()
    {
        using (var ctx = new Context(seed: 42))
        using (var model = new Model(ctx, "8-4-2", Device.Cpu))
        {
            var e = Throws(() => new Trainer(model, new TrainerOptions { Precision = Precision.TF32 }));
            Check(e.Status == Status.NotSupported && e.Message.Contains("tf32"), "tf32 on the CPU: " + e.Message);
        }
    }

    public static void FastPathBitsOutsideAllAreRefused()
    {
        using (var ctx = new Context(seed: 42))
        using (var model = new Model(ctx, "8-4-2", Device.Cpu))
        {
            // Any subset is accepted (the CPU has no fast path to switch off).
            foreach (var fp in new[] { FastPath.None, FastPath.All, FastPath.All & ~FastPath.Graphs })
                new Trainer(model, new TrainerOptions { FastPath = fp }).Dispose();
            foreach (var fp in new[] { FastPath.All + 1, (FastPath)(1u << 31) })
            {
                var e = Throws(() => new Trainer(model, new TrainerOptions { FastPath = fp }));
                Check(e.Status == Status.InvalidArgument, $"fast path {fp}: {e.Message}");
            }
        }
    }

    public static void UnknownStatusIsStillAnException()
    {
        // What the native layer raises for any failed call: a status newer than
        // these bindings keeps its number.
        var e = new KilnException((Status)99, "from the future");
        Check(e.Status == (Status)99 && e.Message == "99: from the future", "status 99: " + e.Message);
        Check(new KilnException((Status)13, "m").Status == Status.Busy, "13 is Busy");
        Check(new KilnException((Status)14, "m").Message == "Numeric: m", "14 is Numeric");
    }

    public static void DivergenceIsNumeric()
    {
        var (xs, ys) = Blobs(256, 16, 4, 7);
        using (var ctx = new Context(seed: 42))
        using (var x = new Tensor(ctx, xs, 256, 16))
        using (var y = new Tensor(ctx, ys, 256))
        using (var data = new Dataset(ctx, x, y))
        using (var model = new Model(ctx, "16-32-4", Device.Cpu))
        using (var trainer = new Trainer(model, new TrainerOptions { Lr = 1e30 }))
        {
            var e = Throws(() => { for (int i = 0; i < 5; i++) trainer.Epoch(data); });
            Check(e.Status == Status.Numeric, "lr 1e30: " + e.Message);
        }
    }
}
