// What the fuzz targets share: a scratch folder of this process (the parsers take paths, so
// each input is written to a file there first) and the tiny model shapes the checkpoint target
// loads with and make_seeds writes its seeds for.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "hstu/model/ranking_model.h"
#include "hstu/model/retrieval_model.h"

namespace hstu::fuzz {

// A folder of this process: under $HSTU_FUZZ_TMPDIR when set (scripts/fuzz.sh points it at
// tmpfs), else /dev/shm when writable (no disk I/O per input), else $TMPDIR or /tmp. Removed
// when the process exits normally; a crash leaves it for the runner to sweep.
inline const std::string& scratch_dir() {
  struct Scratch {
    std::string dir;
    Scratch() {
      std::string base;
      if (const char* e = std::getenv("HSTU_FUZZ_TMPDIR"); e && *e) base = e;
      else if (::access("/dev/shm", W_OK) == 0) base = "/dev/shm";
      else if (const char* t = std::getenv("TMPDIR"); t && *t) base = t;
      else base = "/tmp";
      dir = base + "/hstu-fuzz-XXXXXX";
      if (!::mkdtemp(dir.data())) {
        std::perror("hstu fuzz: mkdtemp");
        std::abort();
      }
    }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const Scratch scratch;
  return scratch.dir;
}

// HSTU_FUZZ_STRICT=1 turns on the targets' extra oracles (a file the reader accepted must
// survive the writer and the reader again; a reader's output must pass its own validate()).
// Off by default: then only a crash, a sanitizer report or an exception other than hstu::Error
// is a finding.
inline bool strict() {
  static const bool on = [] {
    const char* e = std::getenv("HSTU_FUZZ_STRICT");
    return e && *e && *e != '0';
  }();
  return on;
}

// A broken oracle: says which and aborts, so libFuzzer keeps the input as a crash.
[[noreturn]] inline void oracle_failed(const char* what, const std::string& detail) {
  std::fprintf(stderr, "hstu fuzz: oracle failed: %s: %s\n", what, detail.c_str());
  std::abort();
}

// Writes the input to scratch_dir()/name (replacing what was there) and returns the path.
inline std::string write_scratch(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror("hstu fuzz: writing the input file");
    std::abort();
  }
  return path;
}

// The retrieval model the checkpoint target loads with (make_seeds writes checkpoints of it).
inline RetrievalConfig tiny_retrieval() {
  RetrievalConfig c;
  c.num_items = 7;
  c.d_model = 4;
  c.num_layers = 1;
  c.heads = 1;
  c.dqk = c.dv = 2;
  c.max_seq_len = 5;
  c.num_negatives = 3;
  return c;
}

// The ranking model the checkpoint target loads with: 2 tasks, one contextual feature of 3
// values, 3 actions.
inline RankingConfig tiny_ranking() {
  RankingConfig c;
  c.num_items = 6;
  c.num_actions = 3;
  c.feature_sizes = {3};
  c.num_tasks = 2;
  c.d_model = 4;
  c.item_dim = 3;
  c.action_dim = 2;
  c.feature_dim = 2;
  c.num_layers = 1;
  c.heads = 1;
  c.dqk = c.dv = 2;
  c.max_seq_len = 8;
  c.hidden = 3;
  return c;
}

}  // namespace hstu::fuzz
