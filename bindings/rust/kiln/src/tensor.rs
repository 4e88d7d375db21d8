use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use kiln_sys as sys;

use crate::context::{Context, Device};
use crate::error::{check, Error, Result, Status};
use crate::{create, get};

/// A tensor's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32 = 0,
    F16 = 1,
    BF16 = 2,
    F64 = 3,
    I32 = 4,
    I64 = 5,
    U8 = 6,
}

impl DType {
    fn from_raw(v: sys::kiln_dtype) -> Result<DType> {
        Ok(match v {
            0 => DType::F32,
            1 => DType::F16,
            2 => DType::BF16,
            3 => DType::F64,
            4 => DType::I32,
            5 => DType::I64,
            6 => DType::U8,
            other => return Err(Error::new(Status::NotSupported, format!("dtype {other} is newer than these bindings"))),
        })
    }
}

/// A Rust type with a kiln dtype of the same layout.
///
/// # Safety
/// `DTYPE`'s elements must have exactly `Self`'s size and representation.
pub unsafe trait Element: Copy + Default {
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

/// An n-dimensional array on a device.
pub struct Tensor(pub(crate) NonNull<sys::kiln_tensor>);

// SAFETY: kiln.h: tensors that are only read may be used by several threads
// at once; writing takes &mut self here; release works from any thread.
unsafe impl Send for Tensor {}
unsafe impl Sync for Tensor {}

impl Drop for Tensor {
    fn drop(&mut self) {
        unsafe { sys::kiln_tensor_release(self.0.as_ptr()) }
    }
}

/// A read-only view (reshape, rows, a model parameter) sharing storage with
/// a source it borrows, so the source cannot be written while it lives.
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

/// A writable view: writes show through in the source, which it borrows
/// mutably.
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

impl DerefMut for ViewMut<'_> {
    fn deref_mut(&mut self) -> &mut Tensor {
        &mut self.tensor
    }
}

impl<'a> View<'a> {
    pub(crate) fn new(tensor: Tensor) -> View<'a> {
        View { tensor, _source: PhantomData }
    }
}

/// Elementwise operations of two tensors, or a tensor and a scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add = 0,
    Sub = 1,
    Mul = 2,
    Div = 3,
    Maximum = 4,
    Minimum = 5,
    Pow = 6,
}

/// Elementwise comparisons (results are U8 0/1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    Eq = 0,
    Ne = 1,
    Lt = 2,
    Le = 3,
    Gt = 4,
    Ge = 5,
}

/// Elementwise functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    Neg = 0,
    Abs = 1,
    Exp = 2,
    Log = 3,
    Sqrt = 4,
    Relu = 5,
    Gelu = 6,
    Tanh = 7,
    Sigmoid = 8,
    LeakyRelu = 9,
}

/// Reductions along one dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum = 0,
    Mean = 1,
    Max = 2,
    Argmax = 3,
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
                                       T::DTYPE as sys::kiln_dtype, device.raw(), p)
        })
    }

    pub fn zeros(ctx: &Context, shape: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_zeros(ctx.ptr(), shape.as_ptr(), shape.len() as i64, dtype as u32, device.raw(), p) })
    }

    pub fn ones(ctx: &Context, shape: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_ones(ctx.ptr(), shape.as_ptr(), shape.len() as i64, dtype as u32, device.raw(), p) })
    }

    pub fn full(ctx: &Context, shape: &[i64], dtype: DType, device: Device, value: f64) -> Result<Tensor> {
        tensor(|p| unsafe {
            sys::kiln_tensor_full(ctx.ptr(), shape.as_ptr(), shape.len() as i64, dtype as u32, device.raw(), value, p)
        })
    }

    /// Uniform in [0, 1), from the context's generator.
    pub fn rand(ctx: &Context, shape: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_rand(ctx.ptr(), shape.as_ptr(), shape.len() as i64, dtype as u32, device.raw(), p) })
    }

    /// Standard normal, from the context's generator.
    pub fn randn(ctx: &Context, shape: &[i64], dtype: DType, device: Device) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_randn(ctx.ptr(), shape.as_ptr(), shape.len() as i64, dtype as u32, device.raw(), p) })
    }

    /// start, start + step, ... below end.
    pub fn arange(ctx: &Context, start: f64, end: f64, step: f64, dtype: DType, device: Device) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_arange(ctx.ptr(), start, end, step, dtype as u32, device.raw(), p) })
    }

    /// Copies the elements to a Vec; `T` must match the dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let dtype = self.dtype()?;
        if dtype != T::DTYPE {
            return Err(Error::new(Status::DTypeMismatch, format!("tensor is {dtype:?}, not {:?}", T::DTYPE)));
        }
        let mut out = vec![T::default(); self.numel()? as usize];
        check(unsafe { sys::kiln_tensor_copy_to_host(self.ptr(), out.as_mut_ptr().cast(), bytes(&out)) })?;
        Ok(out)
    }

    /// Overwrites the elements with `data` (same dtype and count).
    pub fn copy_from<T: Element>(&mut self, data: &[T]) -> Result<()> {
        check(unsafe { sys::kiln_tensor_copy_from_host(self.ptr(), data.as_ptr().cast(), bytes(data)) })
    }

    pub fn shape(&self) -> Result<Vec<i64>> {
        let ndim: i64 = get(|p| unsafe { sys::kiln_tensor_ndim(self.ptr(), p) })?;
        let mut shape = vec![0i64; ndim as usize];
        check(unsafe { sys::kiln_tensor_shape(self.ptr(), shape.as_mut_ptr(), ndim) })?;
        Ok(shape)
    }

    pub fn numel(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_tensor_numel(self.ptr(), p) })
    }

    pub fn dtype(&self) -> Result<DType> {
        DType::from_raw(get(|p| unsafe { sys::kiln_tensor_dtype(self.ptr(), p) })?)
    }

    pub fn device(&self) -> Result<Device> {
        let mut d = sys::kiln_device { kind: 0, index: 0 };
        check(unsafe { sys::kiln_tensor_device(self.ptr(), &mut d) })?;
        Ok(Device::from_raw(d))
    }

    /// The value of a one-element tensor.
    pub fn item(&self) -> Result<f64> {
        get(|p| unsafe { sys::kiln_tensor_item(self.ptr(), p) })
    }

    /// A copy on `device` (a new handle to this tensor when already there).
    pub fn to(&self, device: Device) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_to(self.ptr(), device.raw(), p) })
    }

    /// A copy converted to `dtype`; float to int truncates toward zero.
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_cast(self.ptr(), dtype as u32, p) })
    }

    /// A contiguous copy on the same device.
    pub fn try_clone(&self) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_clone(self.ptr(), p) })
    }

    /// A view with another shape of the same size (one entry may be -1).
    pub fn reshape(&self, shape: &[i64]) -> Result<View<'_>> {
        tensor(|p| unsafe { sys::kiln_tensor_reshape(self.ptr(), shape.as_ptr(), shape.len() as i64, p) }).map(View::new)
    }

    /// A view of rows [start, end) of the first dimension.
    pub fn rows(&self, start: i64, end: i64) -> Result<View<'_>> {
        tensor(|p| unsafe { sys::kiln_tensor_rows(self.ptr(), start, end, p) }).map(View::new)
    }

    /// A writable view of rows [start, end).
    pub fn rows_mut(&mut self, start: i64, end: i64) -> Result<ViewMut<'_>> {
        let t = tensor(|p| unsafe { sys::kiln_tensor_rows(self.ptr(), start, end, p) })?;
        Ok(ViewMut { tensor: t, _source: PhantomData })
    }

    /// `self op other` elementwise with NumPy broadcasting.
    pub fn binary(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_binary(op as u32, self.ptr(), other.ptr(), p) })
    }

    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Add, other)
    }

    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Mul, other)
    }

    /// `self op scalar` elementwise.
    pub fn scalar(&self, op: BinaryOp, scalar: f64) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_scalar(op as u32, self.ptr(), scalar, p) })
    }

    pub fn compare(&self, op: CompareOp, other: &Tensor) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_compare(op as u32, self.ptr(), other.ptr(), p) })
    }

    /// `op(self)`; `alpha` is LeakyReLU's slope, ignored by the others.
    pub fn unary(&self, op: UnaryOp, alpha: f64) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_unary(op as u32, self.ptr(), alpha, p) })
    }

    pub fn softmax(&self, dim: i64) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_softmax(self.ptr(), dim, p) })
    }

    pub fn log_softmax(&self, dim: i64) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_log_softmax(self.ptr(), dim, p) })
    }

    pub fn reduce(&self, op: ReduceOp, dim: i64, keepdim: bool) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_reduce(op as u32, self.ptr(), dim, keepdim as i32, p) })
    }

    /// Matrix product `self x other`.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        tensor(|p| unsafe { sys::kiln_tensor_matmul(self.ptr(), other.ptr(), p) })
    }
}
