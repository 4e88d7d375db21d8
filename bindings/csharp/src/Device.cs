using System;
using System.Runtime.InteropServices;

namespace Kiln
{
    /// <summary>Where a tensor or model lives: the CPU or GPU N. Laid out as
    /// struct kiln_device, so it crosses P/Invoke as is.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public readonly struct Device : IEquatable<Device>
    {
        readonly DeviceKind kind;
        readonly long index;

        /// <summary>A device of kind with index (-1 for the CPU).</summary>
        public Device(DeviceKind kind, long index) { this.kind = kind; this.index = index; }

        /// <summary>The CPU or CUDA.</summary>
        public DeviceKind Kind => kind;
        /// <summary>The GPU's index; -1 for the CPU.</summary>
        public long Index => index;

        /// <summary>The CPU.</summary>
        public static Device Cpu => new Device(DeviceKind.Cpu, -1);
        /// <summary>GPU index ("cuda:index").</summary>
        public static Device Cuda(long index) => new Device(DeviceKind.Cuda, index);

        /// <summary>Reads "cpu", "cuda" or "cuda:N" (syntax only: whether the GPU
        /// exists is Context.ParseDevice's question). Malformed text throws
        /// ArgumentException.</summary>
        public static Device Parse(string text)
        {
            Native.Check(NativeMethods.kiln_device_parse(ContextHandle.Null, Arg.Text(text, nameof(text)), out Device d));
            return d;
        }

        /// <summary>"cpu" or "cuda:N", as kiln formats it.</summary>
        public override string ToString()
        {
            var buf = new byte[32];
            if (NativeMethods.kiln_device_format(this, buf, buf.Length) != Status.Ok)
                return "invalid device (" + kind + ", " + index + ")";
            return System.Text.Encoding.UTF8.GetString(buf, 0, Array.IndexOf(buf, (byte)0));
        }

        /// <summary>Same kind and index.</summary>
        public bool Equals(Device other) => kind == other.kind && index == other.index;
        /// <summary>Same kind and index.</summary>
        public override bool Equals(object obj) => obj is Device d && Equals(d);
        /// <summary>A hash of kind and index.</summary>
        public override int GetHashCode() => ((int)kind * 397) ^ index.GetHashCode();
        /// <summary>Same kind and index.</summary>
        public static bool operator ==(Device a, Device b) => a.Equals(b);
        /// <summary>Another kind or index.</summary>
        public static bool operator !=(Device a, Device b) => !a.Equals(b);
    }

    /// <summary>A device's description (struct kiln_device_info). For the CPU:
    /// the model name, logical cores and kiln's threads.</summary>
    public readonly struct DeviceInfo
    {
        internal unsafe DeviceInfo(in kiln_device_info raw)
        {
            Device = raw.device;
            fixed (byte* name = raw.name)
            {
                int n = 0;
                while (n < 256 && name[n] != 0) n++;
                Name = System.Text.Encoding.UTF8.GetString(name, n);
            }
            TotalMemory = raw.total_memory;
            FreeMemory = raw.free_memory;
            ComputeCapability = new Version((int)raw.compute_major, (int)raw.compute_minor);
            MultiprocessorCount = raw.multiprocessor_count;
            DriverVersion = raw.driver_version;
            RuntimeVersion = raw.runtime_version;
            Threads = raw.threads;
        }

        /// <summary>The device described.</summary>
        public Device Device { get; }
        /// <summary>The GPU's name or the CPU's model.</summary>
        public string Name { get; }
        /// <summary>Bytes of memory.</summary>
        public long TotalMemory { get; }
        /// <summary>Bytes free at the time of the query.</summary>
        public long FreeMemory { get; }
        /// <summary>CUDA compute capability (0.0 on the CPU).</summary>
        public Version ComputeCapability { get; }
        /// <summary>Streaming multiprocessors; logical cores on the CPU.</summary>
        public long MultiprocessorCount { get; }
        /// <summary>CUDA driver version, e.g. 13000; 0 on the CPU.</summary>
        public long DriverVersion { get; }
        /// <summary>CUDA runtime version; 0 on the CPU.</summary>
        public long RuntimeVersion { get; }
        /// <summary>CPU threads kiln uses; 0 for a GPU.</summary>
        public long Threads { get; }

        /// <summary>"cpu: NAME, N threads" or "cuda:0: NAME, X GiB".</summary>
        public override string ToString() =>
            Device + ": " + Name + (Device.Kind == DeviceKind.Cpu ? ", " + Threads + " threads"
                                                                  : $", {TotalMemory / (double)(1L << 30):F1} GiB");
    }

    /// <summary>The library itself: versions and names.</summary>
    public static class Library
    {
        /// <summary>The loaded libkiln's version.</summary>
        public static Version Version
        {
            get
            {
                NativeMethods.kiln_version(out int major, out int minor, out int patch);
                return new Version(major, minor, patch);
            }
        }

        /// <summary>The loaded libkiln's version as "MAJOR.MINOR.PATCH".</summary>
        public static string VersionString => Native.Utf8(NativeMethods.kiln_version_string());

        /// <summary>The ABI version of the loaded libkiln; this binding was generated for
        /// HeaderConstants.AbiVersion.</summary>
        public static int AbiVersion => NativeMethods.kiln_abi_version();

        /// <summary>kiln's name for a status, e.g. "KILN_ERROR_SHAPE_MISMATCH"
        /// ("KILN_ERROR_UNKNOWN" for a code it does not know).</summary>
        public static string StatusName(Status status) => Native.Utf8(NativeMethods.kiln_status_name(status));

        /// <summary>"f32", "f16", ...; null for a value kiln does not know.</summary>
        public static string DTypeName(DType dtype)
        {
            IntPtr p = NativeMethods.kiln_dtype_name(dtype);
            return p == IntPtr.Zero ? null : Native.Utf8(p);
        }

        /// <summary>Bytes per element; 0 for a value kiln does not know.</summary>
        public static long DTypeSize(DType dtype) => NativeMethods.kiln_dtype_size(dtype);
    }
}
