// DLPack exchange (include/kiln/dlpack.h): kiln tensors out as
// DLManagedTensorVersioned without a copy, and DLPack tensors in as kiln
// tensors over the producer's memory (Tensor::wrap). The C entry points in
// src/api/tensor.cpp only check handles and call these.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/tensor.hpp"
#include "kiln/dlpack.h"

namespace kiln {

// A new DLManagedTensorVersioned over t's memory, holding a reference to its
// storage until its deleter runs. flags: 0 or DLPACK_FLAG_BITMASK_READ_ONLY
// (INVALID_ARGUMENT otherwise).
DLManagedTensorVersioned *to_dlpack(const Tensor &t, uint64_t flags);

// Makes a tensor over managed's memory and passes it to adopt (which makes
// the caller's handle). When adopt returns, the tensor owns managed: its
// deleter runs once, when the last reference goes. When anything throws,
// adopt included, the caller keeps managed and its deleter is not called.
// Errors as kiln_tensor_from_dlpack documents.
void from_dlpack(const std::shared_ptr<Context> &ctx, DLManagedTensorVersioned *managed,
                 const std::function<void(const Tensor &)> &adopt);

}  // namespace kiln
