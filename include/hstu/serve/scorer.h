// `hstu score`: a ranking checkpoint's per-task probabilities for candidate items after a
// history, with raw item ids (the ids of the log the model was trained on).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hstu/core/tensor.h"
#include "hstu/data/ranking_data.h"
#include "hstu/model/ranking_gpu.h"
#include "hstu/model/ranking_model.h"
#include "hstu/serve/history_cache.h"

namespace hstu::serve {

struct ScoreRequest {
  std::optional<std::int64_t> user;      // a user of the checkpoint's data: their whole history and features
  std::vector<std::int64_t> history;     // or raw item ids, oldest first,
  std::vector<std::int64_t> actions;     // one action per history item (its task bits),
  std::vector<std::int64_t> features;    // and the contextual features (one value each)
  std::vector<std::int64_t> timestamps;  // one per history item, then one per candidate (models with a time bias)
  std::vector<std::int64_t> candidates;  // raw item ids to score; they see the history, never each other
};

struct Scores {
  std::optional<std::int64_t> user;
  std::vector<std::int64_t> candidates;
  std::vector<std::vector<float>> probabilities;  // per candidate, one per task
};

// The most candidates a request may carry.
inline constexpr std::int64_t kMaxCandidates = 4096;

// One batch of requests whose forward Scorer::start_scoring queued; finish_scoring answers it.
struct ScoringInFlight {
  std::vector<const ScoreRequest*> requests;
  std::vector<float> logits;         // [candidates, tasks], where the forward has run already (the CPU, no cache)
  std::vector<QueuedLogits> queued;  // or its parts' logits, queued on the GPU, in order
  std::vector<std::shared_ptr<const HistoryCache::Entry>> entries;  // the cache entries it reads
  // Whether its logits are on the host already (nothing of it is queued on the GPU).
  bool ready() const { return queued.empty(); }
};

class Scorer {
 public:
  // Loads the checkpoint and the data it names (hstu::Error naming the file when either fails).
  // With cache_bytes > 0 and a model whose contextual tokens are causal
  // (ranking.contextual_sees_history = false), a KV cache of histories (history_cache.h) of that
  // size: a request whose history extends a cached one runs only its new tokens and candidates,
  // and scores to the same bits on the CPU. With `on_gpu` the model runs on the GPU (RankingGpu:
  // bf16 activations, so scores within its rounding of the CPU's), the cache in GPU memory, for
  // models whose heads and bias the GPU's cached forward takes (cache_off_reason_for).
  // With on_gpu and host_cache_bytes > 0, entries evicted from the GPU's cache move to host memory
  // (a second tier of that size) and come back to the GPU when a request finds them there.
  explicit Scorer(const std::string& checkpoint, std::size_t cache_bytes = 0, bool on_gpu = false,
                  std::size_t host_cache_bytes = 0);
  ~Scorer();
  Scorer(Scorer&&) noexcept;

  // Checks every request first (one hstu::Error naming the first bad one), then answers them.
  std::vector<Scores> score(const std::vector<ScoreRequest>& requests, const std::string& where = "request") const;
  // The request checked and laid out as the model's batch of one sequence (hstu::Error naming
  // `where` for a bad request): what score_prepared takes.
  RankingBatch prepare(const ScoreRequest& q, const std::string& where) const;
  // score() of requests prepared by this scorer (prepared[i] from requests[i]).
  std::vector<Scores> score_prepared(const std::vector<const ScoreRequest*>& requests,
                                     const std::vector<const RankingBatch*>& prepared) const;
  // score_prepared in two halves, so that a server can queue one batch while the GPU still runs
  // the one before: start_scoring queues the forward (on the GPU with the cache; otherwise it
  // runs it) and fills the cache; finish_scoring waits for the logits and answers. Batches may be
  // finished in any order; the requests must outlive the batch.
  ScoringInFlight start_scoring(const std::vector<const ScoreRequest*>& requests,
                                const std::vector<const RankingBatch*>& prepared) const;
  std::vector<Scores> finish_scoring(ScoringInFlight batch) const;
  // Throws the error score would give for `q` (named `where`), without answering it.
  void check(const ScoreRequest& q, const std::string& where) const;
  std::int64_t num_tasks() const;
  // The cache's counters, or nothing without a cache.
  std::optional<HistoryCacheStats> cache_stats() const;
  // Why there is no cache ("" when there is one).
  std::string cache_off_reason() const;

 private:
  // The logits [candidates, tasks] of the prepared requests into `batch` (or their parts queued
  // there), through the cache when there is one (and into it).
  void forward(const std::vector<const RankingBatch*>& prepared, ScoringInFlight& batch) const;
  void warm_up();
  struct State;
  std::unique_ptr<State> s_;
};

// The most requests one GPU forward of the scorer takes (more go in parts).
inline constexpr std::size_t kMaxPartRequests = 256;
// The pages (KvPagePool) a GPU scorer of `model` reserves for a cache of cache_bytes, with
// forwards of at most part_tokens tokens: the cache's budget and two forwards' working pages.
std::int64_t kv_pool_pages(const RankingConfig& model, std::size_t cache_bytes, std::int64_t part_tokens);

// Why a Scorer of `model` gets no KV cache of cache_bytes (on the GPU or not), or "" when it does.
std::string cache_off_reason_for(const RankingConfig& model, std::size_t cache_bytes, bool on_gpu);

// {"user": ID, "candidates": [..]} or {"history": [..], "actions": [..], "features": [..],
// "timestamps": [..], "candidates": [..]}; hstu::Error naming `where` and the field otherwise.
ScoreRequest parse_score_request(const nlohmann::json& j, const std::string& where);
// A /score body in its plain form (one object of whole numbers and lists of them, each of
// ScoreRequest's fields at most once) read straight into a request, as parse_score_request would
// read it; nothing for any other body, which the full parser then reads (and names what is wrong).
std::optional<ScoreRequest> read_plain_score_request(std::string_view body);
// A /score answer's JSON text: {"candidates": [..], "probabilities": [[..] per candidate],
// "user": ID or null}, written directly (nlohmann's tree of 256 candidates' probabilities took a
// connection's thread about twice as long to build and print). Numbers as nlohmann prints them:
// each the shortest text of its double, a float's with ".0" where it would read as an integer,
// null for one that is not finite.
std::string scores_json_text(const Scores& s);

}  // namespace hstu::serve
