// The restricted unpickler for the data.pkl record of a torch.save file.
//
// Written from the pickle protocol's definition (CPython's
// Lib/pickletools.py documents every opcode), it runs the opcodes of
// protocols 1 to 5 that a state_dict uses (protocol 0, whose persistent ids
// are text, torch.load cannot read either) and never executes anything: the
// only globals it resolves are the few a state_dict of tensors needs, each
// mapped to a fixed action of its own:
//   collections.OrderedDict()              an empty dict (its _metadata
//                                          attribute, set by BUILD, is ignored)
//   torch._utils._rebuild_tensor_v2        a tensor view of a storage
//   torch._utils._rebuild_parameter,       an nn.Parameter: its tensor
//   torch._utils._rebuild_parameter_with_state
//   torch.FloatStorage, torch.LongStorage, the storage types in persistent
//   ... (every torch.*Storage)             ids ('storage', type, key,
//                                          location, numel)
// plus tuples, lists, dicts, ints, floats, bools, None, strings and bytes.
// Any other global (os.system, builtins.eval, a model class) is refused
// where it appears, naming it, before anything could call it; so are the
// opcodes that build arbitrary objects (NEWOBJ, INST, OBJ, extensions,
// out-of-band buffers). Objects live in one arena and refer to each other by
// index, so self-referencing containers cannot leak or recurse; the work is
// linear in the pickle's size, and its objects are capped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/shape.hpp"

namespace kiln::io {

// The most bytes of data.pkl kiln reads: a state_dict of 100,000 tensors
// takes some 15 MB.
constexpr int64_t kTorchPickleMaxBytes = int64_t(64) << 20;

// One tensor of the state_dict: a view of a storage, as torch builds it.
struct PickledTensor {
  std::string name;          // its key in the state_dict
  std::string storage_key;   // the storage's record: <archive>/data/<key>
  const char *storage_type;  // "FloatStorage", as torch names it
  const char *torch_dtype;   // "torch.float32", for messages
  bool supported = false;    // whether kiln has the dtype
  DType dtype = DType::F32;  // when supported
  int64_t storage_numel = 0;  // elements, as the persistent id says
  int64_t offset = 0;         // storage_offset, in elements
  Shape size;
  int64_t stride[KILN_MAX_DIMS] = {};  // in elements, each >= 0
};

// The tensors of the state_dict that `pickle` holds, in its order: a dict
// (or OrderedDict) from names to tensors. Every tensor's view is checked to
// lie inside the storage the pickle says it has (its numel): the archive's
// records are checked against those numels by the caller. FORMAT naming
// `path` for anything else: a refused global or opcode, a malformed or
// truncated pickle, a value that is not a tensor (with what it is and how to
// save a state_dict instead).
std::vector<PickledTensor> unpickle_state_dict(const std::string &pickle, const std::string &path);

}  // namespace kiln::io
