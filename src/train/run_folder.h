// The output folder of one training run, owned by that run while it lasts.
//
// - One run at a time: the run holds an exclusive lock (flock) on FOLDER/.hstu.lock, which holds
//   its process id. A second run into the folder is one error naming that process. The kernel
//   drops the lock when its process ends, however it ends, so a killed run's lock is simply
//   taken by the next one.
// - No mixing of runs: a new run into a folder that holds another run's files (config.toml,
//   metrics.jsonl, final.json, checkpoint.safetensors, the served tables' folder tables/) is refused, unless it may replace them
//   (--overwrite, or the default folder runs/latest, which always holds the latest run); then
//   they are removed before anything else is written. A resumed run continues its own files.
// - Nothing left behind: temporary files of writers that were killed mid-write are removed; a
//   run that fails before its first checkpoint removes what it wrote (and the folder, when it
//   made it), so a failing command leaves the disk as it found it.
#pragma once

#include <string>
#include <vector>

namespace hstu::train_detail {

class RunFolder {
 public:
  enum class Mode {
    New,        // a new run: the folder must hold no other run's files
    Overwrite,  // a new run that replaces another run's files in the folder
    Resume,     // the run of the checkpoint being resumed continues in the folder
  };
  // Creates the folder when needed, takes its lock and prepares it for `mode`. Throws
  // hstu::Error (naming the folder, and the process holding it) when it cannot.
  RunFolder(const std::string& path, Mode mode);
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const;
  // From now on the folder holds a resumable run (its first checkpoint is written): a failure
  // leaves its files for --resume.
  void keep() { keep_ = true; }

  // The files of a run, in the order a run writes them.
  static const std::vector<std::string>& run_files();

 private:
  void claim(Mode mode);
  void release();

  std::string path_;
  int lock_fd_ = -1;
  std::vector<std::string> made_;  // the folders this run created, deepest first
  bool keep_ = false;
};

}  // namespace hstu::train_detail
