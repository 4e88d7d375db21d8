// A dependency-free console test runner: every public static void method of
// Tests is a test; the exit code is the number of failures. Run with the
// repository root in KILN_SOURCE_DIR (the coverage test reads kiln.h and the
// binding's sources there).
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Text.RegularExpressions;
using System.Threading;
using System.Threading.Tasks;
using Kiln;

static partial class Tests
{
    static int Main(string[] args)
    {
        int failed = 0, passed = 0;
        foreach (var m in typeof(Tests).GetMethods(BindingFlags.Public | BindingFlags.Static))
        {
            if (args.Length > 0 && !args.Contains(m.Name)) continue;
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

    /// The exception action throws, which must be (or derive from) TE.
    static TE Throws<TE>(Action action) where TE : Exception
    {
        try { action(); }
        catch (TE e) { return e; }
        catch (Exception e) { throw new Exception("wanted " + typeof(TE).Name + ", got " + e.GetType().Name + ": " + e.Message, e); }
        throw new Exception("no " + typeof(TE).Name);
    }

    static Status StatusOf(Exception e) => ((IKilnException)e).Status;

    static string Temp(string name) =>
        Path.Combine(Path.GetTempPath(), $"kiln-cs-{System.Diagnostics.Process.GetCurrentProcess().Id}-{name}");

    public static void Version()
    {
        Check(Library.AbiVersion == HeaderConstants.AbiVersion, "ABI version " + Library.AbiVersion);
        var want = new Version(HeaderConstants.VersionMajor, HeaderConstants.VersionMinor, HeaderConstants.VersionPatch);
        Check(Library.Version == want, "version " + Library.Version);
        Check(Library.VersionString == want.ToString(), "version string " + Library.VersionString);
        // Kiln.dll is versioned as kiln, with its XML docs beside it (build.py, from Kiln.csproj).
        var assembly = typeof(Tensor).Assembly;
        Check(assembly.GetName().Version == new Version(want.Major, want.Minor, want.Build, 0), "assembly version " + assembly.GetName().Version);
        string docs = Path.ChangeExtension(assembly.Location, ".xml");
        Check(File.Exists(docs) && File.ReadAllText(docs).Contains("<member name=\"M:Kiln.Tensor.Matmul(Kiln.Tensor)\">"), "XML docs in " + docs);
        // A .NET Standard 2.1 assembly, as its package folder says: netstandard is all it references.
        var refs = assembly.GetReferencedAssemblies().Select(r => r.Name + " " + r.Version).ToList();
        Check(refs.SequenceEqual(new[] { "netstandard 2.1.0.0" }), "Kiln.dll references " + string.Join(", ", refs));
        Check(Library.StatusName(Status.ShapeMismatch) == "KILN_ERROR_SHAPE_MISMATCH", "status name");
        Check(Library.StatusName((Status)99) == "KILN_ERROR_UNKNOWN", "unknown status name");
        Check(Library.DTypeName(DType.BF16) == "bf16" && Library.DTypeSize(DType.F64) == 8, "dtype name and size");
        Check(Library.DTypeName((DType)99) == null && Library.DTypeSize((DType)99) == 0, "unknown dtype");
    }

    /// The versioned soname is what is loaded (beside Kiln.dll, where the runner
    /// runs from, as a Mono program does: no LD_LIBRARY_PATH), never the
    /// unversioned libkiln.so, and a library of another ABI is refused, naming both.
    public static void LoadsTheVersionedLibraryAndChecksItsAbi()
    {
        Check(Library.AbiVersion == HeaderConstants.AbiVersion, "ABI " + Library.AbiVersion);
        var mapped = File.ReadAllLines("/proc/self/maps").Where(l => l.Contains("/libkiln")).Select(l => l.Split(' ').Last())
                         .Distinct().ToList();
        string beside = Path.Combine(Path.GetDirectoryName(typeof(Tensor).Assembly.Location), "libkiln.so." + HeaderConstants.AbiVersion);
        Check(mapped.Contains(beside) && !mapped.Any(p => p.EndsWith("/libkiln.so")), "mapped: " + string.Join(", ", mapped));
        AbiCheck.Check(HeaderConstants.AbiVersion);
        var e = Throws<BadImageFormatException>(() => AbiCheck.Check(HeaderConstants.AbiVersion + 1));
        Check(e.Message.Contains("generated for kiln ABI " + HeaderConstants.AbiVersion) &&
              e.Message.Contains("libkiln.so." + HeaderConstants.AbiVersion + " loaded has ABI " + (HeaderConstants.AbiVersion + 1)), e.Message);
    }

    public static void Devices()
    {
        using (var ctx = new Context(seed: 42))
        {
            var devices = ctx.Devices();
            Check(devices[0].Device == Device.Cpu, "CPU first");
            Check(devices[0].Name.Length > 0 && devices[0].MultiprocessorCount >= 1 && devices[0].Threads >= 1,
                  "CPU info " + devices[0]);
            long gpus = ctx.DeviceCount(DeviceKind.Cuda);
            Check(devices.Count == gpus + 1, "one entry per device");
            Check(ctx.DeviceCount(DeviceKind.Cpu) == 1, "one CPU");
            Check(ctx.CudaAvailable == (gpus > 0), "CudaAvailable");
            Check(ctx.CudaAvailable || ctx.CudaUnavailableReason.Length > 0, "a reason without CUDA");
            Check(ctx.DefaultDevice == (gpus > 0 ? Device.Cuda(0) : Device.Cpu), "default device");
            Check(ctx.ParseDevice("cpu") == Device.Cpu && Device.Parse("cuda:3") == Device.Cuda(3), "parse");
            Check(Device.Cpu.ToString() == "cpu" && Device.Cuda(2).ToString() == "cuda:2", "format");
            Check(Device.Cuda(1).Kind == DeviceKind.Cuda && Device.Cuda(1).Index == 1 && Device.Cpu.Index == -1, "properties");
            Check(new Device((DeviceKind)7, 0).ToString().StartsWith("invalid device"), "a malformed device prints as such");
            var e = Throws<ArgumentException>(() => ctx.ParseDevice("gpu:0"));
            Check(StatusOf(e) == Status.InvalidArgument && e.Message.Contains("gpu:0"), "gpu:0: " + e.Message);
            Throws<ArgumentException>(() => Device.Parse("cuda:x"));
            if (gpus == 0)
            {
                var u = Throws<KilnException>(() => ctx.ParseDevice("cuda:0"));
                Check(u.Status == Status.DeviceUnavailable && u.Message.Length > 30, "cuda:0 without GPU: " + u.Message);
            }
            ctx.Synchronize(Device.Cpu);
            ctx.SetSeed(7);
            Check(ctx.ToString() == "Context(" + ctx.DefaultDevice + ")", "context ToString");
        }
    }

    public static void TensorsFromSpansAndArrays()
    {
        using (var ctx = new Context(seed: 42))
        {
            var data = new float[] { 0, 1, 2, 3, 4, 5, 6, 7 };
            using (var t = Tensor.FromArray(ctx, new ReadOnlySpan<float>(data, 2, 6), new long[] { 2, 3 }))
            using (var d = Tensor.FromArray(ctx, new double[] { 1.5, -2.5 }, 2))
            using (var l = Tensor.FromArray(ctx, new long[] { 1L << 40, -3 }, 2, 1))
            using (var b = Tensor.FromArray(ctx, new byte[] { 255, 0, 7 }, 3))
            using (var i = Tensor.FromArray(ctx, new ReadOnlySpan<int>(new int[] { -1 }), new long[0]))
            using (var vec = Tensor.FromArray(ctx, new int[] { 4, 5, 6 }))
            {
                Check(t.Shape.SequenceEqual(new long[] { 2, 3 }) && t.NDim == 2 && t.Dim(-1) == 3 && t.NumEl == 6, "shape");
                Check(t.ToArray<float>().SequenceEqual(new float[] { 2, 3, 4, 5, 6, 7 }), "span slice copied");
                Check(d.DType == DType.F64 && d.ToArray<double>().SequenceEqual(new[] { 1.5, -2.5 }), "f64");
                Check(l.DType == DType.I64 && l.ToArray<long>()[0] == 1L << 40, "i64");
                Check(b.DType == DType.U8 && b.ToArray<byte>()[0] == 255, "u8");
                Check(i.DType == DType.I32 && i.NDim == 0 && i.Item() == -1, "0-d i32 from a span with an empty shape");
                Check(vec.Shape.SequenceEqual(new long[] { 3 }) && vec.ToArray<int>()[2] == 6, "1-d from an array without a shape");
                Check(t.ToString() == "Tensor(shape=[2, 3], dtype=f32, device=cpu)", t.ToString());
                Check(t.Device == Device.Cpu && t.GetDevice() == -1 && !t.IsPinned, "device");
                var span = new float[6];
                t.CopyTo(new Span<float>(span));
                Check(span.SequenceEqual(t.ToArray<float>()), "CopyTo");
                t.CopyFrom(new ReadOnlySpan<float>(new float[] { 9, 9, 9, 9, 9, 9 }));
                Check(t.ToArray<float>().All(v => v == 9), "CopyFrom");
                var e = Throws<ArgumentException>(() => t.ToArray<long>());
                Check(StatusOf(e) == Status.DTypeMismatch && e.Message.Contains("f32"), "ToArray<long> of f32: " + e.Message);
                Throws<ArgumentException>(() => t.CopyFrom(new ReadOnlySpan<float>(new float[5])));
                Throws<ArgumentException>(() => t.CopyTo(new Span<float>(new float[7])));
                Throws<ArgumentException>(() => Tensor.FromArray(ctx, new short[] { 1 }, 1));
                Throws<ArgumentException>(() => Tensor.FromArray(ctx, new DateTime[1], 1));
                e = Throws<ArgumentException>(() => Tensor.FromArray(ctx, new float[5], 2, 3));
                Check(StatusOf(e) == Status.InvalidArgument && e.Message.Length > 20, "5 floats as [2,3]: " + e.Message);
                Throws<ArgumentException>(() => Tensor.FromArray(ctx, new float[1], new long[HeaderConstants.MaxDims + 1]));
            }
        }
    }

    public static void TensorCreationAndMath()
    {
        using (var ctx = new Context(seed: 42))
        using (var scope = new DisposeScope())
        {
            var dev = ctx.DefaultDevice;
            Check(Tensor.Full(ctx, 2.5, DType.F32, dev, 2, 2).To(Device.Cpu).ToArray<float>().All(v => v == 2.5f), "full");
            Check(Tensor.Ones(ctx, DType.I64, dev, 3).To(Device.Cpu).ToArray<long>().SequenceEqual(new long[] { 1, 1, 1 }), "ones");
            Check(Tensor.Zeros(ctx, DType.F64, dev, 2).To(Device.Cpu).ToArray<double>().All(v => v == 0), "zeros");
            Check(Tensor.Empty(ctx, DType.U8, dev, 4, 5).NumEl == 20, "empty");
            var pinned = Tensor.EmptyPinned(ctx, DType.F32, 8);
            Check(pinned.IsPinned && pinned.Rows(0, 4).IsPinned, "pinned, and its view");
            Check(Tensor.Arange(ctx, 0, 1, 0.25, DType.F64, Device.Cpu).ToArray<double>().SequenceEqual(new[] { 0, 0.25, 0.5, 0.75 }), "arange");
            Throws<ArgumentException>(() => Tensor.Full(ctx, 300, DType.U8, Device.Cpu, 1));
            Throws<ArgumentException>(() => Tensor.Rand(ctx, DType.I32, Device.Cpu, 2));
            ctx.SetSeed(3);
            var r1 = Tensor.Randn(ctx, DType.F32, Device.Cpu, 64).ToArray<float>();
            ctx.SetSeed(3);
            var r2 = Tensor.Randn(ctx, DType.F32, Device.Cpu, 64).ToArray<float>();
            Check(r1.SequenceEqual(r2) && r1.Distinct().Count() > 60, "seeded randn repeats");
            var u = Tensor.Rand(ctx, DType.F32, Device.Cpu, 1000).ToArray<float>();
            Check(u.All(v => v >= 0 && v < 1) && Math.Abs(u.Average() - 0.5) < 0.05, "rand in [0, 1)");

            var a = Tensor.FromArray(ctx, new float[] { 1, -2, 3, -4, 5, -6 }, 2, 3).To(dev);
            var b = Tensor.FromArray(ctx, new float[] { 10, 20, 30 }, 3).To(dev);
            float[] A = { 1, -2, 3, -4, 5, -6 }, B = { 10, 20, 30 };
            Func<Tensor, float[]> Host = t => t.To(Device.Cpu).ToArray<float>();
            Check(Host(a + b).SequenceEqual(A.Select((v, k) => v + B[k % 3])), "broadcast add");
            Check(Host(a - b).SequenceEqual(A.Select((v, k) => v - B[k % 3])), "sub");
            Check(Host(a * b).SequenceEqual(A.Select((v, k) => v * B[k % 3])), "mul");
            Check(Host(a / b).SequenceEqual(A.Select((v, k) => v / B[k % 3])), "div");
            Check(Host(a * 2 + 1).SequenceEqual(A.Select(v => v * 2 + 1)), "scalar ops");
            Check(Host((a - 1) / 2).SequenceEqual(A.Select(v => (v - 1) / 2)), "scalar sub, div");
            Check(Host(-a).SequenceEqual(A.Select(v => -v)), "negation");
            Check(Host(a.Binary(BinaryOp.Maximum, b)).SequenceEqual(A.Select((v, k) => Math.Max(v, B[k % 3]))), "maximum");
            Check(Host(a.Unary(UnaryOp.Relu)).SequenceEqual(A.Select(v => Math.Max(v, 0))), "relu");
            Check(Host(a.Unary(UnaryOp.LeakyRelu, 0.5)).SequenceEqual(A.Select(v => v > 0 ? v : 0.5f * v)), "leaky relu");
            Check(a.Compare(CompareOp.Gt, Tensor.Zeros(ctx, DType.F32, dev, 1)).To(Device.Cpu).ToArray<byte>()
                   .SequenceEqual(A.Select(v => (byte)(v > 0 ? 1 : 0))), "compare");
            Check(Host(a.Reduce(ReduceOp.Sum, 1)).SequenceEqual(new float[] { 2, -5 }), "sum");
            Check(a.Reduce(ReduceOp.Argmax, 1, keepDim: true).To(Device.Cpu).ToArray<long>().SequenceEqual(new long[] { 2, 1 }), "argmax");
            var sm = Host(a.Softmax());
            var want = new List<double>();
            for (int row = 0; row < 2; row++)
            {
                var x = A.Skip(row * 3).Take(3).Select(v => (double)v).ToArray();
                double max = x.Max(), sum = x.Sum(v => Math.Exp(v - max));
                want.AddRange(x.Select(v => Math.Exp(v - max) / sum));
            }
            Check(sm.Zip(want, (g, w) => Math.Abs(g - w)).Max() < 1e-6, "softmax against a reference");
            Check(Host(a.LogSoftmax()).Zip(want, (g, w) => Math.Abs(g - Math.Log(w))).Max() < 1e-5, "log-softmax");
            var m = a.Matmul(Tensor.Ones(ctx, DType.F32, dev, 3, 1));
            Check(Host(m).SequenceEqual(new float[] { 2, -5 }), "matmul");
            Check(a.Cast(DType.I32).To(Device.Cpu).ToArray<int>().SequenceEqual(A.Select(v => (int)v)), "cast");
            var c = a.Clone();
            var view = a.Reshape(3, -1);
            Check(view.Shape.SequenceEqual(new long[] { 3, 2 }), "reshape -1");
            var e = Throws<ArgumentException>(() => a.Matmul(a));
            Check(StatusOf(e) == Status.ShapeMismatch, "[2,3]x[2,3]: " + e.Message);
            Throws<ArgumentException>(() => a.Reshape(4, 2));
            Throws<ArgumentException>(() => a.Rows(1, 5));
            Check(StatusOf(Throws<ArgumentException>(() => a.Binary(BinaryOp.Add, a.Cast(DType.F64)))) == Status.DTypeMismatch, "no promotion");
            Check(StatusOf(Throws<ArgumentException>(() => a.Binary(BinaryOp.Add, Tensor.Ones(ctx, DType.F32, dev, 4)))) == Status.ShapeMismatch, "no broadcast");
            Check(Tensor.Zeros(ctx, DType.F32, Device.Cpu, 1).Item() == 0, "item");
            Throws<ArgumentException>(() => a.Item());
            Check(Host(c).SequenceEqual(A), "clone unchanged");
        }
    }

    public static void Errors()
    {
        using (var ctx = new Context())
        {
            string missing = "/nonexistent/m.safetensors";
            var nf = Throws<FileNotFoundException>(() => Model.Load(ctx, missing, Device.Cpu));
            Check(nf.FileName == missing && StatusOf(nf) == Status.IO && nf.Message.Contains("KILN_ERROR_IO"), nf.Message);
            Throws<FileNotFoundException>(() => Dataset.LoadMnist(ctx, "/nonexistent", "train"));
            Throws<FileNotFoundException>(() => Dataset.LoadIdx(ctx, "/nonexistent/images", "/nonexistent/labels"));
            string dir = Temp("dir");
            Directory.CreateDirectory(dir);
            try
            {
                // There, but not a file: an IOException that is not FileNotFound.
                var io = Throws<IOException>(() => Model.Load(ctx, dir, Device.Cpu));
                Check(!(io is FileNotFoundException) && StatusOf(io) == Status.IO, io.GetType().Name + ": " + io.Message);
                string hostile = Path.Combine(dir, "hostile.safetensors");
                File.WriteAllBytes(hostile, new byte[] { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, (byte)'{' });
                var f = Throws<FormatException>(() => Model.Load(ctx, hostile, Device.Cpu));
                Check(StatusOf(f) == Status.Format, "hostile file: " + f.Message);
                using (var m = new Model(ctx, "4-2", Device.Cpu))
                using (var spec = new ModelSpec("4-2"))
                using (var trainer = new Trainer(m))
                {
                    Throws<FormatException>(() => m.LoadWeights(hostile));
                    Throws<FormatException>(() => Model.LoadWithSpec(ctx, hostile, spec, Device.Cpu));
                    Throws<FormatException>(() => trainer.LoadCheckpoint(hostile));
                    Throws<FileNotFoundException>(() => trainer.LoadCheckpoint(hostile + ".missing"));
                }
                // An IDX image file that claims 2^31 images of 2^16 x 2^16 pixels and holds none.
                string images = Path.Combine(dir, "images"), labels = Path.Combine(dir, "labels");
                File.WriteAllBytes(images, new byte[] { 0, 0, 8, 3, 0x7f, 0xff, 0xff, 0xff, 0, 1, 0, 0, 0, 1, 0, 0 });
                File.WriteAllBytes(labels, new byte[] { 0, 0, 8, 1, 0, 0, 0, 1, 3 });
                Check(StatusOf(Throws<FormatException>(() => Dataset.LoadIdx(ctx, images, labels))) == Status.Format, "hostile IDX");
                File.WriteAllBytes(images, new byte[] { 0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 200 });
                using (var one = Dataset.LoadIdx(ctx, images, labels))
                    Check(one.Count == 1 && one.NumFeatures == 1 && one.NumClasses == 4, "a 1-image IDX pair");
                var nf2 = Throws<FileNotFoundException>(() => Dataset.LoadIdx(ctx, images, labels + ".missing"));
                Check(nf2.FileName == labels + ".missing", "the missing one of two paths: " + nf2.FileName);
                // Writing: DirectoryNotFoundException when the directory is missing,
                // another IOException when the path cannot be written for another reason.
                using (var m = new Model(ctx, "4-2", Device.Cpu))
                using (var trainer = new Trainer(m))
                    foreach (var write in new Action<string>[] { m.Save, trainer.SaveCheckpoint })
                    {
                        var s = Throws<DirectoryNotFoundException>(() => write("/nonexistent/dir/m.safetensors"));
                        Check(StatusOf(s) == Status.IO && s.Message.Contains("KILN_ERROR_IO"), "save into a missing directory: " + s.Message);
                        var busy = Throws<IOException>(() => write(dir));
                        Check(!(busy is DirectoryNotFoundException) && !(busy is FileNotFoundException) && StatusOf(busy) == Status.IO,
                              "save onto a directory: " + busy.GetType().Name + ": " + busy.Message);
                    }
            }
            finally
            {
                Directory.Delete(dir, true);
            }
            var oom = Throws<OutOfMemoryException>(() => Tensor.Zeros(ctx, DType.F32, Device.Cpu, 1L << 22, 1L << 22));
            Check(StatusOf(oom) == Status.OutOfMemory, "64 TiB: " + oom.Message);
            using (var t = Tensor.Ones(ctx, DType.F32, Device.Cpu, 4)) Check(t.NumEl == 4, "usable after OOM");

            // Use after Dispose is .NET's ObjectDisposedException, raised by the
            // SafeHandle before kiln is called.
            var d = Tensor.Ones(ctx, DType.F32, Device.Cpu, 4);
            d.Dispose();
            d.Dispose();
            Check(d.IsDisposed && d.ToString() == "Tensor(disposed)", "disposed ToString");
            Throws<ObjectDisposedException>(() => Console.Write(d.NumEl));
            Throws<ObjectDisposedException>(() => Console.Write(d + d));
            var model = new Model(ctx, "4-2", Device.Cpu);
            model.Dispose();
            Throws<ObjectDisposedException>(() => model.Describe());
            Check(model.ToString() == "Model(disposed)", "disposed model ToString");

            // What the native layer raises for each status.
            Check(KilnErrors.Create((Status)99, "from the future") is KilnException k && k.Status == (Status)99 &&
                  k.Message == "KILN_ERROR_UNKNOWN: from the future", "status 99");
            Check(KilnErrors.Create(Status.InvalidHandle, "m") is ObjectDisposedException, "InvalidHandle");
            Check(KilnErrors.Create(Status.Busy, "m") is InvalidOperationException, "Busy");
            Check(KilnErrors.Create(Status.Numeric, "m") is ArithmeticException, "Numeric");
            Check(KilnErrors.Create(Status.Cancelled, "m") is OperationCanceledException, "Cancelled");
            Check(KilnErrors.Create(Status.Backend, "m") is KilnException kb && kb.Status == Status.Backend, "Backend");
            Check(KilnErrors.Create(Status.Communication, "m") is KilnException, "Communication");
        }
    }

    /// A null argument is ArgumentNullException naming the parameter, strings and
    /// arrays as objects (a null path reached kiln as NULL, a null array as an
    /// empty one); use after Dispose is ObjectDisposedException naming the type
    /// of the object disposed, whether it is called or passed.
    public static void NullAndDisposedArguments()
    {
        var ctx = new Context();
        var t = Tensor.Ones(ctx, DType.F32, Device.Cpu, 2, 2);
        var model = new Model(ctx, "2-2", Device.Cpu);
        var data = new Dataset(ctx, t, Tensor.Zeros(ctx, DType.I64, Device.Cpu, 2));
        var trainer = new Trainer(model);
        var spec = new ModelSpec("2-2");
        const string file = "/nonexistent/m", dir = "/nonexistent";
        foreach (var entry in new (string Name, Action Call)[]
        {
            ("ctx", () => Tensor.Zeros(null, DType.F32, Device.Cpu, 1)), ("other", () => t.Matmul(null)),
            ("a", () => Console.Write((Tensor)null + t)), ("b", () => Console.Write(t + (Tensor)null)),
            ("a", () => Console.Write((Tensor)null * 2)), ("a", () => Console.Write(-(Tensor)null)),
            ("ctx", () => new Model(null, "2-2", Device.Cpu)), ("spec", () => new Model(ctx, (ModelSpec)null, Device.Cpu)),
            ("x", () => model.Forward(null)), ("x", () => model.Predict(null)), ("x", () => new Dataset(ctx, null, t)),
            ("model", () => new Trainer(null)), ("y", () => trainer.Step(t, null)), ("data", () => trainer.Epoch(null)),
            ("train", () => trainer.Fit(null, null, 1)), ("data", () => trainer.Evaluate(null)), ("data", () => trainer.Steps(null, 1)),
            ("communicator", () => trainer.AttachCommunicator(null)), ("pred", () => Trainer.Loss(LossKind.Mse, null, t)),
            ("ctx", () => Communicator.CreateMpi(null)), ("devices", () => Communicator.CreateLocal(ctx, null)),
            ("ctx", () => Model.Load(null, file, Device.Cpu)), ("x", () => new Batch(null, t)), ("y", () => new Batch(t, null)),
            ("text", () => ctx.ParseDevice(null)), ("text", () => Device.Parse(null)), ("text", () => new ModelSpec(null)),
            ("text", () => spec.Parse(null)), ("spec", () => new Model(ctx, (string)null, Device.Cpu)),
            ("path", () => Model.Load(ctx, null, Device.Cpu)), ("path", () => Model.LoadWithSpec(ctx, null, spec, Device.Cpu)),
            ("spec", () => Model.LoadWithSpec(ctx, file, null, Device.Cpu)), ("path", () => Model.ImportOnnx(ctx, null)),
            ("path", () => model.ExportOnnx(null)), ("path", () => model.ExportOnnx(null, OnnxExportFlags.ExternalData)),
            ("path", () => model.Save(null)), ("path", () => model.LoadWeights(null)),
            ("dir", () => Dataset.LoadMnist(ctx, null, "test")), ("split", () => Dataset.LoadMnist(ctx, dir, null)),
            ("images", () => Dataset.LoadIdx(ctx, null, file)), ("labels", () => Dataset.LoadIdx(ctx, file, null)),
            ("path", () => trainer.SaveCheckpoint(null)), ("path", () => trainer.LoadCheckpoint(null)),
            ("data", () => Tensor.FromArray(ctx, (float[])null)), ("shape", () => Tensor.FromArray(ctx, new float[1], null)),
            ("shape", () => Tensor.FromArray(ctx, new ReadOnlySpan<float>(new float[1]), null)),
            ("shape", () => Tensor.Zeros(ctx, DType.F32, Device.Cpu, null)), ("shape", () => Tensor.EmptyPinned(ctx, DType.F32, null)),
            ("shape", () => Tensor.Full(ctx, 1, DType.F32, Device.Cpu, null)), ("shape", () => t.Reshape(null)),
            ("sizes", () => new ModelSpec().AddMlp(LayerKind.Relu, null)),
        })
        {
            var (name, call) = entry;
            var e = Throws<ArgumentNullException>(call);
            Check(e.ParamName == name, $"null {name}: ArgumentNullException for {e.ParamName ?? "null"}");
        }
        var gone = Tensor.Ones(ctx, DType.F32, Device.Cpu, 2, 2);
        gone.Dispose();
        trainer.Dispose();
        spec.Dispose();
        data.Dispose();
        model.Dispose();
        var disposed = new List<(string, Action)>(new (string, Action)[]
        {
            ("Tensor", () => Console.Write(gone.NumEl)), ("Tensor", () => Console.Write(gone + t)), ("Tensor", () => t.Matmul(gone)),
            ("Trainer", () => trainer.Epoch(data)), ("Trainer", () => Console.Write(trainer.StepsDone)),
            ("ModelSpec", () => new Model(ctx, spec, Device.Cpu)), ("ModelSpec", () => spec.AddLinear(2, 2)),
            ("Dataset", () => Console.Write(data.Count)), ("Model", () => model.Describe()), ("Model", () => model.Save(file)),
            ("Model", () => new Trainer(model)),
        });
        using (var live = new Model(ctx, "2-2", Device.Cpu))
        using (var other = new Trainer(live))
        {
            disposed.Add(("Dataset", () => other.Epoch(data)));
            ctx.Dispose();
            disposed.Add(("Context", () => Tensor.Zeros(ctx, DType.F32, Device.Cpu, 1)));
            disposed.Add(("Context", () => Console.Write(ctx.DefaultDevice)));
            foreach (var entry in disposed)
            {
                var (type, call) = entry;
                var e = Throws<ObjectDisposedException>(call);
                Check(e.ObjectName == type, $"disposed {type}: ObjectName {e.ObjectName ?? "null"} ({e.Message})");
            }
            Check(ctx.ToString() == "Context(disposed)", ctx.ToString());
            // What was made from the context keeps kiln's context alive.
            Check(live.NumParameters == 6 && t.ToArray<float>().Sum() == 4, "objects outlive their Context wrapper");
        }
        t.Dispose();
    }

    /// kiln reads a string up to its first NUL: "784-10\0-999-999" built a 784-10
    /// model and Save("m\0.bak") wrote m. A string holding a NUL is refused,
    /// naming its parameter, before kiln is called.
    public static void StringsWithANulAreRefused()
    {
        using (var ctx = new Context())
        using (var model = new Model(ctx, "4-2", Device.Cpu))
        using (var spec = new ModelSpec("4-2"))
        using (var trainer = new Trainer(model))
        {
            string path = Temp("nul.safetensors"), cut = path + "\0.bak", dir = Path.GetTempPath();
            foreach (var entry in new (string Name, Action Call)[]
            {
                ("text", () => ctx.ParseDevice("cpu\0junk")), ("text", () => Device.Parse("cpu\0junk")),
                ("text", () => new ModelSpec("4-2\0-9")), ("text", () => spec.Parse("2-3\0-9")),
                ("spec", () => new Model(ctx, "784-10\0-999-999", Device.Cpu)),
                ("path", () => model.Save(cut)), ("path", () => model.LoadWeights(cut)), ("path", () => Model.Load(ctx, cut, Device.Cpu)),
                ("path", () => Model.LoadWithSpec(ctx, cut, spec, Device.Cpu)), ("path", () => Model.ImportOnnx(ctx, cut)),
                ("path", () => model.ExportOnnx(cut)), ("path", () => model.ExportOnnx(cut, OnnxExportFlags.ExternalData)),
                ("path", () => trainer.SaveCheckpoint(cut)), ("path", () => trainer.LoadCheckpoint(cut)),
                ("dir", () => Dataset.LoadMnist(ctx, dir + "\0/garbage", "test")), ("split", () => Dataset.LoadMnist(ctx, dir, "test\0x")),
                ("images", () => Dataset.LoadIdx(ctx, cut, path)), ("labels", () => Dataset.LoadIdx(ctx, path, cut)),
            })
            {
                var (name, call) = entry;
                var e = Throws<ArgumentException>(call);
                Check(e is IKilnException && StatusOf(e) == Status.InvalidArgument && e.ParamName == name &&
                      e.Message.Contains(name + " contains a NUL character"), $"a NUL in {name}: {e.GetType().Name}: {e.Message}");
            }
            Check(!File.Exists(path), "Save wrote the path cut at its NUL");
            using (var unchanged = new Model(ctx, spec, Device.Cpu)) Check(unchanged.Describe() == "4-2", "spec " + unchanged.Describe());
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

    /// 1024 samples of 4 Gaussian blobs in 16 dimensions, x and y kept alive by the dataset.
    static Dataset BlobData(Context ctx, int n = 1024)
    {
        var (xs, ys) = Blobs(n, 16, 4, 7);
        using (var x = Tensor.FromArray(ctx, xs, n, 16))
        using (var y = Tensor.FromArray(ctx, ys, n))
            return new Dataset(ctx, x, y);
    }

    static (Model, Tensor) Trained(Context ctx)
    {
        var xs = Blobs(1024, 16, 4, 7).X;
        var x = Tensor.FromArray(ctx, xs, 1024, 16);
        var model = new Model(ctx, "16-32-4", ctx.DefaultDevice);
        using (var data = BlobData(ctx))
        {
            var (train, test) = data.Split(0.25, 1);
            using (train)
            using (test)
            using (var trainer = new Trainer(model, new TrainerOptions { Optimizer = OptimizerKind.Adam, Lr = 0.01, BatchSize = 32 }))
            {
                var history = trainer.Fit(train, test, 4);
                var last = trainer.Epoch(train);
                Check(history.Count == 4 && history[3].HasValidation && history[3].ValAccuracy > 0.9, "fit history");
                Check(last.Epoch == 5 && last.TrainAccuracy > 0.9 && !last.HasValidation, "5th epoch: " + last);
                Check(last.Duration > TimeSpan.Zero && last.SamplesPerSecond > 0, "duration " + last.Duration);
                double acc = trainer.Evaluate(test).Accuracy;
                Check(acc > 0.9, "accuracy " + acc + " (chance 0.25)");
                Check(trainer.EpochsDone == 5 && trainer.StepsDone == 5 * 24 && trainer.CurrentLr == 0.01, "counters");
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
                Check(model.NumParameters == 16 * 32 + 32 + 32 * 4 + 4 && model.NumParameterTensors == 4, "parameter count");
                Check(model.InputSize == 16 && model.OutputSize == 4 && model.Describe() == "16-32-4", model.Describe());
                Check(model.ParameterName(0) == "0.weight" && model.ParameterName(3) == "2.bias", "parameter names");
                Check(model.ToString() == "Model(16-32-4, " + model.Device + ")", model.ToString());
                Throws<ArgumentException>(() => model.ParameterName(4));
                string path = Temp("m.safetensors");
                model.Save(path);
                try
                {
                    using (var loaded = Model.Load(ctx, path, ctx.DefaultDevice))
                    using (var spec = new ModelSpec().AddLinear(16, 32).Add(LayerKind.Gelu).AddLinear(32, 4))
                    using (var withSpec = Model.LoadWithSpec(ctx, path, spec, Device.Cpu))
                    using (var other = new Model(ctx, "16-8-4", Device.Cpu))
                    {
                        Check(loaded.Describe() == model.Describe(), "describe");
                        Check(Logits(loaded, x).SequenceEqual(Logits(model, x)), "same logits after load");
                        Check(withSpec.Describe() == "16-32-4:gelu", "the spec decides the layers: " + withSpec.Describe());
                        using (var w0 = withSpec.Parameter(0))
                        using (var m0 = model.Parameter(0))
                        using (var m0h = m0.To(Device.Cpu))
                            Check(w0.ToArray<float>().SequenceEqual(m0h.ToArray<float>()), "weights of LoadWithSpec");
                        var e = Throws<ArgumentException>(() => other.LoadWeights(path));
                        Check(StatusOf(e) == Status.ShapeMismatch, "another architecture: " + e.Message);
                        Throws<FileNotFoundException>(() => other.LoadWeights(path + ".missing"));
                    }
                }
                finally
                {
                    File.Delete(path);
                }
            }
        }
    }

    public static void OnnxRoundTrip()
    {
        using (var ctx = new Context(seed: 42))
        using (var model = new Model(ctx, "16-32-4", Device.Cpu))
        using (var x = Tensor.Randn(ctx, DType.F32, Device.Cpu, 3, 16))
        {
            string path = Temp("m.onnx");
            try
            {
                try { model.ExportOnnx(path); }
                catch (NotSupportedException e) { Console.WriteLine("  skipped: kiln was built without ONNX: " + e.Message); return; }
                using (var imported = Model.ImportOnnx(ctx, path))
                {
                    float[] want = Logits(model, x), got = Logits(imported, x);
                    Check(want.Length == got.Length && want.Zip(got, (a, b) => Math.Abs(a - b)).Max() <= 1e-6f,
                          "the same logits after an ONNX round trip");
                }
                Throws<FileNotFoundException>(() => Model.ImportOnnx(ctx, path + ".missing"));
                File.WriteAllText(path, "not a protobuf at all");
                Throws<FormatException>(() => Model.ImportOnnx(ctx, path));
            }
            finally
            {
                File.Delete(path);
            }
        }
    }

    // ELU, SELU and Softplus through Add, a Softmax output transform, and the
    // weights exported to a data file beside the model.
    public static void NewLayersAndExternalData()
    {
        using (var ctx = new Context(seed: 42))
        using (var spec = new ModelSpec().AddLinear(16, 8).Add(LayerKind.Elu, 0.5).AddLinear(8, 8).Add(LayerKind.Selu)
                   .AddLinear(8, 6).Add(LayerKind.Softplus, 2, 5).AddLinear(6, 4).Add(LayerKind.Softmax))
        using (var model = new Model(ctx, spec, Device.Cpu))
        using (var x = Tensor.Randn(ctx, DType.F32, Device.Cpu, 3, 16))
        {
            Throws<ArgumentException>(() => spec.Add(LayerKind.Relu));
            Check(model.Describe() == "linear(16,8);elu(0.5);linear(8,8);selu;linear(8,6);softplus(2,5);linear(6,4);softmax",
                  "the spec of the new layers");
            float[] probs = Logits(model, x);
            for (int r = 0; r < 3; ++r)
                Check(Math.Abs(probs.Skip(4 * r).Take(4).Sum() - 1) <= 1e-5f, "a softmax row sums to 1");
            string path = Temp("external.onnx");
            try
            {
                try { model.ExportOnnx(path, OnnxExportFlags.ExternalData); }
                catch (NotSupportedException e) { Console.WriteLine("  skipped: kiln was built without ONNX: " + e.Message); return; }
                Check(File.Exists(path + ".data"), "the weights beside the model");
                using (var imported = Model.ImportOnnx(ctx, path))
                {
                    float[] got = Logits(imported, x);
                    Check(probs.Zip(got, (a, b) => Math.Abs(a - b)).Max() <= 1e-6f, "the same outputs through external data");
                }
                Throws<ArgumentException>(() => model.ExportOnnx(path, (OnnxExportFlags)2));
            }
            finally
            {
                File.Delete(path);
                File.Delete(path + ".data");
            }
        }
    }

    public static void ModelSpecsAndF64()
    {
        using (var ctx = new Context(seed: 1))
        using (var spec = new ModelSpec().AddMlp(LayerKind.Tanh, 4, 8, 3))
        using (var model = new Model(ctx, spec, Device.Cpu, DType.F64))
        using (var f32 = new Model(ctx, "4-8-3:tanh", Device.Cpu))
        {
            Check(model.Describe() == "4-8-3:tanh", model.Describe());
            using (var p = model.Parameter(0)) Check(p.DType == DType.F64 && p.Shape.SequenceEqual(new long[] { 8, 4 }), "f64 weight");
            using (var p = f32.Parameter(0)) Check(p.DType == DType.F32, "default dtype from kiln: f32");
            // Predict against the same MLP computed here from the parameters.
            var xs = new double[] { 0.5, -1, 2, 0.25, 1, 1, -1, -2 };
            var w0 = model.Parameter(0).ToArray<double>();
            var b0 = model.Parameter(1).ToArray<double>();
            var w1 = model.Parameter(2).ToArray<double>();
            var b1 = model.Parameter(3).ToArray<double>();
            using (var x = Tensor.FromArray(ctx, xs, 2, 4))
            using (var y = model.Predict(x))
            {
                var got = y.ToArray<double>();
                for (int s = 0; s < 2; s++)
                    for (int o = 0; o < 3; o++)
                    {
                        double acc = b1[o];
                        for (int h = 0; h < 8; h++)
                        {
                            double z = b0[h];
                            for (int i = 0; i < 4; i++) z += w0[h * 4 + i] * xs[s * 4 + i];
                            acc += w1[o * 8 + h] * Math.Tanh(z);
                        }
                        Check(Math.Abs(got[s * 3 + o] - acc) < 1e-12, $"f64 logit {s},{o}: {got[s * 3 + o]} vs {acc}");
                    }
            }
            Check(model.Training, "starts in training mode");
            model.Training = false;
            Check(!model.Training, "evaluation mode");
            using (var p = model.Parameter(1)) p.CopyFrom(new ReadOnlySpan<double>(new double[8]));
            Check(model.Parameter(1).ToArray<double>().All(v => v == 0), "parameters are views into the model");
            Throws<ArgumentException>(() => new ModelSpec("4-x-2"));
            Throws<ArgumentException>(() => new ModelSpec().AddLinear(4, 8).AddLinear(3, 2));
            Throws<ArgumentException>(() => new ModelSpec().AddMlp(LayerKind.Relu, 4));
            Throws<ArgumentException>(() => new Model(ctx, new ModelSpec(), Device.Cpu));
            Throws<ArgumentException>(() => new Model(ctx, "4-2", Device.Cpu, DType.I32));
            model.To(Device.Cpu);
            Check(model.Device == Device.Cpu, "To(cpu)");
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

    /// Trains a fresh 16-32-4 model for 5 epochs (SGD, lr 0.003, batch 32, a fixed
    /// shuffle seed) at precision, from the same seed each time.
    static (double Loss, double Accuracy) FitBlobs(Precision precision)
    {
        using (var ctx = new Context(seed: 42))
        using (var data = BlobData(ctx))
        using (var model = new Model(ctx, "16-32-4", ctx.DefaultDevice))
        {
            var (train, val) = data.Split(0.25, 1);
            var options = new TrainerOptions { Lr = 0.003, BatchSize = 32, ShuffleSeed = 3, Precision = precision };
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

    public static void TrainerOptionErrors()
    {
        using (var ctx = new Context(seed: 42))
        using (var model = new Model(ctx, "8-4-2", Device.Cpu))
        {
            var e = Throws<NotSupportedException>(() => new Trainer(model, new TrainerOptions { Precision = Precision.TF32 }));
            Check(StatusOf(e) == Status.NotSupported && e.Message.Contains("tf32"), "tf32 on the CPU: " + e.Message);
            foreach (var fp in new[] { FastPath.None, FastPath.All, FastPath.All & ~FastPath.Graphs })
                new Trainer(model, new TrainerOptions { FastPath = fp }).Dispose();
            foreach (var fp in new[] { FastPath.All + 1, (FastPath)(1u << 31) })
                Throws<ArgumentException>(() => new Trainer(model, new TrainerOptions { FastPath = fp }));
            Throws<ArgumentException>(() => new Trainer(model, new TrainerOptions { Precision = (Precision)9 }));
            Throws<ArgumentException>(() => new Trainer(model, new TrainerOptions { BatchSize = 0 }));
            // DataParallel's device list: the model must be on the first device, the CPU only alone.
            var gpus = new[] { Device.Cuda(0), Device.Cuda(1) };
            var ge = Throws<ArgumentException>(() => new Trainer(model, new TrainerOptions { Devices = gpus }));
            Check(ge.Message.Contains("first listed device"), "DataParallel with the model on the CPU: " + ge.Message);
            Throws<ArgumentException>(() => new Trainer(model, new TrainerOptions { Devices = new[] { Device.Cpu, Device.Cuda(0) } }));
            new Trainer(model, new TrainerOptions { Devices = new[] { Device.Cpu } }).Dispose();
            Throws<ArgumentException>(() => new Trainer(model, new TrainerOptions { Lr = -1 }));
            Throws<ArgumentException>(() => new Trainer(model, new TrainerOptions { ProgressInterval = -1 }));
            Throws<ArgumentException>(() => new Trainer(model, new TrainerOptions { BucketBytes = -1 }));
            using (var t = new Trainer(model, new TrainerOptions
            {
                Optimizer = OptimizerKind.AdamW, Betas = (0.8, 0.9), Eps = 1e-6, WeightDecay = 0.1, GradClip = 1,
                Schedule = Schedule.Step(10, 0.5), WarmupSteps = 0, Momentum = 0, Nesterov = false, Loss = LossKind.CrossEntropy,
            }))
                Check(t.CurrentLr == 0.01, "kiln's default lr: " + t.CurrentLr);
            // Warmup scales the first step's lr by 1/10 (kiln's (t + 1) / warmup).
            using (var t = new Trainer(model, new TrainerOptions { Lr = 0.5, Schedule = Schedule.Cosine(100, 0.001), WarmupSteps = 10 }))
                Check(Math.Abs(t.CurrentLr - 0.05) < 1e-15, "warmup's first lr: " + t.CurrentLr);
        }
    }

    public static void DivergenceIsArithmetic()
    {
        using (var ctx = new Context(seed: 42))
        using (var data = BlobData(ctx, 256))
        using (var model = new Model(ctx, "16-32-4", Device.Cpu))
        using (var trainer = new Trainer(model, new TrainerOptions { Lr = 1e30 }))
        {
            var e = Throws<ArithmeticException>(() => { for (int i = 0; i < 5; i++) trainer.Epoch(data); });
            Check(StatusOf(e) == Status.Numeric, "lr 1e30: " + e.Message);
        }
    }

    public static void DatasetsAndCheckpoints()
    {
        using (var ctx = new Context(seed: 42))
        using (var data = BlobData(ctx, 200))
        {
            Check(data.Count == 200 && data.NumFeatures == 16 && data.NumClasses == 4, "dataset sizes");
            var (train, val) = data.Split(0.25, 9);
            using (train)
            using (val)
                Check(train.Count == 150 && val.Count == 50, "split 150/50");
            Throws<ArgumentException>(() => data.Split(1.5, 1));
            Throws<ArgumentException>(() => data.SetNormalization(1, 0, 0));
            Throws<ArgumentException>(() => data.Batch(195, 10, Device.Cpu));
            data.SetNormalization(2, 1, 4);
            using (var b = data.Batch(0, 1, Device.Cpu))
            {
                var raw = Blobs(200, 16, 4, 7).X;
                Check(b.X.ToArray<float>().Zip(raw.Take(16), (g, r) => Math.Abs(g - (r * 2 - 1) / 4)).Max() < 1e-6, "normalised batch");
                Check(b.Y.ToArray<long>()[0] == 0 && b.Y.DType == DType.I64, "labels");
            }
            using (var x = Tensor.Zeros(ctx, DType.F32, Device.Cpu, 3, 2))
            using (var y2 = Tensor.Zeros(ctx, DType.I64, Device.Cpu, 2))
            using (var neg = Tensor.FromArray(ctx, new long[] { 0, -1, 2 }, 3))
            {
                Check(StatusOf(Throws<ArgumentException>(() => new Dataset(ctx, x, y2))) == Status.ShapeMismatch, "3 samples, 2 labels");
                Check(StatusOf(Throws<ArgumentException>(() => new Dataset(ctx, x, neg))) == Status.InvalidArgument, "a negative label");
            }
        }
        // A checkpoint continues training exactly.
        string path = Temp("checkpoint.safetensors");
        try
        {
            double want;
            using (var ctx = new Context(seed: 42))
            using (var data = BlobData(ctx, 256))
            using (var model = new Model(ctx, "16-8-4", Device.Cpu))
            using (var trainer = new Trainer(model, new TrainerOptions { Optimizer = OptimizerKind.Adam, BatchSize = 32 }))
            {
                trainer.Epoch(data);
                trainer.SaveCheckpoint(path);
                want = trainer.Epoch(data).TrainLoss;
            }
            using (var ctx = new Context(seed: 7))
            using (var data = BlobData(ctx, 256))
            using (var model = new Model(ctx, "16-8-4", Device.Cpu))
            using (var trainer = new Trainer(model, new TrainerOptions { Optimizer = OptimizerKind.Adam, BatchSize = 32 }))
            using (var other = new Trainer(new Model(ctx, "16-4-4", Device.Cpu), new TrainerOptions { Optimizer = OptimizerKind.Adam }))
            {
                trainer.LoadCheckpoint(path);
                Check(trainer.EpochsDone == 1 && trainer.StepsDone == 8, "counters restored");
                double got = trainer.Epoch(data).TrainLoss;
                Check(got == want, $"second epoch's loss {got} vs {want}");
                Check(StatusOf(Throws<ArgumentException>(() => other.LoadCheckpoint(path))) == Status.ShapeMismatch, "another architecture");
            }
        }
        finally
        {
            File.Delete(path);
        }
    }

    public static void LossMatchesAReference()
    {
        using (var ctx = new Context())
        using (var pred = Tensor.FromArray(ctx, new float[] { 1, 2, 0.5f, -1 }, 2, 2))
        using (var labels = Tensor.FromArray(ctx, new long[] { 1, 0 }, 2))
        using (var target = Tensor.FromArray(ctx, new float[] { 0, 2, 1, 1 }, 2, 2))
        {
            double ce = (-(2 - Math.Log(Math.Exp(1) + Math.Exp(2))) - (0.5 - Math.Log(Math.Exp(0.5) + Math.Exp(-1)))) / 2;
            Check(Math.Abs(Trainer.Loss(LossKind.CrossEntropy, pred, labels) - ce) < 1e-6, "cross-entropy");
            Check(Math.Abs(Trainer.Loss(LossKind.Mse, pred, target) - (1 + 0 + 0.25 + 4) / 4.0) < 1e-6, "mse");
            Throws<ArgumentException>(() => Trainer.Loss(LossKind.Mse, pred, labels));
        }
    }
}
