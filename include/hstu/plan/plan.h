// The memory planner: from one training step's shapes and two budgets (device and host bytes),
// what each layer keeps for its backward, which embedding tables live on the device and which in
// host memory behind a device cache of how many rows, with the device and host peaks that follow
// (the engine's own byte counts) and the step time a cost model predicts from measured rates.
// A pure function: it allocates nothing and needs no GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hstu/embedding/embedding_config.h"
#include "hstu/model/hstu_layer.h"

namespace hstu::plan {

// What a layer keeps from its forward for its backward (hstu_layer.h's recompute switches and
// StackRecompute): everything; everything but SiLU(z), made again from z; also without LN(x),
// made again from x and its kept statistics; that much, but in host memory during the forward
// (ActivationOffload), allowed only where the link carries a layer's bytes within a layer's
// compute each way; or only the layer's input, its forward run again in the backward. The
// numbers are bitwise the same at every level.
enum class SaveLevel { KeepAll, RecomputeSilu, RecomputeNormAndSilu, Offload, RecomputeLayer };
const char* save_level_name(SaveLevel s);
// The layer's switches for a level (offloaded and recomputed layers keep the least: no SiLU,
// no LN).
HstuLayerConfig with_save_level(HstuLayerConfig cfg, SaveLevel s);

// The machine's rates the cost model turns bytes and FLOPs into time with.
struct Rates {
  double gemm_flops = 0;       // dense bf16 GEMMs, FLOP/s
  double attention_flops = 0;  // the HSTU attention, forward and backward, useful FLOP/s
  double memory_bytes = 0;     // device memory, bytes/s (elementwise passes)
  double host_to_device = 0;   // pinned host to device, bytes/s
  double device_to_host = 0;   // device to pinned host, bytes/s
  std::string source;          // where they came from (measured on which GPU, or a record)
};
// Rates of an H100/H200 SXM from this repository's records (bench/: the layer's GEMM ceiling,
// the attention's fwd+bwd rate at B32 N4096 D256, the copy rate, PCIe gen5 pinned copies),
// for planning on a machine that has not measured its own.
Rates hopper_record_rates();
// Reads rates saved by write_rates (JSON); throws hstu::Error naming the file and the field.
Rates read_rates(const std::string& path);
void write_rates(const Rates& r, const std::string& path);

// One embedding table of the step: its config (storage and cache_rows are the planner's to
// choose), how many rows a step looks up, and how the ids fall: Zipf(s) over the rows, the
// hottest first (0: uniform). A cache of the c hottest rows then hits H_s(c) / H_s(R) of the
// lookups (H_s the generalised harmonic number; c / R when uniform).
struct TableUse {
  EmbeddingTableConfig config;
  std::int64_t rows_per_step = 0;
  double zipf_exponent = 0;
};
// That share of a table's lookups that a cache of `cache_rows` hottest rows serves.
double cache_hit_rate(const TableUse& t, std::int64_t cache_rows);

// One training step on one GPU.
struct Workload {
  HstuLayerConfig layer;  // the layers' shape; the recompute switches are the planner's
  std::int64_t num_layers = 0;
  std::int64_t tokens = 0;        // T, tokens a step (the largest batch)
  double attention_pairs = 0;     // pairs the attention mask allows in such a step
  std::vector<TableUse> tables;   // tables the planner may place
  double fixed_device_bytes = 0;  // everything else on the device (parameters, optimiser
                                  // state, the model's buffers, scratch), counted by the caller
  double fixed_host_bytes = 0;    // host memory the run holds whatever the plan
  double other_step_bytes = 0;    // bytes the step moves outside the layers (embeddings,
                                  // head, optimisers), at the memory rate
};

struct Budget {
  double device_bytes = 0, host_bytes = 0;
};

struct LayerDecision {
  SaveLevel level = SaveLevel::KeepAll;
  double saved_bytes = 0;    // kept on the device from forward to backward
  double temp_bytes = 0;     // the larger of its forward's and backward's temporaries
  double offload_bytes = 0;  // offloaded: what goes to host memory and back
  double recompute_ms = 0;   // the backward's extra work at this level
};
struct TableDecision {
  std::string name;
  TableStorage storage = TableStorage::Gpu;
  std::int64_t cache_rows = 0;  // cached: rows on the device
  double device_bytes = 0, host_bytes = 0;
  double transfer_ms = 0;  // a step's row traffic over PCIe (cached)
};
// One line of the accounting: what holds memory and how much.
struct MemoryLine {
  std::string what;
  double bytes = 0;
};

struct Plan {
  std::vector<LayerDecision> layers;
  std::vector<TableDecision> tables;
  double layer_arena_bytes = 0;          // the layers' arena: every layer's saved tensors + one layer's temporaries
  double offload_slot_bytes = 0;         // each of the two device slots of the offloaded layers (0: none)
  std::vector<MemoryLine> device, host;  // the accounting behind the peaks
  double device_peak_bytes = 0, host_peak_bytes = 0;
  double step_ms = 0;                // predicted
  double unconstrained_step_ms = 0;  // predicted with every layer keeping all and every table on the device
  std::vector<std::string> why;      // each decision away from "keep all on the device", with its reason
};

// The plan for `w` within `b`: the fastest the cost model finds. The layers being alike, a plan
// saves memory in the first layers of the stack, the most in the first: every count of layers
// recomputed whole, offloaded, making SiLU and LN again, and making SiLU again is tried, each with the tables moved to
// host memory (in order of the least time per byte their smallest cache frees, each behind the largest cache that frees
// enough) until the device peak fits. Throws hstu::Error when nothing fits, naming the budget and the smallest one that
// works.
Plan make_plan(const Workload& w, const Budget& b, const Rates& r);

// The plan's save levels as the layer stack takes them (the planner saves in the first layers:
// every layer keeps at most what the one after it keeps).
StackRecompute stack_recompute(const Plan& p);

// The predicted step time of `w` with the given decisions (the cost model alone).
double step_ms(const Workload& w, const std::vector<LayerDecision>& layers, const std::vector<TableDecision>& tables,
               const Rates& r);

}  // namespace hstu::plan
