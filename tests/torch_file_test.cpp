// The torch.save reader (io::open_tensor_file on the zip archives PyTorch
// writes) against the committed fixtures of tests/torch_fixtures/, made by
// real PyTorch (make_torch_fixtures.py says how each was made). Values are
// checked against closed forms computed here, not against kiln: every dtype
// kiln has, views (strides, offsets, a 0-d tensor, an empty one, a stride-0
// expansion) and storages shared by several tensors, big-endian files,
// deflated and zip64 archives, a file without a byteorder record, and
// Parameters pickled with protocol 5. Then what must be refused: hostile
// pickles (each refused naming what it calls), files PyTorch wrote that are
// no state_dict, dtypes kiln lacks, legacy formats, and damage (every
// truncation of a file, a flipped byte in a storage). The CUDA half reads a
// strided big-endian tensor into GPU memory.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "backend_harness.hpp"
#include "core/ops.hpp"
#include "core/tensor.hpp"
#include "io/tensor_file.hpp"

using namespace kiln;
using kiln::test::g_case;
using kiln::test::status_of;

namespace {

std::string fixture(const std::string &name) { return std::string(KILN_TORCH_FIXTURES) + "/" + name; }

double value(int k, int64_t i) { return (k + 1) * 0.1 * double((i % 7) - 3); }

// Tensor `name` of file, read on device and returned as doubles.
std::vector<double> read(Context &ctx, const io::TensorFile &file, const std::string &name, Device device) {
  const io::TensorFile::Entry *e = file.find(name);
  CHECK(e != nullptr);
  if (!e) return {};
  Tensor t = Tensor::empty(ctx.shared_from_this(), e->shape, e->dtype, device);
  file.read_into(name, t);
  Tensor host = cast(t.to(Device::cpu()), DType::F64);
  std::vector<double> out(size_t(e->shape.numel()));
  host.copy_to_host(out.data(), int64_t(out.size() * sizeof(double)));
  return out;
}

void expect_values(const std::vector<double> &got, const std::vector<double> &want, const std::string &what) {
  bool same = got.size() == want.size();
  for (size_t i = 0; same && i < got.size(); ++i) same = got[i] == want[i];
  if (!same) {
    ++kiln::test::g_failures;
    std::fprintf(stderr, "FAIL [%s] %s: %zu values, want %zu:", g_case.c_str(), what.c_str(), got.size(), want.size());
    for (size_t i = 0; i < got.size() && i < 12; ++i) std::fprintf(stderr, " %g/%g", got[i], i < want.size() ? want[i] : NAN);
    std::fprintf(stderr, "\n");
  }
}

// The 4-3-2 MLP's tensors under names (0.*, 2.* unless given), in the
// file's dtype, against value() rounded to it.
void check_mlp(Context &ctx, const std::string &file_name, DType dtype,
               const std::vector<std::string> &names = {"0.weight", "0.bias", "2.weight", "2.bias"}) {
  g_case = file_name;
  const Shape shapes[4] = {Shape{3, 4}, Shape{3}, Shape{2, 3}, Shape{2}};
  std::unique_ptr<io::TensorFile> file;
  std::string message;
  CHECK(status_of([&] { file = io::open_tensor_file(fixture(file_name)); }, &message) == KILN_OK);
  if (!file) return std::fprintf(stderr, "  %s\n", message.c_str()), void();
  CHECK(std::string(file->format()) == "torch.save");
  CHECK(file->entries().size() == 4);
  for (int k = 0; k < 4; ++k) {
    const io::TensorFile::Entry *e = file->find(names[size_t(k)]);
    CHECK(e && e->dtype == dtype && e->shape == shapes[k]);
    std::vector<double> want(size_t(shapes[k].numel()));
    for (size_t i = 0; i < want.size(); ++i)
      want[i] = dtype == DType::F32 ? double(float(value(k, int64_t(i)))) : value(k, int64_t(i));
    expect_values(read(ctx, *file, names[size_t(k)], Device::cpu()), want, names[size_t(k)]);
  }
}

void test_mlps(Context &ctx) {
  check_mlp(ctx, "mlp.pt", DType::F32);
  check_mlp(ctx, "mlp_f64.pt", DType::F64);
  check_mlp(ctx, "mlp_flatten.pt", DType::F32, {"1.weight", "1.bias", "4.weight", "4.bias"});
  check_mlp(ctx, "mlp_parameters_p5.pt", DType::F32);
  check_mlp(ctx, "mlp_shared.pt", DType::F32);
  check_mlp(ctx, "mlp_big_endian.pt", DType::F32);
  check_mlp(ctx, "mlp_no_byteorder.pt", DType::F32);
  check_mlp(ctx, "mlp_no_crc32.pt", DType::F32);  // every CRC-32 0: none written
  check_mlp(ctx, "mlp_protocol1.pt", DType::F32);  // requires_grad as INT "00"
  check_mlp(ctx, "mlp_deflated.pt", DType::F32);
  check_mlp(ctx, "mlp_zip64.pt", DType::F32);
}

// dtypes.pt: (arange(6) - 2) in every dtype, u8 arange * 40 + 3, and views.
void check_dtypes(Context &ctx, const std::string &file_name, Device device) {
  g_case = file_name + " on " + device.str();
  std::unique_ptr<io::TensorFile> file;
  std::string message;
  CHECK(status_of([&] { file = io::open_tensor_file(fixture(file_name)); }, &message) == KILN_OK);
  if (!file) return std::fprintf(stderr, "  %s\n", message.c_str()), void();
  const struct {
    const char *name;
    DType dtype;
  } kinds[] = {{"f32", DType::F32}, {"f64", DType::F64}, {"f16", DType::F16}, {"bf16", DType::BF16},
               {"i32", DType::I32}, {"i64", DType::I64}};
  const std::vector<double> base = {-2, -1, 0, 1, 2, 3};
  for (const auto &k : kinds) {
    const io::TensorFile::Entry *e = file->find(k.name);
    CHECK(e && e->dtype == k.dtype && e->shape == (Shape{2, 3}));
    expect_values(read(ctx, *file, k.name, device), base, k.name);
  }
  expect_values(read(ctx, *file, "u8", device), {3, 43, 83, 123, 163, 203}, "u8");
  // f16's transpose: a view of f16's storage with strides (1, 3).
  CHECK(file->find("f16_t") && file->find("f16_t")->shape == (Shape{3, 2}));
  expect_values(read(ctx, *file, "f16_t", device), {-2, 1, -1, 2, 0, 3}, "f16_t");
  expect_values(read(ctx, *file, "i64_tail", device), {1, 2, 3}, "i64_tail (storage offset 3)");
  expect_values(read(ctx, *file, "expanded", device), {0, 1, 2, 0, 1, 2}, "expanded (stride 0)");
  CHECK(file->find("scalar") && file->find("scalar")->shape.ndim == 0);
  expect_values(read(ctx, *file, "scalar", device), {2.5}, "scalar (0-d)");
  CHECK(file->find("empty") && file->find("empty")->shape == (Shape{0, 3}));
  expect_values(read(ctx, *file, "empty", device), {}, "empty");
}

// A refusal: the status, and the words the message must hold.
void expect_refused(const std::string &file_name, kiln_status status, const std::vector<std::string> &words) {
  g_case = file_name;
  std::string message;
  const kiln_status got = status_of([&] { io::open_tensor_file(fixture(file_name)); }, &message);
  CHECK(got == status);
  for (const std::string &w : words)
    if (message.find(w) == std::string::npos) {
      ++kiln::test::g_failures;
      std::fprintf(stderr, "FAIL [%s] the message lacks \"%s\": %s\n", file_name.c_str(), w.c_str(), message.c_str());
    }
  CHECK(message.size() < 1024 && message.find('\n') == std::string::npos);
}

void test_refusals() {
  const std::string no_code = "never runs code";
  expect_refused("hostile_posix_system.pt", KILN_ERROR_FORMAT, {"is refused: its pickle calls posix.system", no_code});
  expect_refused("hostile_os_system.pt", KILN_ERROR_FORMAT, {"its pickle calls os.system", no_code});
  expect_refused("hostile_eval.pt", KILN_ERROR_FORMAT, {"its pickle calls builtins.eval", no_code});
  expect_refused("hostile_in_state_dict.pt", KILN_ERROR_FORMAT, {"its pickle calls posix.system"});
  expect_refused("hostile_newobj.pt", KILN_ERROR_FORMAT, {"NEWOBJ"});
  expect_refused("hostile_int_text.pt", KILN_ERROR_FORMAT,
                 {"INT \"1234567890123456789\" is not an integer of at most 18 digits"});
  expect_refused("mlp_protocol0.pt", KILN_ERROR_FORMAT,
                 {"written with protocol 0", "torch.load cannot read either", "default pickle_protocol"});
  expect_refused("hostile_storage_key.pt", KILN_ERROR_FORMAT, {"\"../../../etc/passwd\" is not in the archive"});
  expect_refused("hostile_view.pt", KILN_ERROR_FORMAT, {"reaches element 12 of a storage of 12"});
  expect_refused("hostile_storage_size.pt", KILN_ERROR_FORMAT, {"holds 48 bytes, but 13 elements of torch.float32 need 52"});
  expect_refused("whole_model.pt", KILN_ERROR_FORMAT,
                 {"torch.nn.modules.container.Sequential", "save model.state_dict() instead"});
  expect_refused("checkpoint.pt", KILN_ERROR_FORMAT,
                 {"a dict under \"model_state_dict\"", "torch.save(checkpoint[\"model_state_dict\"], PATH)"});
  expect_refused("bool.pt", KILN_ERROR_DTYPE_MISMATCH, {"\"mask\"", "torch.bool"});
  expect_refused("exported.pt2", KILN_ERROR_FORMAT, {"is a torch.export archive", "save model.state_dict()"});
  expect_refused("legacy.pt", KILN_ERROR_FORMAT, {"_use_new_zipfile_serialization=False", "save it again"});
  expect_refused("mlp_bzip2.pt", KILN_ERROR_FORMAT, {"compressed with method 12", "stored (0) and deflated (8)"});
}

std::vector<char> bytes_of(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string &path, const std::vector<char> &bytes, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(n));
}

// Every prefix of a file is refused with FORMAT (the end records are gone),
// and a flipped byte inside a storage fails its CRC when read.
void test_damage(Context &ctx) {
  const std::string tmp = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/kiln_torch_file_test_" +
                          std::to_string(::getpid()) + ".pt";
  for (const char *name : {"mlp.pt", "mlp_deflated.pt", "mlp_zip64.pt"}) {
    g_case = std::string("truncations of ") + name;
    const std::vector<char> full = bytes_of(fixture(name));
    int refused = 0;
    for (size_t n = 0; n < full.size(); ++n) {
      write_bytes(tmp, full, n);
      refused += status_of([&] { io::open_tensor_file(tmp); }) == KILN_ERROR_FORMAT;
    }
    CHECK(refused == int(full.size()));
  }
  g_case = "a damaged storage";
  std::vector<char> full = bytes_of(fixture("mlp.pt"));
  // The first storage's first float (0.weight[0][0] = -0.3f) sits 64-byte
  // aligned after its local header: find its four bytes and flip one.
  const float first = float(value(0, 0));
  const char *bits = reinterpret_cast<const char *>(&first);
  auto at = std::search(full.begin(), full.end(), bits, bits + 4);
  CHECK(at != full.end());
  if (at == full.end()) return;
  at[1] = char(at[1] ^ 0x40);
  write_bytes(tmp, full, full.size());
  std::unique_ptr<io::TensorFile> file;
  CHECK(status_of([&] { file = io::open_tensor_file(tmp); }) == KILN_OK);  // structure intact
  std::string message;
  Tensor t = Tensor::empty(ctx.shared_from_this(), Shape{3, 4}, DType::F32, Device::cpu());
  CHECK(file && status_of([&] { file->read_into("0.weight", t); }, &message) == KILN_ERROR_FORMAT);
  CHECK(message.find("CRC-32") != std::string::npos);

  // A CRC-32 of 0 is checked where the other records have theirs (only an
  // archive whose every sum is 0 was written without them): mlp.pt with
  // the central directory's sum of its first storage zeroed.
  g_case = "one zeroed CRC-32";
  full = bytes_of(fixture("mlp.pt"));
  const std::string header = "PK\x01\x02", storage = "/data/0";
  int zeroed = 0;
  for (auto h = std::search(full.begin(), full.end(), header.begin(), header.end()); h != full.end();
       h = std::search(h + 1, full.end(), header.begin(), header.end())) {
    const size_t name_len = size_t((unsigned char)h[28]) | size_t((unsigned char)h[29]) << 8;
    const std::string name(h + 46, h + 46 + std::ptrdiff_t(name_len));
    if (name.size() >= storage.size() && name.compare(name.size() - storage.size(), storage.size(), storage) == 0) {
      std::fill(h + 16, h + 20, char(0));
      ++zeroed;
    }
  }
  CHECK(zeroed == 1);
  write_bytes(tmp, full, full.size());
  CHECK(status_of([&] { file = io::open_tensor_file(tmp); }) == KILN_OK);
  message.clear();
  CHECK(file && status_of([&] { file->read_into("0.weight", t); }, &message) == KILN_ERROR_FORMAT);
  CHECK(message.find("fails its CRC-32 check") != std::string::npos);
  std::remove(tmp.c_str());
}

// read_into's own checks: a destination of another dtype or shape, a name
// the file lacks.
void test_destinations(Context &ctx) {
  g_case = "destinations";
  std::unique_ptr<io::TensorFile> file = io::open_tensor_file(fixture("mlp.pt"));
  const auto c = ctx.shared_from_this();
  CHECK(status_of([&] { file->read_into("0.weight", Tensor::empty(c, Shape{3, 4}, DType::F64, Device::cpu())); }) ==
        KILN_ERROR_DTYPE_MISMATCH);
  CHECK(status_of([&] { file->read_into("0.weight", Tensor::empty(c, Shape{4, 3}, DType::F32, Device::cpu())); }) ==
        KILN_ERROR_SHAPE_MISMATCH);
  CHECK(status_of([&] { file->read_into("9.weight", Tensor::empty(c, Shape{3, 4}, DType::F32, Device::cpu())); }) ==
        KILN_ERROR_INVALID_ARGUMENT);
}

}  // namespace

int main() {
  return test::run_suite(
      "torch_file", 1,
      [](Context &ctx) {
        test_mlps(ctx);
        check_dtypes(ctx, "dtypes.pt", Device::cpu());
        check_dtypes(ctx, "dtypes_big_endian.pt", Device::cpu());
        test_refusals();
        test_damage(ctx);
        test_destinations(ctx);
      },
      [](Context &ctx) { check_dtypes(ctx, "dtypes_big_endian.pt", Device::cuda(0)); });
}
