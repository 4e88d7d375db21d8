using System;
using System.Runtime.InteropServices;

namespace Kiln
{
    /// <summary>An n-dimensional array on a device. Views (Reshape, Rows) share
    /// storage with their source and keep it alive. Reading from several
    /// threads is safe; writing is for one thread at a time.</summary>
    public sealed class Tensor : IDisposable
    {
        internal readonly TensorHandle Handle;

        internal Tensor(TensorHandle handle) { Handle = handle; }

        /// <summary>A CPU tensor holding a copy of data.</summary>
        public Tensor(Context ctx, float[] data, params long[] shape) : this(FromArray(ctx, data, Device.Cpu, shape)) { }
        public Tensor(Context ctx, double[] data, params long[] shape) : this(FromArray(ctx, data, Device.Cpu, shape)) { }
        public Tensor(Context ctx, int[] data, params long[] shape) : this(FromArray(ctx, data, Device.Cpu, shape)) { }
        public Tensor(Context ctx, long[] data, params long[] shape) : this(FromArray(ctx, data, Device.Cpu, shape)) { }
        public Tensor(Context ctx, byte[] data, params long[] shape) : this(FromArray(ctx, data, Device.Cpu, shape)) { }

        private Tensor(Tensor made) : this(made.Handle) { }

        public void Dispose() => Handle.Dispose();

        static DType DTypeOf(Type t)
        {
            if (t == typeof(float)) return DType.F32;
            if (t == typeof(double)) return DType.F64;
            if (t == typeof(int)) return DType.I32;
            if (t == typeof(long)) return DType.I64;
            if (t == typeof(byte)) return DType.U8;
            throw new ArgumentException("kiln has no dtype for " + t);
        }

        /// <summary>Pins a primitive array for the duration of one native call;
        /// kiln copies from or into it and keeps no pointer.</summary>
        static void WithPinned(Array data, Action<IntPtr, long> call)
        {
            var pin = GCHandle.Alloc(data, GCHandleType.Pinned);
            try { call(pin.AddrOfPinnedObject(), Buffer.ByteLength(data)); }
            finally { pin.Free(); }
        }

        /// <summary>A copy of data (float, double, int, long or byte elements) of
        /// the given shape on device.</summary>
        public static Tensor FromArray(Context ctx, Array data, Device device, params long[] shape)
        {
            DType dtype = DTypeOf(data.GetType().GetElementType());
            TensorHandle h = null;
            WithPinned(data, (p, n) => NativeMethods.tensor_from_host(ctx.Handle, p, n, shape, shape.Length, dtype, device, out h));
            return new Tensor(h);
        }

        public static Tensor Zeros(Context ctx, DType dtype, Device device, params long[] shape)
        {
            NativeMethods.tensor_zeros(ctx.Handle, shape, shape.Length, dtype, device, out TensorHandle h);
            return new Tensor(h);
        }

        public static Tensor Ones(Context ctx, DType dtype, Device device, params long[] shape)
        {
            NativeMethods.tensor_ones(ctx.Handle, shape, shape.Length, dtype, device, out TensorHandle h);
            return new Tensor(h);
        }

        public static Tensor Full(Context ctx, double value, DType dtype, Device device, params long[] shape)
        {
            NativeMethods.tensor_full(ctx.Handle, shape, shape.Length, dtype, device, value, out TensorHandle h);
            return new Tensor(h);
        }

        /// <summary>Uniform in [0, 1), from the context's generator.</summary>
        public static Tensor Rand(Context ctx, DType dtype, Device device, params long[] shape)
        {
            NativeMethods.tensor_rand(ctx.Handle, shape, shape.Length, dtype, device, out TensorHandle h);
            return new Tensor(h);
        }

        /// <summary>Standard normal, from the context's generator.</summary>
        public static Tensor Randn(Context ctx, DType dtype, Device device, params long[] shape)
        {
            NativeMethods.tensor_randn(ctx.Handle, shape, shape.Length, dtype, device, out TensorHandle h);
            return new Tensor(h);
        }

        public static Tensor Arange(Context ctx, double start, double end, double step, DType dtype, Device device)
        {
            NativeMethods.tensor_arange(ctx.Handle, start, end, step, dtype, device, out TensorHandle h);
            return new Tensor(h);
        }

        /// <summary>A copy of the elements; T must match the dtype.</summary>
        public T[] ToArray<T>() where T : struct
        {
            if (DTypeOf(typeof(T)) != DType)
                throw new KilnException(Status.DTypeMismatch, "tensor is " + DType + ", not " + typeof(T).Name);
            var result = new T[NumEl];
            WithPinned(result, (p, n) => NativeMethods.tensor_copy_to_host(Handle, p, n));
            return result;
        }

        /// <summary>Overwrites the elements with data (same dtype and count).</summary>
        public void CopyFrom(Array data) =>
            WithPinned(data, (p, n) => NativeMethods.tensor_copy_from_host(Handle, p, n));

        public long[] Shape
        {
            get
            {
                NativeMethods.tensor_ndim(Handle, out long ndim);
                var shape = new long[ndim];
                NativeMethods.tensor_shape(Handle, shape, ndim);
                return shape;
            }
        }

        public long NumEl { get { NativeMethods.tensor_numel(Handle, out long n); return n; } }
        public DType DType { get { NativeMethods.tensor_dtype(Handle, out DType t); return t; } }
        public Device Device { get { NativeMethods.tensor_device(Handle, out Device d); return d; } }

        /// <summary>The value of a one-element tensor.</summary>
        public double Item() { NativeMethods.tensor_item(Handle, out double v); return v; }

        /// <summary>A copy on device (the same tensor, new handle, when already there).</summary>
        public Tensor To(Device device) { NativeMethods.tensor_to(Handle, device, out TensorHandle h); return new Tensor(h); }
        public Tensor Cast(DType dtype) { NativeMethods.tensor_cast(Handle, dtype, out TensorHandle h); return new Tensor(h); }
        public Tensor Clone() { NativeMethods.tensor_clone(Handle, out TensorHandle h); return new Tensor(h); }

        /// <summary>A view with another shape of the same size; one entry may be -1.</summary>
        public Tensor Reshape(params long[] shape)
        {
            NativeMethods.tensor_reshape(Handle, shape, shape.Length, out TensorHandle h);
            return new Tensor(h);
        }

        /// <summary>A view of rows [start, end) of the first dimension.</summary>
        public Tensor Rows(long start, long end) { NativeMethods.tensor_rows(Handle, start, end, out TensorHandle h); return new Tensor(h); }

        public Tensor Binary(BinaryOp op, Tensor other) { NativeMethods.tensor_binary(op, Handle, other.Handle, out TensorHandle h); return new Tensor(h); }
        public Tensor Scalar(BinaryOp op, double s) { NativeMethods.tensor_scalar(op, Handle, s, out TensorHandle h); return new Tensor(h); }
        public Tensor Compare(CompareOp op, Tensor other) { NativeMethods.tensor_compare(op, Handle, other.Handle, out TensorHandle h); return new Tensor(h); }
        public Tensor Unary(UnaryOp op, double alpha = 0.01) { NativeMethods.tensor_unary(op, Handle, alpha, out TensorHandle h); return new Tensor(h); }
        public Tensor Softmax(long dim = -1) { NativeMethods.tensor_softmax(Handle, dim, out TensorHandle h); return new Tensor(h); }
        public Tensor LogSoftmax(long dim = -1) { NativeMethods.tensor_log_softmax(Handle, dim, out TensorHandle h); return new Tensor(h); }
        public Tensor Reduce(ReduceOp op, long dim, bool keepDim = false) { NativeMethods.tensor_reduce(op, Handle, dim, keepDim ? 1 : 0, out TensorHandle h); return new Tensor(h); }
        public Tensor Matmul(Tensor other) { NativeMethods.tensor_matmul(Handle, other.Handle, out TensorHandle h); return new Tensor(h); }

        public static Tensor operator +(Tensor a, Tensor b) => a.Binary(BinaryOp.Add, b);
        public static Tensor operator -(Tensor a, Tensor b) => a.Binary(BinaryOp.Sub, b);
        public static Tensor operator *(Tensor a, Tensor b) => a.Binary(BinaryOp.Mul, b);
        public static Tensor operator /(Tensor a, Tensor b) => a.Binary(BinaryOp.Div, b);
    }
}
