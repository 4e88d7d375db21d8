using System;

namespace Kiln
{
    /// <summary>An IProgress&lt;T&gt; that calls its handler at once, on the thread
    /// that reports: for Trainer.Fit, the thread that called Fit, in the order of
    /// the reports, before the next batch runs. So a handler that prints sees the
    /// epochs in order, and a CancellationTokenSource it cancels in epoch N stops
    /// training after epoch N. (System.Progress&lt;T&gt; posts each report to the
    /// SynchronizationContext captured when it was made, which in a console program
    /// is the thread pool: reports then arrive out of order, late, or after Fit has
    /// returned.) The handler must not train the same trainer (Busy).</summary>
    public sealed class SynchronousProgress<T> : IProgress<T>
    {
        readonly Action<T> handler;

        /// <summary>A progress that calls handler with each report.</summary>
        public SynchronousProgress(Action<T> handler) =>
            this.handler = handler ?? throw new ArgumentNullException(nameof(handler));

        /// <summary>Calls the handler with value, on this thread; what it throws
        /// propagates (Fit stops and rethrows it).</summary>
        public void Report(T value) => handler(value);
    }
}
