// Collective: what training across ranks asks of a communication engine.
// Declared here, with core's types, so the step program (core/program.hpp)
// and the trainer can name it; implemented by the distributed plugin
// libkiln_dist.so (src/distributed/plugin: Open MPI for processes and CPU buffers,
// NCCL for GPU buffers), which libkiln dlopen()s on demand so that libkiln.so
// itself links neither engine.
//
// Every rank of a communicator must make the same calls in the same order
// (the collective contract of MPI and NCCL). A call that does not complete
// within the timeout, or that an engine reports failed (a peer died), throws
// kiln::Error with KILN_ERROR_COMMUNICATION, and the communicator is broken
// from then on: every later call fails at once with the first failure's
// message, because a timed-out collective may still be pending and the ranks
// can no longer agree on what was exchanged.
//
// Used by one thread at a time (the trainer it is attached to), except
// abort(), which any thread may call; different communicators may be used
// by different threads at once (the MPI engine serializes its MPI calls).
#pragma once

#include <cstdint>
#include <string>

#include "core/device.hpp"
#include "core/dtype.hpp"

namespace kiln {

class Collective {
 public:
  virtual ~Collective() = default;

  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  // The rank among the ranks of the same machine (MPI's shared-memory split):
  // the GPU a rank uses by default.
  virtual int64_t local_rank() const = 0;
  // The engine and its layout, e.g. "mpi (Open MPI v4.1.4), 2 ranks".
  virtual std::string describe() const = 0;

  // Whether buffers on device can be passed (the CPU with MPI; CUDA devices
  // with NCCL). The trainer checks this when it is attached.
  virtual bool supports(Device device) const = 0;

  // In place, over every rank: buf[0..n) = sum (or mean) of every rank's
  // buf. t is F32, F64 or I64 (mean: float types only). buf is memory of
  // device.
  virtual void allreduce(Device device, DType t, void *buf, int64_t n, bool mean) = 0;
  // allreduce, started and not waited for: the gradient buckets of a step
  // (train/gradient_reduce.hpp). On a CUDA device, `producer` is the
  // cudaStream_t whose queued work writes buf: the engine's collective is
  // queued after that work without the host waiting for it, so it overlaps
  // whatever the producer queues next. Host buffers (MPI) are reduced to
  // completion here, since Open MPI makes no progress on a nonblocking
  // collective while the caller computes. buf must not be touched until
  // allreduce_wait returns. Failures may surface here or in allreduce_wait.
  virtual void allreduce_start(Device device, DType t, void *buf, int64_t n, bool mean, void *producer) = 0;
  // Waits for every allreduce_start not yet waited for, with the timeout and
  // abort() of any collective. Nothing started: returns at once.
  virtual void allreduce_wait() = 0;
  // buf[0..bytes) of rank root replaces every other rank's.
  virtual void broadcast(Device device, void *buf, int64_t bytes, int64_t root) = 0;
  // Host memory: out[r * bytes .. (r + 1) * bytes) = rank r's in[0..bytes).
  virtual void allgather(const void *in, int64_t bytes, void *out) = 0;

  // Breaks the communicator from another thread: a collective waiting now on
  // this rank, and every later call, fails at once with COMMUNICATION
  // (`why` in the message) instead of waiting for peers that will not come.
  // A DataParallel group calls it on its other replicas when one replica
  // fails outside a collective.
  virtual void abort(const std::string &why) = 0;

  // Seconds a collective may take before it fails (> 0).
  virtual void set_timeout(double seconds) = 0;
  virtual double timeout() const = 0;
};

}  // namespace kiln
