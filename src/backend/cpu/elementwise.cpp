// Elementwise kernels: fill, arange, cast, unary, scalar and broadcast binary
// ops, for every dtype. The dtype and the op are resolved once per call into
// template parameters, so each inner loop is a plain loop the compiler
// vectorises; integer semantics are documented in kernels.hpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/activation_math.hpp"
#include "backend/cpu/dtype_traits.hpp"
#include "backend/cpu/kernels.hpp"

namespace kiln::cpu {

namespace {

// ---- integer arithmetic without undefined behaviour ----
template <class C>
C wrap_add(C a, C b) { using U = std::make_unsigned_t<C>; return C(U(a) + U(b)); }
template <class C>
C wrap_sub(C a, C b) { using U = std::make_unsigned_t<C>; return C(U(a) - U(b)); }
template <class C>
C wrap_mul(C a, C b) { using U = std::make_unsigned_t<C>; return C(U(a) * U(b)); }
template <class C>
C wrap_neg(C a) { using U = std::make_unsigned_t<C>; return C(U(0) - U(a)); }

// a^b by squaring, wrapping; a negative b truncates 1 / a^|b| toward zero.
template <class C>
C integer_pow(C a, C b) {
  if constexpr (std::is_signed_v<C>) {
    if (b < 0) {
      if (a == 1) return 1;
      if (a == -1) return (b & 1) ? C(-1) : C(1);
      return 0;
    }
  }
  C result = 1;
  while (b != 0) {
    if (b & 1) result = wrap_mul(result, a);
    a = wrap_mul(a, a);
    b = C(b >> 1);
  }
  return result;
}

// ---- binary ops: arithmetic keeps the compute type, comparisons give 0/1 ----
struct Add {
  template <class C> C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) return wrap_add(a, b); else return a + b;
  }
};
struct Sub {
  template <class C> C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) return wrap_sub(a, b); else return a - b;
  }
};
struct Mul {
  template <class C> C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) return wrap_mul(a, b); else return a * b;
  }
};
struct Div {
  template <class C> C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<C>) {
        if (b == C(-1)) return wrap_neg(a);  // INT_MIN / -1 overflows
      }
      return C(a / b);
    } else {
      return a / b;
    }
  }
};
struct Maximum {
  template <class C> C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a > b ? a : b;
  }
};
struct Minimum {
  template <class C> C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? a : b;
  }
};
struct Pow {
  template <class C> C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) return integer_pow(a, b); else return std::pow(a, b);
  }
};
struct Eq { template <class C> uint8_t operator()(C a, C b) const { return a == b; } };
struct Ne { template <class C> uint8_t operator()(C a, C b) const { return a != b; } };
struct Lt { template <class C> uint8_t operator()(C a, C b) const { return a < b; } };
struct Le { template <class C> uint8_t operator()(C a, C b) const { return a <= b; } };
struct Gt { template <class C> uint8_t operator()(C a, C b) const { return a > b; } };
struct Ge { template <class C> uint8_t operator()(C a, C b) const { return a >= b; } };

// Calls f(Op{}) for an arithmetic op, g(Op{}) for a comparison.
template <class F, class G>
void with_binary(BinaryOp op, F &&f, G &&g) {
  switch (op) {
    case BinaryOp::Add: f(Add{}); return;
    case BinaryOp::Sub: f(Sub{}); return;
    case BinaryOp::Mul: f(Mul{}); return;
    case BinaryOp::Div: f(Div{}); return;
    case BinaryOp::Maximum: f(Maximum{}); return;
    case BinaryOp::Minimum: f(Minimum{}); return;
    case BinaryOp::Pow: f(Pow{}); return;
    case BinaryOp::Eq: g(Eq{}); return;
    case BinaryOp::Ne: g(Ne{}); return;
    case BinaryOp::Lt: g(Lt{}); return;
    case BinaryOp::Le: g(Le{}); return;
    case BinaryOp::Gt: g(Gt{}); return;
    case BinaryOp::Ge: g(Ge{}); return;
  }
  fail(KILN_ERROR_INTERNAL, "unknown binary op " + std::to_string(int(op)));
}

// out[i] = op(a[i * as], b[i * bs]) for i < n, with the common stride pairs
// specialised so that they vectorise.
template <class In, class Out, class Op>
void binary_loop(int64_t n, const typename In::Storage *a, int64_t as, const typename In::Storage *b, int64_t bs,
                 typename Out::Storage *out, Op op) {
  if (as == 1 && bs == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = Out::store(op(In::load(a[i]), In::load(b[i])));
  } else if (as == 1 && bs == 0) {
    const auto bv = In::load(b[0]);
    for (int64_t i = 0; i < n; ++i) out[i] = Out::store(op(In::load(a[i]), bv));
  } else if (as == 0 && bs == 1) {
    const auto av = In::load(a[0]);
    for (int64_t i = 0; i < n; ++i) out[i] = Out::store(op(av, In::load(b[i])));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = Out::store(op(In::load(a[i * as]), In::load(b[i * bs])));
  }
}

// The broadcast walk: the last dimension is the inner loop, the others are
// "rows" visited with an odometer so that no row pays a division.
template <class In, class Out, class Op>
void broadcast_binary(ThreadPool &pool, const Broadcast &bc, const typename In::Storage *a,
                      const typename In::Storage *b, typename Out::Storage *out, Op op) {
  if (bc.ndim <= 0) {  // a 0-d result: one element
    out[0] = Out::store(op(In::load(a[0]), In::load(b[0])));
    return;
  }
  const int last = bc.ndim - 1;
  const int64_t inner = bc.shape[last], as = bc.a_stride[last], bs = bc.b_stride[last];
  int64_t rows = 1;
  for (int d = 0; d < last; ++d) rows *= bc.shape[d];
  if (inner <= 0 || rows <= 0) return;

  if (rows == 1) {
    pool.parallel_for(inner, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      binary_loop<In, Out>(end - begin, a + begin * as, as, b + begin * bs, bs, out + begin, op);
    });
    return;
  }
  const int64_t row_grain = std::max<int64_t>(1, kElementwiseGrain / inner);
  pool.parallel_for(rows, row_grain, [&](int64_t begin, int64_t end) {
    int64_t index[kMaxDims] = {};
    int64_t a_off = 0, b_off = 0, rest = begin;
    for (int d = last - 1; d >= 0; --d) {
      index[d] = rest % bc.shape[d];
      rest /= bc.shape[d];
      a_off += index[d] * bc.a_stride[d];
      b_off += index[d] * bc.b_stride[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      binary_loop<In, Out>(inner, a + a_off, as, b + b_off, bs, out + row * inner, op);
      for (int d = last - 1; d >= 0; --d) {  // advance the odometer
        a_off += bc.a_stride[d];
        b_off += bc.b_stride[d];
        if (++index[d] < bc.shape[d]) break;
        a_off -= index[d] * bc.a_stride[d];
        b_off -= index[d] * bc.b_stride[d];
        index[d] = 0;
      }
    }
  });
}

// Unary ops on integers: the ones with exact integer meaning stay integer,
// the others go through double (see kernels.hpp).
template <class Op>
struct IntegerUnary {
  Op op;
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_same_v<Op, act::Identity>) {
      return x;
    } else if constexpr (std::is_same_v<Op, act::Neg>) {
      return wrap_neg(x);
    } else if constexpr (std::is_same_v<Op, act::Abs> || std::is_same_v<Op, act::Relu>) {
      if constexpr (std::is_signed_v<C>) {
        if (x < 0) return std::is_same_v<Op, act::Abs> ? wrap_neg(x) : C(0);
      }
      return x;
    } else {
      return convert<C>(op(double(x)));
    }
  }
};

template <class T, class Op>
void unary_loop(ThreadPool &pool, int64_t n, const typename T::Storage *in, typename T::Storage *out, Op op) {
  pool.parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = T::store(op(T::load(in[i])));
  });
}

}  // namespace

void fill(ThreadPool &pool, const FillArgs &args) {
  const DType t = args.t;
  const int64_t n = args.n;
  void *out = args.out;
  const double value = args.value;
  dispatch_all(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    const S v = T::store(convert<typename T::Compute>(value));
    S *o = static_cast<S *>(out);
    pool.parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = v;
    });
  });
}

void arange(ThreadPool &pool, const ArangeArgs &args) {
  const DType t = args.t;
  const int64_t n = args.n;
  void *out = args.out;
  const double start = args.start, step = args.step;
  dispatch_all(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    S *o = static_cast<S *>(out);
    pool.parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = T::store(convert<typename T::Compute>(start + double(i) * step));
    });
  });
}

void cast(ThreadPool &pool, const CastArgs &args) {
  const DType from = args.from, to = args.to;
  const int64_t n = args.n;
  const void *in = args.in;
  void *out = args.out;
  if (n <= 0) return;
  if (from == to) {
    std::memmove(out, in, size_t(n * dtype_size(from)));
    return;
  }
  dispatch_all(from, [&](auto from_traits) {
    dispatch_all(to, [&](auto to_traits) {
      using F = decltype(from_traits);
      using T = decltype(to_traits);
      const auto *src = static_cast<const typename F::Storage *>(in);
      auto *dst = static_cast<typename T::Storage *>(out);
      pool.parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dst[i] = T::store(convert<typename T::Compute>(F::load(src[i])));
      });
    });
  });
}

void unary(ThreadPool &pool, const UnaryArgs &args) {
  const UnaryOp op = args.op;
  const DType t = args.t;
  const int64_t n = args.n;
  const void *in = args.in;
  void *out = args.out;
  const double alpha = args.alpha, threshold = args.threshold;
  if (n <= 0) return;
  dispatch_all(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    const S *src = static_cast<const S *>(in);
    S *dst = static_cast<S *>(out);
    act::with_unary(op, alpha, threshold, [&](auto fn) {
      if constexpr (std::is_integral_v<typename T::Compute>) {
        unary_loop<T>(pool, n, src, dst, IntegerUnary<decltype(fn)>{fn});
      } else {
        unary_loop<T>(pool, n, src, dst, fn);
      }
    });
  });
}

void scalar(ThreadPool &pool, const ScalarArgs &args) {
  const BinaryOp op = args.op;
  const DType t = args.t;
  const int64_t n = args.n;
  const void *a = args.a;
  const double s = args.s;
  void *out = args.out;
  if (n <= 0) return;
  dispatch_all(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    const S sv = T::store(convert<typename T::Compute>(s));  // s as a's dtype
    const S *src = static_cast<const S *>(a);
    auto run = [&](auto fn, auto out_traits) {
      using O = decltype(out_traits);
      auto *dst = static_cast<typename O::Storage *>(out);
      pool.parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
        binary_loop<T, O>(end - begin, src + begin, 1, &sv, 0, dst + begin, fn);
      });
    };
    with_binary(
        op, [&](auto fn) { run(fn, T{}); }, [&](auto fn) { run(fn, U8T{}); });
  });
}

void binary(ThreadPool &pool, const BinaryArgs &args) {
  const BinaryOp op = args.op;
  const DType t = args.t;
  const Broadcast &bc = args.bc;
  const void *a = args.a, *b = args.b;
  void *out = args.out;
  dispatch_all(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    const S *pa = static_cast<const S *>(a);
    const S *pb = static_cast<const S *>(b);
    with_binary(
        op, [&](auto fn) { broadcast_binary<T, T>(pool, bc, pa, pb, static_cast<S *>(out), fn); },
        [&](auto fn) { broadcast_binary<T, U8T>(pool, bc, pa, pb, static_cast<uint8_t *>(out), fn); });
  });
}

}  // namespace kiln::cpu
