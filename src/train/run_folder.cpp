#include "run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "hstu/core/atomic_file.h"
#include "hstu/core/error.h"

namespace hstu::train_detail {
namespace fs = std::filesystem;

namespace {

constexpr const char* kLockName = ".hstu.lock";

// The process id written in a lock file, or 0.
long lock_holder(const std::string& lock_path) {
  char buf[32] = {};
  const int fd = ::open(lock_path.c_str(), O_RDONLY | O_NOFOLLOW);
  if (fd < 0) return 0;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  return n > 0 ? std::strtol(buf, nullptr, 10) : 0;
}

// The lock of `folder`, held by this process: its descriptor. Retries when the file it locked
// was replaced meanwhile (a run that ended removed it), so that two runs never each hold a lock
// on a different file.
int take_lock(const std::string& folder) {
  const std::string lock_path = (fs::path(folder) / kLockName).string();
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    HSTU_CHECK(fd >= 0, folder, fmt::format("cannot create its lock file {}: {}", kLockName, std::strerror(errno)),
               "choose a writable --out");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      HSTU_CHECK(err != EWOULDBLOCK, folder,
                 fmt::format("is in use by another hstu run (process {})", lock_holder(lock_path)),
                 "wait for that run to end, or choose another --out");
      throw Error(folder, fmt::format("cannot lock {}: {}", kLockName, std::strerror(err)), "choose another --out");
    }
    struct stat held{}, now{};
    if (::fstat(fd, &held) == 0 && ::stat(lock_path.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
        held.st_dev == now.st_dev) {
      const std::string pid = std::to_string(static_cast<long>(::getpid())) + "\n";
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
        // The lock holds without the id; only the message of a second run would lack it.
      }
      return fd;
    }
    ::close(fd);
  }
  throw Error(folder, "its lock file keeps changing", "is another program removing it? choose another --out");
}

}  // namespace

const std::vector<std::string>& RunFolder::run_files() {
  static const std::vector<std::string> files{"config.toml", "metrics.jsonl", "checkpoint.safetensors", "final.json",
                                              "metrics.png", "tables"};
  return files;
}

std::string RunFolder::file(const std::string& name) const { return (fs::path(path_) / name).string(); }

RunFolder::RunFolder(const std::string& path, Mode mode) : path_(path), keep_(mode == Mode::Resume) {
  try {
    claim(mode);
  } catch (...) {
    release();  // the lock and the folders this run made; never another run's files
    throw;
  }
}

void RunFolder::claim(Mode mode) {
  HSTU_CHECK(!path_.empty(), "--out", "is empty", "name the run's output folder");
  std::error_code ec;
  const auto status = fs::symlink_status(path_, ec);
  HSTU_CHECK(!fs::exists(status) || fs::is_directory(status), path_, "exists and is not a folder",
             "choose another --out (a folder for the run's files)");
  if (!fs::exists(status)) {
    // The folders this run makes, deepest first, so that a failure can take them away again.
    for (fs::path p = fs::absolute(path_, ec); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
      made_.push_back(p.string());
      if (p == p.parent_path()) break;
    }
    fs::create_directories(path_, ec);
    HSTU_CHECK(!ec, path_, "cannot create the output folder: " + ec.message(), "choose a writable --out");
  }
  lock_fd_ = take_lock(path_);
  remove_stale_temp_files(path_);
  if (mode == Mode::Resume) return;
  std::vector<std::string> present;
  for (const std::string& f : run_files())
    if (fs::exists(fs::symlink_status(file(f), ec))) present.push_back(f);
  if (present.empty()) return;
  if (mode == Mode::New) {
    std::string list;
    for (const std::string& f : present) list += (list.empty() ? "" : ", ") + f;
    throw Error(path_, fmt::format("holds another run's files ({})", list),
                "choose another --out, pass --overwrite to replace them, or --resume that run's checkpoint");
  }
  for (const std::string& f : present) {
    fs::remove_all(file(f), ec);
    HSTU_CHECK(!ec, file(f), "cannot remove the previous run's file: " + ec.message(), "check the folder's permissions");
  }
}

void RunFolder::release() {
  if (lock_fd_ >= 0) {
    // Removed while still held: a run that opened the old file finds it replaced and retries.
    std::error_code ec;
    fs::remove((fs::path(path_) / kLockName), ec);
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
  // The folders this run made go too, when empty (rmdir fails, harmlessly, when anything is in
  // one: another run's folder beside it, say).
  if (!keep_)
    for (const std::string& dir : made_)
      if (::rmdir(dir.c_str()) != 0) break;
}

RunFolder::~RunFolder() {
  if (!keep_) {
    std::error_code ec;
    for (const std::string& f : run_files()) fs::remove_all(file(f), ec);
  }
  release();
}

}  // namespace hstu::train_detail
