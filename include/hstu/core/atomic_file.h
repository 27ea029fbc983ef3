// Output files that are either whole or absent: the bytes go to a temporary file beside the
// target, are flushed to disk and renamed over it, so a crash or a full disk never leaves a
// half-written file, and a reader never sees one.
//
// An output path may name a new file or an existing regular file, which is replaced. Anything
// else there (a folder, a device such as /dev/full, a pipe, a socket, a symbolic link) is
// refused, never replaced: renaming over it would turn a device node or a link into a file.
#pragma once

#include <string>

namespace hstu {

// Throws hstu::Error naming `path` (and `role`, e.g. "--out") when it cannot be an output
// file: its folder is missing, or something other than a regular file is there. Commands
// call it before their work, so that a bad path costs nothing.
void check_output_path(const std::string& path, const std::string& role = "output file");

// Writes `bytes` to `path` atomically (temporary file `path.tmp.PID`, fsync, rename); on
// failure the temporary file is removed and `path` is left as it was.
void write_file_atomic(const std::string& path, const std::string& bytes);

// Removes the temporary files `NAME.tmp.PID` in `folder` whose process PID no longer runs (a
// writer killed mid-write leaves one); returns how many it removed.
int remove_stale_temp_files(const std::string& folder);

// Whether a process with this id runs on this machine.
bool process_alive(long pid);

}  // namespace hstu
