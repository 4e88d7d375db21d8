using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Threading;

namespace Kiln
{
    /// <summary>Owns the backends and the random generator; everything is
    /// created from one. Safe to share between threads.</summary>
    public sealed class Context : IDisposable
    {
        readonly ContextHandle handle;
        readonly long logId;

        /// <summary>Creates a context: the CPU backend and, when it loads, CUDA.
        /// Options left null keep kiln's defaults (seed 0, a thread per core, log
        /// level Warning, CUDA enabled). log receives each record at or above the
        /// level, on the thread that produced it (any thread using the context),
        /// instead of stderr; it must not call kiln with this context, and what it
        /// throws is dropped.</summary>
        public Context(ulong? seed = null, long? threads = null, LogLevel? logLevel = null, bool? enableCuda = null,
                       Action<LogLevel, string> log = null)
        {
            Native.Check(NativeMethods.kiln_context_options_create(out ContextOptionsHandle options));
            using (options)
            {
                if (seed.HasValue) Native.Check(NativeMethods.kiln_context_options_set_seed(options, seed.Value));
                if (threads.HasValue) Native.Check(NativeMethods.kiln_context_options_set_num_threads(options, threads.Value));
                if (logLevel.HasValue) Native.Check(NativeMethods.kiln_context_options_set_log_level(options, logLevel.Value));
                if (enableCuda.HasValue)
                    Native.Check(NativeMethods.kiln_context_options_set_enable_cuda(options, enableCuda.Value ? 1 : 0));
                if (log != null)
                {
                    logId = Logs.Register(log);
                    Native.Check(NativeMethods.kiln_context_options_set_log_callback(options, Logs.Thunk, (IntPtr)logId));
                }
                try
                {
                    Native.Check(NativeMethods.kiln_context_create(options, out handle));
                }
                catch
                {
                    Logs.Unregister(logId);
                    throw;
                }
            }
        }

        internal ContextHandle Handle => Arg.Live(handle, this);

        /// <summary>Releases this reference; objects made from the context keep
        /// kiln's context alive. Log records they produce afterwards go to stderr.</summary>
        public void Dispose()
        {
            handle.Dispose();
            Logs.Unregister(logId);
        }

        /// <summary>Reseeds the generator (torch.manual_seed).</summary>
        public void SetSeed(ulong seed) => Native.Check(NativeMethods.kiln_context_set_seed(Handle, seed));

        /// <summary>cuda:0 when CUDA is usable, else the CPU.</summary>
        public Device DefaultDevice
        {
            get { Native.Check(NativeMethods.kiln_default_device(Handle, out Device d)); return d; }
        }

        /// <summary>Reads "cpu", "cuda", "cuda:N" or "auto"; a GPU that is not there
        /// throws a KilnException (DeviceUnavailable) saying why, malformed text an
        /// ArgumentException.</summary>
        public Device ParseDevice(string text)
        {
            Native.Check(NativeMethods.kiln_device_parse(Handle, Arg.Text(text, nameof(text)), out Device d));
            return d;
        }

        /// <summary>Whether the CUDA backend loaded and sees a GPU.</summary>
        public bool CudaAvailable
        {
            get { Native.Check(NativeMethods.kiln_cuda_is_available(Handle, out int v)); return v != 0; }
        }

        /// <summary>Why CUDA is not usable ("" when it is).</summary>
        public string CudaUnavailableReason =>
            Native.Borrowed(Handle, (out IntPtr s) => NativeMethods.kiln_cuda_unavailable_reason(Handle, out s));

        /// <summary>Devices of a kind: 1 for the CPU, 0..N for CUDA.</summary>
        public long DeviceCount(DeviceKind kind)
        {
            Native.Check(NativeMethods.kiln_device_count(Handle, kind, out long n));
            return n;
        }

        /// <summary>A description of device.</summary>
        public unsafe DeviceInfo GetDeviceInfo(Device device)
        {
            var raw = new kiln_device_info { struct_size = (uint)sizeof(kiln_device_info) };
            Native.Check(NativeMethods.kiln_device_get_info(Handle, device, ref raw));
            return new DeviceInfo(raw);
        }

        /// <summary>Every usable device: the CPU first, then each GPU.</summary>
        public IReadOnlyList<DeviceInfo> Devices()
        {
            var all = new List<DeviceInfo> { GetDeviceInfo(Device.Cpu) };
            long gpus = DeviceCount(DeviceKind.Cuda);
            for (long i = 0; i < gpus; i++) all.Add(GetDeviceInfo(Device.Cuda(i)));
            return all;
        }

        /// <summary>Waits until all work queued on device is done.</summary>
        public void Synchronize(Device device) => Native.Check(NativeMethods.kiln_device_synchronize(Handle, device));

        /// <summary>"Context(default device)".</summary>
        public override string ToString() => handle.IsClosed ? "Context(disposed)" : "Context(" + DefaultDevice + ")";
    }

    /// <summary>Log callbacks. kiln keeps the function pointer and an integer id,
    /// never a managed reference: the one delegate is static, so it cannot be
    /// collected while kiln holds it, and a record for an id whose Context was
    /// disposed (kiln's context outlives it while models use it) goes to stderr.</summary>
    internal static class Logs
    {
        internal static readonly kiln_log_fn Thunk = OnRecord;
        static readonly ConcurrentDictionary<long, Action<LogLevel, string>> sinks =
            new ConcurrentDictionary<long, Action<LogLevel, string>>();
        static long next;

        internal static long Register(Action<LogLevel, string> sink)
        {
            long id = Interlocked.Increment(ref next);
            sinks[id] = sink;
            return id;
        }

        internal static void Unregister(long id)
        {
            if (id != 0) sinks.TryRemove(id, out _);
        }

        static unsafe int OnRecord(IntPtr user, IntPtr record)
        {
            var r = (kiln_log_record*)record;
            string message = Native.Utf8(r->message);
            Callbacks.Depth++;
            try
            {
                if (sinks.TryGetValue((long)user, out var sink)) sink(r->level, message);
                else Console.Error.WriteLine("kiln: " + message);
            }
            catch (Exception)
            {
                // An exception must not unwind into kiln's frames; the record is lost.
            }
            finally
            {
                Callbacks.Depth--;
            }
            return 0;
        }
    }
}
