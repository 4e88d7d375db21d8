// What the generated P/Invoke layer (Native.g.cs) needs from the hand-written
// side: the SafeHandle base class, argument checks, strings, status checking
// and the native-memory accounting that lets the garbage collector see the
// memory of tensors, models, trainers and datasets.
using System;
using System.IO;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Text;
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
        long pressure;

        protected KilnHandle() : base(IntPtr.Zero, true) { }
        public override bool IsInvalid => handle == IntPtr.Zero;

        /// <summary>Takes ownership of a pointer kiln returned through an array
        /// rather than an out-parameter the marshaller wraps itself.</summary>
        internal void Adopt(IntPtr pointer) => SetHandle(pointer);

        /// <summary>Reports bytes of native memory owned through this handle to
        /// the garbage collector, until the handle is released.</summary>
        internal void Track(long bytes)
        {
            pressure = bytes;
            NativeMemory.Add(bytes);
        }

        protected sealed override bool ReleaseHandle()
        {
            NativeMemory.Remove(Interlocked.Exchange(ref pressure, 0));
            Release(handle);
            return true;
        }

        /// <summary>kiln's release function of the handle's type.</summary>
        protected abstract void Release(IntPtr pointer);
    }

    // NULL for the optional handle arguments of kiln.h; never released (invalid).
    internal sealed partial class ContextHandle { internal static readonly ContextHandle Null = new ContextHandle(); }
    internal sealed partial class DatasetHandle { internal static readonly DatasetHandle Null = new DatasetHandle(); }

    /// <summary>Tells the garbage collector about native memory, which it cannot
    /// see: a 256 KiB tensor or a 73 MiB model is a few dozen managed bytes.
    /// Counts the bytes tensors, models, trainers and datasets read from files
    /// hold (KilnHandle.Track: added when one is made, taken off when it is
    /// disposed or finalized) and passes them on with GC.AddMemoryPressure,
    /// which .NET's collector acts on. Mono accepts the pressure but never
    /// collects because of it (measured: 2 GB of it, no collection), so there,
    /// and only there, a collection is forced when the bytes held grow past
    /// twice the least they came down to since the last forced one (and Budget),
    /// as a collector's heap limit follows what the last collection left:
    /// finalizers freeing garbage lower that least value, and a program that
    /// disposes its objects never grows the count, so it never pays for a
    /// collection.</summary>
    internal static class NativeMemory
    {
        internal const long Budget = 64L << 20;
        static readonly bool pressureIgnored = Type.GetType("Mono.Runtime") != null;
        static long held, least;
        static int collecting, forced;

        /// <summary>Bytes counted whose handles are not released yet.</summary>
        internal static long Live => Interlocked.Read(ref held);

        /// <summary>Collections forced so far (only where pressure is ignored).</summary>
        internal static int Forced => Volatile.Read(ref forced);

        internal static void Add(long bytes)
        {
            if (bytes <= 0) return;
            GC.AddMemoryPressure(bytes);
            long now = Interlocked.Add(ref held, bytes);
            if (!pressureIgnored || now < Math.Max(Budget, 2 * Interlocked.Read(ref least))) return;
            if (Interlocked.CompareExchange(ref collecting, 1, 0) != 0) return; // another thread collects
            try
            {
                Interlocked.Increment(ref forced);
                GC.Collect();
                // Not inside a callback from kiln: a finalizer's release could wait for
                // a lock the interrupted kiln call holds.
                // Past 3 Budgets held, wait for the finalizers: at 4 the 8000
                // undisposed 256 KiB tensors of RuntimeTests peaked at 323 MiB of
                // RSS once in six CI runs (136 to 208 the other five).
                if (now > 3 * Budget && Callbacks.Depth == 0) GC.WaitForPendingFinalizers();
                Interlocked.Exchange(ref least, Live);
            }
            finally
            {
                Volatile.Write(ref collecting, 0);
            }
        }

        internal static void Remove(long bytes)
        {
            if (bytes <= 0) return;
            long now = Interlocked.Add(ref held, -bytes);
            GC.RemoveMemoryPressure(bytes);
            for (long seen = Interlocked.Read(ref least); now < seen; seen = Interlocked.Read(ref least))
                if (Interlocked.CompareExchange(ref least, now, seen) == seen) return;
        }
    }

    /// <summary>How deep this thread is in callbacks from kiln (log records,
    /// progress reports), during which the call that made them is still running.</summary>
    internal static class Callbacks
    {
        [ThreadStatic] internal static int Depth;
    }

    /// <summary>Arguments as kiln takes them: ArgumentNullException naming a
    /// null one, ObjectDisposedException naming the type of a disposed one.
    /// Checked before the call, not left to the marshaller: Mono's, given a
    /// disposed handle after a live one, throws without releasing the reference
    /// it took on the live one, which then can never be released (found by
    /// DisposeRacesFinalizers); and it names no type.</summary>
    internal static class Arg
    {
        internal static T NotNull<T>(T value, string name) where T : class => value ?? throw new ArgumentNullException(name);

        /// <summary>handle, unless its owner was disposed. Each object's Handle
        /// property goes through here, so that a method of a disposed object names
        /// its type as a disposed argument does.</summary>
        internal static H Live<H>(H handle, object owner) where H : SafeHandle =>
            handle.IsClosed ? throw new ObjectDisposedException(owner.GetType().Name) : handle;

        internal static ContextHandle Of(Context o, string name) => NotNull(o, name).Handle;
        internal static TensorHandle Of(Tensor o, string name) => NotNull(o, name).Handle;
        internal static ModelSpecHandle Of(ModelSpec o, string name) => NotNull(o, name).Handle;
        internal static ModelHandle Of(Model o, string name) => NotNull(o, name).Handle;
        internal static DatasetHandle Of(Dataset o, string name) => NotNull(o, name).Handle;
        internal static CommunicatorHandle Of(Communicator o, string name) => NotNull(o, name).Handle;

        /// <summary>A string as kiln takes it, NUL-terminated UTF-8; every string
        /// argument goes through here (the generated signatures take the bytes).
        /// One holding a NUL is refused: C would read it only up to the NUL, which
        /// is another path, device or spec than the caller's.</summary>
        internal static byte[] Text(string value, string name)
        {
            int nul = NotNull(value, name).IndexOf('\0');
            if (nul >= 0)
                throw new KilnArgumentException(Status.InvalidArgument,
                                                $"{name} contains a NUL character (at index {nul}), where kiln would cut it", name);
            var bytes = new byte[Encoding.UTF8.GetByteCount(value) + 1];
            Encoding.UTF8.GetBytes(value, 0, value.Length, bytes, 0);
            return bytes;
        }
    }

    /// <summary>Status checking and strings: the parts every wrapper shares.</summary>
    internal static class Native
    {
        /// <summary>Throws for a failed call. Reads kiln_last_error at once, on the
        /// calling thread: a P/Invoke runs on the OS thread of its managed thread,
        /// and nothing else calls kiln in between. path, when the call read one,
        /// turns an IO failure on a missing file into FileNotFoundException;
        /// written, when it wrote one, an IO failure in a missing directory into
        /// DirectoryNotFoundException.</summary>
        internal static void Check(Status status, string path = null, string written = null)
        {
            if (status == Status.Ok) return;
            throw KilnErrors.Create(status, Utf8(NativeMethods.kiln_last_error()), path, written);
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

        /// <summary>Whether the directory path would be written into is missing.</summary>
        internal static bool DirectoryMissing(string path)
        {
            if (string.IsNullOrEmpty(path)) return false;
            string directory = Path.GetDirectoryName(Path.GetFullPath(path));
            return directory != null && !Directory.Exists(directory);
        }
    }
}
