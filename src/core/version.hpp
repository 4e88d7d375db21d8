// kiln's version as text, "MAJOR.MINOR.PATCH" from kiln.h's macros: what
// kiln_version_string returns and what model files and checkpoints record.
#pragma once

#include "kiln/kiln.h"

#define KILN_VERSION_TEXT_(x) #x
#define KILN_VERSION_TEXT(x) KILN_VERSION_TEXT_(x)

namespace kiln {

inline constexpr const char kVersionText[] = KILN_VERSION_TEXT(KILN_VERSION_MAJOR) "." KILN_VERSION_TEXT(
    KILN_VERSION_MINOR) "." KILN_VERSION_TEXT(KILN_VERSION_PATCH);

}  // namespace kiln
