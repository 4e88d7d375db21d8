using System;
using System.Collections.Generic;

namespace Kiln
{
    /// <summary>Disposes, when it is disposed, every tensor created on this
    /// thread while it was the innermost scope: the intermediates of operator
    /// chains such as <c>a + b * c</c>, which have no variable to dispose
    /// (TorchSharp's NewDisposeScope). Keep a result with
    /// Tensor.MoveToOuterDisposeScope or DetachFromDisposeScope. Scopes nest and
    /// must be disposed innermost first, on the thread that made them; tensors
    /// made on other threads are not in them.
    /// <code>
    /// using (new DisposeScope())
    ///     result = (a + b * c).Softmax().MoveToOuterDisposeScope();
    /// </code></summary>
    public sealed class DisposeScope : IDisposable
    {
        [ThreadStatic] static DisposeScope current;
        readonly DisposeScope outer;
        readonly HashSet<Tensor> tensors = new HashSet<Tensor>();
        bool disposed;

        /// <summary>Opens a scope inside the current one (if any) on this thread.</summary>
        public DisposeScope()
        {
            outer = current;
            current = this;
        }

        /// <summary>The innermost open scope of this thread, or null.</summary>
        public static DisposeScope Current => current;

        /// <summary>How many tensors the scope will dispose.</summary>
        public int Count => tensors.Count;

        internal static void Register(Tensor t) => current?.Add(t);

        void Add(Tensor t)
        {
            t.Scope = this;
            tensors.Add(t);
        }

        internal void MoveToOuter(Tensor t)
        {
            if (!tensors.Remove(t)) return;
            t.Scope = null;
            outer?.Add(t);
        }

        internal void Detach(Tensor t)
        {
            if (tensors.Remove(t)) t.Scope = null;
        }

        /// <summary>Disposes the scope's tensors and makes the outer scope current.
        /// InvalidOperationException when an inner scope is still open.</summary>
        public void Dispose()
        {
            if (disposed) return;
            if (current != this)
                throw new InvalidOperationException("a DisposeScope must be disposed innermost first, on its own thread");
            disposed = true;
            current = outer;
            foreach (var t in tensors)
            {
                t.Scope = null;
                t.Dispose();
            }
            tensors.Clear();
        }
    }
}
