use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::os::raw::c_int;
use std::ptr::NonNull;

use kiln_sys as sys;

use crate::context::{Context, Device};
use crate::error::{check, Error, Result, Status};
use crate::{create, get};

/// A tensor's element type (kiln_dtype). Displays as kiln names it ("f32").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32 = sys::kiln_dtype_KILN_F32 as isize,
    /// IEEE half precision.
    F16 = sys::kiln_dtype_KILN_F16 as isize,
    /// bfloat16.
    BF16 = sys::kiln_dtype_KILN_BF16 as isize,
    /// 64-bit float.
    F64 = sys::kiln_dtype_KILN_F64 as isize,
    /// 32-bit signed integer.
    I32 = sys::kiln_dtype_KILN_I32 as isize,
    /// 64-bit signed integer.
    I64 = sys::kiln_dtype_KILN_I64 as isize,
    /// Byte.
    U8 = sys::kiln_dtype_KILN_U8 as isize,
}

const DTYPES: [DType; 7] = [DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8];

impl DType {
    pub(crate) fn raw(self) -> sys::kiln_dtype {
        self as sys::kiln_dtype
    }

    pub(crate) fn from_raw(v: sys::kiln_dtype) -> Result<DType> {
        DTYPES.into_iter().find(|d| d.raw() == v).ok_or_else(|| {
            Error::new(Status::NotSupported, format!("dtype {v} is newer than these bindings"))
        })
    }

    /// kiln's name: "f32", "f16", "bf16", "f64", "i32", "i64", "u8".
    pub fn name(self) -> &'static str {
        // SAFETY: static storage; never NULL for a dtype kiln defines.
        unsafe { std::ffi::CStr::from_ptr(sys::kiln_dtype_name(self.raw())) }.to_str().unwrap_or("?")
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        unsafe { sys::kiln_dtype_size(self.raw()) as usize }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type with a kiln dtype of the same layout.
///
/// # Safety
/// `DTYPE`'s elements must have exactly `Self`'s size and representation.
pub unsafe trait Element: Copy + Default {
    /// The kiln dtype of the same layout.
    const DTYPE: DType;
}
unsafe impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
unsafe impl Element for f64 {
    const DTYPE: DType = DType::F64;
}
unsafe impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
unsafe impl Element for i64 {
    const DTYPE: DType = DType::I64;
}
unsafe impl Element for u8 {
    const DTYPE: DType = DType::U8;
}

/// An n-dimensional array on a device, which it owns: no other `Tensor`
/// shares its storage except views that borrow it. Displays as
/// `tensor([2, 3], f32, cuda:0)`.
///
/// Writing takes `&mut`, and a view's borrow keeps its source from being
/// written meanwhile:
///
/// ```compile_fail,E0502
/// # let ctx = kiln::Context::new().unwrap();
/// let mut t = kiln::Tensor::zeros(&ctx, &[2, 2], kiln::DType::F32, kiln::Device::Cpu).unwrap();
/// let view = t.rows(0, 1).unwrap();
/// t.copy_from(&[1.0f32; 4]).unwrap(); // error: `t` is borrowed by `view`
/// drop(view);
/// ```
pub struct Tensor(pub(crate) NonNull<sys::kiln_tensor>);

// SAFETY: kiln.h: tensors that are only read may be used by several threads
// at once; writing takes &mut self here, and no safe path gives two owners of
// one storage; release works from any thread.
unsafe impl Send for Tensor {}
unsafe impl Sync for Tensor {}

impl Drop for Tensor {
    fn drop(&mut self) {
        unsafe { sys::kiln_tensor_release(self.0.as_ptr()) }
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.shape(), self.dtype(), self.device()) {
            (Ok(shape), Ok(dtype), Ok(device)) => write!(f, "tensor({shape:?}, {dtype}, {device})"),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => write!(f, "tensor(<{e}>)"),
        }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("shape", &self.shape().ok())
            .field("dtype", &self.dtype().ok())
            .field("device", &self.device().ok())
            .finish()
    }
}

/// A read-only view (reshape, rows, a model parameter) sharing storage with
/// a source it borrows, so the source cannot be written while it lives.
/// Derefs to `Tensor` for reading; `to`, `try_clone` and the operators give
/// owned copies. Writing through it does not compile:
///
/// ```compile_fail,E0596
/// # let ctx = kiln::Context::new().unwrap();
/// let model = kiln::Model::from_text(&ctx, "4-2", kiln::Device::Cpu).unwrap();
/// let (weight, _) = model.parameter(0).unwrap();
/// weight.copy_from(&[0.0f32; 8]).unwrap(); // error: needs &mut Tensor
/// ```
pub struct View<'a> {
    tensor: Tensor,
    _source: PhantomData<&'a Tensor>,
}

impl Deref for View<'_> {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        &self.tensor
    }
}

impl<'a> View<'a> {
    pub(crate) fn new(tensor: Tensor) -> View<'a> {
        View { tensor, _source: PhantomData }
    }
}

/// A writable view: writes show through in the source, which it borrows
/// mutably. It derefs to `&Tensor` only, never `&mut Tensor`, so the alias
/// cannot be swapped out of the borrow:
///
/// ```compile_fail,E0596
/// # let ctx = kiln::Context::new().unwrap();
/// let mut t = kiln::Tensor::zeros(&ctx, &[2, 2], kiln::DType::F32, kiln::Device::Cpu).unwrap();
/// let mut other = kiln::Tensor::zeros(&ctx, &[1, 2], kiln::DType::F32, kiln::Device::Cpu).unwrap();
/// let mut view = t.rows_mut(0, 1).unwrap();
/// std::mem::swap(&mut *view, &mut other); // error: ViewMut is not DerefMut
/// ```
pub struct ViewMut<'a> {
    tensor: Tensor,
    _source: PhantomData<&'a mut Tensor>,
}

impl Deref for ViewMut<'_> {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        &self.tensor
    }
}

impl<'a> ViewMut<'a> {
    pub(crate) fn new(tensor: Tensor) -> ViewMut<'a> {
        ViewMut { tensor, _source: PhantomData }
    }

    /// Overwrites the viewed elements, and so the source's, with `data`.
    pub fn copy_from<T: Element>(&mut self, data: &[T]) -> Result<()> {
        self.tensor.copy_from(data)
    }
}

macro_rules! view_fmt {
    ($($t:ident),*) => {$(
        impl fmt::Display for $t<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.tensor, f)
            }
        }
        impl fmt::Debug for $t<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple(stringify!($t)).field(&self.tensor).finish()
            }
        }
    )*};
}
view_fmt!(View, ViewMut, PinnedTensor);

/// A CPU tensor in page-locked memory (`Tensor::empty_pinned`). Copies out
/// of it to a GPU (`to`, `Model::predict`, ...) may still be reading it when
/// they return, so it derefs to `&Tensor` only and its one write,
/// `copy_from`, first waits for the work queued on the context's GPUs: a
/// refill never races a copy in flight. It borrows the context it came from
/// for that wait. The unsynchronised write of a plain `Tensor` is out of reach:
///
/// ```compile_fail,E0596
/// # let ctx = kiln::Context::new().unwrap();
/// let mut pinned = kiln::Tensor::empty_pinned(&ctx, &[4], kiln::DType::F32).unwrap();
/// let staging: &mut kiln::Tensor = &mut *pinned; // error: not DerefMut
/// ```
pub struct PinnedTensor<'c> {
    tensor: Tensor,
    ctx: &'c Context,
}

impl Deref for PinnedTensor<'_> {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        &self.tensor
    }
}

impl PinnedTensor<'_> {
    /// Waits for the copies queued from this tensor (all work on the
    /// context's GPUs), then overwrites its elements with `data`.
    pub fn copy_from<T: Element>(&mut self, data: &[T]) -> Result<()> {
        for index in 0..self.ctx.cuda_device_count()? {
            self.ctx.synchronize(Device::Cuda(index))?;
        }
        self.tensor.copy_from(data)
    }
}

/// Declares an operation enum whose discriminants are the generated
/// constants and whose Display is the given lower-case name.
macro_rules! op_enum {
    ($(#[$doc:meta])* $name:ident: $($(#[$vdoc:meta])* $variant:ident = $raw:path, $text:literal;)*) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant = $raw as isize,)*
        }
        impl $name {
            pub(crate) fn raw(self) -> u32 {
                self as u32
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self { $($name::$variant => $text,)* })
            }
        }
    };
}
pub(crate) use op_enum;

op_enum! {
    /// Elementwise operations of two tensors, or a tensor and a scalar.
    BinaryOp:
    /// a + b (all dtypes).
    Add = sys::kiln_binary_op_KILN_BINARY_ADD, "add";
    /// a - b (all dtypes).
    Sub = sys::kiln_binary_op_KILN_BINARY_SUB, "sub";
    /// a * b (all dtypes).
    Mul = sys::kiln_binary_op_KILN_BINARY_MUL, "mul";
    /// a / b (integer division truncates; by zero gives 0).
    Div = sys::kiln_binary_op_KILN_BINARY_DIV, "div";
    /// max(a, b).
    Maximum = sys::kiln_binary_op_KILN_BINARY_MAXIMUM, "maximum";
    /// min(a, b).
    Minimum = sys::kiln_binary_op_KILN_BINARY_MINIMUM, "minimum";
    /// a ^ b (float dtypes).
    Pow = sys::kiln_binary_op_KILN_BINARY_POW, "pow";
}

op_enum! {
    /// Elementwise comparisons (results are U8 0/1).
    CompareOp:
    /// a == b.
    Eq = sys::kiln_compare_op_KILN_COMPARE_EQ, "eq";
    /// a != b.
    Ne = sys::kiln_compare_op_KILN_COMPARE_NE, "ne";
    /// a < b.
    Lt = sys::kiln_compare_op_KILN_COMPARE_LT, "lt";
    /// a <= b.
    Le = sys::kiln_compare_op_KILN_COMPARE_LE, "le";
    /// a > b.
    Gt = sys::kiln_compare_op_KILN_COMPARE_GT, "gt";
    /// a >= b.
    Ge = sys::kiln_compare_op_KILN_COMPARE_GE, "ge";
}

op_enum! {
    /// Elementwise functions.
    UnaryOp:
    /// -a (all dtypes).
    Neg = sys::kiln_unary_op_KILN_UNARY_NEG, "neg";
    /// |a| (all dtypes).
    Abs = sys::kiln_unary_op_KILN_UNARY_ABS, "abs";
    /// e^a.
    Exp = sys::kiln_unary_op_KILN_UNARY_EXP, "exp";
    /// Natural logarithm.
    Log = sys::kiln_unary_op_KILN_UNARY_LOG, "log";
    /// Square root.
    Sqrt = sys::kiln_unary_op_KILN_UNARY_SQRT, "sqrt";
    /// max(a, 0).
    Relu = sys::kiln_unary_op_KILN_UNARY_RELU, "relu";
    /// GELU, the exact (erf) form.
    Gelu = sys::kiln_unary_op_KILN_UNARY_GELU, "gelu";
    /// tanh(a).
    Tanh = sys::kiln_unary_op_KILN_UNARY_TANH, "tanh";
    /// 1 / (1 + e^-a).
    Sigmoid = sys::kiln_unary_op_KILN_UNARY_SIGMOID, "sigmoid";
    /// a, or alpha * a below 0.
    LeakyRelu = sys::kiln_unary_op_KILN_UNARY_LEAKY_RELU, "leaky_relu";
}

op_enum! {
    /// Reductions along one dimension.
    ReduceOp:
    /// Sum (all dtypes).
    Sum = sys::kiln_reduce_op_KILN_REDUCE_SUM, "sum";
    /// Mean (float dtypes).
    Mean = sys::kiln_reduce_op_KILN_REDUCE_MEAN, "mean";
    /// Maximum (all dtypes).
    Max = sys::kiln_reduce_op_KILN_REDUCE_MAX, "max";
    /// Index of the first maximum, as I64.
    Argmax = sys::kiln_reduce_op_KILN_REDUCE_ARGMAX, "argmax";
}

fn tensor(f: impl FnOnce(*mut *mut sys::kiln_tensor) -> sys::kiln_status) -> Result<Tensor> {
    create(f).map(Tensor)
}

fn bytes<T: Element>(data: &[T]) -> i64 {
    std::mem::size_of_val(data) as i64
}

impl Tensor {
    pub(crate) fn ptr(&self) -> *mut sys::kiln_tensor {
        self.0.as_ptr()
    }

    /// Copies `data` into a new tensor of `shape` on `device`; the dtype
    /// follows `T`.
    pub fn from_slice<T: Element>(ctx: &Context, data: &[T], shape: &[i64], device: Device) -> Result<Tensor> {
        tensor(|p| unsafe {
            sys::kiln_tensor_from_host(ctx.ptr(), data.as_ptr().cast(), bytes(data), shape.as_ptr(), shape.len() as i64,
                                       T::DTYPE.raw(), device.raw(), p)
        })
    }

    /// A tensor of `shape` whose contents are unspecified (torch.empty).
    pub fn empty(ctx: &Context, shape: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_empty(ctx.ptr(), shape.as_ptr(), shape.len() as i64, dtype.raw(), device.raw(), p) })
    }

    /// A CPU tensor in page-locked memory (ordinary memory without CUDA), from
    /// which copies to a GPU are asynchronous: see `PinnedTensor`.
    pub fn empty_pinned<'c>(ctx: &'c Context, shape: &[i64], dtype: DType) -> Result<PinnedTensor<'c>> {
        let t = tensor(|p| unsafe {
            sys::kiln_tensor_empty_pinned(ctx.ptr(), shape.as_ptr(), shape.len() as i64, dtype.raw(), p)
        })?;
        Ok(PinnedTensor { tensor: t, ctx })
    }

    /// A tensor of zeros.
    pub fn zeros(ctx: &Context, shape: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_zeros(ctx.ptr(), shape.as_ptr(), shape.len() as i64, dtype.raw(), device.raw(), p) })
    }

    /// A tensor of ones.
    pub fn ones(ctx: &Context, shape: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_ones(ctx.ptr(), shape.as_ptr(), shape.len() as i64, dtype.raw(), device.raw(), p) })
    }

    /// A tensor filled with `value` (in range for an integer dtype).
    pub fn full(ctx: &Context, shape: &[i64], dtype: DType, device: Device, value: f64) -> Result<Tensor> {
        tensor(|p| unsafe {
            sys::kiln_tensor_full(ctx.ptr(), shape.as_ptr(), shape.len() as i64, dtype.raw(), device.raw(), value, p)
        })
    }

    /// Uniform in [0, 1), from the context's generator.
    pub fn rand(ctx: &Context, shape: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_rand(ctx.ptr(), shape.as_ptr(), shape.len() as i64, dtype.raw(), device.raw(), p) })
    }

    /// Standard normal, from the context's generator.
    pub fn randn(ctx: &Context, shape: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_randn(ctx.ptr(), shape.as_ptr(), shape.len() as i64, dtype.raw(), device.raw(), p) })
    }

    /// start, start + step, ... below end.
    pub fn arange(ctx: &Context, start: f64, end: f64, step: f64, dtype: DType, device: Device) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_arange(ctx.ptr(), start, end, step, dtype.raw(), device.raw(), p) })
    }

    /// Copies the elements to a Vec; `T` must match the dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let dtype = self.dtype()?;
        if dtype != T::DTYPE {
            return Err(Error::new(Status::DTypeMismatch, format!("tensor is {dtype}, not {}", T::DTYPE)));
        }
        let mut out = vec![T::default(); self.numel()? as usize];
        check(unsafe { sys::kiln_tensor_copy_to_host(self.ptr(), out.as_mut_ptr().cast(), bytes(&out)) })?;
        Ok(out)
    }

    /// Overwrites the elements with `data` (same dtype and count).
    pub fn copy_from<T: Element>(&mut self, data: &[T]) -> Result<()> {
        if self.dtype()? != T::DTYPE {
            return Err(Error::new(Status::DTypeMismatch, format!("tensor is {}, not {}", self.dtype()?, T::DTYPE)));
        }
        check(unsafe { sys::kiln_tensor_copy_from_host(self.ptr(), data.as_ptr().cast(), bytes(data)) })
    }

    /// The size of each dimension.
    pub fn shape(&self) -> Result<Vec<i64>> {
        let ndim = self.ndim()?;
        let mut shape = vec![0i64; ndim as usize];
        check(unsafe { sys::kiln_tensor_shape(self.ptr(), shape.as_mut_ptr(), ndim) })?;
        Ok(shape)
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_tensor_ndim(self.ptr(), p) })
    }

    /// The size of dimension `dim`; negative dims count from the end.
    pub fn dim(&self, dim: i64) -> Result<i64> {
        get(|p| unsafe { sys::kiln_tensor_dim(self.ptr(), dim, p) })
    }

    /// The number of elements.
    pub fn numel(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_tensor_numel(self.ptr(), p) })
    }

    /// The element type.
    pub fn dtype(&self) -> Result<DType> {
        DType::from_raw(get(|p| unsafe { sys::kiln_tensor_dtype(self.ptr(), p) })?)
    }

    /// The device holding the elements.
    pub fn device(&self) -> Result<Device> {
        let mut d = sys::kiln_device { kind: 0, index: 0 };
        check(unsafe { sys::kiln_tensor_device(self.ptr(), &mut d) })?;
        Ok(Device::from_raw(d))
    }

    /// PyTorch's `get_device()`: the CUDA index, or -1 on the CPU.
    pub fn get_device(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_tensor_get_device(self.ptr(), p) })
    }

    /// Whether the tensor was made by `empty_pinned` (views answer for their
    /// source).
    pub fn is_pinned(&self) -> Result<bool> {
        get(|p: *mut c_int| unsafe { sys::kiln_tensor_is_pinned(self.ptr(), p) }).map(|v| v != 0)
    }

    /// The value of a one-element tensor.
    pub fn item(&self) -> Result<f64> {
        get(|p| unsafe { sys::kiln_tensor_item(self.ptr(), p) })
    }

    /// A tensor with these elements on `device`: always a new one of its own.
    /// Unlike kiln_tensor_to, which hands back the same storage when the
    /// tensor is already there, a tensor on its own device is copied, so the
    /// result can be written without changing `self` (which others may be
    /// reading through `&`). To move without that copy, `into_device`.
    pub fn to(&self, device: Device) -> Result<Tensor> {
        if self.device()? == device {
            return self.try_clone();
        }
        tensor(|p| unsafe { sys::kiln_tensor_to(self.ptr(), device.raw(), p) })
    }

    /// This tensor on `device`: itself, without a copy, when it is there
    /// already (it is owned, so nothing else sees the storage), else a copy.
    pub fn into_device(self, device: Device) -> Result<Tensor> {
        if self.device()? == device {
            return Ok(self);
        }
        tensor(|p| unsafe { sys::kiln_tensor_to(self.ptr(), device.raw(), p) })
    }

    /// A copy converted to `dtype`; float to int truncates toward zero.
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_cast(self.ptr(), dtype.raw(), p) })
    }

    /// A contiguous copy on the same device.
    pub fn try_clone(&self) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_clone(self.ptr(), p) })
    }

    /// A view with another shape of the same size (one entry may be -1).
    pub fn reshape(&self, shape: &[i64]) -> Result<View<'_>> {
        tensor(|p| unsafe { sys::kiln_tensor_reshape(self.ptr(), shape.as_ptr(), shape.len() as i64, p) }).map(View::new)
    }

    /// A writable view with another shape of the same size.
    pub fn reshape_mut(&mut self, shape: &[i64]) -> Result<ViewMut<'_>> {
        tensor(|p| unsafe { sys::kiln_tensor_reshape(self.ptr(), shape.as_ptr(), shape.len() as i64, p) }).map(ViewMut::new)
    }

    /// A view of rows [start, end) of the first dimension.
    pub fn rows(&self, start: i64, end: i64) -> Result<View<'_>> {
        tensor(|p| unsafe { sys::kiln_tensor_rows(self.ptr(), start, end, p) }).map(View::new)
    }

    /// A writable view of rows [start, end).
    pub fn rows_mut(&mut self, start: i64, end: i64) -> Result<ViewMut<'_>> {
        tensor(|p| unsafe { sys::kiln_tensor_rows(self.ptr(), start, end, p) }).map(ViewMut::new)
    }

    /// `self op other` elementwise with NumPy broadcasting (the operators
    /// `+ - * /` call this).
    pub fn binary(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_binary(op.raw(), self.ptr(), other.ptr(), p) })
    }

    /// `self op scalar` elementwise (`&t * 2.0` calls this).
    pub fn scalar(&self, op: BinaryOp, scalar: f64) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_scalar(op.raw(), self.ptr(), scalar, p) })
    }

    /// `self op other` elementwise with broadcasting; U8 0/1.
    pub fn compare(&self, op: CompareOp, other: &Tensor) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_compare(op.raw(), self.ptr(), other.ptr(), p) })
    }

    /// `op(self)`; `alpha` is LeakyReLU's slope, ignored by the others
    /// (`-&t` is `Neg`).
    pub fn unary(&self, op: UnaryOp, alpha: f64) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_unary(op.raw(), self.ptr(), alpha, p) })
    }

    /// Softmax along `dim` (negative counts from the end).
    pub fn softmax(&self, dim: i64) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_softmax(self.ptr(), dim, p) })
    }

    /// Log-softmax along `dim`.
    pub fn log_softmax(&self, dim: i64) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_log_softmax(self.ptr(), dim, p) })
    }

    /// Reduces `dim`; `keepdim` keeps it with size 1.
    pub fn reduce(&self, op: ReduceOp, dim: i64, keepdim: bool) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_reduce(op.raw(), self.ptr(), dim, keepdim as c_int, p) })
    }

    /// Matrix product `self x other`.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_matmul(self.ptr(), other.ptr(), p) })
    }
}

