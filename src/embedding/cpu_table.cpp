// The CPU embedding table: the reference every GPU table is tested against, with both tiers in
// host memory. Its stage() runs the phases the GPU's kernels run, in the same order, so that
// both place every row in the same slot.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <numeric>

#include "embedding/cpu_table.h"
#include "embedding/host_index.h"
#include "embedding/row_math.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"

namespace hstu::embedding {

namespace {

struct Staged {
  std::int64_t seq = 0;
  std::vector<std::int64_t> order;      // positions sorted by id (stable)
  std::vector<std::int64_t> run_start;  // [unique + 1] into `order`
  std::vector<std::int64_t> unique_keys, slot_of_unique;
};

class CpuTable final : public EmbeddingTable {
 public:
  explicit CpuTable(const EmbeddingTableConfig& cfg)
      : EmbeddingTable(cfg),
        rf_(cfg.row_floats()),
        cached_(cfg.storage == TableStorage::Cached),
        hashed_(cfg.kind == TableKind::Hashed) {
    cfg.validate("embedding table");
    const std::int64_t dev_rows = cached_ ? cfg.cache_rows : cfg.rows;
    if (cached_ || hashed_) dev_index_ = HostIndex(dev_rows);
    const std::int64_t dev_slots = (cached_ || hashed_) ? dev_index_.slots() : cfg.rows;
    check_host_memory(static_cast<double>(dev_slots) * rf_ * 4.0 + cfg.host_bytes(),
                      fmt::format("embedding table '{}'", cfg.name), "use fewer rows or a smaller cache");
    dev_values_.assign(static_cast<std::size_t>(dev_slots * rf_), 0.0f);
    if (!cached_ && !hashed_)
      for (std::int64_t r = 0; r < cfg.rows; ++r) init_row(&dev_values_[r * rf_], r);
    if (cached_) {
      cache_host_slot_.assign(static_cast<std::size_t>(dev_slots), -1);
      if (hashed_) {
        host_index_ = HostIndex(cfg.rows);
        in_cache_.assign(static_cast<std::size_t>(host_index_.slots()), 0);
        host_values_.assign(static_cast<std::size_t>(host_index_.slots() * rf_), 0.0f);
      } else {
        host_values_.assign(static_cast<std::size_t>(cfg.rows * rf_), 0.0f);
        for (std::int64_t r = 0; r < cfg.rows; ++r) init_row(&host_values_[r * rf_], r);
      }
    }
  }

  Device device() const override { return Device::CPU; }

  void stage(const Tensor& ids_t) override {
    HSTU_CHECK(queue_.size() < 2, where(), "a third batch was staged before the oldest one's backward",
               "call backward() for each staged batch; at most two are staged at once");
    check_ids_tensor(ids_t);
    const std::int64_t n = ids_t.numel();
    const std::int64_t* ids = ids_t.data<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i)
      if (ids[i] < 0 || (!hashed_ && ids[i] >= config_.rows)) throw bad_id_error(config_, ids[i], i);
    Staged b;
    b.seq = ++seq_;
    b.order.resize(n);
    std::iota(b.order.begin(), b.order.end(), 0);
    std::stable_sort(b.order.begin(), b.order.end(), [&](std::int64_t a, std::int64_t c) { return ids[a] < ids[c]; });
    for (std::int64_t j = 0; j < n; ++j)
      if (j == 0 || ids[b.order[j]] != ids[b.order[j - 1]]) {
        b.run_start.push_back(j);
        b.unique_keys.push_back(ids[b.order[j]]);
      }
    b.run_start.push_back(n);
    const std::int64_t nu = static_cast<std::int64_t>(b.unique_keys.size());
    b.slot_of_unique.assign(nu, -1);
    stats_.batches += 1;
    stats_.ids += n;
    stats_.unique += nu;
    if (!cached_ && !hashed_) {
      b.slot_of_unique = b.unique_keys;
      stats_.hits += nu;
    } else {
      assign_slots(b);
    }
    queue_.push_back(std::move(b));
  }

  void stage_host(const std::int64_t* ids, std::int64_t n) override {
    Tensor t = Tensor::empty(DType::I64, {n});
    std::copy(ids, ids + n, t.data<std::int64_t>());
    stage(t);
  }
  int staged() const override { return static_cast<int>(queue_.size()); }

  void lookup(Tensor& out) override {
    const Staged& b = front("lookup");
    const std::int64_t n = static_cast<std::int64_t>(b.order.size()), dim = config_.dim;
    check_rows_tensor(out, n, "lookup output");
    float* o = out.data<float>();
    for (std::size_t u = 0; u + 1 < b.run_start.size(); ++u) {
      const float* row = &dev_values_[b.slot_of_unique[u] * rf_];
      for (std::int64_t j = b.run_start[u]; j < b.run_start[u + 1]; ++j)
        std::memcpy(o + b.order[j] * dim, row, static_cast<std::size_t>(dim) * 4);
    }
  }

  void read(const std::int64_t* ids, std::int64_t n, Tensor& out) override {
    HSTU_CHECK(queue_.empty(), where(), "read() with a batch staged", "read between steps, after the backward");
    check_rows_tensor(out, n, "read output");
    const std::int64_t dim = config_.dim;
    std::vector<float> fresh(static_cast<std::size_t>(rf_));
    for (std::int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || (!hashed_ && ids[i] >= config_.rows)) throw bad_id_error(config_, ids[i], i);
      const float* row = stored_row(ids[i]);
      if (!row) {
        init_row(fresh.data(), ids[i]);
        row = fresh.data();
      }
      std::memcpy(out.data<float>() + i * dim, row, static_cast<std::size_t>(dim) * 4);
    }
  }

  void backward(const Tensor& grads, double lr_scale) override {
    const Staged& b = front("backward");
    const std::int64_t dim = config_.dim;
    check_rows_tensor(grads, static_cast<std::int64_t>(b.order.size()), "backward gradient");
    const float* g = grads.data<float>();
    ++steps_;
    const UpdateConstants c = update_constants(config_.optimizer, steps_, lr_scale);
    std::vector<float> total(dim), piece(dim);
    for (std::size_t u = 0; u + 1 < b.run_start.size(); ++u) {
      // Pieces end at multiples of kReduceChunk of the sorted positions, as the GPU's warps do.
      std::fill(total.begin(), total.end(), 0.0f);
      bool first_piece = true;
      for (std::int64_t j = b.run_start[u]; j < b.run_start[u + 1];) {
        const std::int64_t end = std::min(b.run_start[u + 1], (j / kReduceChunk + 1) * kReduceChunk);
        std::fill(piece.begin(), piece.end(), 0.0f);
        for (; j < end; ++j) {
          const float* gr = g + b.order[j] * dim;
          for (std::int64_t e = 0; e < dim; ++e) piece[e] = HSTU_FADD(piece[e], gr[e]);
        }
        for (std::int64_t e = 0; e < dim; ++e) total[e] = first_piece ? piece[e] : HSTU_FADD(total[e], piece[e]);
        first_piece = false;
      }
      apply_update(&dev_values_[b.slot_of_unique[u] * rf_], total.data(), c);
    }
    queue_.pop_front();
  }

  void snapshot(Tensor* keys_out, Tensor* rows_out) override {
    const bool indexed = cached_ || hashed_;
    assemble_snapshot(config_, indexed ? dev_index_.keys.data() : nullptr, indexed ? dev_index_.slots() : config_.rows,
                      dev_values_.data(), cached_ ? cache_host_slot_.data() : nullptr,
                      cached_ && hashed_ ? host_index_.keys.data() : nullptr,
                      cached_ ? (hashed_ ? host_index_.slots() : config_.rows) : 0, host_values_.data(), keys_out,
                      rows_out);
  }

  void flush() override {
    if (!cached_) return;
    for (std::int64_t s = 0; s < dev_index_.slots(); ++s)
      if (dev_index_.keys[s] != kEmptyKey)
        std::memcpy(&host_values_[cache_host_slot_[s] * rf_], &dev_values_[s * rf_], static_cast<std::size_t>(rf_) * 4);
  }

  std::int64_t stored_positions() const override {
    if (!hashed_) return config_.rows;
    return cached_ ? host_index_.slots() : dev_index_.slots();
  }

  void read_stored(std::int64_t begin, std::int64_t count, Tensor* keys_out, Tensor* rows_out) override {
    const std::int64_t end = std::min(stored_positions(), begin + count), n = std::max<std::int64_t>(0, end - begin);
    const HostIndex* index = hashed_ ? (cached_ ? &host_index_ : &dev_index_) : nullptr;
    const std::vector<float>& values = cached_ ? host_values_ : dev_values_;
    pack_stored_rows(index ? index->keys.data() + begin : nullptr, begin, n, values.data() + begin * rf_, rf_, keys_out,
                     rows_out);
  }

  void begin_import() override {
    HSTU_CHECK(queue_.empty(), where(), "a checkpoint was loaded with batches staged", "load before training");
    if (cached_) {
      dev_index_ = HostIndex(config_.cache_rows);
      std::fill(cache_host_slot_.begin(), cache_host_slot_.end(), -1);
      if (hashed_) {
        host_index_ = HostIndex(config_.rows);
        std::fill(in_cache_.begin(), in_cache_.end(), 0);
      }
    } else if (hashed_) {
      dev_index_ = HostIndex(config_.rows);
    }
  }

  void write_rows(const Tensor& keys, const Tensor& rows) override {
    const std::int64_t k = keys.numel();
    HSTU_CHECK(rows.shape() == Shape({k, rf_}), where(), "a checkpoint piece's rows do not match its keys",
               "the checkpoint is damaged");
    HostIndex* index = hashed_ ? (cached_ ? &host_index_ : &dev_index_) : nullptr;
    std::vector<float>& values = cached_ ? host_values_ : dev_values_;
    for (std::int64_t i = 0; i < k; ++i) {
      const std::int64_t at = import_position(config_, index, keys.data<std::int64_t>()[i]);
      std::memcpy(&values[at * rf_], rows.data<float>() + i * rf_, static_cast<std::size_t>(rf_) * 4);
    }
  }

  void end_import() override {}
  void set_steps(std::int64_t steps) override { steps_ = steps; }

  EmbeddingStats stats() override {
    EmbeddingStats s = stats_;
    s.bytes_to_device = static_cast<double>(s.fetched) * static_cast<double>(rf_) * 4.0;
    s.bytes_to_host = static_cast<double>(s.written_back) * static_cast<double>(rf_) * 4.0;
    return s;
  }
  void reset_stats() override { stats_ = EmbeddingStats{}; }
  std::int64_t steps() const override { return steps_; }

 private:
  std::string where() const { return fmt::format("embedding table '{}'", config_.name); }

  const Staged& front(const char* call) const {
    HSTU_CHECK(!queue_.empty(), where(), fmt::format("{} with no staged batch", call), "stage(ids) the batch first");
    return queue_.front();
  }

  void check_ids_tensor(const Tensor& ids) const {
    HSTU_CHECK(ids.defined() && ids.dtype() == DType::I64 && ids.dim() == 1 && ids.device() == Device::CPU &&
                   ids.is_contiguous(),
               where(), "ids must be a contiguous I64 [n] tensor on the host", "pass the batch's ids as I64");
  }
  void check_rows_tensor(const Tensor& t, std::int64_t n, const char* what) const {
    HSTU_CHECK(t.defined() && t.dtype() == DType::F32 && t.device() == Device::CPU && t.is_contiguous() &&
                   t.shape() == Shape({n, config_.dim}),
               where(), fmt::format("the {} must be a contiguous F32 [{}, {}] host tensor", what, n, config_.dim),
               "this is a bug in the caller; please report it");
  }

  // The newest stored row of `key` (the device tier's copy first), or null when it has none.
  const float* stored_row(std::int64_t key) const {
    if (!cached_ && !hashed_) return &dev_values_[key * rf_];
    const std::int64_t s = dev_index_.find(key);
    if (s >= 0) return &dev_values_[s * rf_];
    if (!cached_) return nullptr;
    if (!hashed_) return &host_values_[key * rf_];
    const std::int64_t h = host_index_.find(key);
    return h >= 0 ? &host_values_[h * rf_] : nullptr;
  }

  void init_row(float* row, std::int64_t key) const {
    const float scale = static_cast<float>(config_.init_scale);
    for (std::int64_t e = 0; e < config_.dim; ++e) row[e] = init_value(config_.seed, key, e, scale);
    std::fill(row + config_.dim, row + rf_, 0.0f);
  }

  // Finds every distinct key in the device tier, then places the missing ones (phases as the
  // GPU's: cache slots; host finds; host inserts; write-backs and row copies).
  void assign_slots(Staged& b) {
    const std::int64_t nu = static_cast<std::int64_t>(b.unique_keys.size());
    const std::int64_t protect = b.seq - 1;  // the batch before may still be in flight
    std::vector<std::int64_t> misses;
    for (std::int64_t u = 0; u < nu; ++u) {
      const std::int64_t s = dev_index_.find(b.unique_keys[u]);
      if (s >= 0) {
        b.slot_of_unique[u] = s;
        dev_index_.last_used[s] = b.seq;
        dev_index_.uses[s] += 1;
        stats_.hits += 1;
      } else {
        misses.push_back(u);
      }
    }
    std::stable_sort(misses.begin(), misses.end(), [&](std::int64_t a, std::int64_t c) {
      return bucket_of(b.unique_keys[a], dev_index_.buckets) < bucket_of(b.unique_keys[c], dev_index_.buckets);
    });
    struct Move {
      std::int64_t unique, slot, victim_key, victim_host, host;  // host: -1 new row
    };
    std::vector<Move> moves;
    for (std::int64_t u : misses) {
      const std::int64_t key = b.unique_keys[u];
      const std::int64_t s = dev_index_.choose(key, config_.policy, protect);
      if (s < 0) throw bucket_full_error(config_, false, key);
      Move m{u, s, dev_index_.keys[s], cached_ ? cache_host_slot_[s] : -1, -1};
      if (m.victim_key != kEmptyKey && !cached_) stats_.dropped += 1;
      dev_index_.keys[s] = key;
      dev_index_.last_used[s] = b.seq;
      dev_index_.uses[s] = 1;
      b.slot_of_unique[u] = s;
      moves.push_back(m);
    }
    if (cached_) {
      if (!hashed_) {
        for (Move& m : moves) m.host = b.unique_keys[m.unique];
      } else {
        std::vector<std::size_t> fresh;
        for (std::size_t i = 0; i < moves.size(); ++i) {
          const std::int64_t h = host_index_.find(b.unique_keys[moves[i].unique]);
          if (h >= 0) {
            moves[i].host = h;
            in_cache_[h] = 1;
            host_index_.last_used[h] = b.seq;
            host_index_.uses[h] += 1;
          } else {
            fresh.push_back(i);
          }
        }
        // Finds and inserts go in ascending key order; inserts then by host bucket.
        std::sort(fresh.begin(), fresh.end(), [&](std::size_t a, std::size_t c) {
          const std::int64_t ka = b.unique_keys[moves[a].unique], kc = b.unique_keys[moves[c].unique];
          const std::int64_t ba = bucket_of(ka, host_index_.buckets), bc = bucket_of(kc, host_index_.buckets);
          return ba != bc ? ba < bc : ka < kc;
        });
        for (std::size_t i : fresh) {
          const std::int64_t key = b.unique_keys[moves[i].unique];
          const std::int64_t h = host_index_.choose(key, config_.policy, protect, &in_cache_);
          if (h < 0) throw bucket_full_error(config_, true, key);
          if (host_index_.keys[h] != kEmptyKey) stats_.dropped += 1;
          host_index_.keys[h] = key;
          host_index_.last_used[h] = b.seq;
          host_index_.uses[h] = 1;
          in_cache_[h] = 1;
          moves[i].host = -1 - h;  // a new row, homed at h: initialised, not copied
        }
      }
      // The victims' rows go home (their host slots stay pinned until now, so no insert above
      // took them), then the misses' rows come in.
      for (const Move& m : moves) {
        if (m.victim_key == kEmptyKey) continue;
        std::memcpy(&host_values_[m.victim_host * rf_], &dev_values_[m.slot * rf_], static_cast<std::size_t>(rf_) * 4);
        stats_.written_back += 1;
        if (hashed_) in_cache_[m.victim_host] = 0;
      }
      for (const Move& m : moves) {
        if (m.host >= 0) {
          std::memcpy(&dev_values_[m.slot * rf_], &host_values_[m.host * rf_], static_cast<std::size_t>(rf_) * 4);
          cache_host_slot_[m.slot] = m.host;
          stats_.fetched += 1;
        } else {
          init_row(&dev_values_[m.slot * rf_], b.unique_keys[m.unique]);
          cache_host_slot_[m.slot] = -1 - m.host;
          stats_.inits += 1;
        }
      }
    } else {
      for (const Move& m : moves) {
        init_row(&dev_values_[m.slot * rf_], b.unique_keys[m.unique]);
        stats_.inits += 1;
      }
    }
  }

  void apply_update(float* row, const float* g, const UpdateConstants& c) const {
    const std::int64_t dim = config_.dim;
    switch (config_.optimizer.kind) {
      case SparseOptimizerKind::Adam:
        for (std::int64_t e = 0; e < dim; ++e) adam_update(row[e], row[dim + e], row[2 * dim + e], g[e], c);
        break;
      case SparseOptimizerKind::Adagrad: {
        float lanes[kLanes] = {};
        for (std::int64_t e = 0; e < dim; ++e) {
          float& lane = lanes[sum_lane(e)];
          lane = HSTU_FADD(lane, HSTU_FMUL(g[e], g[e]));
        }
        for (int off = kLanes / 2; off > 0; off >>= 1) {
          float next[kLanes];
          for (int l = 0; l < kLanes; ++l) next[l] = HSTU_FADD(lanes[l], lanes[l ^ off]);
          std::copy(next, next + kLanes, lanes);
        }
        row[dim] = HSTU_FADD(row[dim], HSTU_FDIV(lanes[0], static_cast<float>(dim)));
        for (std::int64_t e = 0; e < dim; ++e) adagrad_update(row[e], row[dim], g[e], c);
        break;
      }
      case SparseOptimizerKind::Sgd:
        for (std::int64_t e = 0; e < dim; ++e) sgd_update(row[e], g[e], c);
        break;
    }
  }

  std::int64_t rf_;
  bool cached_, hashed_;
  HostIndex dev_index_, host_index_;
  std::vector<float> dev_values_, host_values_;
  std::vector<std::int64_t> cache_host_slot_;
  std::vector<std::uint8_t> in_cache_;
  std::deque<Staged> queue_;
  std::int64_t seq_ = 0, steps_ = 0;
  EmbeddingStats stats_;
};

}  // namespace

UpdateConstants update_constants(const SparseOptimizerConfig& o, std::int64_t step, double lr_scale) {
  UpdateConstants c;
  const double lr = o.lr * lr_scale;
  c.lr = static_cast<float>(lr);
  c.decay = static_cast<float>(lr * o.weight_decay);
  c.adam_step = static_cast<float>(lr * std::sqrt(1.0 - std::pow(o.beta2, static_cast<double>(step))) /
                                   (1.0 - std::pow(o.beta1, static_cast<double>(step))));
  c.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  c.eps = static_cast<float>(o.eps);
  return c;
}

std::unique_ptr<EmbeddingTable> make_cpu_table(const EmbeddingTableConfig& config) {
  return std::make_unique<CpuTable>(config);
}

}  // namespace hstu::embedding
