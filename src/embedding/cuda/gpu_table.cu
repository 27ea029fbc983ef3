// The GPU embedding table: the device tier (the whole table, or the cache) in device memory,
// the host tier in pinned host memory that the kernels read and write directly, every index on
// the device. Staging runs on the table's own stream; lookups and backwards run on the default
// stream, after their batch's staging.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include "core/cuda/cuda_common.cuh"
#include "embedding/cpu_table.h"
#include "embedding/cuda/launch.cuh"
#include "embedding/cuda/pinned_buffer.h"
#include "embedding/cuda/read_kernels.h"
#include "embedding/cuda/stage_kernels.h"
#include "embedding/cuda/update_kernels.h"
#include "embedding/host_index.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"

namespace hstu::embedding {

namespace {

using cuda::BatchArrays;
using cuda::DeviceIndex;
using hstu::cuda::check_cuda;

struct IndexTensors {
  Tensor keys, last_used, uses, pinned;
  DeviceIndex view;

  IndexTensors() = default;
  IndexTensors(std::int64_t capacity, bool with_pins, const std::string& what, cudaStream_t s) {
    const std::int64_t buckets = (capacity + kBucketSlots - 1) / kBucketSlots, slots = buckets * kBucketSlots;
    keys = Tensor::empty(DType::I64, {slots}, Device::CUDA, what.c_str());
    last_used = Tensor::empty(DType::I64, {slots}, Device::CUDA, what.c_str());
    uses = Tensor::empty(DType::I64, {slots}, Device::CUDA, what.c_str());
    // One byte a slot, held in 32-bit words (the tensors have no byte type).
    if (with_pins) pinned = Tensor::empty(DType::I32, {(slots + 3) / 4}, Device::CUDA, what.c_str());
    view = DeviceIndex{keys.data<std::int64_t>(), last_used.data<std::int64_t>(), uses.data<std::int64_t>(),
                       with_pins ? static_cast<std::uint8_t*>(pinned.raw()) : nullptr, buckets};
    cuda::clear_index(view, nullptr, s);
  }
  std::int64_t slots() const { return view.buckets * kBucketSlots; }
};

struct StagedBatch {
  std::int64_t seq = 0, n = 0;
  int buffer = 0;
  Tensor ids;  // the caller's device ids, held until the batch's staging has run
};

class GpuTable final : public EmbeddingTable {
 public:
  explicit GpuTable(const EmbeddingTableConfig& cfg)
      : EmbeddingTable(cfg),
        rf_(cfg.row_floats()),
        cached_(cfg.storage == TableStorage::Cached),
        hashed_(cfg.kind == TableKind::Hashed) {
    cfg.validate("embedding table");
    HSTU_CHECK(cfg.dim % 4 == 0 && cfg.dim <= cuda::kMaxGpuDim, where() + ".dim",
               fmt::format("dim is {}; a GPU table takes a multiple of 4 up to {}", cfg.dim, cuda::kMaxGpuDim),
               "round dim up to a multiple of 4");
    HSTU_CHECK(cuda_available(), where(), "no CUDA device is visible",
               "run it where nvidia-smi lists a GPU, or on the CPU");
    check_host_memory(cfg.host_bytes(), where(), "use fewer rows, a smaller optimiser state, or storage = \"gpu\"");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "embedding table");
    check_cuda(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming), "embedding table");
    for (auto& e : staged_) check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "embedding table");
    const std::string what = where();
    const std::int64_t dev_rows = cached_ ? cfg.cache_rows : cfg.rows;
    if (cached_ || hashed_) dev_index_ = IndexTensors(dev_rows, false, what, stream_);
    dev_slots_ = (cached_ || hashed_) ? dev_index_.slots() : cfg.rows;
    values_ = Tensor::empty(DType::F32, {dev_slots_, rf_}, Device::CUDA, what.c_str());
    if (!cached_ && !hashed_)
      cuda::init_dense_rows(values_.data<float>(), cfg.rows, rf_, cfg.dim, cfg.seed, static_cast<float>(cfg.init_scale),
                            stream_);
    if (cached_) {
      cache_host_slot_ = Tensor::empty(DType::I64, {dev_slots_}, Device::CUDA, what.c_str());
      check_cuda(cudaMemsetAsync(cache_host_slot_.raw(), 0xff, cache_host_slot_.nbytes(), stream_), what.c_str());
      if (hashed_) host_index_ = IndexTensors(cfg.rows, true, what, stream_);
      host_slots_ = hashed_ ? host_index_.slots() : cfg.rows;
      host_ = PinnedBuffer(static_cast<std::size_t>(host_slots_ * rf_) * 4, what);
      if (!hashed_)
        cuda::init_dense_rows(host_.floats(), cfg.rows, rf_, cfg.dim, cfg.seed, static_cast<float>(cfg.init_scale),
                              stream_);
    }
    counters_ = Tensor::zeros(DType::I64, {cuda::kCounters}, Device::CUDA);
    error_ = Tensor::zeros(DType::I64, {static_cast<std::int64_t>((sizeof(cuda::DeviceError) + 7) / 8)}, Device::CUDA);
    check_cuda(cudaStreamSynchronize(stream_), what.c_str());
  }

  ~GpuTable() override {
    cudaDeviceSynchronize();
    for (auto& w : waits_) {
      cudaEventDestroy(w.first);
      cudaEventDestroy(w.second);
    }
    for (auto& e : staged_) cudaEventDestroy(e);
    cudaEventDestroy(issued_);
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::CUDA; }

  void stage(const Tensor& ids) override {
    HSTU_CHECK(ids.defined() && ids.dtype() == DType::I64 && ids.dim() == 1 && ids.device() == Device::CUDA &&
                   ids.is_contiguous(),
               where(), "ids must be a contiguous I64 [n] tensor on the GPU", "pass the batch's ids as I64");
    const std::int64_t n = ids.numel();
    begin_stage(n);
    StagedBatch b{++seq_, n, static_cast<int>(seq_ & 1), ids};
    // The ids, and the backward of the batch before the previous one, come first.
    check_cuda(cudaEventRecord(issued_, cudaStreamLegacy), "embedding stage");
    check_cuda(cudaStreamWaitEvent(stream_, issued_, 0), "embedding stage");
    run_stage(b, ids.data<std::int64_t>());
  }

  void stage_host(const std::int64_t* ids, std::int64_t n) override {
    begin_stage(n);
    StagedBatch b{++seq_, n, static_cast<int>(seq_ & 1), Tensor()};
    // The buffer's last upload (two batches ago) has long been staged; wait for it anyway.
    check_cuda(cudaEventSynchronize(staged_[b.buffer]), "embedding stage");
    std::copy(ids, ids + n, host_ids_[b.buffer].ids());
    // The backward of the batch before the previous one comes first (it may own a victim's row).
    check_cuda(cudaEventRecord(issued_, cudaStreamLegacy), "embedding stage");
    check_cuda(cudaStreamWaitEvent(stream_, issued_, 0), "embedding stage");
    std::int64_t* dev = static_cast<std::int64_t*>(device_ids_[b.buffer].raw());
    if (n > 0)
      check_cuda(cudaMemcpyAsync(dev, host_ids_[b.buffer].ids(), static_cast<std::size_t>(n) * 8,
                                 cudaMemcpyHostToDevice, stream_),
                 "embedding stage");
    run_stage(b, dev);
  }

  int staged() const override { return static_cast<int>(queue_.size()); }

 private:
  void begin_stage(std::int64_t n) {
    HSTU_CHECK(queue_.size() < 2, where(), "a third batch was staged before the oldest one's backward",
               "call backward() for each staged batch; at most two are staged at once");
    HSTU_CHECK(n < (std::int64_t{1} << 31), where(), fmt::format("a batch of {} ids exceeds 2^31", n),
               "stage smaller batches");
    ensure_capacity(n, static_cast<int>((seq_ + 1) & 1));
  }

  void run_stage(const StagedBatch& b, const std::int64_t* ids) {
    const std::int64_t n = b.n;
    const BatchArrays& a = arrays_[b.buffer];
    auto* err = reinterpret_cast<cuda::DeviceError*>(error_.raw());
    auto* counters = reinterpret_cast<unsigned long long*>(counters_.raw());
    if (n == 0) {
      check_cuda(cudaMemsetAsync(a.counts, 0, 3 * sizeof(std::int32_t), stream_), "embedding stage");
    } else {
      const int key_bits = hashed_ ? 63 : cuda::bits_for(static_cast<std::uint64_t>(config_.rows - 1));
      cuda::sort_and_unique(a, ids, n, key_bits, hashed_ ? 0 : config_.rows, err, stream_);
      if (!cached_ && !hashed_) {
        cuda::direct_slots(a, n, stream_);
      } else {
        const std::int64_t protect = b.seq - 1;
        cuda::find_and_sort_misses(a, n, dev_index_.view, b.seq, stream_);
        cuda::assign_misses(a, n, dev_index_.view, b.seq, protect, config_.policy,
                            cached_ ? cache_host_slot_.data<std::int64_t>() : nullptr, err, stream_);
        if (cached_ && hashed_)
          cuda::place_in_host_index(a, n, host_index_.view, b.seq, protect, config_.policy, err, counters, stream_);
        cuda::move_rows(a, n, values_.data<float>(), cached_ ? host_.floats() : nullptr, rf_, config_.dim,
                        cached_ && !hashed_, cached_ && hashed_ ? host_index_.view.pinned : nullptr,
                        cached_ ? cache_host_slot_.data<std::int64_t>() : nullptr, config_.seed,
                        static_cast<float>(config_.init_scale), counters, stream_);
      }
    }
    cuda::count_batch(a, counters, stream_);
    check_cuda(cudaEventRecord(staged_[b.buffer], stream_), "embedding stage");
    ids_staged_ += n;
    batches_ += 1;
    queue_.push_back(b);
  }

 public:
  void lookup(Tensor& out) override {
    const StagedBatch& b = front("lookup");
    check_rows(out, b.n, "lookup output");
    cudaEvent_t before, after;
    check_cuda(cudaEventCreate(&before), "embedding lookup");
    check_cuda(cudaEventCreate(&after), "embedding lookup");
    check_cuda(cudaEventRecord(before, cudaStreamLegacy), "embedding lookup");
    check_cuda(cudaStreamWaitEvent(cudaStreamLegacy, staged_[b.buffer], 0), "embedding lookup");
    check_cuda(cudaEventRecord(after, cudaStreamLegacy), "embedding lookup");
    waits_.emplace_back(before, after);
    cuda::gather_rows(arrays_[b.buffer], b.n, values_.data<float>(), rf_, config_.dim, out.data<float>(),
                      cudaStreamLegacy);
  }

  void read(const std::int64_t* ids, std::int64_t n, Tensor& out) override {
    HSTU_CHECK(queue_.empty(), where(), "read() with a batch staged", "read between steps, after the backward");
    check_rows(out, n, "read output");
    for (std::int64_t i = 0; i < n; ++i)
      if (ids[i] < 0 || (!hashed_ && ids[i] >= config_.rows)) throw bad_id_error(config_, ids[i], i);
    if (n == 0) return;
    cuda::ReadTiers t;
    if (cached_ || hashed_) t.dev_index = dev_index_.view;
    t.values = values_.data<float>();
    if (cached_) {
      t.host = host_.floats();
      if (hashed_) t.host_index = host_index_.view;
    }
    t.row_floats = rf_;
    t.dim = config_.dim;
    t.seed = config_.seed;
    t.init_scale = static_cast<float>(config_.init_scale);
    Tensor host_ids = Tensor::empty(DType::I64, {n});
    std::copy(ids, ids + n, host_ids.data<std::int64_t>());
    const Tensor dev_ids = host_ids.to(Device::CUDA);
    // After every staging and backward queued so far (staging runs on the table's stream).
    check_cuda(cudaEventRecord(issued_, stream_), "embedding read");
    check_cuda(cudaStreamWaitEvent(cudaStreamLegacy, issued_, 0), "embedding read");
    cuda::read_rows(t, dev_ids.data<std::int64_t>(), n, out.data<float>(), cudaStreamLegacy);
  }

  void backward(const Tensor& grads, double lr_scale) override {
    const StagedBatch b = front("backward");
    check_rows(grads, b.n, "backward gradient");
    ++steps_;
    const UpdateConstants c = update_constants(config_.optimizer, steps_, lr_scale);
    check_cuda(cudaStreamWaitEvent(cudaStreamLegacy, staged_[b.buffer], 0), "embedding backward");
    cuda::reduce_and_update(arrays_[b.buffer], b.n, grads.data<float>(), values_.data<float>(), rf_, config_.dim,
                            config_.optimizer.kind, c, partial_.data<float>(), cudaStreamLegacy);
    queue_.pop_front();
  }

  void snapshot(Tensor* keys, Tensor* rows) override {
    sync_and_check();
    const Tensor values = values_.to(Device::CPU);
    const Tensor dev_keys = dev_index_.keys.defined() ? dev_index_.keys.to(Device::CPU) : Tensor();
    const Tensor host_slot = cache_host_slot_.defined() ? cache_host_slot_.to(Device::CPU) : Tensor();
    const Tensor host_keys = host_index_.keys.defined() ? host_index_.keys.to(Device::CPU) : Tensor();
    assemble_snapshot(config_, dev_keys.defined() ? dev_keys.data<std::int64_t>() : nullptr, dev_slots_,
                      values.data<float>(), host_slot.defined() ? host_slot.data<std::int64_t>() : nullptr,
                      host_keys.defined() ? host_keys.data<std::int64_t>() : nullptr, cached_ ? host_slots_ : 0,
                      host_.floats(), keys, rows);
  }

  void flush() override {
    if (!cached_) return;
    cuda::flush_cache(dev_index_.keys.data<std::int64_t>(), cache_host_slot_.data<std::int64_t>(), dev_slots_,
                      values_.data<float>(), host_.floats(), rf_, stream_);
    sync_and_check();
  }

  std::int64_t stored_positions() const override {
    if (!hashed_) return config_.rows;
    return cached_ ? host_index_.slots() : dev_index_.slots();
  }

  void read_stored(std::int64_t begin, std::int64_t count, Tensor* keys_out, Tensor* rows_out) override {
    sync_and_check();
    const std::int64_t end = std::min(stored_positions(), begin + count), n = std::max<std::int64_t>(0, end - begin);
    std::vector<std::int64_t> slot_keys(hashed_ ? static_cast<std::size_t>(n) : 0);
    if (hashed_ && n > 0) {
      const Tensor& k = cached_ ? host_index_.keys : dev_index_.keys;
      check_cuda(cudaMemcpy(slot_keys.data(), k.data<std::int64_t>() + begin, static_cast<std::size_t>(n) * 8,
                            cudaMemcpyDeviceToHost),
                 "embedding checkpoint");
    }
    // The rows of the range: the host tier itself (cached), or a copy of the device's.
    std::vector<float> copied;
    const float* values = nullptr;
    if (cached_) {
      values = host_.floats() + begin * rf_;
    } else {
      copied.resize(static_cast<std::size_t>(n * rf_));
      if (n > 0)
        check_cuda(
            cudaMemcpy(copied.data(), values_.data<float>() + begin * rf_, copied.size() * 4, cudaMemcpyDeviceToHost),
            "embedding checkpoint");
      values = copied.data();
    }
    pack_stored_rows(hashed_ ? slot_keys.data() : nullptr, begin, n, values, rf_, keys_out, rows_out);
  }

  void begin_import() override {
    HSTU_CHECK(queue_.empty(), where(), "a checkpoint was loaded with batches staged", "load before training");
    sync_and_check();
    if (cached_) {
      cuda::clear_index(dev_index_.view, cache_host_slot_.data<std::int64_t>(), stream_);
      if (hashed_) cuda::clear_index(host_index_.view, nullptr, stream_);
    } else if (hashed_) {
      cuda::clear_index(dev_index_.view, nullptr, stream_);
    }
    check_cuda(cudaStreamSynchronize(stream_), "embedding checkpoint");
    // A hashed table's keys are placed on the host (host_index.h's rules) and uploaded at the end.
    if (hashed_) import_index_ = HostIndex(config_.rows);
  }

  void write_rows(const Tensor& keys, const Tensor& rows) override {
    const std::int64_t k = keys.numel();
    HSTU_CHECK(rows.shape() == Shape({k, rf_}) && rows.device() == Device::CPU, where(),
               "a checkpoint piece's rows do not match its keys", "the checkpoint is damaged");
    std::vector<std::int64_t> slots(static_cast<std::size_t>(k));
    for (std::int64_t i = 0; i < k; ++i)
      slots[i] = import_position(config_, hashed_ ? &import_index_ : nullptr, keys.data<std::int64_t>()[i]);
    if (cached_) {
      for (std::int64_t i = 0; i < k; ++i)
        std::memcpy(host_.floats() + slots[i] * rf_, rows.data<float>() + i * rf_, static_cast<std::size_t>(rf_) * 4);
      return;
    }
    if (k == 0) return;
    const Tensor dev_rows = rows.to(Device::CUDA);
    Tensor dev_slots = Tensor::empty(DType::I64, {k});
    std::copy(slots.begin(), slots.end(), dev_slots.data<std::int64_t>());
    dev_slots = dev_slots.to(Device::CUDA);
    cuda::scatter_rows(dev_rows.data<float>(), dev_slots.data<std::int64_t>(), k, values_.data<float>(), rf_, stream_);
    check_cuda(cudaStreamSynchronize(stream_), "embedding checkpoint");
  }

  void end_import() override {
    if (!hashed_) return;
    IndexTensors& index = cached_ ? host_index_ : dev_index_;
    const auto bytes = static_cast<std::size_t>(index.slots()) * 8;
    check_cuda(cudaMemcpy(index.keys.raw(), import_index_.keys.data(), bytes, cudaMemcpyHostToDevice),
               "embedding checkpoint");
    check_cuda(cudaMemcpy(index.last_used.raw(), import_index_.last_used.data(), bytes, cudaMemcpyHostToDevice),
               "embedding checkpoint");
    check_cuda(cudaMemcpy(index.uses.raw(), import_index_.uses.data(), bytes, cudaMemcpyHostToDevice),
               "embedding checkpoint");
    import_index_ = HostIndex();
  }

  void set_steps(std::int64_t steps) override { steps_ = steps; }

  EmbeddingStats stats() override {
    sync_and_check();
    const Tensor c = counters_.to(Device::CPU);
    const auto* v = c.data<std::int64_t>();
    EmbeddingStats s;
    s.batches = batches_;
    s.ids = ids_staged_;
    s.unique = v[cuda::kUnique];
    s.hits = v[cuda::kHits];
    s.inits = v[cuda::kInits];
    s.fetched = v[cuda::kFetched];
    s.written_back = v[cuda::kWrittenBack];
    s.dropped = v[cuda::kDropped];
    s.bytes_to_device = static_cast<double>(s.fetched) * static_cast<double>(rf_) * 4.0;
    s.bytes_to_host = static_cast<double>(s.written_back) * static_cast<double>(rf_) * 4.0;
    for (auto& w : waits_) {
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, w.first, w.second), "embedding stats");
      wait_ms_ += ms;
      cudaEventDestroy(w.first);
      cudaEventDestroy(w.second);
    }
    waits_.clear();
    s.stage_wait_ms = wait_ms_;
    return s;
  }

  void reset_stats() override {
    sync_and_check();
    stats();
    check_cuda(cudaMemset(counters_.raw(), 0, counters_.nbytes()), "embedding stats");
    batches_ = ids_staged_ = 0;
    wait_ms_ = 0;
  }

  std::int64_t steps() const override { return steps_; }

 private:
  std::string where() const { return fmt::format("embedding table '{}'", config_.name); }

  const StagedBatch& front(const char* call) const {
    HSTU_CHECK(!queue_.empty(), where(), fmt::format("{} with no staged batch", call), "stage(ids) the batch first");
    return queue_.front();
  }

  void check_rows(const Tensor& t, std::int64_t n, const char* what) const {
    HSTU_CHECK(t.defined() && t.dtype() == DType::F32 && t.device() == Device::CUDA && t.is_contiguous() &&
                   t.shape() == Shape({n, config_.dim}),
               where(), fmt::format("the {} must be a contiguous F32 [{}, {}] GPU tensor", what, n, config_.dim),
               "this is a bug in the caller; please report it");
  }

  // Grows buffer `buffer`'s arrays to n ids (the other buffer may hold a staged batch; it keeps
  // its arrays), waiting for the device first.
  void ensure_capacity(std::int64_t n, int buffer) {
    BatchArrays& a = arrays_[buffer];
    if (n <= a.n_cap && a.n_cap > 0) return;
    check_cuda(cudaDeviceSynchronize(), "embedding stage");
    const std::int64_t cap = std::max<std::int64_t>(n, 1024);
    const std::string what = where() + " batch arrays";
    std::vector<Tensor>& held = buffers_[buffer];
    held.clear();
    auto alloc = [&](DType dt, std::int64_t count) {
      held.push_back(Tensor::empty(dt, {count}, Device::CUDA, what.c_str()));
      return held.back().raw();
    };
    a.n_cap = cap;
    a.keys_in = static_cast<std::uint64_t*>(alloc(DType::I64, cap));
    a.keys_sorted = static_cast<std::uint64_t*>(alloc(DType::I64, cap));
    a.pos_in = static_cast<std::int32_t*>(alloc(DType::I32, cap));
    a.pos_sorted = static_cast<std::int32_t*>(alloc(DType::I32, cap));
    a.heads = static_cast<std::int32_t*>(alloc(DType::I32, cap));
    a.run_incl = static_cast<std::int32_t*>(alloc(DType::I32, cap));
    a.unique_keys = static_cast<std::int64_t*>(alloc(DType::I64, cap));
    a.slot_of_unique = static_cast<std::int64_t*>(alloc(DType::I64, cap));
    a.victim_key = static_cast<std::int64_t*>(alloc(DType::I64, cap));
    a.victim_host = static_cast<std::int64_t*>(alloc(DType::I64, cap));
    a.host_slot = static_cast<std::int64_t*>(alloc(DType::I64, cap));
    a.run_start = static_cast<std::int32_t*>(alloc(DType::I32, cap + 1));
    a.miss_key_in = static_cast<std::uint64_t*>(alloc(DType::I64, cap));
    a.miss_key_sorted = static_cast<std::uint64_t*>(alloc(DType::I64, cap));
    a.fresh_key_in = static_cast<std::uint64_t*>(alloc(DType::I64, cap));
    a.fresh_key_sorted = static_cast<std::uint64_t*>(alloc(DType::I64, cap));
    a.miss_u_in = static_cast<std::int32_t*>(alloc(DType::I32, cap));
    a.miss_u_sorted = static_cast<std::int32_t*>(alloc(DType::I32, cap));
    a.fresh_u_in = static_cast<std::int32_t*>(alloc(DType::I32, cap));
    a.fresh_u_sorted = static_cast<std::int32_t*>(alloc(DType::I32, cap));
    a.counts = static_cast<std::int32_t*>(alloc(DType::I32, 4));
    a.cub_bytes = cuda::cub_scratch_bytes(cap);
    a.cub_temp = alloc(DType::I64, static_cast<std::int64_t>((a.cub_bytes + 7) / 8));
    device_ids_[buffer] = Tensor::empty(DType::I64, {cap}, Device::CUDA, what.c_str());
    host_ids_[buffer] = PinnedBuffer(static_cast<std::size_t>(cap) * 8, what);
    const std::int64_t partial = ((cap + kReduceChunk - 1) / kReduceChunk) * 2 * config_.dim;
    if (!partial_.defined() || partial_.numel() < partial)
      partial_ = Tensor::empty(DType::F32, {partial}, Device::CUDA, what.c_str());
  }

  void sync_and_check() {
    check_cuda(cudaDeviceSynchronize(), "embedding table");
    cuda::DeviceError e{};
    check_cuda(cudaMemcpy(&e, error_.raw(), sizeof(e), cudaMemcpyDeviceToHost), "embedding table");
    if (e.code == 0) return;
    check_cuda(cudaMemset(error_.raw(), 0, sizeof(e)), "embedding table");
    if (e.code == cuda::kBadId) throw bad_id_error(config_, e.key, e.position);
    throw bucket_full_error(config_, e.code == cuda::kHostBucketFull, e.key);
  }

  std::int64_t rf_;
  bool cached_, hashed_;
  std::int64_t dev_slots_ = 0, host_slots_ = 0;
  IndexTensors dev_index_, host_index_;
  Tensor values_, cache_host_slot_, counters_, error_, partial_;
  PinnedBuffer host_, host_ids_[2];
  Tensor device_ids_[2];
  std::vector<Tensor> buffers_[2];
  BatchArrays arrays_[2] = {};
  cudaStream_t stream_ = nullptr;
  cudaEvent_t issued_ = nullptr, staged_[2] = {nullptr, nullptr};
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> waits_;
  std::deque<StagedBatch> queue_;
  HostIndex import_index_;
  std::int64_t seq_ = 0, steps_ = 0, batches_ = 0, ids_staged_ = 0;
  double wait_ms_ = 0;
};

}  // namespace

std::unique_ptr<EmbeddingTable> make_gpu_table(const EmbeddingTableConfig& config) {
  return std::make_unique<GpuTable>(config);
}

}  // namespace hstu::embedding
