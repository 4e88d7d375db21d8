#include "core/error.hpp"

namespace kiln {

// The key function: Error's vtable and type information are emitted here
// only (see error.hpp).
Error::~Error() = default;

}  // namespace kiln
