#include "hstu/core/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "hstu/core/error.h"

namespace hstu {
namespace fs = std::filesystem;

namespace {

// What lies at `path`, without following a symbolic link: a description of what is not a
// regular file there, or "" for a regular file or nothing at all.
std::string not_a_file(const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return "";
  if (S_ISREG(st.st_mode)) return "";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISDIR(st.st_mode)) return "a folder";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  if (S_ISFIFO(st.st_mode)) return "a pipe";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

void check_output_path(const std::string& path, const std::string& role) {
  HSTU_CHECK(!path.empty(), role, "is empty", "name a file to write");
  const std::string kind = not_a_file(path);
  HSTU_CHECK(kind.empty(), path, fmt::format("is {}, which hstu does not replace", kind),
             fmt::format("give {} the path of a new or regular file", role));
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  HSTU_CHECK(parent.empty() || fs::is_directory(parent, ec), path,
             fmt::format("its folder {} does not exist", parent.string()), "create the folder first");
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  check_output_path(path);
  const std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(getpid()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
  if (fd < 0) throw Error(path, std::string("cannot create: ") + std::strerror(errno), "check that the folder exists and is writable");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(path, std::string("write failed: ") + std::strerror(err), "check the free disk space");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(path, std::string("flush failed: ") + std::strerror(err), "check the free disk space");
  }
  // Checked again just before the rename: something may have appeared there meanwhile.
  const std::string kind = not_a_file(path);
  if (!kind.empty()) {
    ::unlink(tmp.c_str());
    throw Error(path, fmt::format("is {}, which hstu does not replace", kind), "give the path of a new or regular file");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(path, std::string("cannot replace: ") + std::strerror(err), "check the folder's permissions");
  }
}

bool process_alive(long pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

int remove_stale_temp_files(const std::string& folder) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    const auto at = name.rfind(".tmp.");
    if (at == std::string::npos || !entry.is_regular_file(ec)) continue;
    const std::string digits = name.substr(at + 5);
    long pid = 0;
    auto [p, err] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (err != std::errc() || p != digits.data() + digits.size() || process_alive(pid)) continue;
    if (fs::remove(entry.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace hstu
