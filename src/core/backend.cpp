// The Backend interface's default implementations that are not about step
// programs (those are in core/program.cpp): inference products on the
// weights themselves, for backends without a packed layout of their own.
#include "core/backend.hpp"

namespace kiln {

std::unique_ptr<PackedLinear> Backend::pack_linear(int64_t, DType t, const void *w, int64_t out, int64_t in) {
  return std::make_unique<PackedLinear>(t, out, in, w);
}

void Backend::linear_packed(int64_t index, const PackedLinearArgs &args) {
  const PackedLinear &w = *args.w;
  GemmArgs g;
  g.t = w.t;
  g.trans_b = true;
  g.m = args.rows, g.n = w.out, g.k = w.in;
  g.a = args.x, g.b = w.w, g.c = args.y;
  gemm(index, g);
  if (args.bias || args.act != UnaryOp::Identity) {
    BiasActArgs a;
    a.t = w.t;
    a.rows = args.rows, a.cols = w.out;
    a.y = args.y, a.bias = args.bias;
    a.act = args.act, a.alpha = args.alpha, a.threshold = args.threshold;
    bias_act(index, a);
  }
}

}  // namespace kiln
