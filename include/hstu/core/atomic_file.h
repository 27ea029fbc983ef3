// Output files that are either whole or absent: the bytes go to a temporary file beside the
// target, are flushed to disk and renamed over it, so a crash or a full disk never leaves a
// half-written file, and a reader never sees one.
#pragma once

#include <string>

namespace hstu {

// Writes `bytes` to `path` atomically (temporary file, fsync, rename); on failure the
// temporary file is removed and `path` is left as it was.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace hstu
