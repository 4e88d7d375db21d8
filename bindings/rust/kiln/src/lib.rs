//! Safe Rust bindings to kiln: train and run multilayer perceptrons on
//! NVIDIA GPUs or the CPU.
//!
//! Every fallible call returns `Result<T, kiln::Error>`; every object
//! releases its native memory on `Drop` (from any thread). Thread rules
//! follow kiln.h: `Context`, `Model` (for inference) and `Tensor` (for
//! reading) are `Send + Sync`; a `Trainer` is `Send` and mutably borrows its
//! model while it lives; writes to a tensor need `&mut`.
//!
//! ```no_run
//! let ctx = kiln::Context::new()?;
//! let dev = ctx.default_device()?;
//! let x = kiln::Tensor::from_slice(&ctx, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2], dev)?;
//! assert_eq!(x.to(kiln::Device::Cpu)?.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
//! # Ok::<(), kiln::Error>(())
//! ```

mod error;
mod context;
mod tensor;
mod model;
mod train;

pub use context::{Context, ContextOptions, Device, DeviceInfo, LogLevel};
pub use error::{Error, Result, Status};
pub use model::{LayerKind, Model, ModelSpec, PredictKind};
pub use tensor::{BinaryOp, CompareOp, DType, Element, ReduceOp, Tensor, UnaryOp, View, ViewMut};
pub use train::{loss, Dataset, EpochStats, FastPath, LossKind, Optimizer, Precision, Schedule, Trainer, TrainerOptions};

/// The loaded library's version, "MAJOR.MINOR.PATCH".
pub fn version() -> String {
    // SAFETY: static NUL-terminated storage, never NULL.
    unsafe { std::ffi::CStr::from_ptr(kiln_sys::kiln_version_string()) }.to_string_lossy().into_owned()
}

/// The ABI version of the loaded library; must equal `ABI_VERSION`.
pub fn abi_version() -> i32 {
    unsafe { kiln_sys::kiln_abi_version() }
}

/// The ABI these bindings were generated for.
pub const ABI_VERSION: i32 = kiln_sys::KILN_ABI_VERSION as i32;

/// Creates a handle through an out-parameter and checks the status.
pub(crate) fn create<T>(f: impl FnOnce(*mut *mut T) -> kiln_sys::kiln_status) -> Result<std::ptr::NonNull<T>> {
    let mut p = std::ptr::null_mut();
    error::check(f(&mut p))?;
    std::ptr::NonNull::new(p).ok_or_else(|| Error::new(Status::Internal, "kiln returned a NULL handle"))
}

/// Reads a value through an out-parameter and checks the status.
pub(crate) fn get<T: Default>(f: impl FnOnce(*mut T) -> kiln_sys::kiln_status) -> Result<T> {
    let mut v = T::default();
    error::check(f(&mut v))?;
    Ok(v)
}

pub(crate) fn cstring(s: &str) -> Result<std::ffi::CString> {
    std::ffi::CString::new(s).map_err(|_| Error::new(Status::InvalidArgument, format!("string {s:?} contains a NUL byte")))
}
