use std::fmt;
use std::ptr::NonNull;
use std::time::Duration;

use kiln_sys as sys;

use crate::context::{Context, Device};
use crate::error::{check, Error, Result, Status};
use crate::{create, get};

/// One rank of a group of processes or GPUs that train one model together
/// (distributed data parallel): attach it to a trainer with
/// `Trainer::attach_communicator`, and every rank's steps then average their
/// gradients. The engines (Open MPI, NCCL) live in the plugin
/// libkiln_dist.so, loaded on first use; without it creation fails with
/// `Status::DeviceUnavailable` saying why. A collective that fails or times
/// out gives `Status::Communication`, as does every later call on it.
/// Displays as `rank 0 of 4 (local rank 0)`.
pub struct Communicator(NonNull<sys::kiln_communicator>);

// SAFETY: reads (rank, size) are plain queries; the one change (the timeout)
// takes &mut self, and once attached the trainer owns it; release works from
// any thread, so a rank can be handed to the thread that drives it.
unsafe impl Send for Communicator {}
unsafe impl Sync for Communicator {}

impl Drop for Communicator {
    fn drop(&mut self) {
        unsafe { sys::kiln_communicator_release(self.0.as_ptr()) }
    }
}

impl fmt::Display for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.rank(), self.size(), self.local_rank()) {
            (Ok(r), Ok(n), Ok(l)) => write!(f, "rank {r} of {n} (local rank {l})"),
            (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => write!(f, "communicator (<{e}>)"),
        }
    }
}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank().ok())
            .field("size", &self.size().ok())
            .field("local_rank", &self.local_rank().ok())
            .finish()
    }
}

impl Communicator {
    /// This process's rank among every process of the MPI job (collective:
    /// every process calls it). A process not started by mpirun is a job of
    /// one rank. MPI is initialised when the program has not done it.
    pub fn mpi(ctx: &Context) -> Result<Communicator> {
        create(|p| unsafe { sys::kiln_communicator_create_mpi(ctx.ptr(), p) }).map(Communicator)
    }

    /// One communicator per GPU of `devices`, over NCCL in this process:
    /// element i is rank i and runs on `devices[i]`. Each rank must be driven
    /// by a thread of its own (the ranks meet in every collective).
    /// `Status::InvalidArgument` for an empty list, a CPU device or a device
    /// listed twice; `DeviceUnavailable` for a GPU that is not there or a
    /// missing plugin; `NotSupported` for a plugin built without NCCL.
    pub fn local(ctx: &Context, devices: &[Device]) -> Result<Vec<Communicator>> {
        let raw: Vec<sys::kiln_device> = devices.iter().map(|d| d.raw()).collect();
        let mut out = vec![std::ptr::null_mut(); devices.len()];
        check(unsafe { sys::kiln_communicator_create_local(ctx.ptr(), raw.as_ptr(), raw.len() as i64, out.as_mut_ptr()) })?;
        out.into_iter()
            .map(|p| NonNull::new(p).map(Communicator).ok_or_else(|| Error::new(Status::Internal, "kiln returned a NULL communicator")))
            .collect()
    }

    pub(crate) fn ptr(&self) -> *mut sys::kiln_communicator {
        self.0.as_ptr()
    }

    /// This rank, in [0, size).
    pub fn rank(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_communicator_rank(self.ptr(), p) })
    }

    /// The number of ranks.
    pub fn size(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_communicator_size(self.ptr(), p) })
    }

    /// The rank among the ranks of this machine: the GPU to use
    /// (`Device::Cuda(local_rank)`).
    pub fn local_rank(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_communicator_local_rank(self.ptr(), p) })
    }

    /// How long one collective may take before it fails with
    /// `Status::Communication` (a dead or stuck peer); positive and finite,
    /// else `Status::InvalidArgument`.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<()> {
        check(unsafe { sys::kiln_communicator_set_timeout(self.ptr(), timeout.as_secs_f64()) })
    }
}
