#include "backend/cuda/planning/lt_layout.hpp"

namespace kiln::cuda {

LtProduct lt_product(const GemmArgs &g) {
  LtProduct p;
  p.trans_first = g.trans_b;
  p.trans_second = g.trans_a;
  p.m = g.n, p.n = g.m, p.k = g.k;
  // kiln's B is [k, n] row-major (stored [n, k] when trans_b): column-major
  // [n, k] with ld n (or [k, n] with ld k).
  p.first = g.trans_b ? LtMatrix{g.k, g.n, g.k} : LtMatrix{g.n, g.k, g.n};
  // kiln's A is [m, k] row-major (stored [k, m] when trans_a).
  p.second = g.trans_a ? LtMatrix{g.m, g.k, g.m} : LtMatrix{g.k, g.m, g.k};
  p.out = LtMatrix{g.n, g.m, g.n};
  return p;
}

}  // namespace kiln::cuda
