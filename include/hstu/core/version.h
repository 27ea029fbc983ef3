// Build identity, for benchmark records.
#pragma once

namespace hstu {

// `git describe --always --dirty` of the source tree at build time, or "unknown".
const char* git_commit();

}  // namespace hstu
