using System;
using System.Runtime.InteropServices;

namespace Kiln
{
    /// <summary>An n-dimensional array on a device. Views (Reshape, Rows,
    /// Model.Parameter) share storage with their source and keep it alive.
    /// Reading from several threads is safe; writing is for one thread at a
    /// time. Dispose releases the storage at once; a tensor never disposed is
    /// released by its finalizer, and the garbage collector is told its size,
    /// so a loop that forgets Dispose still collects (see DisposeScope for
    /// operator chains).</summary>
    public sealed class Tensor : IDisposable
    {
        readonly TensorHandle handle;
        internal DisposeScope Scope;

        /// <summary>Wraps a new handle. storage: the handle owns new storage (not a
        /// view), whose size the garbage collector is told.</summary>
        internal Tensor(TensorHandle handle, bool storage = true)
        {
            this.handle = handle;
            if (storage) handle.Track(NumEl * Library.DTypeSize(DType));
            DisposeScope.Register(this);
        }

        internal TensorHandle Handle => Arg.Live(handle, this);

        /// <summary>Releases the tensor's reference to its storage (views and
        /// datasets keep theirs). A second Dispose does nothing.</summary>
        public void Dispose() => handle.Dispose();

        /// <summary>Whether Dispose was called.</summary>
        public bool IsDisposed => handle.IsClosed;

        /// <summary>The dtype of T: float F32, double F64, int I32, long I64, byte
        /// U8. mcs (C# 7.2) has no <c>unmanaged</c> constraint, so the generic
        /// methods take <c>where T : struct</c> and refuse other types here.</summary>
        internal static DType DTypeOf<T>()
        {
            var t = typeof(T);
            if (t == typeof(float)) return DType.F32;
            if (t == typeof(double)) return DType.F64;
            if (t == typeof(int)) return DType.I32;
            if (t == typeof(long)) return DType.I64;
            if (t == typeof(byte)) return DType.U8;
            throw new ArgumentException("kiln has no dtype for " + t + ": use float, double, int, long or byte");
        }

        /// <summary>A copy of data (float, double, int, long or byte elements)
        /// with the given shape on device (null: the CPU). The element count must
        /// match the shape (ArgumentException otherwise).</summary>
        public static unsafe Tensor FromArray<T>(Context ctx, ReadOnlySpan<T> data, long[] shape, Device? device = null)
            where T : struct
        {
            DType dtype = DTypeOf<T>();
            var bytes = MemoryMarshal.AsBytes(data);
            fixed (byte* p = &MemoryMarshal.GetReference(bytes))
            {
                Native.Check(NativeMethods.kiln_tensor_from_host(Arg.Of(ctx, nameof(ctx)), (IntPtr)p, bytes.Length, shape, Rank(shape),
                                                                 dtype, device ?? Device.Cpu, out TensorHandle h));
                return new Tensor(h);
            }
        }

        /// <summary>A CPU tensor holding a copy of data with the given shape; no
        /// shape gives a 1-D tensor of data.Length elements.</summary>
        public static Tensor FromArray<T>(Context ctx, T[] data, params long[] shape) where T : struct =>
            FromArray(ctx, new ReadOnlySpan<T>(Arg.NotNull(data, nameof(data))),
                      Arg.NotNull(shape, nameof(shape)).Length == 0 ? new long[] { data.Length } : shape);

        static long Rank(long[] shape) => Arg.NotNull(shape, nameof(shape)).Length;

        delegate Status Creator(ContextHandle ctx, long[] shape, long ndim, DType dtype, Device device, out TensorHandle h);

        static Tensor Create(Creator create, Context ctx, DType dtype, Device device, long[] shape)
        {
            Native.Check(create(Arg.Of(ctx, nameof(ctx)), shape, Rank(shape), dtype, device, out TensorHandle h));
            return new Tensor(h);
        }

        /// <summary>An uninitialised tensor.</summary>
        public static Tensor Empty(Context ctx, DType dtype, Device device, params long[] shape) =>
            Create(NativeMethods.kiln_tensor_empty, ctx, dtype, device, shape);

        /// <summary>A CPU tensor in page-locked memory (ordinary memory without
        /// CUDA): To(a GPU) from it is asynchronous, so call
        /// Context.Synchronize before changing its contents again.</summary>
        public static Tensor EmptyPinned(Context ctx, DType dtype, params long[] shape)
        {
            Native.Check(NativeMethods.kiln_tensor_empty_pinned(Arg.Of(ctx, nameof(ctx)), shape, Rank(shape), dtype, out TensorHandle h));
            return new Tensor(h);
        }

        /// <summary>A tensor of zeros.</summary>
        public static Tensor Zeros(Context ctx, DType dtype, Device device, params long[] shape) =>
            Create(NativeMethods.kiln_tensor_zeros, ctx, dtype, device, shape);

        /// <summary>A tensor of ones.</summary>
        public static Tensor Ones(Context ctx, DType dtype, Device device, params long[] shape) =>
            Create(NativeMethods.kiln_tensor_ones, ctx, dtype, device, shape);

        /// <summary>A tensor filled with value (which must fit an integer dtype).</summary>
        public static Tensor Full(Context ctx, double value, DType dtype, Device device, params long[] shape)
        {
            Native.Check(NativeMethods.kiln_tensor_full(Arg.Of(ctx, nameof(ctx)), shape, Rank(shape), dtype, device, value, out TensorHandle h));
            return new Tensor(h);
        }

        /// <summary>Uniform in [0, 1), from the context's generator (float dtypes).</summary>
        public static Tensor Rand(Context ctx, DType dtype, Device device, params long[] shape) =>
            Create(NativeMethods.kiln_tensor_rand, ctx, dtype, device, shape);

        /// <summary>Standard normal, from the context's generator (float dtypes).</summary>
        public static Tensor Randn(Context ctx, DType dtype, Device device, params long[] shape) =>
            Create(NativeMethods.kiln_tensor_randn, ctx, dtype, device, shape);

        /// <summary>start, start+step, ... below end (above it for a negative step).</summary>
        public static Tensor Arange(Context ctx, double start, double end, double step, DType dtype, Device device)
        {
            Native.Check(NativeMethods.kiln_tensor_arange(Arg.Of(ctx, nameof(ctx)), start, end, step, dtype, device, out TensorHandle h));
            return new Tensor(h);
        }

        void CheckElement<T>()
        {
            DType want = DTypeOf<T>();
            if (want != DType)
                throw new KilnArgumentException(Status.DTypeMismatch, "tensor is " + Library.DTypeName(DType) + ", not " +
                                                typeof(T).Name + " (" + Library.DTypeName(want) + ")");
        }

        /// <summary>A copy of the elements; T must match the dtype.</summary>
        public T[] ToArray<T>() where T : struct
        {
            CheckElement<T>();
            var result = new T[NumEl];
            CopyTo(new Span<T>(result));
            return result;
        }

        /// <summary>Copies the elements into destination, whose length must be
        /// NumEl; waits for pending device work on the tensor.</summary>
        public unsafe void CopyTo<T>(Span<T> destination) where T : struct
        {
            CheckElement<T>();
            var bytes = MemoryMarshal.AsBytes(destination);
            fixed (byte* p = &MemoryMarshal.GetReference(bytes))
                Native.Check(NativeMethods.kiln_tensor_copy_to_host(Handle, (IntPtr)p, bytes.Length));
        }

        /// <summary>Overwrites the elements with source (same dtype and count);
        /// views write through to the storage they share.</summary>
        public unsafe void CopyFrom<T>(ReadOnlySpan<T> source) where T : struct
        {
            CheckElement<T>();
            var bytes = MemoryMarshal.AsBytes(source);
            fixed (byte* p = &MemoryMarshal.GetReference(bytes))
                Native.Check(NativeMethods.kiln_tensor_copy_from_host(Handle, (IntPtr)p, bytes.Length));
        }

        /// <summary>The size of each dimension.</summary>
        public long[] Shape
        {
            get
            {
                var shape = new long[NDim];
                Native.Check(NativeMethods.kiln_tensor_shape(Handle, shape, shape.Length));
                return shape;
            }
        }

        /// <summary>The number of dimensions.</summary>
        public long NDim { get { Native.Check(NativeMethods.kiln_tensor_ndim(Handle, out long n)); return n; } }

        /// <summary>The size of dimension dim (negative counts from the end).</summary>
        public long Dim(long dim) { Native.Check(NativeMethods.kiln_tensor_dim(Handle, dim, out long n)); return n; }

        /// <summary>The number of elements.</summary>
        public long NumEl { get { Native.Check(NativeMethods.kiln_tensor_numel(Handle, out long n)); return n; } }

        /// <summary>The element type.</summary>
        public DType DType { get { Native.Check(NativeMethods.kiln_tensor_dtype(Handle, out DType t)); return t; } }

        /// <summary>Where the tensor lives.</summary>
        public Device Device { get { Native.Check(NativeMethods.kiln_tensor_device(Handle, out Device d)); return d; } }

        /// <summary>PyTorch's get_device(): the GPU's index, -1 on the CPU.</summary>
        public long GetDevice() { Native.Check(NativeMethods.kiln_tensor_get_device(Handle, out long i)); return i; }

        /// <summary>Whether the tensor was made by EmptyPinned (views share the answer).</summary>
        public bool IsPinned { get { Native.Check(NativeMethods.kiln_tensor_is_pinned(Handle, out int v)); return v != 0; } }

        /// <summary>The value of a one-element tensor.</summary>
        public double Item() { Native.Check(NativeMethods.kiln_tensor_item(Handle, out double v)); return v; }

        delegate Status Unary1(TensorHandle a, out TensorHandle h);

        Tensor Make(Unary1 op, bool storage = true)
        {
            Native.Check(op(Handle, out TensorHandle h));
            return new Tensor(h, storage);
        }

        /// <summary>The tensor on device: a copy, or a new handle to the same
        /// storage when it is already there (PyTorch's .to(device)).</summary>
        public Tensor To(Device device) => Make((TensorHandle a, out TensorHandle h) => NativeMethods.kiln_tensor_to(a, device, out h));

        /// <summary>A copy converted to dtype; float to integer truncates toward zero.</summary>
        public Tensor Cast(DType dtype) => Make((TensorHandle a, out TensorHandle h) => NativeMethods.kiln_tensor_cast(a, dtype, out h));

        /// <summary>A contiguous copy on the same device.</summary>
        public Tensor Clone() => Make(NativeMethods.kiln_tensor_clone);

        /// <summary>A view with another shape of the same size; one entry may be -1.</summary>
        public Tensor Reshape(params long[] shape) =>
            Make((TensorHandle a, out TensorHandle h) => NativeMethods.kiln_tensor_reshape(a, shape, Rank(shape), out h), false);

        /// <summary>A view of rows [start, end) of the first dimension.</summary>
        public Tensor Rows(long start, long end) =>
            Make((TensorHandle a, out TensorHandle h) => NativeMethods.kiln_tensor_rows(a, start, end, out h), false);

        /// <summary>this op other, elementwise with NumPy broadcasting (one device, one dtype).</summary>
        public Tensor Binary(BinaryOp op, Tensor other) =>
            Make((TensorHandle a, out TensorHandle h) => NativeMethods.kiln_tensor_binary(op, a, Arg.Of(other, nameof(other)), out h));

        /// <summary>this op scalar, elementwise (scalar converted to the dtype).</summary>
        public Tensor Scalar(BinaryOp op, double scalar) =>
            Make((TensorHandle a, out TensorHandle h) => NativeMethods.kiln_tensor_scalar(op, a, scalar, out h));

        /// <summary>Elementwise comparison with broadcasting; u8 0 or 1.</summary>
        public Tensor Compare(CompareOp op, Tensor other) =>
            Make((TensorHandle a, out TensorHandle h) => NativeMethods.kiln_tensor_compare(op, a, Arg.Of(other, nameof(other)), out h));

        /// <summary>op(this), elementwise; alpha is LeakyRelu's negative slope.</summary>
        public Tensor Unary(UnaryOp op, double alpha = 0.01) =>
            Make((TensorHandle a, out TensorHandle h) => NativeMethods.kiln_tensor_unary(op, a, alpha, out h));

        /// <summary>Softmax along dim (negative counts from the end).</summary>
        public Tensor Softmax(long dim = -1) =>
            Make((TensorHandle a, out TensorHandle h) => NativeMethods.kiln_tensor_softmax(a, dim, out h));

        /// <summary>Log-softmax along dim (negative counts from the end).</summary>
        public Tensor LogSoftmax(long dim = -1) =>
            Make((TensorHandle a, out TensorHandle h) => NativeMethods.kiln_tensor_log_softmax(a, dim, out h));

        /// <summary>Reduces dimension dim; keepDim keeps it with size 1. Argmax gives i64.</summary>
        public Tensor Reduce(ReduceOp op, long dim, bool keepDim = false) =>
            Make((TensorHandle a, out TensorHandle h) => NativeMethods.kiln_tensor_reduce(op, a, dim, keepDim ? 1 : 0, out h));

        /// <summary>The matrix product [m, k] x [k, n] (1-D operands as NumPy).</summary>
        public Tensor Matmul(Tensor other) =>
            Make((TensorHandle a, out TensorHandle h) => NativeMethods.kiln_tensor_matmul(a, Arg.Of(other, nameof(other)), out h));

        // The operators' operands, checked under the operators' parameter names.
        static Tensor Apply(BinaryOp op, Tensor a, Tensor b) => Arg.NotNull(a, nameof(a)).Binary(op, Arg.NotNull(b, nameof(b)));
        static Tensor Apply(BinaryOp op, Tensor a, double s) => Arg.NotNull(a, nameof(a)).Scalar(op, s);

        /// <summary>Elementwise sum with broadcasting.</summary>
        public static Tensor operator +(Tensor a, Tensor b) => Apply(BinaryOp.Add, a, b);
        /// <summary>Elementwise difference with broadcasting.</summary>
        public static Tensor operator -(Tensor a, Tensor b) => Apply(BinaryOp.Sub, a, b);
        /// <summary>Elementwise product with broadcasting.</summary>
        public static Tensor operator *(Tensor a, Tensor b) => Apply(BinaryOp.Mul, a, b);
        /// <summary>Elementwise quotient with broadcasting (integers truncate; x/0 is 0).</summary>
        public static Tensor operator /(Tensor a, Tensor b) => Apply(BinaryOp.Div, a, b);
        /// <summary>Adds a scalar.</summary>
        public static Tensor operator +(Tensor a, double s) => Apply(BinaryOp.Add, a, s);
        /// <summary>Subtracts a scalar.</summary>
        public static Tensor operator -(Tensor a, double s) => Apply(BinaryOp.Sub, a, s);
        /// <summary>Multiplies by a scalar.</summary>
        public static Tensor operator *(Tensor a, double s) => Apply(BinaryOp.Mul, a, s);
        /// <summary>Divides by a scalar.</summary>
        public static Tensor operator /(Tensor a, double s) => Apply(BinaryOp.Div, a, s);
        /// <summary>Elementwise negation.</summary>
        public static Tensor operator -(Tensor a) => Arg.NotNull(a, nameof(a)).Unary(UnaryOp.Neg);

        /// <summary>Moves this tensor from the innermost DisposeScope to the one
        /// around it (or out of all of them): the value an operator chain returns.</summary>
        public Tensor MoveToOuterDisposeScope()
        {
            Scope?.MoveToOuter(this);
            return this;
        }

        /// <summary>Takes this tensor out of its DisposeScope: the caller disposes it.</summary>
        public Tensor DetachFromDisposeScope()
        {
            Scope?.Detach(this);
            return this;
        }

        /// <summary>"Tensor(shape=[2, 3], dtype=f32, device=cpu)".</summary>
        public override string ToString()
        {
            if (handle.IsClosed) return "Tensor(disposed)";
            return "Tensor(shape=[" + string.Join(", ", Shape) + "], dtype=" + Library.DTypeName(DType) +
                   ", device=" + Device + ")";
        }
    }
}
