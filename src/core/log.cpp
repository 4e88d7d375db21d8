// Context::log: records at or above the context's level go to the user's
// callback, or to stderr as "kiln: warning: ...". Logging never throws and
// never fails the operation that logs.
#include <cstdio>
#include <string>

#include "core/context.hpp"

namespace kiln {

namespace {

const char *level_name(kiln_log_level level) {
  switch (level) {
    case KILN_LOG_DEBUG: return "debug";
    case KILN_LOG_INFO: return "info";
    case KILN_LOG_WARNING: return "warning";
    case KILN_LOG_ERROR: return "error";
    case KILN_LOG_OFF: break;
  }
  return "log";
}

// Set while this thread runs a log callback. A callback that calls back into
// kiln (the header forbids it) would otherwise deadlock on log_mutex_ or
// recurse; its records are dropped instead.
thread_local bool in_callback = false;

}  // namespace

void Context::log(kiln_log_level level, const std::string &message) const {
  if (level < options_.log_level || level >= KILN_LOG_OFF || in_callback) return;
  try {
    // The record is one line, as the header promises.
    std::string line = message;
    for (char &c : line)
      if (c == '\n' || c == '\r') c = ' ';
    while (!line.empty() && line.back() == ' ') line.pop_back();

    // Serialised, so callbacks need not be reentrant and stderr lines do not
    // interleave.
    std::lock_guard<std::mutex> lock(log_mutex_);
    if (options_.log_fn) {
      kiln_log_record record{};
      record.struct_size = sizeof(kiln_log_record);
      record.level = level;
      record.message = line.c_str();
      in_callback = true;
      options_.log_fn(options_.log_user, &record);
      in_callback = false;
    } else {
      std::fprintf(stderr, "kiln: %s: %s\n", level_name(level), line.c_str());
    }
  } catch (...) {
    in_callback = false;
  }
}

}  // namespace kiln
