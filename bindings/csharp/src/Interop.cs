// What the generated P/Invoke layer (Native.g.cs) needs from the hand-written
// side: the SafeHandle base class, status checking, borrowed strings and the
// native-memory accounting that lets the garbage collector see tensor storage.
using System;
using System.IO;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

[assembly: InternalsVisibleTo("KilnTests")]

namespace Kiln
{
    /// <summary>Owns one reference to a kiln handle. The marshaller adds a
    /// reference for the length of each call, so Dispose on another thread (or
    /// the finalizer) cannot release the handle while kiln is using it; release
    /// happens exactly once, on whichever thread drops the last reference
    /// (kiln allows release from any thread).</summary>
    internal abstract class KilnHandle : SafeHandle
    {
        protected KilnHandle() : base(IntPtr.Zero, true) { }
        public override bool IsInvalid => handle == IntPtr.Zero;

        /// <summary>Takes ownership of a pointer kiln returned through an array
        /// rather than an out-parameter the marshaller wraps itself.</summary>
        internal void Adopt(IntPtr pointer) => SetHandle(pointer);
    }

    // NULL for the optional handle arguments of kiln.h; never released (invalid).
    internal sealed partial class ContextHandle { internal static readonly ContextHandle Null = new ContextHandle(); }
    internal sealed partial class DatasetHandle { internal static readonly DatasetHandle Null = new DatasetHandle(); }

    internal sealed partial class TensorHandle
    {
        long pressure;

        /// <summary>Reports bytes of native storage owned through this handle to
        /// the garbage collector, until the handle is released.</summary>
        internal void Track(long bytes)
        {
            pressure = bytes;
            NativeMemory.Add(bytes);
        }

        partial void OnRelease() { NativeMemory.Remove(Interlocked.Exchange(ref pressure, 0)); }
    }

    /// <summary>Tells the garbage collector about tensor storage, which it cannot
    /// see: a 256 KiB tensor is a few dozen managed bytes. GC.AddMemoryPressure
    /// does that on .NET; Mono accepts it but never collects because of it
    /// (measured: 2 GB of pressure, no collection), so every Budget bytes of new
    /// storage also forces a collection, and when the storage still alive is far
    /// past the budget, waits for the finalizers that release it.</summary>
    internal static class NativeMemory
    {
        internal const long Budget = 64L << 20;
        static long live, sinceCollection;
        static int collections;

        /// <summary>Bytes of tensor storage whose handles are not released yet.</summary>
        internal static long Live => Interlocked.Read(ref live);

        internal static void Add(long bytes)
        {
            if (bytes <= 0) return;
            GC.AddMemoryPressure(bytes);
            Interlocked.Add(ref live, bytes);
            int seen = GC.CollectionCount(0);
            if (Interlocked.Exchange(ref collections, seen) != seen)
                Interlocked.Exchange(ref sinceCollection, 0); // the runtime collected on its own
            if (Interlocked.Add(ref sinceCollection, bytes) < Budget) return;
            Interlocked.Exchange(ref sinceCollection, 0);
            GC.Collect();
            // Not inside a callback from kiln: a finalizer's release could wait for
            // a lock the interrupted kiln call holds.
            if (Live > 4 * Budget && Callbacks.Depth == 0) GC.WaitForPendingFinalizers();
        }

        internal static void Remove(long bytes)
        {
            if (bytes <= 0) return;
            Interlocked.Add(ref live, -bytes);
            GC.RemoveMemoryPressure(bytes);
        }
    }

    /// <summary>How deep this thread is in callbacks from kiln (log records,
    /// progress reports), during which the call that made them is still running.</summary>
    internal static class Callbacks
    {
        [ThreadStatic] internal static int Depth;
    }

    /// <summary>The handle of an argument: ArgumentNullException naming a null
    /// one, ObjectDisposedException for a disposed one. Checked before the call,
    /// not left to the marshaller: Mono's, given a disposed handle after a live
    /// one, throws without releasing the reference it took on the live one, which
    /// then can never be released (found by DisposeRacesFinalizers).</summary>
    internal static class Arg
    {
        static H Live<H>(H handle, object owner) where H : SafeHandle
        {
            if (handle.IsClosed) throw new ObjectDisposedException(owner.GetType().Name);
            return handle;
        }

        internal static ContextHandle Of(Context o, string name) => Live(o?.Handle ?? throw new ArgumentNullException(name), o);
        internal static TensorHandle Of(Tensor o, string name) => Live(o?.Handle ?? throw new ArgumentNullException(name), o);
        internal static ModelSpecHandle Of(ModelSpec o, string name) => Live(o?.Handle ?? throw new ArgumentNullException(name), o);
        internal static ModelHandle Of(Model o, string name) => Live(o?.Handle ?? throw new ArgumentNullException(name), o);
        internal static DatasetHandle Of(Dataset o, string name) => Live(o?.Handle ?? throw new ArgumentNullException(name), o);
        internal static CommunicatorHandle Of(Communicator o, string name) => Live(o?.Handle ?? throw new ArgumentNullException(name), o);
    }

    /// <summary>Status checking and strings: the parts every wrapper shares.</summary>
    internal static class Native
    {
        /// <summary>Throws for a failed call. Reads kiln_last_error at once, on the
        /// calling thread: a P/Invoke runs on the OS thread of its managed thread,
        /// and nothing else calls kiln in between. path, when the call took one,
        /// turns an IO failure on a missing file into FileNotFoundException.</summary>
        internal static void Check(Status status, string path = null)
        {
            if (status == Status.Ok) return;
            throw KilnErrors.Create(status, Utf8(NativeMethods.kiln_last_error()), path);
        }

        /// <summary>A copy of a NUL-terminated UTF-8 string kiln owns ("" for NULL).</summary>
        internal static unsafe string Utf8(IntPtr p)
        {
            if (p == IntPtr.Zero) return "";
            byte* s = (byte*)p;
            int n = 0;
            while (s[n] != 0) n++;
            return System.Text.Encoding.UTF8.GetString(s, n);
        }

        internal delegate Status BorrowedString(out IntPtr text);

        /// <summary>A string owned by owner, copied while a reference to owner is
        /// held, so a Dispose on another thread cannot free it before the copy.</summary>
        internal static string Borrowed(SafeHandle owner, BorrowedString call)
        {
            bool added = false;
            try
            {
                owner.DangerousAddRef(ref added);
                Check(call(out IntPtr text));
                return Utf8(text);
            }
            finally
            {
                if (added) owner.DangerousRelease();
            }
        }

        internal static bool Exists(string path) => path != null && (File.Exists(path) || Directory.Exists(path));
    }
}
