#include "hstu/io/table_checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>

#include "hstu/core/atomic_file.h"
#include "hstu/core/error.h"
#include "hstu/dist/sharded_ids.h"
#include "hstu/io/safetensors.h"

namespace hstu {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string shard_name(int i) { return fmt::format("shard-{:05d}.safetensors", i); }

}  // namespace

TableCheckpointReport save_table(EmbeddingTable& table, const std::string& dir, bool with_state, double shard_bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  const EmbeddingTableConfig& c = table.config();
  const std::int64_t rf = c.row_floats(), dim = c.dim, state = with_state ? rf - dim : 0;
  const auto per_shard =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(shard_bytes / static_cast<double>(8 + 4 * (dim + state))));
  const fs::path target(dir);
  HSTU_CHECK(!target.filename().empty(), dir, "names no folder", "give the table's folder a name");
  std::error_code ec;
  const fs::path tmp = target.string() + fmt::format(".tmp.{}", static_cast<long>(::getpid()));
  // A writer of this folder that was killed left its temporary folder: one writer at a time
  // writes a table's folder, so every such folder beside it is stale.
  const std::string stale_prefix = target.filename().string() + ".tmp.";
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  for (const auto& entry : fs::directory_iterator(parent, ec))
    if (entry.path().filename().string().rfind(stale_prefix, 0) == 0) fs::remove_all(entry.path(), ec);
  ec.clear();
  HSTU_CHECK(fs::create_directories(tmp, ec) || fs::is_directory(tmp), tmp.string(),
             "cannot create the folder: " + ec.message(), "check that the parent folder exists and is writable");
  TableCheckpointReport report;
  nlohmann::json index = {{"format", "hstu embedding table"},
                          {"version", 1},
                          {"name", c.name},
                          {"kind", table_kind_name(c.kind)},
                          {"rows", c.rows},
                          {"dim", dim},
                          {"optimizer", sparse_optimizer_name(c.optimizer.kind)},
                          {"state_floats", state},
                          {"steps", table.steps()},
                          {"shards", nlohmann::json::array()}};
  try {
    table.flush();
    const std::int64_t positions = table.stored_positions();
    int shard = 0;
    // The disk writes one shard while the next is read from the table: a writer thread, at most
    // one shard behind.
    std::future<void> writing;
    for (std::int64_t begin = 0; begin < positions; begin += per_shard) {
      Tensor keys, rows;
      table.read_stored(begin, per_shard, &keys, &rows);
      const std::int64_t k = keys.numel();
      if (k == 0) continue;
      Tensor weight = Tensor::empty(DType::F32, {k, dim});
      Tensor st = Tensor::empty(DType::F32, {k, std::max<std::int64_t>(state, 0)});
      for (std::int64_t i = 0; i < k; ++i) {
        const float* r = rows.data<float>() + i * rf;
        std::memcpy(weight.data<float>() + i * dim, r, static_cast<std::size_t>(dim) * 4);
        if (state > 0) std::memcpy(st.data<float>() + i * state, r + dim, static_cast<std::size_t>(state) * 4);
      }
      std::vector<std::pair<std::string, Tensor>> tensors{{"keys", keys}, {"weight", weight}};
      if (state > 0) tensors.emplace_back("state", st);
      const std::string name = shard_name(++shard);
      if (writing.valid()) writing.get();
      writing = std::async(std::launch::async, [file = (tmp / name).string(), tensors = std::move(tensors), &c] {
        write_safetensors(file, tensors, {{"table", c.name}});
      });
      index["shards"].push_back({{"file", name}, {"rows", k}});
      report.rows += k;
    }
    if (writing.valid()) writing.get();
    for (const auto& s : index["shards"])
      report.bytes += static_cast<double>(fs::file_size(tmp / s["file"].get<std::string>()));
    report.shards = shard;
    index["stored_rows"] = report.rows;
    write_file_atomic((tmp / "index.json").string(), index.dump(2) + "\n");
    // Swap the new folder in: the old one (if any) is moved aside first and removed after.
    const fs::path old = target.string() + fmt::format(".old.{}", static_cast<long>(::getpid()));
    const bool had_old = fs::exists(target);
    if (had_old) fs::rename(target, old);
    fs::rename(tmp, target);
    if (had_old) fs::remove_all(old, ec);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  report.seconds = seconds_since(t0);
  return report;
}

namespace {

// Puts the folder's rows whose key `keep` accepts (every row without it) into the table, which
// is being imported into (begin_import .. end_import); returns what it read and the saved step
// count in *steps.
TableCheckpointReport import_folder(EmbeddingTable& table, const std::string& dir,
                                    const std::function<bool(std::int64_t)>& keep, std::int64_t* steps) {
  const auto t0 = std::chrono::steady_clock::now();
  const EmbeddingTableConfig& c = table.config();
  const fs::path folder(dir);
  const std::string index_path = (folder / "index.json").string();
  std::ifstream f(index_path);
  HSTU_CHECK(f.good(), index_path, "cannot be read", "name a folder that save_table wrote");
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw Error(index_path, std::string("is not valid JSON: ") + e.what(), "the checkpoint is damaged");
  }
  const auto field = [&](const char* key) -> const nlohmann::json& {
    HSTU_CHECK(index.contains(key), index_path, fmt::format("has no '{}'", key), "the checkpoint is damaged");
    return index[key];
  };
  try {
    HSTU_CHECK(
        field("kind").get<std::string>() == table_kind_name(c.kind) && field("dim").get<std::int64_t>() == c.dim,
        index_path,
        fmt::format("holds a {} table of dim {}, and table '{}' is {} of dim {}", field("kind").get<std::string>(),
                    field("dim").get<std::int64_t>(), c.name, table_kind_name(c.kind), c.dim),
        "load it into a table of the kind and width it was saved from");
    const std::int64_t state = field("state_floats").get<std::int64_t>();
    const std::int64_t rf = c.row_floats(), dim = c.dim;
    HSTU_CHECK(state == 0 || (field("optimizer").get<std::string>() == sparse_optimizer_name(c.optimizer.kind) &&
                              state == rf - dim),
               index_path,
               fmt::format("holds {} state ({} floats a row), and the table's optimiser is {}",
                           field("optimizer").get<std::string>(), state, sparse_optimizer_name(c.optimizer.kind)),
               "load it into a table with the optimiser it was saved with");
    TableCheckpointReport report;
    for (const auto& s : field("shards")) {
      const std::string path = (folder / s.at("file").get<std::string>()).string();
      const SafetensorsFile file = read_safetensors(path);
      const Tensor* keys = file.find("keys");
      const Tensor* weight = file.find("weight");
      const Tensor* st = file.find("state");
      HSTU_CHECK(keys && weight && keys->dtype() == DType::I64 && weight->dtype() == DType::F32 && keys->dim() == 1 &&
                     weight->shape() == Shape({keys->numel(), dim}) &&
                     (state == 0 || (st && st->dtype() == DType::F32 && st->shape() == Shape({keys->numel(), state}))),
                 path, "does not hold keys, weight (and state) of matching shapes", "the checkpoint is damaged");
      const std::int64_t k = keys->numel();
      std::vector<std::int64_t> kept;
      for (std::int64_t i = 0; i < k; ++i)
        if (!keep || keep(keys->data<std::int64_t>()[i])) kept.push_back(i);
      const auto n = static_cast<std::int64_t>(kept.size());
      Tensor rows = Tensor::zeros(DType::F32, {n, rf});
      Tensor kept_keys = Tensor::empty(DType::I64, {n});
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t i = kept[j];
        kept_keys.data<std::int64_t>()[j] = keys->data<std::int64_t>()[i];
        std::memcpy(rows.data<float>() + j * rf, weight->data<float>() + i * dim, static_cast<std::size_t>(dim) * 4);
        if (state > 0)
          std::memcpy(rows.data<float>() + j * rf + dim, st->data<float>() + i * state,
                      static_cast<std::size_t>(state) * 4);
      }
      table.write_rows(kept_keys, rows);
      report.rows += n;
      report.shards += 1;
      report.bytes += static_cast<double>(fs::file_size(path));
    }
    *steps = field("steps").get<std::int64_t>();
    report.seconds = seconds_since(t0);
    return report;
  } catch (const nlohmann::json::exception& e) {
    throw Error(index_path, std::string("has a field of the wrong type: ") + e.what(), "the checkpoint is damaged");
  }
}

std::string rank_folder(const std::string& dir, int rank, int world) {
  return (fs::path(dir) / fmt::format("rank-{:05d}-of-{:05d}", rank, world)).string();
}

}  // namespace

TableCheckpointReport load_table(EmbeddingTable& table, const std::string& dir) {
  std::int64_t steps = 0;
  table.begin_import();
  TableCheckpointReport report = import_folder(table, dir, {}, &steps);
  table.end_import();
  table.set_steps(steps);
  return report;
}

TableCheckpointReport save_sharded_table(EmbeddingTable& table, const std::string& dir, dist::Communicator& comm,
                                         bool with_state, double shard_bytes) {
  const int r = comm.rank(), w = comm.world_size();
  if (r == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    HSTU_CHECK(fs::is_directory(dir, ec), dir, "cannot be made", "check the path and its permissions");
  }
  comm.barrier();  // the folder exists before any rank writes into it
  TableCheckpointReport report = save_table(table, rank_folder(dir, r, w), with_state, shard_bytes);
  comm.barrier();  // every rank's part is whole before the index names them
  if (r == 0) {
    const nlohmann::json ranks = {{"world_size", w}, {"table", table.config().name}};
    write_file_atomic((fs::path(dir) / "ranks.json").string(), ranks.dump(2) + "\n");
  }
  comm.barrier();
  return report;
}

TableCheckpointReport save_sharded_table(EmbeddingTable& table, const std::string& dir, bool with_state,
                                         double shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  HSTU_CHECK(fs::is_directory(dir, ec), dir, "cannot be made", "check the path and its permissions");
  TableCheckpointReport report = save_table(table, rank_folder(dir, 0, 1), with_state, shard_bytes);
  const nlohmann::json ranks = {{"world_size", 1}, {"table", table.config().name}};
  write_file_atomic((fs::path(dir) / "ranks.json").string(), ranks.dump(2) + "\n");
  return report;
}

TableCheckpointReport load_sharded_table(EmbeddingTable& table, const std::string& dir, dist::Communicator& comm) {
  return load_sharded_table(table, dir, comm.rank(), comm.world_size());
}

TableCheckpointReport load_sharded_table(EmbeddingTable& table, const std::string& dir, int r, int w) {
  const std::string ranks_path = (fs::path(dir) / "ranks.json").string();
  std::ifstream f(ranks_path);
  HSTU_CHECK(f.good(), ranks_path, "cannot be read", "name a folder that save_sharded_table wrote");
  int saved = 0;
  try {
    saved = nlohmann::json::parse(f).at("world_size").get<int>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(ranks_path, std::string("is damaged: ") + e.what(), "save the table again");
  }
  HSTU_CHECK(saved >= 1, ranks_path, fmt::format("names {} ranks", saved), "save the table again");
  // Every saved part is read, and this rank keeps the rows it owns now: the same width keeps its
  // own part whole, another width reshards.
  const auto mine = [r, w](std::int64_t key) { return dist::owner_of(key, w) == r; };
  TableCheckpointReport report;
  std::int64_t steps = 0;
  table.begin_import();
  for (int s = 0; s < saved; ++s) {
    const TableCheckpointReport part = import_folder(table, rank_folder(dir, s, saved), mine, &steps);
    report.rows += part.rows;
    report.shards += part.shards;
    report.bytes += part.bytes;
    report.seconds += part.seconds;
  }
  table.end_import();
  table.set_steps(steps);
  return report;
}

}  // namespace hstu
