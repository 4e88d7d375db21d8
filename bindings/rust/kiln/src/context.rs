use std::fmt;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kiln_sys as sys;

use crate::error::{check, Error, Result};
use crate::{create, cstring, get, owned_string};

/// Minimum level of the records a context logs (kiln_log_level).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Everything, including per-call details.
    Debug = sys::kiln_log_level_KILN_LOG_DEBUG as isize,
    /// Informational records (plugin loading, device choice).
    Info = sys::kiln_log_level_KILN_LOG_INFO as isize,
    /// Warnings: kiln's default.
    Warning = sys::kiln_log_level_KILN_LOG_WARNING as isize,
    /// Errors only.
    Error = sys::kiln_log_level_KILN_LOG_ERROR as isize,
    /// Nothing.
    Off = sys::kiln_log_level_KILN_LOG_OFF as isize,
}

impl LogLevel {
    fn from_raw(level: sys::kiln_log_level) -> LogLevel {
        [LogLevel::Debug, LogLevel::Info, LogLevel::Warning, LogLevel::Error]
            .into_iter()
            .find(|l| *l as sys::kiln_log_level == level)
            .unwrap_or(LogLevel::Error)
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Off => "off",
        })
    }
}

/// Receives a context's log records (level, one line of text) on whichever
/// thread produced them. It must not use the context it logs for. A panic
/// inside it is caught (it cannot unwind into C) and the record dropped.
pub type LogCallback = Arc<dyn Fn(LogLevel, &str) + Send + Sync>;

/// Options for `Context::with_options`; a field left `None` keeps kiln's
/// default (seed 0, one thread per core, warnings, CUDA loaded when present,
/// records written to stderr). Set fields directly or chain:
/// `ContextOptions::default().seed(42).log(|level, line| eprintln!("{level}: {line}"))`.
#[derive(Clone, Default)]
pub struct ContextOptions {
    /// The generator's seed.
    pub seed: Option<u64>,
    /// CPU threads (>= 1; 0 for one per core).
    pub threads: Option<i64>,
    /// The least severe level logged.
    pub log_level: Option<LogLevel>,
    /// `Some(false)`: a CPU-only context that does not load the CUDA plugin.
    pub enable_cuda: Option<bool>,
    /// Where records go instead of stderr.
    pub log: Option<LogCallback>,
}

impl fmt::Debug for ContextOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextOptions")
            .field("seed", &self.seed)
            .field("threads", &self.threads)
            .field("log_level", &self.log_level)
            .field("enable_cuda", &self.enable_cuda)
            .field("log", &self.log.as_ref().map(|_| "<callback>"))
            .finish()
    }
}
crate::display_as_debug!(ContextOptions);

crate::setters! {
    ContextOptions {
        /// Sets `seed`.
        seed: u64;
        /// Sets `threads`.
        threads: i64;
        /// Sets `log_level`.
        log_level: LogLevel;
        /// Sets `enable_cuda`.
        enable_cuda: bool;
    }
}

impl ContextOptions {
    /// Sets `log` to this closure (which a plain `Arc::new(|level, line| ..)`
    /// cannot infer as taking any `&str` without a type on `line`).
    pub fn log(mut self, log: impl Fn(LogLevel, &str) + Send + Sync + 'static) -> ContextOptions {
        self.log = Some(Arc::new(log));
        self
    }
}

// Log callbacks by id. The C context can outlive the Rust `Context` (tensors
// and models keep it alive), so kiln gets an id, not a pointer: after the
// Rust side drops, the id is gone and late records go to stderr instead of
// through a freed closure.
// A Vec, not a map: there is one entry per context with a logger, and
// `BTreeMap::new` is only const from Rust 1.66 (Debian 12 ships 1.63).
static LOGGERS: Mutex<Vec<(usize, LogCallback)>> = Mutex::new(Vec::new());
static NEXT_LOGGER: AtomicUsize = AtomicUsize::new(1);

fn forget_logger(id: usize) {
    LOGGERS.lock().unwrap_or_else(|e| e.into_inner()).retain(|(key, _)| *key != id);
}

fn logger(id: usize) -> Option<LogCallback> {
    LOGGERS.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(key, _)| *key == id).map(|(_, log)| Arc::clone(log))
}

extern "C" fn log_trampoline(user: *mut c_void, record: *const sys::kiln_log_record) -> c_int {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: kiln passes a valid record for the duration of the call.
        let record = unsafe { &*record };
        let level = LogLevel::from_raw(record.level);
        let message = unsafe { owned_string(record.message) };
        match logger(user as usize) {
            Some(log) => log(level, &message),
            None => eprintln!("kiln [{level}] {message}"),
        }
    }));
    0
}

/// Owns the backends and the random generator. `Send + Sync`.
pub struct Context {
    raw: NonNull<sys::kiln_context>,
    logger: Option<usize>,
}

// SAFETY: kiln.h: a context may be used by several threads at once, and
// released from any thread.
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        unsafe { sys::kiln_context_release(self.raw.as_ptr()) }
        if let Some(id) = self.logger {
            forget_logger(id);
        }
    }
}

struct Options(NonNull<sys::kiln_context_options>);
impl Drop for Options {
    fn drop(&mut self) {
        unsafe { sys::kiln_context_options_release(self.0.as_ptr()) }
    }
}

impl Context {
    /// A context with kiln's default options.
    pub fn new() -> Result<Context> {
        Context::with_options(&ContextOptions::default())
    }

    /// A context with `options`.
    pub fn with_options(options: &ContextOptions) -> Result<Context> {
        let o = Options(create(|p| unsafe { sys::kiln_context_options_create(p) })?);
        let p = o.0.as_ptr();
        unsafe {
            if let Some(seed) = options.seed {
                check(sys::kiln_context_options_set_seed(p, seed))?;
            }
            if let Some(n) = options.threads {
                check(sys::kiln_context_options_set_num_threads(p, n))?;
            }
            if let Some(level) = options.log_level {
                check(sys::kiln_context_options_set_log_level(p, level as sys::kiln_log_level))?;
            }
            if let Some(enable) = options.enable_cuda {
                check(sys::kiln_context_options_set_enable_cuda(p, enable as c_int))?;
            }
        }
        let logger = options.log.as_ref().map(|log| {
            let id = NEXT_LOGGER.fetch_add(1, Ordering::Relaxed);
            LOGGERS.lock().unwrap_or_else(|e| e.into_inner()).push((id, Arc::clone(log)));
            id
        });
        let raw = (|| {
            if let Some(id) = logger {
                check(unsafe { sys::kiln_context_options_set_log_callback(p, Some(log_trampoline), id as *mut c_void) })?;
            }
            create(|out| unsafe { sys::kiln_context_create(p, out) })
        })();
        match raw {
            Ok(raw) => Ok(Context { raw, logger }),
            Err(e) => {
                if let Some(id) = logger {
                    forget_logger(id);
                }
                Err(e)
            }
        }
    }

    pub(crate) fn ptr(&self) -> *mut sys::kiln_context {
        self.raw.as_ptr()
    }

    /// Reseeds the generator (torch.manual_seed).
    pub fn set_seed(&self, seed: u64) -> Result<()> {
        check(unsafe { sys::kiln_context_set_seed(self.ptr(), seed) })
    }

    /// Parses "cpu", "cuda", "cuda:N" or "auto", checking that the device is
    /// there: a GPU that is not is `Status::DeviceUnavailable` saying why.
    /// (`"cuda:1".parse::<Device>()` checks the syntax alone.)
    pub fn parse_device(&self, text: &str) -> Result<Device> {
        parse_device(Some(self), text)
    }

    /// cuda:0 when CUDA is usable, else the CPU.
    pub fn default_device(&self) -> Result<Device> {
        let mut d = sys::kiln_device { kind: 0, index: 0 };
        check(unsafe { sys::kiln_default_device(self.ptr(), &mut d) })?;
        Ok(Device::from_raw(d))
    }

    /// Ok(()) when CUDA is usable, else Err(reason) from the loader or driver.
    pub fn cuda_status(&self) -> Result<std::result::Result<(), String>> {
        let available: c_int = get(|p| unsafe { sys::kiln_cuda_is_available(self.ptr(), p) })?;
        if available != 0 {
            return Ok(Ok(()));
        }
        let mut reason = std::ptr::null();
        check(unsafe { sys::kiln_cuda_unavailable_reason(self.ptr(), &mut reason) })?;
        // SAFETY: owned by the context, which outlives this copy.
        Ok(Err(unsafe { owned_string(reason) }))
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
        let name = unsafe { owned_string(info.name.as_ptr()) };
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

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("default_device", &self.default_device().ok())
            .field("log_callback", &self.logger.is_some())
            .finish()
    }
}

impl fmt::Display for Context {
    /// "kiln context (default device cuda:0)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.default_device() {
            Ok(d) => write!(f, "kiln context (default device {d})"),
            Err(e) => write!(f, "kiln context ({e})"),
        }
    }
}

fn parse_device(ctx: Option<&Context>, text: &str) -> Result<Device> {
    let text = cstring(text)?;
    let mut d = sys::kiln_device { kind: 0, index: 0 };
    let ctx = ctx.map_or(std::ptr::null_mut(), Context::ptr);
    check(unsafe { sys::kiln_device_parse(ctx, text.as_ptr(), &mut d) })?;
    Ok(Device::from_raw(d))
}

/// Where a tensor or model lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host CPU.
    Cpu,
    /// The CUDA GPU of this index.
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

impl FromStr for Device {
    type Err = Error;
    /// The syntax alone: "cpu", "cpu:0", "cuda", "cuda:N" (whether that GPU
    /// exists is `Context::parse_device`'s question). "auto" needs a context:
    /// `Status::InvalidArgument` here.
    fn from_str(text: &str) -> Result<Device> {
        parse_device(None, text)
    }
}

impl fmt::Display for Device {
    /// "cpu" or "cuda:N", as kiln formats and parses them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0 as std::os::raw::c_char; 32];
        match check(unsafe { sys::kiln_device_format(self.raw(), buf.as_mut_ptr(), buf.len() as i64) }) {
            Ok(()) => f.write_str(&unsafe { owned_string(buf.as_ptr()) }),
            // A malformed device (a negative GPU index) still prints.
            Err(_) => write!(f, "{self:?}"),
        }
    }
}

/// A device's description. For the CPU: model name, logical cores in
/// `multiprocessor_count`, kiln's threads in `threads`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device described.
    pub device: Device,
    /// GPU name or CPU model.
    pub name: String,
    /// Bytes of memory.
    pub total_memory: i64,
    /// Bytes free at the time of the query.
    pub free_memory: i64,
    /// CUDA compute capability (major, minor); (0, 0) on the CPU.
    pub compute_capability: (i64, i64),
    /// Streaming multiprocessors, or the CPU's logical cores.
    pub multiprocessor_count: i64,
    /// CUDA driver version (e.g. 13000); 0 on the CPU.
    pub driver_version: i64,
    /// CUDA runtime version; 0 on the CPU.
    pub runtime_version: i64,
    /// CPU threads kiln uses; 0 for a GPU.
    pub threads: i64,
}

impl fmt::Display for DeviceInfo {
    /// `cpu: <model>, 16 cores, 62.5 GiB` or
    /// `cuda:0: <name>, compute 9.0, 132 SMs, 79.1 GiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gib = self.total_memory as f64 / (1u64 << 30) as f64;
        match self.device {
            Device::Cpu => write!(f, "{}: {}, {} cores, {gib:.1} GiB", self.device, self.name, self.multiprocessor_count),
            Device::Cuda(_) => write!(f, "{}: {}, compute {}.{}, {} SMs, {gib:.1} GiB", self.device, self.name,
                                      self.compute_capability.0, self.compute_capability.1, self.multiprocessor_count),
        }
    }
}
