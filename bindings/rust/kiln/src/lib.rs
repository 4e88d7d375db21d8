//! Safe Rust bindings to kiln: train and run multilayer perceptrons on
//! NVIDIA GPUs or the CPU.
//!
//! Every fallible call returns `Result<T, kiln::Error>`; every object
//! releases its native memory on `Drop` (from any thread). Thread rules
//! follow kiln.h: `Context`, `Model` (for inference) and `Tensor` (for
//! reading) are `Send + Sync`; a `Trainer` is `Send` and mutably borrows its
//! model while it lives; writes to a tensor need `&mut`, and nothing reachable
//! through `&` writes storage another value shares (views borrow their source;
//! `Tensor::to` onto the tensor's own device copies).
//!
//! Arithmetic operators work on `&Tensor` and return `Result<Tensor>`, and a
//! `Result<Tensor>` chains on, so one `?` ends an expression:
//!
//! ```
//! let ctx = kiln::Context::new()?;
//! let dev = ctx.default_device()?;
//! let x = kiln::Tensor::from_slice(&ctx, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2], dev)?;
//! let y = ((&x + &x) * &x)?;
//! assert_eq!(y.to(kiln::Device::Cpu)?.to_vec::<f32>()?, vec![2.0, 8.0, 18.0, 32.0]);
//! println!("{y}"); // tensor([2, 2], f32, cpu)
//! # Ok::<(), kiln::Error>(())
//! ```
//!
//! The committed raw layer, `kiln-sys`, is described there (linking through
//! pkg-config, `KILN_LIB_DIR`, the opt-in rpath and its LP64 assumption).
#![deny(missing_docs)]

mod context;
mod dist;
mod error;
mod model;
mod ops;
mod tensor;
mod train;

pub use context::{Context, ContextOptions, Device, DeviceInfo, LogCallback, LogLevel};
pub use dist::Communicator;
pub use error::{Error, Result, Status};
pub use model::{LayerKind, Model, ModelSpec, PredictKind};
pub use tensor::{BinaryOp, CompareOp, DType, Element, PinnedTensor, ReduceOp, Tensor, UnaryOp, View, ViewMut};
pub use train::{loss, Batches, Dataset, EpochStats, Epochs, FastPath, LossKind, Optimizer, Precision, Progress,
                ProgressPhase, Schedule, Trainer, TrainerOptions, Validation};

use std::ffi::{CStr, CString};
use std::path::Path;

/// The loaded library's version, "MAJOR.MINOR.PATCH".
pub fn version() -> String {
    // SAFETY: static NUL-terminated storage, never NULL.
    unsafe { CStr::from_ptr(kiln_sys::kiln_version_string()) }.to_string_lossy().into_owned()
}

/// The loaded library's version as (major, minor, patch).
pub fn version_numbers() -> (i32, i32, i32) {
    let (mut major, mut minor, mut patch) = (0, 0, 0);
    unsafe { kiln_sys::kiln_version(&mut major, &mut minor, &mut patch) };
    (major, minor, patch)
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

/// Copies a string kiln owns (static, or owned by a handle the caller keeps
/// alive for the duration of this call).
pub(crate) unsafe fn owned_string(s: *const std::os::raw::c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    CStr::from_ptr(s).to_string_lossy().into_owned()
}

pub(crate) fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(Status::InvalidArgument, format!("string {s:?} contains a NUL byte")))
}

/// A path as kiln's `const char *`: the OS's bytes unchanged on Unix, so
/// names that are not UTF-8 still reach the file system as they are.
pub(crate) fn path_cstring(path: &Path) -> Result<CString> {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes = path
        .to_str()
        .ok_or_else(|| Error::new(Status::InvalidArgument, format!("path {path:?} is not valid Unicode")))?
        .as_bytes()
        .to_vec();
    CString::new(bytes).map_err(|_| Error::new(Status::InvalidArgument, format!("path {path:?} contains a NUL byte")))
}

/// Chainable setters for an options struct whose fields are `Option`s:
/// `field(value)` sets `Some(value)`.
macro_rules! setters {
    ($options:ident { $($(#[$doc:meta])* $field:ident: $t:ty;)* }) => {
        impl $options {
            $($(#[$doc])* pub fn $field(mut self, value: $t) -> $options {
                self.$field = Some(value);
                self
            })*
        }
    };
}
pub(crate) use setters;

/// Formats a value whose Debug form is also the natural text, for the
/// Display of option structs.
macro_rules! display_as_debug {
    ($($t:ty),* $(,)?) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(self, f)
            }
        }
    )*};
}
pub(crate) use display_as_debug;
