// The pieces of the C# binding that SWIG does not generate: the enums and
// structs of kiln.h (idiomatic names, ABI-fixed values and layouts), the
// SafeHandle classes the generated P/Invoke layer takes, and KilnException.
using System;
using System.Runtime.InteropServices;

namespace Kiln
{
    /// <summary>Why a kiln call failed.</summary>
    public enum Status
    {
        Ok = 0, InvalidArgument = 1, InvalidHandle = 2, ShapeMismatch = 3, DTypeMismatch = 4,
        DeviceUnavailable = 5, OutOfMemory = 6, IO = 7, Format = 8, NotSupported = 9, Cancelled = 10,
        Backend = 11, Internal = 12,
        /// <summary>The object is inside another call (e.g. a trainer called from its own callback).</summary>
        Busy = 13,
        /// <summary>Training diverged: a loss that is NaN or infinite.</summary>
        Numeric = 14,
    }

    public enum LogLevel { Debug = 0, Info = 1, Warning = 2, Error = 3, Off = 4 }
    public enum DeviceKind { Cpu = 0, Cuda = 1 }
    public enum DType { F32 = 0, F16 = 1, BF16 = 2, F64 = 3, I32 = 4, I64 = 5, U8 = 6 }
    public enum BinaryOp { Add = 0, Sub = 1, Mul = 2, Div = 3, Maximum = 4, Minimum = 5, Pow = 6 }
    public enum CompareOp { Eq = 0, Ne = 1, Lt = 2, Le = 3, Gt = 4, Ge = 5 }
    public enum UnaryOp { Neg = 0, Abs = 1, Exp = 2, Log = 3, Sqrt = 4, Relu = 5, Gelu = 6, Tanh = 7, Sigmoid = 8, LeakyRelu = 9 }
    public enum ReduceOp { Sum = 0, Mean = 1, Max = 2, Argmax = 3 }
    public enum LayerKind { Linear = 0, Relu = 1, LeakyRelu = 2, Gelu = 3, Tanh = 4, Sigmoid = 5, Dropout = 6 }
    public enum PredictKind { Logits = 0, Probabilities = 1, Classes = 2 }
    public enum LossKind { CrossEntropy = 0, Mse = 1, BceWithLogits = 2 }
    public enum OptimizerKind { Sgd = 0, Adam = 1, AdamW = 2 }
    public enum LrSchedule { Constant = 0, Step = 1, Cosine = 2 }

    /// <summary>The numeric precision of a trainer's steps (kiln_precision).</summary>
    public enum Precision
    {
        /// <summary>The model's dtype throughout, f32 products computed exactly (kiln's
        /// default, and PyTorch's with TF32 off).</summary>
        FP32 = 0,
        /// <summary>f32 products on CUDA's TF32 tensor cores (10-bit mantissa inputs, f32
        /// accumulation). CUDA only: a trainer for a CPU model throws NotSupported.</summary>
        TF32 = 1,
        /// <summary>Mixed precision on every device: batch, activations and products in
        /// bf16 (f32 accumulation) with f32 master weights, gradients, optimizer state
        /// and loss, as PyTorch's autocast to bfloat16.</summary>
        BF16 = 2,
    }

    /// <summary>The parts of a backend's fast path (kiln_fast_path bits), each of
    /// which can be switched off to bisect a failure. Backends without them, the
    /// CPU's, ignore the bits; results agree with every part off within float
    /// rounding.</summary>
    [Flags]
    public enum FastPath : uint
    {
        /// <summary>No part: every step runs as the plain sequence of kernels.</summary>
        None = 0,
        /// <summary>Fused GEMM epilogues (cuBLASLt).</summary>
        Epilogues = 1,
        /// <summary>Steps replayed as CUDA graphs.</summary>
        Graphs = 2,
        /// <summary>cuDNN's fused graphs.</summary>
        Cudnn = 4,
        /// <summary>Every part: kiln's default.</summary>
        All = Epilogues | Graphs | Cudnn,
    }

    /// <summary>A failed kiln call: its status and the library's message, read
    /// inside the same native call. A status newer than these bindings keeps its
    /// number (Status is not a closed set).</summary>
    public class KilnException : Exception
    {
        public Status Status { get; }
        public KilnException(Status status, string message) : base(status + ": " + message) { Status = status; }
    }

    /// <summary>Where a tensor or model lives: the CPU (index -1) or GPU N.
    /// Laid out as struct kiln_device.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct Device : IEquatable<Device>
    {
        public DeviceKind Kind;
        public long Index;

        public Device(DeviceKind kind, long index) { Kind = kind; Index = index; }
        public static readonly Device Cpu = new Device(DeviceKind.Cpu, -1);
        public static Device Cuda(long index) => new Device(DeviceKind.Cuda, index);

        /// <summary>"cpu" or "cuda:N", as Context.ParseDevice reads them.</summary>
        public override string ToString() => Kind == DeviceKind.Cpu ? "cpu" : "cuda:" + Index;
        public bool Equals(Device other) => Kind == other.Kind && Index == other.Index;
        public override bool Equals(object obj) => obj is Device d && Equals(d);
        public override int GetHashCode() => ((int)Kind * 397) ^ Index.GetHashCode();
        public static bool operator ==(Device a, Device b) => a.Equals(b);
        public static bool operator !=(Device a, Device b) => !a.Equals(b);
    }

    /// <summary>A device's description, laid out as struct kiln_device_info.
    /// For the CPU: the model name, logical cores and kiln's threads.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct DeviceInfo
    {
        internal uint StructSize;
        public Device Device;
        [MarshalAs(UnmanagedType.ByValArray, SizeConst = 256)] internal byte[] name;
        public long TotalMemory, FreeMemory, ComputeMajor, ComputeMinor, MultiprocessorCount;
        public long DriverVersion, RuntimeVersion, Threads;

        public string Name
        {
            get
            {
                int n = Array.IndexOf(name, (byte)0);
                return System.Text.Encoding.UTF8.GetString(name, 0, n < 0 ? name.Length : n);
            }
        }

        internal static DeviceInfo Create() =>
            new DeviceInfo { StructSize = (uint)Marshal.SizeOf(typeof(DeviceInfo)), name = new byte[256] };
    }

    /// <summary>One epoch's statistics, laid out as struct kiln_epoch_stats.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct EpochStats
    {
        internal uint StructSize;
        public long Epoch;
        public double TrainLoss, TrainAccuracy, ValLoss, ValAccuracy;
        internal int hasValidation;
        public double Seconds, SamplesPerSecond, Lr;

        public bool HasValidation => hasValidation != 0;

        internal static EpochStats Create() =>
            new EpochStats { StructSize = (uint)Marshal.SizeOf(typeof(EpochStats)) };
    }

    /// <summary>Owns one reference to a kiln handle. The marshaller keeps it
    /// alive and referenced during each call; its finalizer releases a handle
    /// that was never disposed, from the finalizer thread (kiln allows that).</summary>
    internal abstract class KilnHandle : SafeHandle
    {
        protected KilnHandle() : base(IntPtr.Zero, true) { }
        public override bool IsInvalid => handle == IntPtr.Zero;
    }

    internal static class Release
    {
        const string Lib = "kiln";
        [DllImport(Lib)] internal static extern void kiln_context_options_release(IntPtr p);
        [DllImport(Lib)] internal static extern void kiln_context_release(IntPtr p);
        [DllImport(Lib)] internal static extern void kiln_tensor_release(IntPtr p);
        [DllImport(Lib)] internal static extern void kiln_model_spec_release(IntPtr p);
        [DllImport(Lib)] internal static extern void kiln_model_release(IntPtr p);
        [DllImport(Lib)] internal static extern void kiln_dataset_release(IntPtr p);
        [DllImport(Lib)] internal static extern void kiln_trainer_options_release(IntPtr p);
        [DllImport(Lib)] internal static extern void kiln_trainer_release(IntPtr p);
        [DllImport(Lib)] internal static extern void kiln_history_release(IntPtr p);
    }

    internal sealed class ContextOptionsHandle : KilnHandle
    {
        protected override bool ReleaseHandle() { Release.kiln_context_options_release(handle); return true; }
    }
    internal sealed class ContextHandle : KilnHandle
    {
        protected override bool ReleaseHandle() { Release.kiln_context_release(handle); return true; }
    }
    internal sealed class TensorHandle : KilnHandle
    {
        protected override bool ReleaseHandle() { Release.kiln_tensor_release(handle); return true; }
    }
    internal sealed class ModelSpecHandle : KilnHandle
    {
        protected override bool ReleaseHandle() { Release.kiln_model_spec_release(handle); return true; }
    }
    internal sealed class ModelHandle : KilnHandle
    {
        protected override bool ReleaseHandle() { Release.kiln_model_release(handle); return true; }
    }
    internal sealed class DatasetHandle : KilnHandle
    {
        /// <summary>A NULL dataset, for optional arguments; never released.</summary>
        internal static readonly DatasetHandle Null = new DatasetHandle();
        protected override bool ReleaseHandle() { Release.kiln_dataset_release(handle); return true; }
    }
    internal sealed class TrainerOptionsHandle : KilnHandle
    {
        protected override bool ReleaseHandle() { Release.kiln_trainer_options_release(handle); return true; }
    }
    internal sealed class TrainerHandle : KilnHandle
    {
        protected override bool ReleaseHandle() { Release.kiln_trainer_release(handle); return true; }
    }
    internal sealed class HistoryHandle : KilnHandle
    {
        protected override bool ReleaseHandle() { Release.kiln_history_release(handle); return true; }
    }
}
