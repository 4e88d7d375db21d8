// Atomic file replacement: a reader (or a crash) sees either the old file or
// the complete new one, never a mix. Used for every file kiln writes (model
// weights, checkpoints), so a crash in the middle of a save never destroys
// the last good file.
#pragma once

#include <cstdio>
#include <functional>
#include <string>

namespace kiln::io {

// Writes `path` by calling write(f) on a temporary file in the same
// directory (path + ".tmp.<host>.<pid>.<random>"), then fflush, fsync,
// close, rename over path, and fsync of the directory so the rename itself
// is durable. Only regular files are replaced: an existing path that is a
// device node, FIFO, socket or directory is refused (KILN_ERROR_IO) and left
// alone; a symbolic link is followed, and the file it points to is replaced
// (the link stays). Temporaries of path left by dead writers on this machine
// (a kill during a save) are removed first. write may use any stdio output function on f; a failed write is
// detected through ferror(f) afterwards, so it need not check each call.
// On any failure (including an exception thrown by write, which is
// rethrown) the temporary file is removed and the old file is untouched;
// I/O failures throw KILN_ERROR_IO naming the path and strerror.
void write_file_atomically(const std::string &path, const std::function<void(std::FILE *)> &write);

}  // namespace kiln::io
