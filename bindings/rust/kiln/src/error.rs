use std::ffi::CStr;
use std::fmt;

use kiln_sys as sys;

/// Why a kiln call failed (kiln_status without `KILN_OK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    InvalidArgument,
    InvalidHandle,
    ShapeMismatch,
    DTypeMismatch,
    DeviceUnavailable,
    OutOfMemory,
    Io,
    Format,
    NotSupported,
    Cancelled,
    Backend,
    Internal,
    /// A code newer than these bindings.
    Unknown(u32),
}

impl Status {
    fn from_code(code: sys::kiln_status) -> Status {
        match code {
            1 => Status::InvalidArgument,
            2 => Status::InvalidHandle,
            3 => Status::ShapeMismatch,
            4 => Status::DTypeMismatch,
            5 => Status::DeviceUnavailable,
            6 => Status::OutOfMemory,
            7 => Status::Io,
            8 => Status::Format,
            9 => Status::NotSupported,
            10 => Status::Cancelled,
            11 => Status::Backend,
            12 => Status::Internal,
            other => Status::Unknown(other),
        }
    }
}

/// A failed kiln call: its status and the library's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

/// Turns a status into a Result, reading kiln_last_error() right away on
/// this thread (the message is thread-local and valid until the next call).
pub(crate) fn check(status: sys::kiln_status) -> Result<()> {
    if status == sys::kiln_status_KILN_OK {
        return Ok(());
    }
    // SAFETY: kiln_last_error never returns NULL; we copy it at once.
    let message = unsafe { CStr::from_ptr(sys::kiln_last_error()) }.to_string_lossy().into_owned();
    Err(Error { status: Status::from_code(status), message })
}
