// The restricted unpickler; see torch_pickle.hpp. Opcode names and layouts
// are those of CPython's Lib/pickletools.py.
#include "io/torch_pickle.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <unordered_map>
#include <unordered_set>

#include "core/error.hpp"
#include "core/excerpt.hpp"
#include "io/byte_order.hpp"

namespace kiln::io {

namespace {

// More objects than a state_dict of 100,000 tensors needs (some 15 each):
// bounds the memory a hostile pickle can make kiln spend to about 150 MB.
constexpr size_t kMaxObjects = size_t(1) << 21;
constexpr int kHighestProtocol = 5;

struct StorageType {
  const char *name;
  const char *torch_dtype;
  bool supported;
  DType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", "torch.float32", true, DType::F32},
    {"DoubleStorage", "torch.float64", true, DType::F64},
    {"HalfStorage", "torch.float16", true, DType::F16},
    {"BFloat16Storage", "torch.bfloat16", true, DType::BF16},
    {"IntStorage", "torch.int32", true, DType::I32},
    {"LongStorage", "torch.int64", true, DType::I64},
    {"ByteStorage", "torch.uint8", true, DType::U8},
    {"CharStorage", "torch.int8", false, DType::U8},
    {"ShortStorage", "torch.int16", false, DType::U8},
    {"BoolStorage", "torch.bool", false, DType::U8},
    {"ComplexFloatStorage", "torch.complex64", false, DType::U8},
    {"ComplexDoubleStorage", "torch.complex128", false, DType::U8},
    {"QInt8Storage", "torch.qint8", false, DType::U8},
    {"QUInt8Storage", "torch.quint8", false, DType::U8},
    {"QInt32Storage", "torch.qint32", false, DType::U8},
    {"QUInt4x2Storage", "torch.quint4x2", false, DType::U8},
    {"QUInt2x4Storage", "torch.quint2x4", false, DType::U8},
};

enum class Kind : uint8_t { None, Bool, Int, Float, String, Bytes, Tuple, List, Dict, Global, Storage, Tensor };

// A value's kind as a message says it: "an int", "a dict", "None".
const char *kind_name(Kind k) {
  switch (k) {
    case Kind::None: return "None";
    case Kind::Bool: return "a bool";
    case Kind::Int: return "an int";
    case Kind::Float: return "a float";
    case Kind::String: return "a str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "a tuple";
    case Kind::List: return "a list";
    case Kind::Dict: return "a dict";
    case Kind::Global: return "a global";
    case Kind::Storage: return "a storage";
    case Kind::Tensor: return "a tensor";
  }
  return "?";
}

// What each allowed global does when the pickle calls it.
enum class Callable : int64_t { OrderedDict, RebuildTensorV2, RebuildParameter, RebuildParameterWithState, Storage };

struct Object {
  Kind kind = Kind::None;
  int64_t value = 0;  // Bool, Int; Global: its Callable; Storage: numel; Tensor: index into views
  int type = -1;      // Global of a storage type and Storage: index into kStorageTypes
  std::string text;   // String, Bytes; Global: "module.name"; Storage: its key
  std::vector<uint32_t> items;  // Tuple, List; Dict: key, value, key, value, ...
};

struct View {
  uint32_t storage;
  int64_t offset;
  Shape size;
  int64_t stride[KILN_MAX_DIMS];
};

// Why a global that torch writes for things other than a state_dict of
// dense tensors is refused, so that the message says what to do.
std::string refusal_hint(const std::string &module, const std::string &name) {
  if (module == "torch._utils" && name == "_rebuild_tensor_v3")
    return " (a tensor of a dtype kiln does not have, such as uint16 or float8: convert it with .float())";
  if (module == "torch._utils" && name == "_rebuild_qtensor") return " (a quantized tensor: dequantize it first)";
  if (module == "torch._utils" && name.rfind("_rebuild_sparse", 0) == 0) return " (a sparse tensor: save .to_dense())";
  if (module == "torch._tensor" && name.rfind("_rebuild_from_type", 0) == 0)
    return " (a tensor subclass or a tensor with Python attributes: save plain tensors, e.g. model.state_dict())";
  if (module == "__main__" || module.rfind("torch.nn.modules", 0) == 0)
    return " (a whole model, as torch.save(model) writes it: save model.state_dict() instead)";
  return "";
}

class Unpickler {
 public:
  Unpickler(const std::string &data, const std::string &path) : data_(data), path_(path) {}

  std::vector<PickledTensor> run() {
    const uint32_t result = execute();
    return state_dict(result);
  }

 private:
  [[noreturn]] void error(const std::string &problem) const {
    fail(KILN_ERROR_FORMAT, "torch.save file '" + path_ + "': data.pkl: " + problem + " (opcode at byte " +
                                std::to_string(op_at_) + ")");
  }

  // ---- reading the byte stream
  const unsigned char *take(uint64_t n) {
    if (n > data_.size() - pos_) error("the pickle ends in the middle of an opcode (a truncated file?)");
    const unsigned char *p = reinterpret_cast<const unsigned char *>(data_.data()) + pos_;
    pos_ += size_t(n);
    return p;
  }
  uint64_t take_le(int n) { return load_le(take(uint64_t(n)), n); }
  std::string take_text(uint64_t n) {
    const unsigned char *p = take(n);
    return std::string(reinterpret_cast<const char *>(p), size_t(n));
  }
  // A line of a text opcode's argument (GLOBAL, INT, LONG), without its newline.
  std::string take_line(const char *what) {
    const size_t end = data_.find('\n', pos_);
    if (end == std::string::npos) error(std::string(what) + " has no end of line");
    std::string line = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return line;
  }
  // A decimal integer as a line of protocol 0 and 1's INT and LONG hold it
  // (LONG with Python 2's trailing L): an optional '-' and 1 to 18 digits,
  // so that it fits int64 unchecked.
  int64_t decimal(std::string line, const char *what) {
    if (!line.empty() && line.back() == 'L') line.pop_back();
    const size_t digits = line.size() - (!line.empty() && line[0] == '-');
    if (digits == 0 || digits > 18 || line.find_first_not_of("0123456789", line.size() - digits) != std::string::npos)
      error(std::string(what) + " \"" + excerpt(line, 40) + "\" is not an integer of at most 18 digits");
    return std::stoll(line);
  }
  // A little-endian two's complement integer of n bytes (LONG1, LONG4).
  int64_t take_long(uint64_t n) {
    if (n > 8) error("an integer of " + std::to_string(n) + " bytes is too large for a state_dict");
    if (n == 0) return 0;
    uint64_t v = load_le(take(n), int(n));
    if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign-extend
    int64_t out;
    std::memcpy(&out, &v, sizeof out);
    return out;
  }

  // ---- objects and the stack
  Object &obj(uint32_t i) { return objects_[i]; }
  uint32_t add(Object o) {
    if (objects_.size() >= kMaxObjects)
      error("the pickle builds more than " + std::to_string(kMaxObjects) + " objects, more than a state_dict needs");
    objects_.push_back(std::move(o));
    return uint32_t(objects_.size() - 1);
  }
  uint32_t add(Kind kind, int64_t value = 0) {
    Object o;
    o.kind = kind;
    o.value = value;
    return add(std::move(o));
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(uint32_t i) { stack_.push_back(i); }
  uint32_t pop() {
    if (stack_.size() <= floor()) error("the pickle pops from an empty stack");
    const uint32_t i = stack_.back();
    stack_.pop_back();
    return i;
  }
  uint32_t top() {
    if (stack_.size() <= floor()) error("the pickle uses the top of an empty stack");
    return stack_.back();
  }
  std::vector<uint32_t> pop_mark() {
    if (marks_.empty()) error("the pickle ends a MARK that it never set");
    std::vector<uint32_t> items(stack_.begin() + std::ptrdiff_t(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  uint32_t container(Kind kind, std::vector<uint32_t> items) {
    Object o;
    o.kind = kind;
    o.items = std::move(items);
    return add(std::move(o));
  }
  // The top of the stack, which the opcode `op` extends, must be a `kind`.
  Object &target(Kind kind, const char *op) {
    Object &o = obj(top());
    if (o.kind != kind)
      error(std::string(op) + " adds to " + kind_name(o.kind) + ", not to " + kind_name(kind));
    return o;
  }
  void add_items(const char *op, const std::vector<uint32_t> &pairs) {
    if (pairs.size() % 2) error(std::string(op) + " has a key without a value");
    Object &dict = target(Kind::Dict, op);
    dict.items.insert(dict.items.end(), pairs.begin(), pairs.end());
  }
  void memo_put(uint64_t index) { memo_[index] = top(); }
  void memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) error("the pickle reads memo entry " + std::to_string(index) + ", which it never stored");
    push(it->second);
  }

  // ---- the globals and calls a state_dict needs
  void global(const std::string &module, const std::string &name) {
    Object o;
    o.kind = Kind::Global;
    o.text = module + "." + name;
    if (module == "collections" && name == "OrderedDict") {
      o.value = int64_t(Callable::OrderedDict);
    } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      o.value = int64_t(Callable::RebuildTensorV2);
    } else if (module == "torch._utils" && name == "_rebuild_parameter") {
      o.value = int64_t(Callable::RebuildParameter);
    } else if (module == "torch._utils" && name == "_rebuild_parameter_with_state") {
      o.value = int64_t(Callable::RebuildParameterWithState);
    } else {
      for (size_t t = 0; module == "torch" && t < std::size(kStorageTypes); ++t)
        if (name == kStorageTypes[t].name) {
          o.value = int64_t(Callable::Storage);
          o.type = int(t);
        }
      if (o.type < 0)
        fail(KILN_ERROR_FORMAT, "'" + path_ + "' is refused: its pickle calls " + printable(o.text, 160) +
                                    refusal_hint(module, name) +
                                    "; kiln reads only tensors (a state_dict) and never runs code from a file");
    }
    push(add(std::move(o)));
  }

  void expect(uint32_t i, Kind kind, const std::string &what) {
    if (obj(i).kind != kind)
      error(what + " is " + kind_name(obj(i).kind) + ", not " + kind_name(kind));
  }
  // An empty dict (backward hooks), or for metadata None or a dict of false
  // flags: anything else would change the tensor in ways kiln does not.
  void expect_no_hooks(uint32_t i) {
    expect(i, Kind::Dict, "a tensor's backward hooks");
    if (!obj(i).items.empty()) error("a tensor has backward hooks; a state_dict's tensors have none");
  }
  void expect_plain_metadata(uint32_t i) {
    if (obj(i).kind == Kind::None) return;
    expect(i, Kind::Dict, "a tensor's metadata");
    const std::vector<uint32_t> &kv = obj(i).items;
    for (size_t k = 1; k < kv.size(); k += 2)
      if (obj(kv[k]).kind != Kind::Bool || obj(kv[k]).value != 0)
        error("a tensor has metadata (a conjugate or negative bit): resolve it with .resolve_conj().resolve_neg()");
  }
  std::vector<int64_t> ints(uint32_t i, const std::string &what) {
    expect(i, Kind::Tuple, what);
    const std::vector<uint32_t> items = obj(i).items;
    if (items.size() > size_t(KILN_MAX_DIMS))
      error("a tensor has " + std::to_string(items.size()) + " dimensions; kiln supports at most " +
            std::to_string(KILN_MAX_DIMS));
    std::vector<int64_t> out;
    for (uint32_t item : items) {
      if (obj(item).kind != Kind::Int || obj(item).value < 0) error(what + " holds something other than sizes >= 0");
      out.push_back(obj(item).value);
    }
    return out;
  }

  // torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride,
  // requires_grad, backward_hooks[, metadata]).
  uint32_t rebuild_tensor(const std::vector<uint32_t> &args) {
    if (args.size() != 6 && args.size() != 7)
      error("_rebuild_tensor_v2 takes 6 or 7 arguments, not " + std::to_string(args.size()));
    expect(args[0], Kind::Storage, "_rebuild_tensor_v2's storage");
    expect(args[1], Kind::Int, "_rebuild_tensor_v2's storage offset");
    expect(args[4], Kind::Bool, "_rebuild_tensor_v2's requires_grad");
    expect_no_hooks(args[5]);
    if (args.size() == 7) expect_plain_metadata(args[6]);
    const std::vector<int64_t> size = ints(args[2], "a tensor's size"), stride = ints(args[3], "a tensor's stride");
    if (size.size() != stride.size())
      error("a tensor has " + std::to_string(size.size()) + " sizes but " + std::to_string(stride.size()) + " strides");
    View v{};
    v.storage = args[0];
    v.offset = obj(args[1]).value;
    if (v.offset < 0) error("a tensor has a negative storage offset");
    // The elements the view reaches, overflow-checked: its last one must lie
    // inside the storage (an empty view only needs its offset to).
    int64_t last = v.offset, numel = 1;
    bool empty = false;
    for (size_t d = 0; d < size.size(); ++d) {
      v.size.d[v.size.ndim++] = size[d];
      v.stride[d] = stride[d];
      if (size[d] == 0) empty = true;
      else if (__builtin_mul_overflow(numel, size[d], &numel) || numel > (int64_t(1) << 59))
        error("a tensor of size " + v.size.str() + " is too large");
    }
    for (size_t d = 0; d < size.size() && !empty; ++d) {
      int64_t reach;
      if (__builtin_mul_overflow(size[d] - 1, stride[d], &reach) || __builtin_add_overflow(last, reach, &last))
        error("a tensor's strides reach past any storage");
    }
    const int64_t storage_numel = obj(v.storage).value;
    if (empty ? v.offset > storage_numel : last >= storage_numel)
      error("a tensor of size " + v.size.str() + " at storage offset " + std::to_string(v.offset) +
            " reaches element " + std::to_string(last) + " of a storage of " + std::to_string(storage_numel));
    views_.push_back(v);
    return add(Kind::Tensor, int64_t(views_.size() - 1));
  }

  uint32_t call(uint32_t fn, uint32_t args_obj) {
    if (obj(fn).kind != Kind::Global) error("REDUCE calls " + std::string(kind_name(obj(fn).kind)));
    expect(args_obj, Kind::Tuple, "REDUCE's arguments");
    const std::vector<uint32_t> args = obj(args_obj).items;  // objects_ may grow below
    switch (Callable(obj(fn).value)) {
      case Callable::OrderedDict:
        if (!args.empty()) error("collections.OrderedDict is called with arguments");
        return add(Kind::Dict);
      case Callable::RebuildTensorV2:
        return rebuild_tensor(args);
      case Callable::RebuildParameter:
      case Callable::RebuildParameterWithState: {
        const size_t n = Callable(obj(fn).value) == Callable::RebuildParameter ? 3 : 4;
        if (args.size() != n)
          error(obj(fn).text + " takes " + std::to_string(n) + " arguments, not " + std::to_string(args.size()));
        expect(args[0], Kind::Tensor, "an nn.Parameter's data");
        expect(args[1], Kind::Bool, "an nn.Parameter's requires_grad");
        expect_no_hooks(args[2]);
        return args[0];  // a Parameter's state (Python attributes) holds nothing kiln reads
      }
      case Callable::Storage:
        break;
    }
    error("the pickle calls the storage type " + obj(fn).text + ", which a state_dict only names");
  }

  // BINPERSID: ('storage', storage type, key, location, numel), as
  // torch.serialization's persistent_id writes each storage.
  uint32_t persistent_load(uint32_t pid) {
    expect(pid, Kind::Tuple, "a persistent id");
    const std::vector<uint32_t> f = obj(pid).items;
    if (f.size() != 5 || obj(f[0]).kind != Kind::String || obj(f[0]).text != "storage")
      error("a persistent id is not a torch storage ('storage', type, key, location, numel)");
    expect(f[1], Kind::Global, "a storage's type");
    if (Callable(obj(f[1]).value) != Callable::Storage)
      error("a storage's type is " + printable(obj(f[1]).text) + ", not a torch storage type");
    expect(f[2], Kind::String, "a storage's key");
    expect(f[3], Kind::String, "a storage's location");
    expect(f[4], Kind::Int, "a storage's size");
    if (obj(f[4]).value < 0) error("a storage has a negative size");
    Object s;
    s.kind = Kind::Storage;
    s.type = obj(f[1]).type;
    s.text = obj(f[2]).text;
    s.value = obj(f[4]).value;
    return add(std::move(s));
  }

  // BUILD: only an OrderedDict's instance state, {"_metadata": ...}, which
  // records module versions kiln does not need.
  void build() {
    const uint32_t state = pop();
    if (obj(top()).kind != Kind::Dict || obj(state).kind != Kind::Dict)
      error("BUILD sets the state of " + std::string(kind_name(obj(top()).kind)) +
            "; kiln accepts only a state_dict's _metadata");
    const std::vector<uint32_t> &kv = obj(state).items;
    for (size_t k = 0; k < kv.size(); k += 2)
      if (obj(kv[k]).kind != Kind::String || obj(kv[k]).text != "_metadata")
        error("BUILD sets attributes other than a state_dict's _metadata");
  }

  // Runs the opcodes up to STOP; returns the pickled object.
  uint32_t execute() {
    for (;;) {
      op_at_ = pos_;
      const unsigned char op = *take(1);
      switch (op) {
        case 0x80: {  // PROTO
          const unsigned v = *take(1);
          if (v > kHighestProtocol) error("pickle protocol " + std::to_string(v) + " is newer than 5");
          break;
        }
        case 0x95:  // FRAME: a length prefix for buffered reading; nothing to do
          if (take_le(8) > data_.size() - pos_) error("a FRAME runs past the end of the pickle");
          break;
        case '.':  // STOP
          if (stack_.size() != 1 || !marks_.empty()) error("the pickle stops with " + std::to_string(stack_.size()) + " objects on its stack");
          return stack_.back();
        case '(': marks_.push_back(stack_.size()); break;  // MARK
        case '0':  // POP (a MARK on top is popped as CPython does)
          if (!marks_.empty() && marks_.back() == stack_.size()) marks_.pop_back();
          else pop();
          break;
        case '1': pop_mark(); break;  // POP_MARK
        case '2': push(top()); break;  // DUP
        case 'N': push(add(Kind::None)); break;
        case 0x88: push(add(Kind::Bool, 1)); break;  // NEWTRUE
        case 0x89: push(add(Kind::Bool, 0)); break;  // NEWFALSE
        case 'I': {  // INT: protocol 0 and 1's, which write True and False as "01" and "00"
          const std::string line = take_line("INT");
          if (line == "01" || line == "00") push(add(Kind::Bool, line == "01"));
          else push(add(Kind::Int, decimal(line, "INT")));
          break;
        }
        case 'L': push(add(Kind::Int, decimal(take_line("LONG"), "LONG"))); break;  // LONG (text)
        case 'P': case 'p': case 'g':  // PERSID, PUT, GET: protocol 0's, with text arguments
          error(
              "the pickle was written with protocol 0 (torch.save(..., pickle_protocol=0)), which torch.load "
              "cannot read either: save it again with the default pickle_protocol");
        case 'J': push(add(Kind::Int, int64_t(int32_t(uint32_t(take_le(4)))))); break;  // BININT
        case 'K': push(add(Kind::Int, int64_t(take_le(1)))); break;                      // BININT1
        case 'M': push(add(Kind::Int, int64_t(take_le(2)))); break;                      // BININT2
        case 0x8a: push(add(Kind::Int, take_long(take_le(1)))); break;                   // LONG1
        case 0x8b: push(add(Kind::Int, take_long(take_le(4)))); break;                   // LONG4
        case 'G': take(8); push(add(Kind::Float)); break;                                // BINFLOAT
        case 'X': case 0x8c: case 0x8d: case 'U': case 'T': {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, SHORT_BINSTRING, BINSTRING
          const int width = op == 'X' || op == 'T' ? 4 : op == 0x8d ? 8 : 1;
          uint64_t n = take_le(width);
          if (op == 'T' && n > 0x7fffffff) error("a BINSTRING has a negative length");
          Object s;
          s.kind = Kind::String;
          s.text = take_text(n);
          push(add(std::move(s)));
          break;
        }
        case 'C': case 'B': case 0x8e: {  // SHORT_BINBYTES, BINBYTES, BINBYTES8
          const uint64_t n = take_le(op == 'C' ? 1 : op == 'B' ? 4 : 8);
          Object b;
          b.kind = Kind::Bytes;
          b.text = take_text(n);
          push(add(std::move(b)));
          break;
        }
        case ')': push(container(Kind::Tuple, {})); break;             // EMPTY_TUPLE
        case 't': push(container(Kind::Tuple, pop_mark())); break;     // TUPLE
        case 0x85: case 0x86: case 0x87: {                               // TUPLE1, TUPLE2, TUPLE3
          std::vector<uint32_t> items(size_t(op - 0x84));
          for (size_t k = items.size(); k-- > 0;) items[k] = pop();
          push(container(Kind::Tuple, std::move(items)));
          break;
        }
        case ']': push(container(Kind::List, {})); break;              // EMPTY_LIST
        case 'l': push(container(Kind::List, pop_mark())); break;      // LIST
        case 'a': {                                                      // APPEND
          const uint32_t v = pop();
          target(Kind::List, "APPEND").items.push_back(v);
          break;
        }
        case 'e': {  // APPENDS
          const std::vector<uint32_t> items = pop_mark();
          Object &list = target(Kind::List, "APPENDS");
          list.items.insert(list.items.end(), items.begin(), items.end());
          break;
        }
        case '}': push(container(Kind::Dict, {})); break;  // EMPTY_DICT
        case 'd': {                                         // DICT
          std::vector<uint32_t> items = pop_mark();
          if (items.size() % 2) error("DICT has a key without a value");
          push(container(Kind::Dict, std::move(items)));
          break;
        }
        case 's': {  // SETITEM
          const uint32_t v = pop(), k = pop();
          add_items("SETITEM", {k, v});
          break;
        }
        case 'u': add_items("SETITEMS", pop_mark()); break;  // SETITEMS
        case 'c': {                                            // GLOBAL
          const std::string module = take_line("GLOBAL's module");
          global(module, take_line("GLOBAL's name"));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const uint32_t name = pop(), module = pop();
          expect(name, Kind::String, "STACK_GLOBAL's name");
          expect(module, Kind::String, "STACK_GLOBAL's module");
          global(obj(module).text, obj(name).text);
          break;
        }
        case 'R': {  // REDUCE
          const uint32_t args = pop(), fn = pop();
          push(call(fn, args));
          break;
        }
        case 'b': build(); break;                         // BUILD
        case 'Q': push(persistent_load(pop())); break;    // BINPERSID
        case 'q': memo_put(take_le(1)); break;            // BINPUT
        case 'r': memo_put(take_le(4)); break;            // LONG_BINPUT
        case 0x94: memo_put(memo_.size()); break;         // MEMOIZE
        case 'h': memo_get(take_le(1)); break;            // BINGET
        case 'j': memo_get(take_le(4)); break;            // LONG_BINGET
        case 0x81: case 0x92: error("NEWOBJ creates an object of a class; a state_dict holds none");
        case 'i': case 'o': error("INST/OBJ creates an object of a class; a state_dict holds none");
        case 0x82: case 0x83: case 0x84: error("the pickle uses the extension registry (EXT1/2/4)");
        case 0x96: case 0x97: case 0x98: error("the pickle uses out-of-band buffers (protocol 5), which torch.save does not");
        case 0x8f: case 0x90: case 0x91: error("the pickle builds a set; a state_dict holds none");
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          error(std::string("opcode ") + hex +
                " is not one that kiln reads in a state_dict's pickle (torch.save's protocols 1 to 5)");
        }
      }
    }
  }

  // The state_dict itself: a dict from names to tensors.
  std::vector<PickledTensor> state_dict(uint32_t root) {
    const std::string kRead = "kiln reads a state_dict: torch.save(model.state_dict(), PATH)";
    const Object &r = obj(root);
    if (r.kind == Kind::Tensor)
      fail(KILN_ERROR_FORMAT, "'" + path_ + "' holds a single tensor, not a state_dict (a dict of tensors); " + kRead);
    if (r.kind != Kind::Dict)
      fail(KILN_ERROR_FORMAT, "'" + path_ + "' holds " + kind_name(r.kind) + ", not a state_dict; " + kRead);
    // A dict among the values: the model's state_dict inside a training
    // checkpoint, as PyTorch's tutorials save one.
    for (size_t k = 0; k + 1 < r.items.size(); k += 2)
      if (obj(r.items[k + 1]).kind == Kind::Dict && obj(r.items[k]).kind == Kind::String)
        fail(KILN_ERROR_FORMAT, "'" + path_ + "' holds a dict under " + quoted(obj(r.items[k]).text) +
                                    ", not a tensor: a training checkpoint? kiln reads the model's state_dict alone: "
                                    "torch.save(checkpoint[" + quoted(obj(r.items[k]).text) + "], PATH)");
    std::vector<PickledTensor> out;
    std::unordered_set<std::string> names;
    for (size_t k = 0; k + 1 < r.items.size(); k += 2) {
      const Object &key = obj(r.items[k]), &value = obj(r.items[k + 1]);
      if (key.kind != Kind::String)
        fail(KILN_ERROR_FORMAT, "'" + path_ + "' holds a dict with " + kind_name(key.kind) +
                                    " as a key; a state_dict's keys are names");
      if (value.kind != Kind::Tensor)
        fail(KILN_ERROR_FORMAT, "'" + path_ + "' holds " + kind_name(value.kind) + " under " + quoted(key.text) +
                                    ", not a tensor; " + kRead);
      if (!names.insert(key.text).second)
        fail(KILN_ERROR_FORMAT, "'" + path_ + "' names " + quoted(key.text) + " twice");
      const View &v = views_[size_t(value.value)];
      const Object &storage = obj(v.storage);
      const StorageType &type = kStorageTypes[storage.type];
      PickledTensor t;
      t.name = key.text;
      t.storage_key = storage.text;
      t.storage_type = type.name;
      t.torch_dtype = type.torch_dtype;
      t.supported = type.supported;
      t.dtype = type.dtype;
      t.storage_numel = storage.value;
      t.offset = v.offset;
      t.size = v.size;
      std::copy(std::begin(v.stride), std::end(v.stride), std::begin(t.stride));
      out.push_back(std::move(t));
    }
    return out;
  }

  const std::string &data_;
  const std::string &path_;
  size_t pos_ = 0, op_at_ = 0;
  std::vector<Object> objects_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;  // stack sizes at each open MARK
  std::unordered_map<uint64_t, uint32_t> memo_;
  std::vector<View> views_;
};

}  // namespace

std::vector<PickledTensor> unpickle_state_dict(const std::string &pickle, const std::string &path) {
  return Unpickler(pickle, path).run();
}

}  // namespace kiln::io
