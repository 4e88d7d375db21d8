using System;

namespace Kiln
{
    /// <summary>One rank of distributed data-parallel training: Open MPI across
    /// processes (started by mpirun), or NCCL across the GPUs of one process.
    /// The engines live in the plugin libkiln_dist.so, loaded on first use.
    /// Attach it to a trainer with Trainer.AttachCommunicator.</summary>
    public sealed class Communicator : IDisposable
    {
        readonly CommunicatorHandle handle;

        Communicator(CommunicatorHandle handle) { this.handle = handle; }

        internal CommunicatorHandle Handle => Arg.Live(handle, this);

        /// <summary>A communicator over every process of the MPI job (collective: each
        /// calls it; a process not started by mpirun is a job of one).
        /// KilnException (DeviceUnavailable) when the plugin or Open MPI cannot be
        /// loaded, with the loader's reason.</summary>
        public static Communicator CreateMpi(Context ctx)
        {
            Native.Check(NativeMethods.kiln_communicator_create_mpi(Arg.Of(ctx, nameof(ctx)), out CommunicatorHandle h));
            return new Communicator(h);
        }

        /// <summary>One communicator per GPU of devices, over NCCL in this process:
        /// element i is rank i and runs on devices[i]; drive each from a thread of its
        /// own. ArgumentException for no device, a CPU or a repeated device;
        /// KilnException (DeviceUnavailable) for a missing GPU or plugin;
        /// NotSupportedException for a plugin without NCCL.</summary>
        public static Communicator[] CreateLocal(Context ctx, params Device[] devices)
        {
            Arg.NotNull(devices, nameof(devices));
            var raw = new IntPtr[Math.Max(devices.Length, 1)];
            Native.Check(NativeMethods.kiln_communicator_create_local(Arg.Of(ctx, nameof(ctx)), devices, devices.Length, raw));
            var result = new Communicator[devices.Length];
            for (int i = 0; i < result.Length; i++)
            {
                var h = new CommunicatorHandle();
                h.Adopt(raw[i]);
                result[i] = new Communicator(h);
            }
            return result;
        }

        /// <summary>Releases this reference (an attached trainer keeps its own).</summary>
        public void Dispose() => handle.Dispose();

        /// <summary>This process's rank in [0, Size).</summary>
        public long Rank { get { Native.Check(NativeMethods.kiln_communicator_rank(Handle, out long n)); return n; } }
        /// <summary>The number of ranks.</summary>
        public long Size { get { Native.Check(NativeMethods.kiln_communicator_size(Handle, out long n)); return n; } }
        /// <summary>The rank among those on this machine (the GPU to use: cuda:LocalRank).</summary>
        public long LocalRank { get { Native.Check(NativeMethods.kiln_communicator_local_rank(Handle, out long n)); return n; } }

        /// <summary>How long any one collective may take before it fails with
        /// KilnException (Communication); ArgumentException unless positive and
        /// finite. Not while an attached trainer runs.</summary>
        public void SetTimeout(TimeSpan timeout) =>
            Native.Check(NativeMethods.kiln_communicator_set_timeout(Handle, timeout.TotalSeconds));

        /// <summary>"Communicator(rank 0 of 1)".</summary>
        public override string ToString() => handle.IsClosed ? "Communicator(disposed)" : $"Communicator(rank {Rank} of {Size})";
    }
}
