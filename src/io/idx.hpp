// The IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/):
//   bytes 0-1  zero
//   byte 2     element type: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32,
//              0x0E f64
//   byte 3     number of dimensions (kiln: 1..8)
//   then       one big-endian u32 per dimension, then the elements,
//              big-endian, row-major.
// Files may be gzip-compressed (recognised by the gzip magic bytes, whatever
// the name); they are decompressed as they are read.
#pragma once

#include <memory>
#include <string>

#include "core/tensor.hpp"

namespace kiln::io {

// Reads an IDX file into a new CPU tensor of ctx, in native byte order.
// u8, i32, f32 and f64 keep their type; i8 and i16 widen to i32 (kiln has no
// narrower signed type). Throws KILN_ERROR_IO when the file cannot be opened
// or read (path + strerror) and KILN_ERROR_FORMAT for a bad magic, an
// unknown type, zero or more than 8 dimensions, or a payload that does not
// hold exactly the elements the header promises ("expected N bytes of data,
// found M", trailing bytes). The promised size is checked against the file's
// size (for gzip, against the most deflate can expand it) before allocating,
// so a hostile header cannot make kiln allocate more than the file can hold.
Tensor read_idx(const std::string &path, const std::shared_ptr<Context> &ctx);

}  // namespace kiln::io
