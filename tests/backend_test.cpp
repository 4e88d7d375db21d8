// Every backend's kernels against naive float64 loops, through the Backend
// interface: the CPU always, CUDA when a context has a usable device (the
// CUDA half alone under KILN_TEST_DEVICE=cuda, the CPU half alone under
// KILN_TEST_DEVICE=cpu). Linked with kiln_internal
// (libkiln hides its C++ symbols), so it tests the kernels without the rest of
// kiln: every dtype path, StepParams read from device memory, shuffles,
// broadcasting, reductions, gemm, the nn kernels (gradients against
// finite differences), optimizer steps against torch.optim's formulas, and
// kernels called from several threads at once (thread_pool_test: the pool).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_features.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend_harness.hpp"
#include "core/context.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

using namespace kiln;

namespace {

using test::g_case;
using test::g_failures;
using test::status_of;

// The backend under test and its device index (-1: the CPU, 0: cuda:0).
Backend *g_be = nullptr;
int64_t g_dev = -1;
#define D g_dev
bool on_cpu() { return g_be->kind() == KILN_DEVICE_CPU; }

// |got - want| <= atol + rtol * |want| elementwise; NaN matches NaN.
void check_close(const char *what, const std::vector<double> &got, const std::vector<double> &want, double rtol,
                 double atol) {
  if (got.size() != want.size()) {
    ++g_failures;
    std::fprintf(stderr, "FAIL [%s] %s: %zu values, want %zu\n", g_case.c_str(), what, got.size(), want.size());
    return;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    if (g == w) continue;  // equal infinities
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      ++g_failures;
      std::fprintf(stderr, "FAIL [%s] %s[%zu] = %.9g, want %.9g\n", g_case.c_str(), what, i, g, w);
      return;
    }
  }
}

// Deterministic test inputs in [lo, hi).
std::vector<double> randoms(size_t n, uint64_t seed, double lo = -2, double hi = 2) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng_uniform(seed, i);
  return v;
}

// Host values of any dtype, converted from / to double.
struct Host {
  DType t;
  std::vector<unsigned char> bytes;
  Host(DType type, size_t n) : t(type), bytes(n * size_t(dtype_size(type)) + 1) {}
  Host(DType type, const std::vector<double> &v) : Host(type, v.size()) {
    for (size_t i = 0; i < v.size(); ++i) set(i, v[i]);
  }
  size_t size() const { return (bytes.size() - 1) / size_t(dtype_size(t)); }
  void set(size_t i, double x) {
    unsigned char *p = bytes.data() + i * size_t(dtype_size(t));
    switch (t) {
      case DType::F32: { float f = float(x); std::memcpy(p, &f, 4); break; }
      case DType::F64: std::memcpy(p, &x, 8); break;
      case DType::F16: { uint16_t h = f32_to_f16(float(x)); std::memcpy(p, &h, 2); break; }
      case DType::BF16: { uint16_t h = f32_to_bf16(float(x)); std::memcpy(p, &h, 2); break; }
      case DType::I32: { int32_t v = int32_t(x); std::memcpy(p, &v, 4); break; }
      case DType::I64: { int64_t v = int64_t(x); std::memcpy(p, &v, 8); break; }
      // Through int64: a u8 result wraps modulo 256 (a u8 sum of 378 is
      // stored as 122), and converting an out-of-range double straight to
      // uint8_t is undefined (UBSan's float-cast-overflow).
      case DType::U8: { uint8_t v = uint8_t(int64_t(x)); std::memcpy(p, &v, 1); break; }
    }
  }
  double get(size_t i) const {
    const unsigned char *p = bytes.data() + i * size_t(dtype_size(t));
    switch (t) {
      case DType::F32: { float f; std::memcpy(&f, p, 4); return f; }
      case DType::F64: { double d; std::memcpy(&d, p, 8); return d; }
      case DType::F16: { uint16_t h; std::memcpy(&h, p, 2); return f16_to_f32(h); }
      case DType::BF16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_f32(h); }
      case DType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
      case DType::I64: { int64_t v; std::memcpy(&v, p, 8); return double(v); }
      case DType::U8: return *p;
    }
    return 0;
  }
  std::vector<double> values() const {
    std::vector<double> v(size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = get(i);
    return v;
  }
};

// A buffer in the current backend's device memory (host memory on the CPU)
// with a host mirror: data() uploads pending host writes and hands out the
// device pointer (kernels may then write it), values() downloads first.
struct Buf {
  Host host;
  void *dev = nullptr;
  bool host_newer = true, device_newer = false;
  Buf(DType type, size_t n) : host(type, n) { dev = g_be->alloc(D, int64_t(host.bytes.size())); }
  Buf(DType type, const std::vector<double> &v) : Buf(type, v.size()) {
    for (size_t i = 0; i < v.size(); ++i) host.set(i, v[i]);
  }
  Buf(const Buf &) = delete;
  Buf &operator=(const Buf &) = delete;
  ~Buf() { g_be->free(D, dev); }
  size_t size() const { return host.size(); }
  void download() {
    if (!device_newer) return;
    g_be->copy_to_host(D, host.bytes.data(), dev, int64_t(host.bytes.size()), false);
    device_newer = false;
  }
  void *data() {
    if (host_newer) g_be->copy_to_device(D, dev, host.bytes.data(), int64_t(host.bytes.size()), false);
    host_newer = false;
    device_newer = true;
    return dev;
  }
  template <class T>
  T *as() { return static_cast<T *>(data()); }
  void set(size_t i, double x) {
    download();
    host.set(i, x);
    host_newer = true;
  }
  // Raw bytes into the buffer's start (integer patterns doubles cannot carry).
  void set_bytes(const void *src, size_t n) {
    download();
    std::memcpy(host.bytes.data(), src, n);
    host_newer = true;
  }
  std::vector<double> values() {
    download();
    return host.values();
  }
  std::vector<unsigned char> bytes() {
    download();
    return std::vector<unsigned char>(host.bytes.begin(), host.bytes.end() - 1);
  }
};

// The input as the dtype would store it (what the kernel actually reads).
std::vector<double> rounded(DType t, const std::vector<double> &v) { return Host(t, v).values(); }

// A StepParams block in the current backend's memory.
struct DevStep {
  void *dev;
  explicit DevStep(const StepParams &sp) {
    dev = g_be->alloc(D, int64_t(sizeof(StepParams)));
    g_be->copy_to_device(D, dev, &sp, int64_t(sizeof(StepParams)), false);
  }
  DevStep(const DevStep &) = delete;
  DevStep &operator=(const DevStep &) = delete;
  ~DevStep() { g_be->free(D, dev); }
  const StepParams *get() const { return static_cast<const StepParams *>(dev); }
};

const DType kFloats[] = {DType::F32, DType::F64, DType::F16, DType::BF16};
const DType kAll[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8};

double rtol_of(DType t) {
  switch (t) {
    case DType::F64: return 1e-12;
    case DType::F32: return 2e-6;
    case DType::F16: return 2e-3;
    case DType::BF16: return 1.6e-2;
    default: return 0;
  }
}

Broadcast make_broadcast(std::vector<int64_t> shape, std::vector<int64_t> as, std::vector<int64_t> bs) {
  Broadcast bc;
  bc.ndim = int(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    bc.shape[d] = shape[d];
    bc.a_stride[d] = as[d];
    bc.b_stride[d] = bs[d];
  }
  return bc;
}

// ---- tensor kernels -----------------------------------------------------

GemmArgs gemm_args(DType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                   const void *b, double beta, void *c) {
  GemmArgs g;
  g.t = t, g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k, g.alpha = alpha, g.beta = beta;
  g.a = a, g.b = b, g.c = c;
  return g;
}

DropoutArgs dropout_args(DType t, int64_t n, const void *x, void *y, uint8_t *mask, double p, uint64_t seed) {
  DropoutArgs d;
  d.t = t, d.n = n, d.x = x, d.y = y, d.mask = mask, d.p = p, d.stream = seed;
  return d;
}

void test_memory_and_info(Backend &be) {
  g_case = "memory";
  void *p = be.alloc(D, 1000);
  CHECK(p != nullptr && reinterpret_cast<uintptr_t>(p) % 64 == 0);
  be.free(D, p);
  void *z = be.alloc(D, 0);
  if (on_cpu()) CHECK(z != nullptr);  // elsewhere only bytes > 0 promise a pointer
  be.free(D, z);
  CHECK(status_of([&] { be.alloc(D, std::numeric_limits<int64_t>::max()); }) == KILN_ERROR_OUT_OF_MEMORY);
  CHECK(status_of([&] { be.alloc(D, int64_t(1) << 60); }) == KILN_ERROR_OUT_OF_MEMORY);
  DeviceInfo info = be.info(D);
  CHECK(!info.name.empty() && info.total_memory > 0 && info.free_memory > 0);
  CHECK(info.multiprocessor_count >= 1);
  if (on_cpu()) CHECK(info.threads >= 1);
  // Copies there and back, and on the device.
  std::vector<double> v = randoms(1000, 3);
  Buf a(DType::F64, v), b(DType::F64, v.size());
  be.copy_on_device(D, b.data(), a.data(), int64_t(v.size() * 8));
  check_close("copy_on_device", b.values(), v, 0, 0);
}

void test_fill_arange_cast(Backend &be) {
  for (DType t : kAll) {
    g_case = std::string("fill/arange ") + dtype_name(t);
    Buf out(t, 100);
    be.fill(D, FillArgs{t, 100, out.data(), 3.0});
    check_close("fill", out.values(), std::vector<double>(100, 3.0), 0, 0);
    be.arange(D, ArangeArgs{t, 100, out.data(), 1.0, 2.0});
    std::vector<double> want(100);
    for (int i = 0; i < 100; ++i) want[size_t(i)] = 1 + 2 * i;
    if (t == DType::U8) for (auto &w : want) w = double(uint8_t(int(w)));
    check_close("arange", out.values(), rounded(t, want), 0, 0);
  }
  g_case = "cast";
  // float -> int truncates toward zero, saturates, NaN -> 0.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Buf f(DType::F64, {2.7, -2.7, 1e30, -1e30, nan, 300, -5});
  Buf i32(DType::I32, 7), u8(DType::U8, 7), i64(DType::I64, 7);
  be.cast(D, CastArgs{DType::F64, DType::I32, 7, f.data(), i32.data()});
  check_close("f64->i32", i32.values(), {2, -2, 2147483647.0, -2147483648.0, 0, 300, -5}, 0, 0);
  be.cast(D, CastArgs{DType::F64, DType::U8, 7, f.data(), u8.data()});
  check_close("f64->u8", u8.values(), {2, 0, 255, 0, 0, 255, 0}, 0, 0);
  be.cast(D, CastArgs{DType::F64, DType::I64, 7, f.data(), i64.data()});
  check_close("f64->i64", i64.values(), {2, -2, 9223372036854775807.0, -9223372036854775808.0, 0, 300, -5}, 0, 0);
  for (DType from : kAll) {
    for (DType to : kAll) {
      g_case = std::string("cast ") + dtype_name(from) + "->" + dtype_name(to);
      std::vector<double> v = {0, 1, 2, 3, 100, 7, 42, 5};
      Buf in(from, v), out(to, v.size());
      be.cast(D, CastArgs{from, to, int64_t(v.size()), in.data(), out.data()});
      check_close("small integers", out.values(), rounded(to, v), 0, 0);
    }
  }
  // Large enough to run on the pool.
  g_case = "cast large";
  std::vector<double> big = randoms(200000, 5, -100, 100);
  Buf in(DType::F32, big), out(DType::F64, big.size());
  be.cast(D, CastArgs{DType::F32, DType::F64, int64_t(big.size()), in.data(), out.data()});
  check_close("f32->f64", out.values(), rounded(DType::F32, big), 0, 0);
}

// Each op in double from its definition (PyTorch's docs), not from
// core/formulas: alpha is LeakyReLU's slope, ELU's alpha and Softplus's
// beta; threshold is Softplus's.
double unary_ref(UnaryOp op, double x, double alpha, double threshold = 0) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Relu: return x > 0 ? x : 0;
    case UnaryOp::Gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Sigmoid: return 1 / (1 + std::exp(-x));
    case UnaryOp::LeakyRelu: return x > 0 ? x : alpha * x;
    case UnaryOp::Identity: return x;
    case UnaryOp::Elu: return x > 0 ? x : alpha * (std::exp(x) - 1);
    case UnaryOp::Selu: return 1.0507009873554804934 * (x > 0 ? x : 1.6732632423543772848 * (std::exp(x) - 1));
    case UnaryOp::Softplus: return alpha * x > threshold ? x : std::log(1 + std::exp(alpha * x)) / alpha;
  }
  return 0;
}

const UnaryOp kUnary[] = {UnaryOp::Neg,       UnaryOp::Abs,      UnaryOp::Exp,  UnaryOp::Log,  UnaryOp::Sqrt,
                          UnaryOp::Relu,      UnaryOp::Gelu,     UnaryOp::Tanh, UnaryOp::Sigmoid,
                          UnaryOp::LeakyRelu, UnaryOp::Identity, UnaryOp::Elu,  UnaryOp::Selu, UnaryOp::Softplus};

// The parameters the activation tests use: Softplus's threshold falls
// inside their inputs' range, at a point no float format holds exactly (so
// every dtype and the reference take the same side of it).
constexpr double kTestAlpha = 0.5, kTestThreshold = 1.3;

void test_unary(Backend &be) {
  for (DType t : kFloats) {
    for (UnaryOp op : kUnary) {
      g_case = std::string("unary ") + std::to_string(int(op)) + " " + dtype_name(t);
      const bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt;
      std::vector<double> x = rounded(t, randoms(70000, 11, positive ? 0.01 : -4, 4));
      Buf in(t, x), out(t, x.size());
      be.unary(D, UnaryArgs{op, t, int64_t(x.size()), in.data(), out.data(), kTestAlpha, kTestThreshold});
      std::vector<double> want(x.size());
      for (size_t i = 0; i < x.size(); ++i) want[i] = unary_ref(op, x[i], kTestAlpha, kTestThreshold);
      check_close("values", out.values(), rounded(t, want), rtol_of(t) * 4, t == DType::F64 ? 1e-15 : 1e-6);
    }
  }
  g_case = "unary integers";
  Buf i32(DType::I32, 4);
  int32_t vals[4] = {INT32_MIN, -3, 0, 7};
  i32.set_bytes(vals, sizeof vals);
  Buf out(DType::I32, 4);
  be.unary(D, UnaryArgs{UnaryOp::Neg, DType::I32, 4, i32.data(), out.data(), 0, 0});
  check_close("neg wraps", out.values(), {double(INT32_MIN), 3, 0, -7}, 0, 0);
  be.unary(D, UnaryArgs{UnaryOp::Abs, DType::I32, 4, i32.data(), out.data(), 0, 0});
  check_close("abs wraps", out.values(), {double(INT32_MIN), 3, 0, 7}, 0, 0);
  be.unary(D, UnaryArgs{UnaryOp::Relu, DType::I32, 4, i32.data(), out.data(), 0, 0});
  check_close("relu", out.values(), {0, 0, 0, 7}, 0, 0);
  Buf u8(DType::U8, {0, 1, 255}), u8out(DType::U8, 3);
  be.unary(D, UnaryArgs{UnaryOp::Neg, DType::U8, 3, u8.data(), u8out.data(), 0, 0});
  check_close("u8 neg wraps", u8out.values(), {0, 255, 1}, 0, 0);
}

double binary_ref(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Maximum: return std::max(a, b);
    case BinaryOp::Minimum: return std::min(a, b);
    case BinaryOp::Pow: return std::pow(a, b);
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
  }
  return 0;
}

const BinaryOp kBinary[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum,
                            BinaryOp::Minimum, BinaryOp::Pow, BinaryOp::Eq, BinaryOp::Ne, BinaryOp::Lt,
                            BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge};

void test_binary(Backend &be) {
  // [rows, cols] op b for four layouts of b, and scalar ops; floats.
  struct Layout { const char *name; int64_t rows, cols; std::vector<int64_t> bs; size_t b_len; };
  const int64_t R = 300, K = 257;
  const Layout layouts[] = {
      {"same shape", R, K, {K, 1}, size_t(R * K)},
      {"row broadcast", R, K, {0, 1}, size_t(K)},
      {"column broadcast", R, K, {1, 0}, size_t(R)},
      {"scalar", R, K, {0, 0}, 1},
  };
  for (DType t : kFloats) {
    for (BinaryOp op : kBinary) {
      const bool cmp = op >= BinaryOp::Eq;
      const DType out_t = cmp ? DType::U8 : t;
      for (const Layout &l : layouts) {
        g_case = std::string("binary ") + std::to_string(int(op)) + " " + dtype_name(t) + " " + l.name;
        std::vector<double> a = rounded(t, randoms(size_t(l.rows * l.cols), 21, 0.1, 3));
        std::vector<double> b = rounded(t, randoms(l.b_len, 22, 0.1, 3));
        if (cmp) for (size_t i = 0; i < l.b_len && i < a.size(); i += 3) b[i] = a[i];  // some equal pairs
        Buf ba(t, a), bb(t, b), out(out_t, a.size());
        Broadcast bc = make_broadcast({l.rows, l.cols}, {l.cols, 1}, l.bs);
        be.binary(D, BinaryArgs{op, t, bc, ba.data(), bb.data(), out.data()});
        std::vector<double> want(a.size());
        for (int64_t r = 0; r < l.rows; ++r)
          for (int64_t c = 0; c < l.cols; ++c)
            want[size_t(r * l.cols + c)] = binary_ref(op, a[size_t(r * l.cols + c)], b[size_t(r * l.bs[0] + c * l.bs[1])]);
        check_close("values", out.values(), rounded(out_t, want), rtol_of(t) * 4, 0);
      }
      if (!cmp) {
        g_case = std::string("scalar ") + std::to_string(int(op)) + " " + dtype_name(t);
        std::vector<double> a = rounded(t, randoms(50000, 23, 0.1, 3));
        Buf ba(t, a), out(t, a.size());
        be.scalar(D, ScalarArgs{op, t, int64_t(a.size()), ba.data(), 1.5, out.data()});
        std::vector<double> want(a.size());
        for (size_t i = 0; i < a.size(); ++i) want[i] = binary_ref(op, a[i], 1.5);
        check_close("values", out.values(), rounded(t, want), rtol_of(t) * 4, 0);
      }
    }
  }
  g_case = "binary 3-d broadcast";
  {  // [4, 5, 6] + [4, 1, 6]
    std::vector<double> a = randoms(120, 31), b = randoms(24, 32);
    Buf ba(DType::F64, a), bb(DType::F64, b), out(DType::F64, 120);
    Broadcast bc = make_broadcast({4, 5, 6}, {30, 6, 1}, {6, 0, 1});
    be.binary(D, BinaryArgs{BinaryOp::Sub, DType::F64, bc, ba.data(), bb.data(), out.data()});
    std::vector<double> want(120);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 5; ++j)
        for (int k = 0; k < 6; ++k) want[size_t(i * 30 + j * 6 + k)] = a[size_t(i * 30 + j * 6 + k)] - b[size_t(i * 6 + k)];
    check_close("values", out.values(), want, 0, 0);
  }
  g_case = "binary NaN";
  {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Buf a(DType::F32, {nan, 1, 2}), b(DType::F32, {1, nan, 3}), out(DType::F32, 3);
    Broadcast bc = make_broadcast({3}, {1}, {1});
    be.binary(D, BinaryArgs{BinaryOp::Maximum, DType::F32, bc, a.data(), b.data(), out.data()});
    check_close("maximum propagates NaN", out.values(), {nan, nan, 3}, 0, 0);
  }
  g_case = "binary integers";
  {
    Broadcast bc = make_broadcast({6}, {1}, {1});
    Buf a(DType::I32, 6), b(DType::I32, 6), out(DType::I32, 6);
    int32_t av[6] = {7, -7, INT32_MIN, 5, INT32_MAX, 3}, bv[6] = {2, 2, -1, 0, 1, 4};
    a.set_bytes(av, sizeof av);
    b.set_bytes(bv, sizeof bv);
    be.binary(D, BinaryArgs{BinaryOp::Div, DType::I32, bc, a.data(), b.data(), out.data()});
    check_close("div truncates, /0 = 0, INT_MIN/-1 wraps", out.values(), {3, -3, double(INT32_MIN), 0, INT32_MAX, 0},
                0, 0);
    be.binary(D, BinaryArgs{BinaryOp::Add, DType::I32, bc, a.data(), b.data(), out.data()});
    check_close("add wraps", out.values(), {9, -5, INT32_MAX, 5, double(INT32_MIN), 7}, 0, 0);
    be.binary(D, BinaryArgs{BinaryOp::Pow, DType::I32, bc, b.data(), b.data(), out.data()});
    check_close("pow", out.values(), {4, 4, -1, 1, 1, 256}, 0, 0);
    Buf u(DType::U8, {200, 10, 3}), v(DType::U8, {100, 20, 0}), uo(DType::U8, 3);
    Broadcast bc3 = make_broadcast({3}, {1}, {1});
    be.binary(D, BinaryArgs{BinaryOp::Add, DType::U8, bc3, u.data(), v.data(), uo.data()});
    check_close("u8 add wraps", uo.values(), {44, 30, 3}, 0, 0);
    be.binary(D, BinaryArgs{BinaryOp::Sub, DType::U8, bc3, u.data(), v.data(), uo.data()});
    check_close("u8 sub wraps", uo.values(), {100, 246, 3}, 0, 0);
    Buf i64(DType::I64, {-9, 9}), o64(DType::I64, 2);
    be.scalar(D, ScalarArgs{BinaryOp::Div, DType::I64, 2, i64.data(), 2.0, o64.data()});
    check_close("i64 scalar div", o64.values(), {-4, 4}, 0, 0);
    be.scalar(D, ScalarArgs{BinaryOp::Div, DType::I64, 2, i64.data(), 0.0, o64.data()});
    check_close("i64 scalar div by 0", o64.values(), {0, 0}, 0, 0);
  }
}

void test_reduce_softmax(Backend &be) {
  struct Shape3 { int64_t outer, n, inner; };
  const Shape3 shapes[] = {{1, 1, 1}, {3, 7, 1}, {1, 300001, 1}, {5, 9, 130}, {2, 1000, 3}, {40, 3, 1}, {1, 4, 70}};
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Argmax};
  for (DType t : kAll) {
    for (ReduceOp op : ops) {
      if (op == ReduceOp::Mean && !dtype_is_float(t)) continue;
      for (const Shape3 &s : shapes) {
        g_case = std::string("reduce ") + std::to_string(int(op)) + " " + dtype_name(t) + " [" +
                 std::to_string(s.outer) + "," + std::to_string(s.n) + "," + std::to_string(s.inner) + "]";
        const size_t total = size_t(s.outer * s.n * s.inner);
        std::vector<double> x = randoms(total, 41, dtype_is_float(t) ? -3 : 0, dtype_is_float(t) ? 3 : 100);
        for (auto &v : x) if (!dtype_is_float(t)) v = std::floor(v);
        x = rounded(t, x);
        Buf in(t, x);
        const DType out_t = op == ReduceOp::Argmax ? DType::I64 : t;
        Buf out(out_t, size_t(s.outer * s.inner));
        be.reduce(D, ReduceArgs{op, t, s.outer, s.n, s.inner, in.data(), out.data()});
        std::vector<double> want(size_t(s.outer * s.inner));
        for (int64_t o = 0; o < s.outer; ++o) {
          for (int64_t i = 0; i < s.inner; ++i) {
            double sum = 0, best = -INFINITY;
            int64_t arg = 0;
            for (int64_t j = 0; j < s.n; ++j) {
              double v = x[size_t((o * s.n + j) * s.inner + i)];
              sum += v;
              if (v > best) { best = v; arg = j; }
            }
            double w = op == ReduceOp::Sum ? sum : op == ReduceOp::Mean ? sum / double(s.n)
                       : op == ReduceOp::Max ? best : double(arg);
            want[size_t(o * s.inner + i)] = w;
          }
        }
        const double tol = dtype_is_float(t) ? rtol_of(t) * 2 : 0;
        check_close("values", out.values(), op == ReduceOp::Argmax ? want : rounded(out_t, want), tol, tol);
      }
    }
  }
  g_case = "reduce sum of empty";
  {
    Buf in(DType::F32, 1), out(DType::F32, 2);
    be.reduce(D, ReduceArgs{ReduceOp::Sum, DType::F32, 2, 0, 1, in.data(), out.data()});
    check_close("zero", out.values(), {0, 0}, 0, 0);
    CHECK(status_of([&] { be.reduce(D, ReduceArgs{ReduceOp::Max, DType::F32, 2, 0, 1, in.data(), out.data()}); }) ==
          KILN_ERROR_INVALID_ARGUMENT);
  }
  for (DType t : kFloats) {
    for (bool log : {false, true}) {
      for (const Shape3 &s : {Shape3{7, 10, 1}, Shape3{3, 5, 100}, Shape3{200, 300, 1}}) {
        g_case = std::string(log ? "log_softmax " : "softmax ") + dtype_name(t) + " inner " + std::to_string(s.inner);
        const size_t total = size_t(s.outer * s.n * s.inner);
        std::vector<double> x = rounded(t, randoms(total, 51, -5, 5));
        Buf in(t, x), out(t, total);
        be.softmax(D, SoftmaxArgs{t, s.outer, s.n, s.inner, in.data(), out.data(), log});
        std::vector<double> want(total);
        for (int64_t o = 0; o < s.outer; ++o) {
          for (int64_t i = 0; i < s.inner; ++i) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < s.n; ++j) mx = std::max(mx, x[size_t((o * s.n + j) * s.inner + i)]);
            for (int64_t j = 0; j < s.n; ++j) sum += std::exp(x[size_t((o * s.n + j) * s.inner + i)] - mx);
            for (int64_t j = 0; j < s.n; ++j) {
              const size_t k = size_t((o * s.n + j) * s.inner + i);
              want[k] = log ? x[k] - mx - std::log(sum) : std::exp(x[k] - mx) / sum;
            }
          }
        }
        check_close("values", out.values(), want, rtol_of(t) * 4, t == DType::F64 ? 1e-14 : 1e-6);
      }
    }
  }
}

void test_gemm(Backend &be) {
  struct Size {
    int64_t m, n, k;
  };
  // Shapes of the tutorial MLP, odd tails, narrow blocks, packed-B cases
  // (m >= 256, n a multiple of 256; the last one big enough that the packing
  // is split over the pool) and k = 0; then, in f32 only, products above 2^26
  // multiply-adds (the CPU's blocked kernels, AVX-512 and AVX2). On AVX-512:
  // column panels with a partial last block of 16 and 263 = 21 x 12 + 8 + 3
  // rows, in passes of 704 steps along k (as deep as 263 rows allow) with a
  // last one of 692, not a multiple of 16; row panels (1096 = 91 x 12 + 4
  // rows, cut in multiples of 4 over the suite's three threads: 368 = 30 x
  // 12 + 8 rows and twice 364 = 30 x 12 + 4, each in one pass of 500 steps);
  // and column panels of 1040 rows, more than one row block of 256 steps
  // holds (1032), so in two. On AVX2 (tiles of 6 x 16, passes of at most
  // 512 steps in multiples of 8, op(B) transposed 16 steps at a time, then
  // 8, then one): the last tile of a panel 5 (263), 1 (259), 3 (261), 4
  // (1096 in rows of 366, 366 and 364) and 2 (1040, in two row blocks of
  // 522) rows high; partial last blocks of 12 (300) and 5 (293) columns;
  // last passes whose depth is not a multiple of 8 or 16 (2100 = 4 x 424 +
  // 404, 500 in one, 900 = 456 + 444, 1000 = 504 + 496).
  // Blocks of at most 16 columns take one vector per row on AVX-512: 10
  // (a classifier's last layer, long k) and 16 do, 17 does not. With k <=
  // 16 the register-blocked kernel goes along C's rows (50 x 70 x 10: 7
  // blocks of rows, the last of 2, by 3 of columns, the last of 6), and 9 to
  // 12 rows are one block of 12 (10 x 70 x 33); 300 x 1000 x 10 is big
  // enough to be split over the pool, in row panels (short k) although it
  // is wider than tall. The AVX2 register-blocked kernel (tiles of up to 6
  // x 16, the last 7 to 11 rows in two tiles) takes the products up to 2^26
  // at most 128 columns wide or with an A of at most 8192 floats: tiles of
  // 1 to 6 rows (1, 2, 3; 32 as 6 x 4 + 4 + 4, 40 as 6 x 5 + 5 + 5, 257 as 6
  // x 42 + 5, 50 x 70 x 10 as 6 x 7 + 4 + 4 along C's rows), last blocks of
  // 1, 5, 6, 8 and 10 columns, and 300 x 1000 x 10 (an A of 3000 floats)
  // and 256 x 256 x 24 (B packed although not transposed: a stride of 1
  // KiB) by its second rule.
  const Size sizes[] = {{1, 1, 1},       {3, 5, 7},       {128, 32, 784},   {32, 784, 128},  {128, 10, 32},
                        {256, 10, 1024}, {40, 16, 50},    {40, 17, 50},     {257, 129, 65},  {300, 256, 40},
                        {4, 3, 0},       {50, 70, 10},    {10, 70, 33},     {300, 1000, 10}, {256, 512, 300},
                        {2, 40, 24},     {256, 256, 24},
                        {263, 304, 2100}, {1096, 300, 500}, {1040, 1056, 256}, {259, 320, 1000},
                        {261, 293, 900}};
  // The f32 kernels the CPU has, each in turn (cpu::set_f32_products): the
  // widest (Auto), AVX2 where the widest is AVX-512, and OpenBLAS alone.
  std::vector<std::pair<const char *, cpu::F32Products>> f32_paths = {{"", cpu::F32Products::Auto}};
  if (on_cpu()) {
    if (cpu::avx512_available() && cpu::avx2_fma_available()) f32_paths.push_back({" avx2", cpu::F32Products::Avx2});
    if (cpu::avx2_fma_available()) f32_paths.push_back({" blas", cpu::F32Products::Blas});
  }
  // C = alpha op(A) op(B) + beta C against a float64 reference, on each f32
  // path.
  auto check_product = [&](DType t, const Size &s, bool ta, bool tb, double beta) {
    std::vector<double> a = rounded(t, randoms(size_t(s.m * s.k), 61, -1, 1));
    std::vector<double> b = rounded(t, randoms(size_t(s.k * s.n), 62, -1, 1));
    std::vector<double> c = rounded(t, randoms(size_t(s.m * s.n), 63, -1, 1));
    const double alpha = 1.5;
    std::vector<double> want(size_t(s.m * s.n));
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < s.k; ++p) {
          const double av = ta ? a[size_t(p * s.m + i)] : a[size_t(i * s.k + p)];
          const double bv = tb ? b[size_t(j * s.k + p)] : b[size_t(p * s.n + j)];
          acc += av * bv;
        }
        want[size_t(i * s.n + j)] = alpha * acc + beta * c[size_t(i * s.n + j)];
      }
    }
    const double tol = t == DType::F64 ? 1e-12 : t == DType::F32 ? 1e-5 : rtol_of(t) * 2;
    for (const auto &[path, which] : f32_paths) {
      if (t != DType::F32 && which != cpu::F32Products::Auto) continue;
      g_case = std::string("gemm ") + dtype_name(t) + path + " " + std::to_string(s.m) + "x" + std::to_string(s.n) +
               "x" + std::to_string(s.k) + (ta ? " A^T" : "") + (tb ? " B^T" : "") + (beta == 0 ? " beta 0" : "");
      Buf ba(t, a), bb(t, b), bc(t, c);
      if (beta == 0) bc.set(0, std::numeric_limits<double>::quiet_NaN());  // beta = 0 ignores C
      if (on_cpu()) cpu::set_f32_products(which);
      be.gemm(D, gemm_args(t, ta, tb, s.m, s.n, s.k, alpha, ba.data(), bb.data(), beta, bc.data()));
      if (on_cpu()) cpu::set_f32_products(cpu::F32Products::Auto);
      check_close("values", bc.values(), want, tol, tol * std::sqrt(double(s.k) + 1));
    }
  };
  for (DType t : kFloats) {
    for (const Size &s : sizes) {
      if (s.m * s.n * s.k > (int64_t(1) << 26) && t != DType::F32) continue;
      for (int trans = 0; trans < 4; ++trans) check_product(t, s, trans & 1, trans & 2, trans == 3 ? 0.0 : 0.5);
    }
  }
  // A B^T at most 12 columns wide and 128 steps or more deep: on AVX-512
  // each element is a dot product (sgemm_avx512_dots), in groups of 16 rows
  // and passes of 256 steps. Every width from 1 to 12, an odd last row
  // (37 = 2 x 16 + 5), a last pass of 44 steps with a masked tail of 12, and
  // beta = 0 (C ignored) as the forward product has it.
  for (int64_t n = 1; n <= 12; ++n) {
    for (double beta : {0.0, 0.5}) check_product(DType::F32, Size{37, n, 300}, false, true, beta);
  }
  // TF32: a CUDA mode. The CPU refuses it, naming it; CUDA rounds the inputs
  // to 10-bit mantissas (relative error <= 2^-11 each, so <= ~2^-10 per
  // product) and accumulates in f32: |C - ref| <= 2^-9 * sum |a||b| bounds it.
  for (const Size &s : {Size{128, 32, 784}, Size{257, 129, 65}}) {
    g_case = "gemm tf32 " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
    std::vector<double> a = rounded(DType::F32, randoms(size_t(s.m * s.k), 64, -1, 1));
    std::vector<double> b = rounded(DType::F32, randoms(size_t(s.k * s.n), 65, -1, 1));
    Buf ba(DType::F32, a), bb(DType::F32, b), bc(DType::F32, size_t(s.m * s.n));
    GemmArgs g = gemm_args(DType::F32, false, false, s.m, s.n, s.k, 1, ba.data(), bb.data(), 0, bc.data());
    g.math = MathMode::Tf32;
    if (on_cpu()) {
      std::string message;
      kiln_status status = KILN_OK;
      try {
        be.gemm(D, g);
      } catch (const Error &e) {
        status = e.status();
        message = e.what();
      }
      CHECK(status == KILN_ERROR_NOT_SUPPORTED);
      CHECK(message.find("tf32") != std::string::npos);
      continue;
    }
    be.gemm(D, g);
    const std::vector<double> got = bc.values();
    bool ok = true;
    for (int64_t i = 0; i < s.m && ok; ++i)
      for (int64_t j = 0; j < s.n && ok; ++j) {
        double acc = 0, mag = 0;
        for (int64_t p = 0; p < s.k; ++p) {
          acc += a[size_t(i * s.k + p)] * b[size_t(p * s.n + j)];
          mag += std::fabs(a[size_t(i * s.k + p)] * b[size_t(p * s.n + j)]);
        }
        if (!(std::fabs(got[size_t(i * s.n + j)] - acc) <= std::ldexp(mag, -9) + 1e-6)) {
          std::fprintf(stderr, "FAIL [%s] C[%lld,%lld] = %.9g, want %.9g\n", g_case.c_str(), (long long)i,
                       (long long)j, got[size_t(i * s.n + j)], acc);
          ++g_failures;
          ok = false;
        }
      }
  }
}

// ---- neural-network kernels ---------------------------------------------

void test_bias_act(Backend &be) {
  const UnaryOp acts[] = {UnaryOp::Identity, UnaryOp::Relu, UnaryOp::LeakyRelu, UnaryOp::Gelu, UnaryOp::Tanh,
                          UnaryOp::Sigmoid,  UnaryOp::Elu,  UnaryOp::Selu,      UnaryOp::Softplus};
  const double a = kTestAlpha, th = kTestThreshold;
  const int64_t rows = 200, cols = 37;
  for (DType t : kFloats) {
    for (UnaryOp act : acts) {
      for (int with_bias = 0; with_bias < 2; ++with_bias) {
        g_case = std::string("bias_act ") + std::to_string(int(act)) + " " + dtype_name(t) + (with_bias ? " bias" : "");
        std::vector<double> y = rounded(t, randoms(size_t(rows * cols), 71, -3, 3));
        std::vector<double> bias = rounded(t, randoms(size_t(cols), 72, -1, 1));
        Buf by(t, y), bb(t, bias), pre(t, y.size());
        be.bias_act(D, BiasActArgs{t, rows, cols, by.data(), with_bias ? bb.data() : nullptr, act, a, th, pre.data()});
        std::vector<double> sum(y.size()), want(y.size());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const size_t k = size_t(r * cols + c);
            sum[k] = y[k] + (with_bias ? bias[size_t(c)] : 0);
          }
        // pre holds the sum in t; the activation reads it in the compute
        // type (f32 for half types), which matters at Softplus's threshold.
        const std::vector<double> want_pre = rounded(t, sum), computed = rounded(t == DType::F64 ? t : DType::F32, sum);
        for (size_t k = 0; k < y.size(); ++k) want[k] = unary_ref(act, computed[k], a, th);
        check_close("pre", pre.values(), want_pre, rtol_of(t), 0);
        check_close("y", by.values(), rounded(t, want), rtol_of(t) * 4, 1e-6);

        // Backward vs a central difference of the activation.
        g_case = std::string("act_backward ") + std::to_string(int(act)) + " " + dtype_name(t);
        std::vector<double> dy = rounded(t, randoms(y.size(), 73, -1, 1));
        Buf bdy(t, dy), dx(t, y.size());
        be.act_backward(D, ActBackwardArgs{t, int64_t(y.size()), act, a, th, bdy.data(), pre.data(), by.data(),
                                           dx.data()});
        std::vector<double> want_dx(y.size());
        const std::vector<double> out = by.values();
        for (size_t k = 0; k < y.size(); ++k) {
          const double x = want_pre[k], h = 1e-6;
          double deriv = (unary_ref(act, x + h, a, th) - unary_ref(act, x - h, a, th)) / (2 * h);
          // PyTorch's from-output forms (and its choice of 0 at ReLU's kink)
          if (act == UnaryOp::Relu) deriv = out[k] > 0 ? 1 : 0;
          if (act == UnaryOp::LeakyRelu) deriv = out[k] > 0 ? 1 : a;
          // At a kink, the side PyTorch takes: ELU's and SELU's left one at
          // 0, Softplus's curve at its threshold (x itself only past it).
          if (act == UnaryOp::Elu && std::fabs(x) < 2 * h) deriv = x > 0 ? 1 : a * std::exp(x);
          if (act == UnaryOp::Selu && std::fabs(x) < 2 * h)
            deriv = 1.0507009873554804934 * (x > 0 ? 1 : 1.6732632423543772848 * std::exp(x));
          if (act == UnaryOp::Softplus && std::fabs(a * x - th) < 2 * h * a)
            deriv = a * x > th ? 1 : 1 / (1 + std::exp(-a * x));
          if (act == UnaryOp::Tanh) deriv = 1 - out[k] * out[k];
          if (act == UnaryOp::Sigmoid) deriv = out[k] * (1 - out[k]);
          want_dx[k] = dy[k] * deriv;
        }
        check_close("dx", dx.values(), want_dx, rtol_of(t) * 8 + 1e-6, 1e-5);
      }
    }
  }
}

void test_bias_grad(Backend &be) {
  for (DType t : kFloats) {
    for (int64_t cols : {10, 300}) {
      g_case = std::string("bias_grad ") + dtype_name(t) + " cols " + std::to_string(cols);
      const int64_t rows = 128;
      std::vector<double> dy = rounded(t, randoms(size_t(rows * cols), 81, -1, 1));
      std::vector<double> db = rounded(t, randoms(size_t(cols), 82, -1, 1));
      Buf bdy(t, dy), bdb(t, db);
      be.bias_grad(D, BiasGradArgs{t, rows, cols, bdy.data(), bdb.data(), 0.5});
      std::vector<double> want(static_cast<size_t>(cols));
      for (int64_t c = 0; c < cols; ++c) {
        double s = 0.5 * db[size_t(c)];
        for (int64_t r = 0; r < rows; ++r) s += dy[size_t(r * cols + c)];
        want[size_t(c)] = s;
      }
      check_close("db", bdb.values(), want, rtol_of(t) * 4, rtol_of(t) * 4);
      bdb.set(0, std::numeric_limits<double>::quiet_NaN());  // beta = 0 overwrites
      be.bias_grad(D, BiasGradArgs{t, rows, cols, bdy.data(), bdb.data(), 0.0});
      for (int64_t c = 0; c < cols; ++c) want[size_t(c)] -= 0.5 * db[size_t(c)];
      check_close("db beta 0", bdb.values(), want, rtol_of(t) * 4, rtol_of(t) * 4);
    }
  }
}

// The summed cross-entropy with label smoothing `eps`, as PyTorch's
// CrossEntropyLoss(label_smoothing=eps) defines it per row:
// (1 - eps) * -log p_label + eps * mean_c(-log p_c).
double ce_loss_ref(const std::vector<double> &x, const std::vector<int64_t> &labels, int64_t rows, int64_t cols,
                   double eps) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, x[size_t(r * cols + j)]);
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(x[size_t(r * cols + j)] - mx);
    const double log_z = mx + std::log(sum);
    double mean_nll = 0;
    for (int64_t j = 0; j < cols; ++j) mean_nll += (log_z - x[size_t(r * cols + j)]) / double(cols);
    total += (1 - eps) * (log_z - x[size_t(r * cols + labels[size_t(r)])]) + eps * mean_nll;
  }
  return total;
}

void test_losses(Backend &be) {
  const int64_t rows = 300, cols = 10;
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) labels[size_t(r)] = (r * 7) % cols;
  Buf blabels(DType::I64, std::vector<double>(labels.begin(), labels.end()));
  for (double eps : {0.0, 0.15, 1.0})
  for (DType t : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    g_case = std::string("cross_entropy ") + dtype_name(t) + " label smoothing " + std::to_string(eps);
    std::vector<double> x = rounded(t, randoms(size_t(rows * cols), 91, -4, 4));
    for (int64_t r = 0; r < rows; r += 3) x[size_t(r * cols + labels[size_t(r)])] = 5;  // a third correct
    Buf bx(t, x), dl(t, x.size());
    Buf bstats(DType::F64, {1, 2, 0});
    const double scale = 1.0 / double(rows);
    be.cross_entropy(D, LossArgs{t, rows, cols, bx.data(), blabels.as<int64_t>(), scale, dl.data(),
                                 bstats.as<double>(), eps});
    const std::vector<double> stats = bstats.values();
    check_close("bad labels", {stats[2]}, {0}, 0, 0);
    check_close("loss", {stats[0] - 1}, {ce_loss_ref(x, labels, rows, cols, eps)}, rtol_of(t) * 4, 0);
    int64_t correct = 0;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t arg = 0;
      for (int64_t j = 1; j < cols; ++j) if (x[size_t(r * cols + j)] > x[size_t(r * cols + arg)]) arg = j;
      correct += arg == labels[size_t(r)];
    }
    check_close("correct", {stats[1] - 2}, {double(correct)}, 0, 0);
    if (t == DType::F64) {  // the gradient is the finite difference of the mean loss
      std::vector<double> fd(x.size());
      for (size_t k = 0; k < x.size(); ++k) {
        std::vector<double> xp = x, xm = x;
        xp[k] += 1e-6;
        xm[k] -= 1e-6;
        fd[k] = (ce_loss_ref(xp, labels, rows, cols, eps) - ce_loss_ref(xm, labels, rows, cols, eps)) / 2e-6 * scale;
      }
      check_close("dlogits", dl.values(), fd, 1e-5, 1e-9);
    } else {
      std::vector<double> want(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, x[size_t(r * cols + j)]);
        for (int64_t j = 0; j < cols; ++j) sum += std::exp(x[size_t(r * cols + j)] - mx);
        for (int64_t j = 0; j < cols; ++j)
          want[size_t(r * cols + j)] = (std::exp(x[size_t(r * cols + j)] - mx) / sum -
                                        (1 - eps) * (j == labels[size_t(r)]) - eps / double(cols)) *
                                       scale;
      }
      check_close("dlogits", dl.values(), want, rtol_of(t) * 8, rtol_of(t) * scale);
    }
    Buf plain(DType::F64, {0, 0, 0});  // no gradient wanted
    be.cross_entropy(D, LossArgs{t, rows, cols, bx.data(), blabels.as<int64_t>(), scale, nullptr, plain.as<double>(),
                                 eps});
    check_close("loss without gradient", {plain.values()[0]}, {stats[0] - 1}, 1e-12, 0);
  }
  g_case = "cross_entropy bad label";
  {
    Buf bx(DType::F32, std::vector<double>(20, 0.0)), dl(DType::F32, 20);
    Buf bad(DType::I64, {1, 10}), stats(DType::F64, {0, 0, 0});
    if (on_cpu()) {  // the CPU refuses the label
      std::string message;
      try {
        be.cross_entropy(D, LossArgs{DType::F32, 2, 10, bx.data(), bad.as<int64_t>(), 1, dl.data(),
                                     stats.as<double>()});
      } catch (const Error &e) {
        CHECK(e.status() == KILN_ERROR_INVALID_ARGUMENT);
        message = e.what();
      }
      CHECK(message.find("label 10") != std::string::npos && message.find("row 1") != std::string::npos);
      bad.set(1, -1);
      CHECK(status_of([&] {
              be.cross_entropy(D, LossArgs{DType::F32, 2, 10, bx.data(), bad.as<int64_t>(), 1, dl.data(),
                                           stats.as<double>()});
            }) == KILN_ERROR_INVALID_ARGUMENT);
    } else {  // CUDA counts it (stats[2]) with loss 0; row 0 (all logits 0) loses log(10)
      for (double label : {10.0, -1.0}) {
        bad.set(1, label);
        Buf st(DType::F64, {0, 0, 0});
        be.cross_entropy(D, LossArgs{DType::F32, 2, 10, bx.data(), bad.as<int64_t>(), 1, dl.data(), st.as<double>()});
        const std::vector<double> got = st.values();
        check_close("loss of the good row", {got[0]}, {std::log(10.0)}, 1e-6, 0);
        check_close("bad labels", {got[2]}, {1}, 0, 0);
        const std::vector<double> grad = dl.values();  // row 1's gradient is zero
        check_close("bad row's gradient", std::vector<double>(grad.begin() + 10, grad.end()),
                    std::vector<double>(10, 0.0), 0, 0);
      }
    }
  }
  for (DType t : kFloats) {
    g_case = std::string("mse/bce ") + dtype_name(t);
    const size_t n = 100000;
    std::vector<double> p = rounded(t, randoms(n, 101, -30, 30)), y = rounded(t, randoms(n, 102, 0, 1));
    Buf bp(t, p), by(t, y), d(t, n);
    const double scale = 1.0 / double(n);
    Buf bstats(DType::F64, {0, 0, 0});
    be.mse(D, LossArgs{t, int64_t(n), 1, bp.data(), by.data(), scale, d.data(), bstats.as<double>()});
    std::vector<double> stats = bstats.values();
    double want_loss = 0;
    std::vector<double> want(n);
    for (size_t i = 0; i < n; ++i) {
      want_loss += (p[i] - y[i]) * (p[i] - y[i]);
      want[i] = 2 * (p[i] - y[i]) * scale;
    }
    check_close("mse loss", {stats[0]}, {want_loss}, rtol_of(t) * 4, 0);
    check_close("mse grad", d.values(), rounded(t, want), rtol_of(t) * 4, 1e-12);
    bstats.set(0, 0);
    be.bce_with_logits(D, LossArgs{t, int64_t(n), 1, bp.data(), by.data(), scale, d.data(), bstats.as<double>()});
    stats = bstats.values();
    want_loss = 0;
    for (size_t i = 0; i < n; ++i) {
      const double x = p[i];
      want_loss += std::max(x, 0.0) - x * y[i] + std::log1p(std::exp(-std::fabs(x)));
      want[i] = (1 / (1 + std::exp(-x)) - y[i]) * scale;
    }
    check_close("bce loss", {stats[0]}, {want_loss}, rtol_of(t) * 4, 0);
    check_close("bce grad", d.values(), rounded(t, want), rtol_of(t) * 8, 1e-11);
  }
  g_case = "bce extreme logits";
  {
    Buf bp(DType::F32, {-1000, 1000, 0}), by(DType::F32, {1, 0, 0.5}), d(DType::F32, 3);
    Buf stats(DType::F64, {0, 0, 0});
    be.bce_with_logits(D, LossArgs{DType::F32, 3, 1, bp.data(), by.data(), 1, d.data(), stats.as<double>()});
    check_close("loss finite", {stats.values()[0]}, {2000 + std::log(2.0)}, 1e-6, 0);
    check_close("grad", d.values(), {-1, 1, 0}, 0, 1e-7);
  }
}

// Dropout's mask rule, shared by every backend: element i is kept when
// rng_uniform(seed, i) < 1 - p.
void check_dropout(Backend &be, DType t, int64_t n, double p, uint64_t seed, const StepParams *step,
                   const std::vector<double> &x, Buf &bx) {
  Buf y(t, size_t(n)), dx(t, size_t(n)), mask(DType::U8, size_t(n));
  DropoutArgs args = dropout_args(t, n, bx.data(), y.data(), mask.as<uint8_t>(), p, step ? 5 : seed);
  be.dropout(D, args, step);
  std::vector<double> want(static_cast<size_t>(n)), want_mask(static_cast<size_t>(n));
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = rng_uniform(seed, uint64_t(i)) < 1 - p;
    kept += keep;
    want_mask[size_t(i)] = keep;
    want[size_t(i)] = keep ? x[size_t(i)] / (1 - p) : 0;
  }
  check_close("mask", mask.values(), want_mask, 0, 0);
  check_close("y", y.values(), rounded(t, want), rtol_of(t) * 2, 0);
  CHECK(std::fabs(double(kept) / double(n) - (1 - p)) < 0.01);
  be.dropout_backward(D, DropoutBackwardArgs{t, n, bx.data(), mask.as<uint8_t>(), p, dx.data()});
  check_close("dx", dx.values(), rounded(t, want), rtol_of(t) * 2, 0);
}

void test_dropout(Backend &be) {
  const int64_t n = 100000;
  const double p = 0.3;
  const uint64_t seed = 1234;
  for (DType t : kFloats) {
    g_case = std::string("dropout ") + dtype_name(t);
    std::vector<double> x = rounded(t, randoms(size_t(n), 111, -2, 2));
    Buf bx(t, x);
    check_dropout(be, t, n, p, seed, nullptr, x, bx);
    // Inside a step the seed is rng_bits(step->dropout_seed, stream), read
    // from the StepParams block on the device (stream 5 here).
    g_case = std::string("dropout StepParams seed ") + dtype_name(t);
    for (uint64_t step_seed : {uint64_t(77), uint64_t(0xfeedbeefcafeull)}) {
      StepParams sp;
      sp.dropout_seed = step_seed;
      DevStep step(sp);
      check_dropout(be, t, n, p, rng_bits(step_seed, 5), step.get(), x, bx);
    }
  }
  g_case = "dropout StepParams seeds differ";
  {
    StepParams s1, s2;
    s1.dropout_seed = 1, s2.dropout_seed = 2;
    DevStep d1(s1), d2(s2);
    Buf bx(DType::F32, std::vector<double>(1000, 1.0)), m1(DType::U8, 1000), m2(DType::U8, 1000), y(DType::F32, 1000);
    be.dropout(D, dropout_args(DType::F32, 1000, bx.data(), y.data(), m1.as<uint8_t>(), 0.5, 0), d1.get());
    be.dropout(D, dropout_args(DType::F32, 1000, bx.data(), y.data(), m2.as<uint8_t>(), 0.5, 0), d2.get());
    CHECK(m1.values() != m2.values());
  }
  g_case = "dropout p = 1";
  Buf bx(DType::F32, {1, 2, 3}), y(DType::F32, 3), mask(DType::U8, 3);
  be.dropout(D, dropout_args(DType::F32, 3, bx.data(), y.data(), mask.as<uint8_t>(), 1.0, seed), nullptr);
  check_close("zeros", y.values(), {0, 0, 0}, 0, 0);
}

void test_optimizers(Backend &be) {
  const int64_t n = 1000;
  for (DType t : {DType::F64, DType::F32}) {
    g_case = std::string("clip_grad_norm ") + dtype_name(t);
    {
      std::vector<double> g = rounded(t, randoms(size_t(n), 121, -1, 1));
      double norm = 0;
      for (double v : g) norm += v * v;
      norm = std::sqrt(norm);
      Buf bg(t, g), scratch(DType::F64, std::vector<double>{-1.0});
      be.clip_grad_norm(D, ClipArgs{t, n, bg.data(), 1.0, scratch.as<double>()});
      std::vector<double> want(g);
      for (auto &v : want) v *= 1.0 / (norm + 1e-6);
      check_close("norm", scratch.values(), {norm}, rtol_of(t), 0);
      check_close("clipped", bg.values(), want, rtol_of(t) * 2, 0);
      be.clip_grad_norm(D, ClipArgs{t, n, bg.data(), 100.0, scratch.as<double>()});  // under the limit: unchanged
      check_close("unchanged", bg.values(), want, rtol_of(t) * 2, 0);
    }
    for (int variant = 0; variant < 4; ++variant) {
      const double lr = 0.1, momentum = variant == 0 ? 0.0 : 0.9, wd = variant >= 2 ? 0.01 : 0.0;
      const bool nesterov = variant == 3;
      g_case = std::string("sgd ") + dtype_name(t) + " variant " + std::to_string(variant);
      std::vector<double> p = rounded(t, randoms(size_t(n), 131)), v(size_t(n), 0);
      Buf bp(t, p), bv(t, size_t(n));
      for (int step = 1; step <= 3; ++step) {
        std::vector<double> g = rounded(t, randoms(size_t(n), 140 + uint64_t(step)));
        Buf bg(t, g);
        SgdArgs a;
        a.t = t, a.n = n, a.params = bp.data(), a.grads = bg.data(), a.velocity = bv.data();
        a.momentum = momentum, a.weight_decay = wd, a.nesterov = nesterov;
        StepParams sp;  // lr and step are read from the device
        sp.lr = lr / step, sp.step = step - 1;
        DevStep ds(sp);
        be.sgd_update(D, a, ds.get());
        for (size_t i = 0; i < size_t(n); ++i) {  // torch.optim.SGD, dampening 0
          double d = g[i] + wd * p[i];
          if (momentum != 0) {
            v[i] = step == 1 ? d : momentum * v[i] + d;
            d = nesterov ? d + momentum * v[i] : v[i];
          }
          p[i] -= lr / step * d;
        }
      }
      check_close("params", bp.values(), p, rtol_of(t) * 10, rtol_of(t) * 10);
    }
    for (int variant = 0; variant < 3; ++variant) {
      const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = variant == 0 ? 0.0 : 0.1;
      const bool decoupled = variant == 2;
      g_case = std::string("adam ") + dtype_name(t) + " variant " + std::to_string(variant);
      std::vector<double> p = rounded(t, randoms(size_t(n), 151)), m(size_t(n), 0), v(size_t(n), 0);
      Buf bp(t, p), bm(t, size_t(n)), bv(t, size_t(n));
      for (int step = 1; step <= 3; ++step) {
        std::vector<double> g = rounded(t, randoms(size_t(n), 160 + uint64_t(step)));
        Buf bg(t, g);
        AdamArgs a;
        a.t = t, a.n = n, a.params = bp.data(), a.grads = bg.data(), a.m = bm.data(), a.v = bv.data();
        a.beta1 = b1, a.beta2 = b2, a.eps = eps, a.weight_decay = wd, a.decoupled = decoupled;
        StepParams sp;
        sp.lr = lr * step, sp.step = step - 1;  // an lr that changes from step to step
        DevStep ds(sp);
        be.adam_update(D, a, ds.get());
        for (size_t i = 0; i < size_t(n); ++i) {  // torch.optim.Adam / AdamW
          double d = g[i];
          const double lr_t = lr * step;
          if (decoupled) p[i] *= 1 - lr_t * wd; else d += wd * p[i];
          m[i] = b1 * m[i] + (1 - b1) * d;
          v[i] = b2 * v[i] + (1 - b2) * d * d;
          const double mhat = m[i] / (1 - std::pow(b1, step)), vhat = v[i] / (1 - std::pow(b2, step));
          p[i] -= lr_t * mhat / (std::sqrt(vhat) + eps);
        }
      }
      check_close("params", bp.values(), p, rtol_of(t) * 10, 1e-6);
      check_close("m", bm.values(), m, rtol_of(t) * 10, 1e-7);
      check_close("v", bv.values(), v, rtol_of(t) * 10, 1e-9);
    }
  }
}

void test_gather(Backend &be) {
  const int64_t src_rows = 50, cols = 784, count = 128;
  std::vector<double> src(size_t(src_rows * cols));
  for (size_t i = 0; i < src.size(); ++i) src[i] = double((i * 37) % 256);
  // An order longer than a batch: a step reads order[offset, offset + count).
  const int64_t order_len = 3 * count;
  std::vector<double> order(static_cast<size_t>(order_len));
  for (int64_t r = 0; r < order_len; ++r) order[size_t(r)] = double((r * 13 + r / 7) % src_rows);
  Buf border(DType::I64, order);
  for (int64_t offset : {int64_t(-1), int64_t(0), int64_t(count + 5), int64_t(2 * count)}) {
    // offset -1: no StepParams (offset 0); else the offset is read from the device.
    StepParams sp;
    sp.offset = offset < 0 ? 0 : offset;
    DevStep ds(sp);
    const StepParams *step = offset < 0 ? nullptr : ds.get();
    const int64_t first = offset < 0 ? 0 : offset;
    auto sample = [&](int64_t r) { return int64_t(order[size_t(first + r)]); };
    const std::string at = " offset " + std::to_string(offset);
    for (DType src_t : {DType::U8, DType::F32}) {
      for (DType out_t : kFloats) {
        g_case = std::string("gather x ") + dtype_name(src_t) + "->" + dtype_name(out_t) + at;
        Buf bs(src_t, src), out(out_t, size_t(count * cols));
        GatherArgs g;
        g.order = border.as<int64_t>(), g.count = count;
        g.x_type = src_t, g.x = bs.data(), g.cols = cols, g.scale = 1.0 / 255, g.shift = -0.5;
        g.out_x_type = out_t, g.out_x = out.data();
        be.gather(D, g, step);
        std::vector<double> want(size_t(count * cols));
        for (int64_t r = 0; r < count; ++r)
          for (int64_t c = 0; c < cols; ++c)
            want[size_t(r * cols + c)] = src[size_t(sample(r) * cols + c)] / 255 - 0.5;
        check_close("values", out.values(), rounded(out_t, want), rtol_of(out_t) * 2, 1e-7);
      }
    }
    std::vector<double> labels(static_cast<size_t>(src_rows));
    for (int64_t i = 0; i < src_rows; ++i) labels[size_t(i)] = double((i * 3) % 10);
    for (DType t : {DType::U8, DType::I32, DType::I64}) {
      g_case = std::string("gather labels ") + dtype_name(t) + at;
      Buf bl(t, labels), out(DType::I64, size_t(count));
      GatherArgs g;
      g.order = border.as<int64_t>(), g.count = count;
      g.y_type = t, g.y = bl.data(), g.out_y = out.data();
      be.gather(D, g, step);
      std::vector<double> want(static_cast<size_t>(count));
      for (int64_t r = 0; r < count; ++r) want[size_t(r)] = labels[size_t(sample(r))];
      check_close("labels", out.values(), want, 0, 0);
    }
    // Both halves at once, with float targets of 3 columns.
    for (DType t : {DType::F32, DType::F64}) {
      g_case = std::string("gather x and targets ") + dtype_name(t) + at;
      const int64_t y_cols = 3, x_cols = 5;
      std::vector<double> xs = rounded(t, randoms(size_t(src_rows * x_cols), 181));
      std::vector<double> ys = rounded(t, randoms(size_t(src_rows * y_cols), 182));
      Buf bx(t, xs), by(t, ys), out_x(t, size_t(count * x_cols)), out_y(t, size_t(count * y_cols));
      GatherArgs g;
      g.order = border.as<int64_t>(), g.count = count;
      g.x_type = t, g.x = bx.data(), g.cols = x_cols, g.scale = 2.0, g.shift = 0.25;
      g.out_x_type = t, g.out_x = out_x.data();
      g.y_type = t, g.y = by.data(), g.y_cols = y_cols, g.out_y_type = t, g.out_y = out_y.data();
      be.gather(D, g, step);
      std::vector<double> want_x(size_t(count * x_cols)), want_y(size_t(count * y_cols));
      for (int64_t r = 0; r < count; ++r) {
        for (int64_t c = 0; c < x_cols; ++c)
          want_x[size_t(r * x_cols + c)] = xs[size_t(sample(r) * x_cols + c)] * 2.0 + 0.25;
        for (int64_t c = 0; c < y_cols; ++c) want_y[size_t(r * y_cols + c)] = ys[size_t(sample(r) * y_cols + c)];
      }
      check_close("x", out_x.values(), rounded(t, want_x), rtol_of(t) * 2, 0);
      check_close("targets", out_y.values(), want_y, 0, 0);
    }
  }
}

// The permutation every backend draws: 0..n-1 stably sorted by the 32-bit
// keys rng_bits(seed, i) >> 32 (std::stable_sort, independent of the
// backend's radix sort).
std::vector<int64_t> shuffle_ref(int64_t n, uint64_t seed) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    return (rng_bits(seed, uint64_t(a)) >> 32) < (rng_bits(seed, uint64_t(b)) >> 32);
  });
  return idx;
}

std::vector<int64_t> run_shuffle(Backend &be, int64_t n, uint64_t seed) {
  Buf out(DType::I64, size_t(n));
  be.shuffle(D, n, seed, out.as<int64_t>());
  std::vector<double> v = out.values();
  return std::vector<int64_t>(v.begin(), v.end());
}

void test_shuffle(Backend &be) {
  // 200000 > 2^16 keys: the 32-bit keys collide (birthday), so stability matters.
  for (int64_t n : {int64_t(1), int64_t(2), int64_t(1000), int64_t(60000), int64_t(200000)}) {
    for (uint64_t seed : {uint64_t(0), uint64_t(42), uint64_t(0x9e3779b97f4a7c15ull)}) {
      g_case = "shuffle n " + std::to_string(n) + " seed " + std::to_string(seed);
      const std::vector<int64_t> got = run_shuffle(be, n, seed);
      std::vector<char> seen(static_cast<size_t>(n), 0);  // a permutation of [0, n)
      bool valid = int64_t(got.size()) == n;
      for (int64_t v : got) {
        if (v < 0 || v >= n || seen[size_t(v)]) { valid = false; break; }
        seen[size_t(v)] = 1;
      }
      CHECK(valid);
      CHECK(got == shuffle_ref(n, seed));
      CHECK(got == run_shuffle(be, n, seed));  // deterministic
      if (n >= 1000) CHECK(got != run_shuffle(be, n, seed + 1));
    }
  }
  g_case = "shuffle key collisions";
  {  // the reference itself must exercise ties for the stability check to mean anything
    const int64_t n = 200000;
    std::vector<uint32_t> keys(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) keys[size_t(i)] = uint32_t(rng_bits(42, uint64_t(i)) >> 32);
    std::sort(keys.begin(), keys.end());
    CHECK(std::adjacent_find(keys.begin(), keys.end()) != keys.end());
  }
  g_case = "shuffle n 0";
  be.shuffle(D, 0, 1, nullptr);
}

// Several threads running kernels on one backend at once (contexts are
// shared between threads) get the same results as one thread.
void test_concurrent_kernels(Backend &be) {
  g_case = "concurrent kernels";
  const int64_t m = 128, n = 64, k = 300;
  std::vector<double> a = randoms(size_t(m * k), 171), b = randoms(size_t(k * n), 172);
  Buf ba(DType::F32, a), bb(DType::F32, b), ref(DType::F32, size_t(m * n));
  be.gemm(D, gemm_args(DType::F32, false, false, m, n, k, 1, ba.data(), bb.data(), 0, ref.data()));
  const std::vector<unsigned char> want = ref.bytes();
  const void *pa = ba.data(), *pb = bb.data();  // uploaded before the threads start
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      Buf c(DType::F32, size_t(m * n));
      for (int rep = 0; rep < 50; ++rep) {
        be.gemm(D, gemm_args(DType::F32, false, false, m, n, k, 1, pa, pb, 0, c.data()));
        if (c.bytes() != want) ++mismatches;
      }
    });
  }
  for (auto &th : threads) th.join();
  CHECK(mismatches == 0);
}

}  // namespace

static void run_all(Backend &be, const char *name) {
  std::printf("%s backend (%s)\n", name, be.info(D).name.c_str());
  const int before = g_failures;
  test_memory_and_info(be);
  test_fill_arange_cast(be);
  test_unary(be);
  test_binary(be);
  test_reduce_softmax(be);
  test_gemm(be);
  test_bias_act(be);
  test_bias_grad(be);
  test_losses(be);
  test_dropout(be);
  test_optimizers(be);
  test_gather(be);
  test_shuffle(be);
  test_concurrent_kernels(be);
  std::printf("%s backend: %s\n", name, g_failures == before ? "all checks passed" : "FAILED");
}

// The backends run the same cases in one process: the CPU, and CUDA too when
// cuda:0 is usable. KILN_TEST_DEVICE=cpu (the backend_test registration)
// runs only the CPU half; KILN_TEST_DEVICE=cuda (backend_test_cuda) only the
// CUDA half, and exits 77 (skipped) without a device.
int main() {
  // More threads than the CI's cores: the pool's splitting is exercised everywhere.
  return test::run_suite(
      "backend kernels", 3,
      [](Context &ctx) {
        g_be = &ctx.cpu();
        g_dev = -1;
        run_all(*g_be, "cpu");
      },
      [](Context &ctx) {
        g_be = &ctx.backend(Device::cuda(0));
        g_dev = 0;
        run_all(*g_be, "cuda");
        // The same permutation on both backends, for the trainer's epochs.
        g_case = "shuffle cpu == cuda";
        std::vector<int64_t> gpu = run_shuffle(*g_be, 100000, 7);
        g_be = &ctx.cpu();
        g_dev = -1;
        CHECK(gpu == run_shuffle(*g_be, 100000, 7));
      });
}
