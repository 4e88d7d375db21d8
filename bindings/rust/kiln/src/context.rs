use std::ffi::CStr;
use std::fmt;
use std::ptr::NonNull;

use kiln_sys as sys;

use crate::error::{check, Result};
use crate::{create, cstring, get};

/// Minimum level of the records a context writes to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Debug = 0,
    Info = 1,
    Warning = 2,
    Error = 3,
    Off = 4,
}

/// Options for `Context::with_options`; unset fields keep kiln's defaults
/// (seed 0, one thread per core, warnings, CUDA loaded when present).
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    pub seed: Option<u64>,
    pub threads: Option<i64>,
    pub log_level: Option<LogLevel>,
    pub enable_cuda: Option<bool>,
}

/// Owns the backends and the random generator. `Send + Sync`.
pub struct Context(pub(crate) NonNull<sys::kiln_context>);

// SAFETY: kiln.h: a context may be used by several threads at once, and
// released from any thread.
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        unsafe { sys::kiln_context_release(self.0.as_ptr()) }
    }
}

struct Options(NonNull<sys::kiln_context_options>);
impl Drop for Options {
    fn drop(&mut self) {
        unsafe { sys::kiln_context_options_release(self.0.as_ptr()) }
    }
}

impl Context {
    /// A context with default options.
    pub fn new() -> Result<Context> {
        Context::with_options(&ContextOptions::default())
    }

    pub fn with_options(options: &ContextOptions) -> Result<Context> {
        let o = Options(create(|p| unsafe { sys::kiln_context_options_create(p) })?);
        unsafe {
            if let Some(seed) = options.seed {
                check(sys::kiln_context_options_set_seed(o.0.as_ptr(), seed))?;
            }
            if let Some(n) = options.threads {
                check(sys::kiln_context_options_set_num_threads(o.0.as_ptr(), n))?;
            }
            if let Some(level) = options.log_level {
                check(sys::kiln_context_options_set_log_level(o.0.as_ptr(), level as sys::kiln_log_level))?;
            }
            if let Some(enable) = options.enable_cuda {
                check(sys::kiln_context_options_set_enable_cuda(o.0.as_ptr(), enable as i32))?;
            }
            create(|p| sys::kiln_context_create(o.0.as_ptr(), p)).map(Context)
        }
    }

    pub(crate) fn ptr(&self) -> *mut sys::kiln_context {
        self.0.as_ptr()
    }

    /// Reseeds the generator (torch.manual_seed).
    pub fn set_seed(&self, seed: u64) -> Result<()> {
        check(unsafe { sys::kiln_context_set_seed(self.ptr(), seed) })
    }

    /// Parses "cpu", "cuda", "cuda:N" or "auto"; a GPU that is not there is
    /// an error saying why.
    pub fn parse_device(&self, text: &str) -> Result<Device> {
        let text = cstring(text)?;
        let mut d = sys::kiln_device { kind: 0, index: 0 };
        check(unsafe { sys::kiln_device_parse(self.ptr(), text.as_ptr(), &mut d) })?;
        Ok(Device::from_raw(d))
    }

    /// cuda:0 when CUDA is usable, else the CPU.
    pub fn default_device(&self) -> Result<Device> {
        let mut d = sys::kiln_device { kind: 0, index: 0 };
        check(unsafe { sys::kiln_default_device(self.ptr(), &mut d) })?;
        Ok(Device::from_raw(d))
    }

    /// Ok(()) when CUDA is usable, else Err(reason) from the loader or driver.
    pub fn cuda_status(&self) -> Result<std::result::Result<(), String>> {
        let available: i32 = get(|p| unsafe { sys::kiln_cuda_is_available(self.ptr(), p) })?;
        if available != 0 {
            return Ok(Ok(()));
        }
        let mut reason = std::ptr::null();
        check(unsafe { sys::kiln_cuda_unavailable_reason(self.ptr(), &mut reason) })?;
        // SAFETY: owned by the context, which outlives this copy.
        Ok(Err(unsafe { CStr::from_ptr(reason) }.to_string_lossy().into_owned()))
    }

    /// Number of usable GPUs.
    pub fn cuda_device_count(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_device_count(self.ptr(), sys::kiln_device_kind_KILN_DEVICE_CUDA, p) })
    }

    /// Describes one device.
    pub fn device_info(&self, device: Device) -> Result<DeviceInfo> {
        // SAFETY: an all-zero kiln_device_info is valid (integers and bytes).
        let mut info: sys::kiln_device_info = unsafe { std::mem::zeroed() };
        info.struct_size = std::mem::size_of::<sys::kiln_device_info>() as u32;
        check(unsafe { sys::kiln_device_get_info(self.ptr(), device.raw(), &mut info) })?;
        let name = unsafe { CStr::from_ptr(info.name.as_ptr()) }.to_string_lossy().into_owned();
        Ok(DeviceInfo {
            device: Device::from_raw(info.device),
            name,
            total_memory: info.total_memory,
            free_memory: info.free_memory,
            compute_capability: (info.compute_major, info.compute_minor),
            multiprocessor_count: info.multiprocessor_count,
            driver_version: info.driver_version,
            runtime_version: info.runtime_version,
            threads: info.threads,
        })
    }

    /// Every usable device: the CPU first, then each GPU.
    pub fn devices(&self) -> Result<Vec<DeviceInfo>> {
        let gpus = self.cuda_device_count()?;
        std::iter::once(Device::Cpu).chain((0..gpus).map(Device::Cuda)).map(|d| self.device_info(d)).collect()
    }

    /// Waits until all work queued on the device is done.
    pub fn synchronize(&self, device: Device) -> Result<()> {
        check(unsafe { sys::kiln_device_synchronize(self.ptr(), device.raw()) })
    }
}

/// Where a tensor or model lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Cuda(i64),
}

impl Device {
    pub(crate) fn raw(self) -> sys::kiln_device {
        match self {
            Device::Cpu => sys::kiln_device { kind: sys::kiln_device_kind_KILN_DEVICE_CPU, index: -1 },
            Device::Cuda(i) => sys::kiln_device { kind: sys::kiln_device_kind_KILN_DEVICE_CUDA, index: i },
        }
    }

    pub(crate) fn from_raw(d: sys::kiln_device) -> Device {
        if d.kind == sys::kiln_device_kind_KILN_DEVICE_CUDA {
            Device::Cuda(d.index)
        } else {
            Device::Cpu
        }
    }
}

impl fmt::Display for Device {
    /// "cpu" or "cuda:N", as `Context::parse_device` reads them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// A device's description. For the CPU: model name, logical cores in
/// `multiprocessor_count`, kiln's threads in `threads`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub device: Device,
    pub name: String,
    pub total_memory: i64,
    pub free_memory: i64,
    pub compute_capability: (i64, i64),
    pub multiprocessor_count: i64,
    pub driver_version: i64,
    pub runtime_version: i64,
    pub threads: i64,
}
