// kiln's statuses as exceptions of the matching .NET types. Each also
// implements IKilnException, whose Status keeps kiln's code.
using System;
using System.IO;
using System.Threading;

namespace Kiln
{
    /// <summary>Implemented by every exception a kiln call throws: the status
    /// kiln returned. Catch the .NET base type (ArgumentException,
    /// FileNotFoundException, ...) or filter on this:
    /// <c>catch (Exception e) when (e is IKilnException k &amp;&amp; k.Status == Status.Busy)</c>.</summary>
    public interface IKilnException
    {
        /// <summary>The status of the failed call.</summary>
        Status Status { get; }
    }

    /// <summary>A failure without a closer .NET type: DeviceUnavailable, Backend,
    /// Internal, Communication, and statuses newer than this binding.</summary>
    public class KilnException : Exception, IKilnException
    {
        /// <inheritdoc/>
        public Status Status { get; }
        /// <summary>An exception for status with kiln's message.</summary>
        public KilnException(Status status, string message) : base(message) { Status = status; }
    }

    /// <summary>InvalidArgument, ShapeMismatch or DTypeMismatch.</summary>
    public class KilnArgumentException : ArgumentException, IKilnException
    {
        /// <inheritdoc/>
        public Status Status { get; }
        /// <summary>An exception for status with kiln's message.</summary>
        public KilnArgumentException(Status status, string message) : base(message) { Status = status; }
        internal KilnArgumentException(Status status, string message, string paramName) : base(message, paramName) { Status = status; }
    }

    /// <summary>InvalidHandle: a handle kiln no longer knows (use after Dispose is
    /// caught before kiln is called, as a plain ObjectDisposedException).</summary>
    public class KilnObjectDisposedException : ObjectDisposedException, IKilnException
    {
        /// <inheritdoc/>
        public Status Status => Status.InvalidHandle;
        /// <summary>An exception with kiln's message.</summary>
        public KilnObjectDisposedException(string message) : base(null, message) { }
    }

    /// <summary>OutOfMemory: a host or device allocation failed (the context stays usable).</summary>
    public class KilnOutOfMemoryException : OutOfMemoryException, IKilnException
    {
        /// <inheritdoc/>
        public Status Status => Status.OutOfMemory;
        /// <summary>An exception with kiln's message.</summary>
        public KilnOutOfMemoryException(string message) : base(message) { }
    }

    /// <summary>IO on a path that does not exist.</summary>
    public class KilnFileNotFoundException : FileNotFoundException, IKilnException
    {
        /// <inheritdoc/>
        public Status Status => Status.IO;
        /// <summary>An exception with kiln's message for the missing path.</summary>
        public KilnFileNotFoundException(string message, string path) : base(message, path) { }
    }

    /// <summary>IO writing into a directory that does not exist.</summary>
    public class KilnDirectoryNotFoundException : DirectoryNotFoundException, IKilnException
    {
        /// <inheritdoc/>
        public Status Status => Status.IO;
        /// <summary>An exception with kiln's message.</summary>
        public KilnDirectoryNotFoundException(string message) : base(message) { }
    }

    /// <summary>IO: a file that exists could not be opened, read or written.</summary>
    public class KilnIOException : IOException, IKilnException
    {
        /// <inheritdoc/>
        public Status Status => Status.IO;
        /// <summary>An exception with kiln's message.</summary>
        public KilnIOException(string message) : base(message) { }
    }

    /// <summary>Format: a file's contents are malformed, truncated or hostile.</summary>
    public class KilnFormatException : FormatException, IKilnException
    {
        /// <inheritdoc/>
        public Status Status => Status.Format;
        /// <summary>An exception with kiln's message.</summary>
        public KilnFormatException(string message) : base(message) { }
    }

    /// <summary>NotSupported: a valid request this build or device cannot do.</summary>
    public class KilnNotSupportedException : NotSupportedException, IKilnException
    {
        /// <inheritdoc/>
        public Status Status => Status.NotSupported;
        /// <summary>An exception with kiln's message.</summary>
        public KilnNotSupportedException(string message) : base(message) { }
    }

    /// <summary>Cancelled: training stopped because a CancellationToken asked.</summary>
    public class KilnOperationCanceledException : OperationCanceledException, IKilnException
    {
        /// <inheritdoc/>
        public Status Status => Status.Cancelled;
        /// <summary>An exception with kiln's message, for token.</summary>
        public KilnOperationCanceledException(string message, CancellationToken token) : base(message, token) { }
    }

    /// <summary>Busy: the object is inside another call (a trainer used from its
    /// own progress report).</summary>
    public class KilnInvalidOperationException : InvalidOperationException, IKilnException
    {
        /// <inheritdoc/>
        public Status Status => Status.Busy;
        /// <summary>An exception with kiln's message.</summary>
        public KilnInvalidOperationException(string message) : base(message) { }
    }

    /// <summary>Numeric: training diverged (a NaN or infinite loss); the updates
    /// made before stay in the model.</summary>
    public class KilnArithmeticException : ArithmeticException, IKilnException
    {
        /// <inheritdoc/>
        public Status Status => Status.Numeric;
        /// <summary>An exception with kiln's message.</summary>
        public KilnArithmeticException(string message) : base(message) { }
    }

    internal static class KilnErrors
    {
        /// <summary>The exception for a failed call: "KILN_ERROR_X: message".
        /// path and written as Native.Check takes them.</summary>
        internal static Exception Create(Status status, string message, string path = null, string written = null,
                                         CancellationToken token = default(CancellationToken))
        {
            string text = Library.StatusName(status) + ": " + message;
            switch (status)
            {
                case Status.InvalidArgument:
                case Status.ShapeMismatch:
                case Status.DTypeMismatch: return new KilnArgumentException(status, text);
                case Status.InvalidHandle: return new KilnObjectDisposedException(text);
                case Status.OutOfMemory: return new KilnOutOfMemoryException(text);
                case Status.IO:
                    if (path != null && !Native.Exists(path)) return new KilnFileNotFoundException(text, path);
                    if (Native.DirectoryMissing(written)) return new KilnDirectoryNotFoundException(text);
                    return new KilnIOException(text);
                case Status.Format: return new KilnFormatException(text);
                case Status.NotSupported: return new KilnNotSupportedException(text);
                case Status.Cancelled: return new KilnOperationCanceledException(text, token);
                case Status.Busy: return new KilnInvalidOperationException(text);
                case Status.Numeric: return new KilnArithmeticException(text);
                default: return new KilnException(status, text);
            }
        }
    }
}
