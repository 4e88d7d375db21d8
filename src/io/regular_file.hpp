// Opening files kiln reads (models, checkpoints, datasets) without the
// surprises of special files: a FIFO would block open() forever and a device
// node could be read without end, so both are refused before any read.
#pragma once

#include <string>

namespace kiln::io {

// Opens path read-only (close-on-exec) and returns the descriptor, after
// checking it is a regular file (symbolic links followed). Throws
// KILN_ERROR_IO naming path: "cannot open" with strerror, or "not a regular
// file" at once for FIFOs, sockets, directories and device nodes.
int open_regular_file(const std::string &path);

}  // namespace kiln::io
