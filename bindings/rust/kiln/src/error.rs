use std::ffi::CStr;
use std::fmt;

use kiln_sys as sys;

/// Why a kiln call failed (kiln_status without `KILN_OK`). Non-exhaustive:
/// kiln may add statuses, and a code these bindings do not know arrives as
/// `Unknown`. Displays as the library's constant name
/// (`KILN_ERROR_SHAPE_MISMATCH`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// A bad value, size or string.
    InvalidArgument,
    /// A released, foreign or wrong-type handle.
    InvalidHandle,
    /// Shapes that do not fit together.
    ShapeMismatch,
    /// Dtypes that do not fit the operation.
    DTypeMismatch,
    /// No such device, no driver, no plugin.
    DeviceUnavailable,
    /// A host or device allocation failed.
    OutOfMemory,
    /// A file could not be opened, read or written.
    Io,
    /// A file's contents are malformed.
    Format,
    /// A valid request this build or device cannot do.
    NotSupported,
    /// A callback asked to stop.
    Cancelled,
    /// CUDA, cuBLAS, cuDNN or BLAS failure.
    Backend,
    /// A bug in kiln.
    Internal,
    /// The object is inside another call (e.g. a trainer called from its own
    /// callback).
    Busy,
    /// Training diverged: a loss that is NaN or infinite.
    Numeric,
    /// A collective across ranks failed: a peer died or timed out.
    Communication,
    /// A code newer than these bindings.
    Unknown(u32),
}

/// Each status with its kiln_status code, from the generated constants.
const CODES: [(Status, sys::kiln_status); 15] = [
    (Status::InvalidArgument, sys::kiln_status_KILN_ERROR_INVALID_ARGUMENT),
    (Status::InvalidHandle, sys::kiln_status_KILN_ERROR_INVALID_HANDLE),
    (Status::ShapeMismatch, sys::kiln_status_KILN_ERROR_SHAPE_MISMATCH),
    (Status::DTypeMismatch, sys::kiln_status_KILN_ERROR_DTYPE_MISMATCH),
    (Status::DeviceUnavailable, sys::kiln_status_KILN_ERROR_DEVICE_UNAVAILABLE),
    (Status::OutOfMemory, sys::kiln_status_KILN_ERROR_OUT_OF_MEMORY),
    (Status::Io, sys::kiln_status_KILN_ERROR_IO),
    (Status::Format, sys::kiln_status_KILN_ERROR_FORMAT),
    (Status::NotSupported, sys::kiln_status_KILN_ERROR_NOT_SUPPORTED),
    (Status::Cancelled, sys::kiln_status_KILN_ERROR_CANCELLED),
    (Status::Backend, sys::kiln_status_KILN_ERROR_BACKEND),
    (Status::Internal, sys::kiln_status_KILN_ERROR_INTERNAL),
    (Status::Busy, sys::kiln_status_KILN_ERROR_BUSY),
    (Status::Numeric, sys::kiln_status_KILN_ERROR_NUMERIC),
    (Status::Communication, sys::kiln_status_KILN_ERROR_COMMUNICATION),
];

impl Status {
    /// The status of a failed call's `kiln_status` code. Total: codes these
    /// bindings do not know (and `KILN_OK`, which is no failure) become
    /// `Unknown`.
    pub fn from_code(code: u32) -> Status {
        CODES.iter().find(|(_, c)| *c == code).map_or(Status::Unknown(code), |(s, _)| *s)
    }

    /// The `kiln_status` code (`from_code`'s inverse).
    pub fn code(self) -> u32 {
        match self {
            Status::Unknown(code) => code,
            known => CODES.iter().find(|(s, _)| *s == known).map(|(_, c)| *c).unwrap_or_default(),
        }
    }

    /// The library's name for the code, e.g. "KILN_ERROR_BUSY";
    /// "KILN_ERROR_UNKNOWN" for a code it does not know either.
    pub fn name(self) -> &'static str {
        // SAFETY: static storage, never NULL.
        unsafe { CStr::from_ptr(sys::kiln_status_name(self.code())) }.to_str().unwrap_or("KILN_ERROR_UNKNOWN")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Unknown(code) => write!(f, "{} ({code})", self.name()),
            _ => f.write_str(self.name()),
        }
    }
}

/// A failed kiln call: its status and the library's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// What kind of failure.
    pub status: Status,
    /// kiln's description of this failure (or the bindings', for checks made
    /// before calling kiln).
    pub message: String,
}

/// `std::result::Result` with kiln's error.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error with this status and message.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }
}

impl fmt::Display for Error {
    /// `KILN_ERROR_SHAPE_MISMATCH: <message>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
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
