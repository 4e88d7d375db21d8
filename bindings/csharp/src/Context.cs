using System;
using System.Collections.Generic;

namespace Kiln
{
    /// <summary>Owns the backends and the random generator; everything is
    /// created from one. Safe to share between threads.</summary>
    public sealed class Context : IDisposable
    {
        internal readonly ContextHandle Handle;

        /// <summary>Creates a context: the CPU backend and, when it loads, CUDA.
        /// Unset options keep kiln's defaults.</summary>
        public Context(ulong? seed = null, long? threads = null, LogLevel? logLevel = null, bool? enableCuda = null)
        {
            NativeMethods.context_options_create(out ContextOptionsHandle options);
            using (options)
            {
                if (seed.HasValue) NativeMethods.context_options_set_seed(options, seed.Value);
                if (threads.HasValue) NativeMethods.context_options_set_num_threads(options, threads.Value);
                if (logLevel.HasValue) NativeMethods.context_options_set_log_level(options, logLevel.Value);
                if (enableCuda.HasValue) NativeMethods.context_options_set_enable_cuda(options, enableCuda.Value ? 1 : 0);
                NativeMethods.context_create(options, out Handle);
            }
        }

        /// <summary>Releases this reference; objects made from the context keep it alive.</summary>
        public void Dispose() => Handle.Dispose();

        /// <summary>Reseeds the generator (torch.manual_seed).</summary>
        public void SetSeed(ulong seed) => NativeMethods.context_set_seed(Handle, seed);

        /// <summary>cuda:0 when CUDA is usable, else the CPU.</summary>
        public Device DefaultDevice
        {
            get { NativeMethods.default_device(Handle, out Device d); return d; }
        }

        /// <summary>Reads "cpu", "cuda", "cuda:N" or "auto"; a missing GPU throws
        /// a KilnException saying why.</summary>
        public Device ParseDevice(string text)
        {
            NativeMethods.device_parse(Handle, text, out Device d);
            return d;
        }

        public bool CudaAvailable
        {
            get { NativeMethods.cuda_is_available(Handle, out int v); return v != 0; }
        }

        /// <summary>Why CUDA is not usable ("" when it is).</summary>
        public string CudaUnavailableReason
        {
            get
            {
                NativeMethods.cuda_unavailable_reason(Handle, out string reason);
                GC.KeepAlive(this); // the string is owned by the context
                return reason;
            }
        }

        public long DeviceCount(DeviceKind kind)
        {
            NativeMethods.device_count(Handle, kind, out long n);
            return n;
        }

        public DeviceInfo GetDeviceInfo(Device device)
        {
            var info = DeviceInfo.Create();
            NativeMethods.device_get_info(Handle, device, ref info);
            return info;
        }

        /// <summary>Every usable device: the CPU first, then each GPU.</summary>
        public DeviceInfo[] Devices()
        {
            var all = new List<DeviceInfo> { GetDeviceInfo(Device.Cpu) };
            long gpus = DeviceCount(DeviceKind.Cuda);
            for (long i = 0; i < gpus; i++) all.Add(GetDeviceInfo(Device.Cuda(i)));
            return all.ToArray();
        }

        /// <summary>Waits until all work queued on the device is done.</summary>
        public void Synchronize(Device device) => NativeMethods.device_synchronize(Handle, device);

        public static string Version => NativeMethods.version_string();
        public static int AbiVersion => NativeMethods.abi_version();
    }
}
