// The second engine for Linear layers: cuDNN's graph (backend) API, used per
// shape only where it is measured faster than the cuBLASLt path.
//
// cuDNN is optional and never linked (cudnn_library.hpp). When the library
// cannot be used or the handle cannot be made, the engine is unavailable and
// says why (CudnnEngine::create's reason): kiln then runs its own path and
// nothing fails.
//
// One engine per device, made with the device's stream: everything it runs
// is queued there. Plans (a finalized cuDNN execution plan with its
// workspace) are cached per shape for the engine's life, so binding an op to
// a plan is cheap and the pointers a bound call runs with never change, which
// keeps a captured CUDA graph valid.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/kernels.hpp"
#include "core/program.hpp"

namespace kiln::cuda {

struct CudnnApi;  // the functions resolved from libcudnn (cudnn_engine.cpp)

// One op's plan(s) bound to that op's pointers: execute() queues it on
// L.stream, the device's stream or the one a CUDA graph is being captured on
// (CudaBackend::launch). Made by CudnnEngine::bind; it refers to the engine,
// so it must not outlive it (executables die before their backend).
class CudnnCall {
 public:
  virtual ~CudnnCall() = default;
  virtual void execute(const Launch &L) = 0;
};

// What the per-shape timing chose, for Executable::describe().
struct EngineChoice {
  bool use_cudnn = false;
  double cudnn_ms = -1, other_ms = -1;  // medians; -1 where not timed
  int variant = 0;                      // which cuDNN variant won (backward: 1 = dX fused with dy * act')
  std::string note;                     // e.g. "cudnn 0.021 ms, cublaslt 0.018 ms" or why cuDNN was not tried
};

class CudnnEngine {
 public:
  // The engine of the current device, or null with *reason saying why cuDNN
  // cannot be used (the library, its version, the handle). `launch` is the
  // device's stream and grid width (for kiln's own kernels that a backward
  // call runs between cuDNN's); `pool` its memory pool (null: cudaMalloc).
  static std::unique_ptr<CudnnEngine> create(const Launch &launch, cudaMemPool_t pool, std::string *reason);
  ~CudnnEngine();
  CudnnEngine(const CudnnEngine &) = delete;
  CudnnEngine &operator=(const CudnnEngine &) = delete;

  // The op as cuDNN graphs, or null with *why_not when cuDNN offers no
  // engine for it (dtype, activation, or no engine config finalizes).
  std::unique_ptr<CudnnCall> bind(const LinearOp &op, std::string *why_not);
  // Backward: with fuse_dgrad, dX is computed from the raw dy with
  // dy * act'(.) fused in (see LinearBackwardCall in the .cpp).
  std::unique_ptr<CudnnCall> bind(const LinearBackwardOp &op, bool fuse_dgrad, std::string *why_not);

  // Runs `plan` and `alternative` (both must queue on the engine's stream)
  // once each to warm up, then `reps` times each, alternating which goes
  // first, timed with CUDA events; returns the median milliseconds of each.
  // Waits for the stream. Refuses (KILN_ERROR_BACKEND) while the stream is
  // being captured.
  struct Timing {
    double plan_ms = 0, alternative_ms = 0;
  };
  Timing time_plan(const std::function<void()> &plan, const std::function<void()> &alternative, int reps = 7);

  // The per-shape choice between cuDNN and the caller's path for one op:
  // the first op of each (shape, dtype, math, activation, direction, bias,
  // pre, dx) is bound and timed against `alternative` (which must compute the
  // same op on the same stream); later ones reuse the decision. When cuDNN
  // wins, *call is the op bound to its plan; otherwise *call is null.
  // The timing runs the op on its own buffers: its outputs (y, pre, dx, dw,
  // db, and dy, rewritten in place) are values a step rewrites before it
  // reads them, so this is only valid where nothing waits to read them, as
  // at compile time.
  EngineChoice choose_linear(const LinearOp &op, const std::function<void()> &alternative,
                             std::unique_ptr<CudnnCall> *call);
  EngineChoice choose_linear(const LinearBackwardOp &op, const std::function<void()> &alternative,
                             std::unique_ptr<CudnnCall> *call);

  // Backend::softmax for args.inner == 1, rows of n contiguous values, queued on
  // L.stream: the first call of each (dtype, outer, n, log) on the engine's
  // own stream times cudnnSoftmaxForward against `own_kernel` (which must do
  // the same on L.stream) and every call then runs the faster one. Runs
  // own_kernel, untimed, where cuDNN cannot take the shape (more than
  // INT_MAX elements), where in and out overlap (a repeated run would not
  // recompute the same thing), or before a decision while L.stream is
  // another stream or captured.
  void softmax(const Launch &L, const SoftmaxArgs &args, const std::function<void()> &own_kernel);

  struct Plan;  // one finalized execution plan and its workspace (.cpp)

 private:
  CudnnEngine(const CudnnApi &api, const Launch &launch, cudaMemPool_t pool);

  // Shape key of a plan: graph kind, dtype, math, rows, in, out, activation,
  // with bias, with pre, the pointers' common alignment.
  using PlanKey = std::tuple<int, DType, MathMode, int64_t, int64_t, int64_t, UnaryOp, bool, bool, uint32_t>;
  // Decision key: direction, dtype, math, rows, in, out, activation, bias, pre, dx.
  using DecisionKey = std::tuple<int, DType, MathMode, int64_t, int64_t, int64_t, UnaryOp, bool, bool, bool>;
  using SoftmaxKey = std::tuple<DType, int64_t, int64_t, bool>;

  // The cached plan for `key`, built by `build` on first use; a declined
  // build is cached too (as null with its reason) so it is not retried.
  std::shared_ptr<const Plan> plan(const PlanKey &key, const std::function<std::shared_ptr<const Plan>()> &build,
                                   std::string *why_not);
  // Binds each variant, keeps the fastest that binds, times it against
  // `alternative` and caches the decision under `key`.
  using Binder = std::function<std::unique_ptr<CudnnCall>(std::string *)>;
  EngineChoice choose(const DecisionKey &key, const std::vector<Binder> &variants,
                      const std::function<void()> &alternative, std::unique_ptr<CudnnCall> *call);
  void run_softmax(cudaStream_t stream, const SoftmaxArgs &args);
  // Points the handle at `stream` (the caller holds mutex_).
  void use_stream(cudaStream_t stream);

  const CudnnApi &api_;
  cudnnHandle_t handle_ = nullptr;
  cudaStream_t handle_stream_ = nullptr;  // the stream the handle queues on now
  Launch launch_;
  cudaMemPool_t pool_ = nullptr;
  // Guards the handle (cuDNN handles must not be used by two threads at
  // once) and the caches. Recursive: choose() binds and executes under it.
  std::recursive_mutex mutex_;
  std::map<PlanKey, std::pair<std::shared_ptr<const Plan>, std::string>> plans_;
  std::map<DecisionKey, EngineChoice> decisions_;
  std::map<SoftmaxKey, bool> softmax_choice_;  // true: cuDNN's is faster
  // KILN_CUDNN_ALWAYS=1: cuDNN wherever it binds, faster or not (still
  // timed, for describe()), so that a GPU test checks its results whatever
  // the timings say.
  bool always_ = false;

  friend class LinearCall;
  friend class LinearBackwardCall;
};

}  // namespace kiln::cuda
