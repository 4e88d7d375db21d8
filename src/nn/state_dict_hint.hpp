// What a state_dict's names and shapes say about the model that saved it,
// for the loaders' messages when a file does not fit the spec it is loaded
// with (or comes without one): the layer kinds it holds, found from
// PyTorch's parameter and buffer names ("BatchNorm1d running statistics at
// 1.*: kiln has no BatchNorm"), and the spec that fits it when one does,
// found from its Linear weights' shapes and nn.Sequential indices.
#pragma once

#include <string>
#include <vector>

#include "io/tensor_file.hpp"

namespace kiln {

struct StateDictHint {
  // "Linear(784, 32) at 0; BatchNorm1d running statistics at 1.*: kiln has
  // no BatchNorm; ...", the list cut short after a few modules; "" for an
  // empty state_dict.
  std::string layers;
  // A spec whose parameters carry exactly these names and shapes (ReLU
  // between the Linears: a state_dict holds no activations), or "".
  std::string spec;
  // The module prefix that the spec's names lack ("linear_relu_stack."), or
  // "" when the names are nn.Sequential's own.
  std::string prefix;
  // Where the Linears are not named as one nn.Sequential's (fc1, fc2) but
  // chain in the file's order: the nn.Sequential that names them as spec
  // needs, as Python ("nn.Sequential(model.fc1, nn.ReLU(), model.fc2)").
  std::string sequential;

  // All of it as sentences to append to a message, each starting with a
  // space: " It holds Linear(4, 3) at 0; Linear(3, 2) at 2. The spec that
  // fits it is \"4-3-2\" (...)."; "" when there is nothing to say.
  std::string sentences() const;
};

StateDictHint read_state_dict_hint(const std::vector<io::TensorFile::Entry> &entries);

}  // namespace kiln
