#include "hstu/serve/scorer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <optional>
#include <unordered_map>

#include "hstu/core/error.h"
#include "hstu/core/host_trace.h"
#include "hstu/data/ranking_data.h"
#include "hstu/model/ranking_gpu.h"
#include "hstu/model/ranking_model.h"
#include "hstu/ops/ops.h"
#include "hstu/train/trainer.h"
#include "json_fields.h"

namespace hstu::serve {

struct Scorer::State {
  TrainedRanking trained;
  std::unique_ptr<RankingGpu> gpu;  // with on_gpu: the model's workspace,
  RankingParams gpu_weights;        // and its weights on the GPU
  std::int64_t gpu_tokens = 0;      // the most tokens one GPU forward takes
  std::unique_ptr<HistoryCache> cache;
  std::shared_ptr<KvPagePool> host_pages;  // the cache's second tier (GPU scorers with host_cache_bytes)
  std::string cache_off;
  std::unordered_map<std::int64_t, std::int32_t> item_of_raw;
  std::unordered_map<std::int64_t, std::int64_t> user_of_raw;
};

std::string cache_off_reason_for(const RankingConfig& model, std::size_t cache_bytes, bool on_gpu) {
  if (cache_bytes == 0) return "no cache asked for";
  if (model.contextual_sees_history)
    return "the model's contextual tokens see the whole history (ranking.contextual_sees_history)";
  if (on_gpu && (model.position_bias || model.time_bias))
    return "the GPU's cached forward takes no relative attention bias yet (serve with --device cpu for the cache)";
  const bool head_fits = model.dqk == model.dv && (model.dqk == 64 || model.dqk == 128 || model.dqk == 256);
  if (on_gpu && !head_fits)
    return fmt::format("the GPU's cached forward takes heads of 64, 128 or 256 dims, and the model's are {} / {}",
                       model.dqk, model.dv);
  return "";
}

namespace {

// A copy of cache entry `e` with its keys and values in `pool`'s pages.
std::shared_ptr<const HistoryCache::Entry> moved_entry(const HistoryCache::Entry& e,
                                                       const std::shared_ptr<KvPagePool>& pool) {
  auto out = std::make_shared<HistoryCache::Entry>();
  out->tokens = e.tokens;
  out->kv.tokens = e.kv.tokens;
  out->kv.pages = copy_pages(*e.kv.pages, pool);
  return out;
}

}  // namespace

std::int64_t kv_pool_pages(const RankingConfig& model, std::size_t cache_bytes, std::int64_t part_tokens) {
  const std::int64_t P = KvPagePool::kPageTokens;
  const std::size_t page_bytes =
      KvPagePool::page_bytes_for(model.num_layers, model.heads * model.dqk, model.heads * model.dv);
  // The cache's budget, and room for two parts in flight: one part's sequences' pages (its tokens',
  // and a partly filled page each) beside the entries it replaces, which the part holds until it ends.
  const std::int64_t part_pages = part_tokens / P + kMaxPartRequests;
  return static_cast<std::int64_t>(cache_bytes / page_bytes) + 2 * part_pages;
}

Scorer::Scorer(const std::string& checkpoint, std::size_t cache_bytes, bool on_gpu, std::size_t host_cache_bytes)
    : s_(std::make_unique<State>()) {
  s_->trained = load_trained_ranking(checkpoint);
  if (on_gpu) {
    // Forwards of up to eight of the longest sequences' tokens (with the cache, of their uncached
    // tokens); larger batches go in parts.
    const RankingConfig& model = s_->trained.model;
    s_->gpu_tokens = 8 * model.max_seq_len;
    s_->gpu = std::make_unique<RankingGpu>(model, s_->gpu_tokens, s_->gpu_tokens);
    s_->gpu_weights = s_->trained.weights.to(Device::CUDA);
  }
  s_->cache_off = cache_off_reason_for(s_->trained.model, cache_bytes, on_gpu);
  if (s_->cache_off.empty()) {
    HistoryCache::Spill spill;
    if (s_->gpu) {
      s_->gpu->reserve_kv_pages(kv_pool_pages(s_->trained.model, cache_bytes, s_->gpu_tokens));
      const KvPagePool& gpu_pages = *s_->gpu->kv_pool();
      const auto host_pages = static_cast<std::int64_t>(host_cache_bytes / gpu_pages.page_bytes());
      if (host_pages > 0) {
        s_->host_pages = std::make_shared<KvPagePool>(gpu_pages.layers(), gpu_pages.k(0).size(1),
                                                      gpu_pages.v(0).size(1), host_pages, Device::CPU);
        spill = [pool = s_->host_pages](const HistoryCache::Entry& e) { return moved_entry(e, pool); };
      }
    }
    s_->cache = std::make_unique<HistoryCache>(cache_bytes, host_cache_bytes, std::move(spill));
  }
  const Dataset& seqs = s_->trained.data.seqs;
  for (std::size_t i = 1; i < seqs.raw_item_ids.size(); ++i)
    s_->item_of_raw.emplace(seqs.raw_item_ids[i], static_cast<std::int32_t>(i));
  for (std::size_t u = 0; u < seqs.raw_user_ids.size(); ++u) s_->user_of_raw.emplace(seqs.raw_user_ids[u], u);
  if (s_->gpu) warm_up();
}

void Scorer::warm_up() {
  // Forwards of the largest parts the GPU takes, the longest and the one of the most requests:
  // each kernel's first run, and cuBLASLt's algorithm for each product at those sizes, which then
  // serve every smaller batch (a question per new size would cost the first requests of that
  // size milliseconds each: the layers' products go by tokens, the features' and the head's by
  // requests and candidates).
  const HostSpan span("score: warm-up forwards");
  const RankingData& data = s_->trained.data;
  const Dataset& seqs = data.seqs;
  const std::int64_t F = data.num_features();
  const std::int64_t C = std::min<std::int64_t>(kMaxCandidates, s_->trained.model.max_seq_len - F - 2);
  if (C < 1 || seqs.num_users() == 0 || seqs.user_offsets[1] == seqs.user_offsets[0] || seqs.raw_item_ids.size() < 2)
    return;  // no history to make a request of: the first requests warm up instead
  auto run = [&](const ScoreRequest& q) {
    const RankingBatch one = prepare(q, "the warm-up request");
    std::vector<const RankingBatch*> part;
    for (std::int64_t tokens = one.tokens(); tokens <= s_->gpu_tokens && part.size() < kMaxPartRequests;
         tokens += one.tokens())
      part.push_back(&one);
    if (part.empty()) return;
    const RankingBatch batch = concat_ranking_batches(part);
    if (s_->cache) {
      // The cache's path (no entries: every row new), its pages given back at the end.
      const std::vector<const RankingKeysValues*> none(part.size(), nullptr);
      s_->gpu->logits_cached(s_->gpu_weights, batch, none, std::vector<std::int64_t>(part.size(), 0), nullptr, {});
    } else {
      s_->gpu->logits(s_->gpu_weights, batch);
    }
  };
  ScoreRequest longest;  // the first user's history and the most candidates
  longest.user = seqs.raw_user_ids[0];
  longest.candidates.assign(static_cast<std::size_t>(C), seqs.raw_item_ids[1]);
  run(longest);
  if (seqs.num_actions < 1) return;
  ScoreRequest shortest;  // one interaction, one candidate
  shortest.history = {seqs.raw_item_ids[1]};
  shortest.actions = {0};
  shortest.features.assign(static_cast<std::size_t>(F), 0);
  if (seqs.has_timestamps()) shortest.timestamps = {0, 0};
  shortest.candidates = {seqs.raw_item_ids[1]};
  run(shortest);
  ops::set_gemm_algorithm_reuse(true);
}

Scorer::~Scorer() = default;
Scorer::Scorer(Scorer&&) noexcept = default;

std::int64_t Scorer::num_tasks() const { return s_->trained.model.num_tasks; }

std::optional<HistoryCacheStats> Scorer::cache_stats() const {
  if (!s_->cache) return std::nullopt;
  return s_->cache->stats();
}
std::string Scorer::cache_off_reason() const { return s_->cache_off; }

namespace {

// One request as the one user of a ranking data set whose last interactions are its candidates,
// so that make_ranking_batch lays its tokens out exactly as training and evaluation do (without
// the raw ids, which it does not read).
RankingData request_data(const RankingData& from, const std::vector<std::int32_t>& items,
                         const std::vector<std::int32_t>& actions, const std::vector<std::int64_t>& times,
                         const std::vector<std::int32_t>& features, std::int64_t candidates) {
  RankingData d;
  d.num_tasks = from.num_tasks;
  d.feature_sizes = from.feature_sizes;
  d.features = features;
  d.num_candidates = static_cast<std::int32_t>(candidates);
  d.seqs.num_items = from.seqs.num_items;
  d.seqs.num_actions = from.seqs.num_actions;
  d.seqs.raw_user_ids = {0};
  d.seqs.items = items;
  d.seqs.actions = actions;
  d.seqs.timestamps = times;
  d.seqs.user_offsets = {0, static_cast<std::int64_t>(items.size())};
  return d;
}

}  // namespace

void Scorer::check(const ScoreRequest& q, const std::string& where) const { prepare(q, where); }

RankingBatch Scorer::prepare(const ScoreRequest& q, const std::string& at) const {
  const RankingData& data = s_->trained.data;
  const RankingConfig& model = s_->trained.model;
  const Dataset& seqs = data.seqs;
  const std::int64_t F = data.num_features();
  const bool timed = seqs.has_timestamps();
  const auto nc = static_cast<std::int64_t>(q.candidates.size());
  HSTU_CHECK(nc >= 1 && nc <= kMaxCandidates, at, fmt::format("has {} candidates", nc),
             fmt::format("give 1 .. {} candidates", kMaxCandidates));
  std::vector<std::int32_t> items, actions, features;
  std::vector<std::int64_t> times;
  if (q.user) {
    HSTU_CHECK(q.history.empty() && q.actions.empty() && q.features.empty(), at,
               "gives a user and a history, actions or features",
               "give a user, or a history with its actions and features");
    const auto u = s_->user_of_raw.find(*q.user);
    HSTU_CHECK(u != s_->user_of_raw.end(), at, fmt::format("user {} is not in the checkpoint's data", *q.user),
               "give a user id of the data the model was trained on, or their history");
    const std::int64_t b = seqs.user_offsets[u->second], e = seqs.user_offsets[u->second + 1];
    items.assign(seqs.items.begin() + b, seqs.items.begin() + e);
    actions.assign(seqs.actions.begin() + b, seqs.actions.begin() + e);
    if (timed) times.assign(seqs.timestamps.begin() + b, seqs.timestamps.begin() + e);
    features.assign(data.features.begin() + u->second * F, data.features.begin() + (u->second + 1) * F);
  } else {
    HSTU_CHECK(!q.history.empty(), at, "has neither a user nor a history", "give \"user\" or a non-empty \"history\"");
    HSTU_CHECK(q.actions.size() == q.history.size(), at,
               fmt::format("{} actions for {} history items", q.actions.size(), q.history.size()),
               "give one action (its task bits) per history item");
    HSTU_CHECK(static_cast<std::int64_t>(q.features.size()) == F, at,
               fmt::format("{} contextual features; the model has {}", q.features.size(), F),
               fmt::format("give {} feature values", F));
    for (std::size_t i = 0; i < q.history.size(); ++i) {
      const auto it = s_->item_of_raw.find(q.history[i]);
      HSTU_CHECK(it != s_->item_of_raw.end(), at,
                 fmt::format("history item {} (position {}) is not in the checkpoint's catalogue", q.history[i], i),
                 "leave out items the model was not trained on");
      items.push_back(it->second);
      HSTU_CHECK(q.actions[i] >= 0 && q.actions[i] < seqs.num_actions, at,
                 fmt::format("action {} (position {}) is outside 0 .. {}", q.actions[i], i, seqs.num_actions - 1),
                 "give actions the model was trained on");
      actions.push_back(static_cast<std::int32_t>(q.actions[i]));
    }
    for (std::int64_t k = 0; k < F; ++k) {
      HSTU_CHECK(q.features[k] >= 0 && q.features[k] < data.feature_sizes[k], at,
                 fmt::format("feature {} is {}, outside 0 .. {}", k, q.features[k], data.feature_sizes[k] - 1),
                 "give each contextual feature within its size");
      features.push_back(static_cast<std::int32_t>(q.features[k]));
    }
  }
  for (std::size_t c = 0; c < q.candidates.size(); ++c) {
    const auto it = s_->item_of_raw.find(q.candidates[c]);
    HSTU_CHECK(it != s_->item_of_raw.end(), at,
               fmt::format("candidate {} (position {}) is not in the checkpoint's catalogue", q.candidates[c], c),
               "score items the model was trained on");
    items.push_back(it->second);
    actions.push_back(0);  // unknown: a candidate's action is its label, which the model does not read
  }
  if (timed) {
    if (q.user) {
      // The candidates come now: after the history's last interaction.
      const std::int64_t last = times.empty() ? 0 : times.back();
      HSTU_CHECK(q.timestamps.empty() || static_cast<std::int64_t>(q.timestamps.size()) == nc, at,
                 fmt::format("{} timestamps for {} candidates", q.timestamps.size(), nc),
                 "give one timestamp per candidate, or none");
      for (std::int64_t c = 0; c < nc; ++c) times.push_back(q.timestamps.empty() ? last : q.timestamps[c]);
    } else {
      HSTU_CHECK(q.timestamps.size() == items.size(), at,
                 fmt::format("{} timestamps for {} history items and candidates", q.timestamps.size(), items.size()),
                 "give one timestamp per history item, then one per candidate (the data has times)");
      times = q.timestamps;
    }
    for (std::size_t i = 1; i < times.size(); ++i)
      HSTU_CHECK(times[i] >= times[i - 1], at, fmt::format("timestamps go back in time at position {}", i),
                 "order them oldest first");
  }
  // Every field was checked above, so the one-user data is not validated again (that would
  // need a copy of the catalogue's raw ids for each request).
  RankingData d = request_data(data, items, actions, times, features, nc);
  try {
    return make_ranking_batch(d, {0}, model.max_seq_len, RankingSplit::Test);
  } catch (const Error& e) {
    throw Error(at, e.problem(), e.fix());
  }
}

void Scorer::forward(const std::vector<const RankingBatch*>& prepared, ScoringInFlight& batch) const {
  const RankingConfig& model = s_->trained.model;
  std::vector<float>& logits = batch.logits;  // [candidates, tasks]
  auto add = [&](const Tensor& part) {
    logits.insert(logits.end(), part.data<float>(), part.data<float>() + part.numel());
  };
  auto slice = [&](std::size_t begin, std::size_t end) {
    return concat_ranking_batches(std::vector<const RankingBatch*>(
        prepared.begin() + static_cast<std::ptrdiff_t>(begin), prepared.begin() + static_cast<std::ptrdiff_t>(end)));
  };
  // On the GPU in parts: each of at most kMaxPartRequests requests and gpu_tokens tokens through
  // the layers (all of their tokens, or with the cache their uncached ones).
  auto parts = [&](const std::function<std::int64_t(std::size_t)>& tokens, const auto& run) {
    for (std::size_t begin = 0; begin < prepared.size();) {
      std::size_t end = begin + 1;
      std::int64_t sum = tokens(begin);
      while (s_->gpu && end < prepared.size() && end - begin < kMaxPartRequests && sum + tokens(end) <= s_->gpu_tokens)
        sum += tokens(end++);
      if (!s_->gpu) end = prepared.size();
      run(begin, end);
      begin = end;
    }
  };
  if (!s_->cache) {
    parts([&](std::size_t r) { return prepared[r]->tokens(); },
          [&](std::size_t begin, std::size_t end) {
            const RankingBatch all = slice(begin, end);
            add(s_->gpu ? s_->gpu->logits(s_->gpu_weights, all) : ranking_logits(model, s_->trained.weights, all));
          });
    return;
  }
  // With the cache: each request takes the longest cached prefix of its history and leaves its own
  // (all but the history's last token, whose time bias reads the first candidate's time) for the
  // next request.
  const std::size_t R = prepared.size();
  std::optional<HostSpan> span(std::in_place, "score: cache lookups");
  std::vector<std::shared_ptr<const HistoryCache::Entry>> used(R);
  std::vector<const RankingKeysValues*> cached(R, nullptr);
  std::vector<std::int64_t> keep(R);
  // What each lookup read: the tokens it asked for are the entry each request leaves.
  std::vector<HistoryCache::Probe> probes(R);
  for (std::size_t r = 0; r < R; ++r) {
    const std::int64_t n = prepared[r]->tokens(), C = static_cast<std::int64_t>(prepared[r]->candidate_tokens.size());
    keep[r] = std::max<std::int64_t>(n - C - 1, 0);
    used[r] = s_->cache->find(*prepared[r], 0, keep[r], n, &probes[r]);
  }
  // Entries found in host memory come back to the GPU's pages (and into the cache's first tier).
  if (s_->host_pages) {
    span.emplace("score: host-tier entries brought back");
    for (std::size_t r = 0; r < R; ++r) {
      if (!used[r] || used[r]->kv.pages->pool == s_->gpu->kv_pool()) continue;
      auto back = moved_entry(*used[r], s_->gpu->kv_pool());
      s_->cache->insert(back);
      used[r] = std::move(back);
    }
  }
  for (std::size_t r = 0; r < R; ++r)
    if (used[r]) cached[r] = &used[r]->kv;
  span.reset();
  parts([&](std::size_t r) { return prepared[r]->tokens() - (cached[r] ? cached[r]->tokens : 0); },
        [&](std::size_t begin, std::size_t end) {
          const RankingBatch all = slice(begin, end);
          const std::vector<const RankingKeysValues*> part_cached(cached.begin() + static_cast<std::ptrdiff_t>(begin),
                                                                  cached.begin() + static_cast<std::ptrdiff_t>(end));
          const std::vector<std::int64_t> part_keep(keep.begin() + static_cast<std::ptrdiff_t>(begin),
                                                    keep.begin() + static_cast<std::ptrdiff_t>(end));
          std::vector<RankingKeysValues> kept;
          auto insert = [&] {
            const HostSpan inserts("score: cache inserts");
            for (std::size_t r = begin; r < end; ++r) {
              if (keep[r] == 0 || (used[r] && used[r]->kv.tokens == keep[r])) continue;
              auto entry = std::make_shared<HistoryCache::Entry>();
              entry->tokens = std::move(probes[r].tokens);
              entry->kv = std::move(kept[r - begin]);
              s_->cache->insert(std::move(entry), &probes[r].hashes);
            }
          };
          if (s_->gpu) {
            batch.queued.push_back(
                s_->gpu->queue_logits_cached(s_->gpu_weights, all, part_cached, part_keep, &kept, insert));
          } else {
            add(ranking_logits_cached(model, s_->trained.weights, all, part_cached, part_keep, &kept));
            insert();
          }
        });
  // The entries the queued forwards read stay whole until they are answered.
  for (auto& e : used)
    if (e) batch.entries.push_back(std::move(e));
}

std::vector<Scores> Scorer::score(const std::vector<ScoreRequest>& requests, const std::string& where) const {
  std::vector<RankingBatch> prepared;
  {
    const HostSpan span("score: requests prepared");
    for (std::size_t r = 0; r < requests.size(); ++r)
      prepared.push_back(prepare(requests[r], fmt::format("{} {}", where, r + 1)));
  }
  std::vector<const ScoreRequest*> qs;
  std::vector<const RankingBatch*> ps;
  for (std::size_t r = 0; r < requests.size(); ++r) {
    qs.push_back(&requests[r]);
    ps.push_back(&prepared[r]);
  }
  return score_prepared(qs, ps);
}

std::vector<Scores> Scorer::score_prepared(const std::vector<const ScoreRequest*>& requests,
                                           const std::vector<const RankingBatch*>& prepared) const {
  return finish_scoring(start_scoring(requests, prepared));
}

ScoringInFlight Scorer::start_scoring(const std::vector<const ScoreRequest*>& requests,
                                      const std::vector<const RankingBatch*>& prepared) const {
  HSTU_CHECK(prepared.size() == requests.size(), "score",
             fmt::format("{} batches for {} requests", prepared.size(), requests.size()), "this is a bug in hstu");
  ScoringInFlight batch;
  batch.requests = requests;
  // One forward over the requests as one jagged batch (on the GPU in parts): each is a sequence of
  // its own, its candidates targets that see its history and themselves only.
  if (!requests.empty()) forward(prepared, batch);
  return batch;
}

std::vector<Scores> Scorer::finish_scoring(ScoringInFlight batch) const {
  const RankingConfig& model = s_->trained.model;
  const std::vector<const ScoreRequest*>& requests = batch.requests;
  std::vector<Scores> out(requests.size());
  std::vector<float>& logits = batch.logits;  // [candidates, tasks]
  for (QueuedLogits& part : batch.queued) {
    const Tensor t = part.wait();
    logits.insert(logits.end(), t.data<float>(), t.data<float>() + t.numel());
  }
  const HostSpan span("score: probabilities");
  std::int64_t first = 0;  // the request's first candidate among the batch's
  for (std::size_t r = 0; r < requests.size(); ++r) {
    out[r].user = requests[r]->user;
    out[r].candidates = requests[r]->candidates;
    const auto C = static_cast<std::int64_t>(requests[r]->candidates.size());
    for (std::int64_t c = 0; c < C; ++c) {
      std::vector<float> p(static_cast<std::size_t>(model.num_tasks));
      for (std::int64_t t = 0; t < model.num_tasks; ++t)
        p[t] =
            static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(
                                                logits[static_cast<std::size_t>((first + c) * model.num_tasks + t)]))));
      out[r].probabilities.push_back(std::move(p));
    }
    first += C;
  }
  return out;
}

ScoreRequest parse_score_request(const nlohmann::json& j, const std::string& where) {
  HSTU_CHECK(j.is_object(), where, "is not a JSON object",
             "give {\"user\": ID, \"candidates\": [..]} or a history with its actions and features");
  ScoreRequest q;
  for (const auto& [key, v] : j.items()) {
    if (key == "user")
      q.user = json_integer(v, where + " user");
    else if (key == "history")
      q.history = json_integers(v, where + " history");
    else if (key == "actions")
      q.actions = json_integers(v, where + " actions");
    else if (key == "features")
      q.features = json_integers(v, where + " features");
    else if (key == "timestamps")
      q.timestamps = json_integers(v, where + " timestamps");
    else if (key == "candidates")
      q.candidates = json_integers(v, where + " candidates");
    else
      throw Error(where, fmt::format("has an unknown field '{}'", key),
                  "use user, history, actions, features, timestamps and candidates");
  }
  return q;
}

namespace {

// A double as nlohmann prints it: its shortest text, with ".0" where that reads as an integer.
void append_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  const std::size_t from = out.size();
  fmt::format_to(std::back_inserter(out), "{}", v);
  if (out.find_first_of(".e", from) == std::string::npos) out += ".0";
}

}  // namespace

std::string scores_json_text(const Scores& s) {
  std::size_t numbers = s.candidates.size();
  for (const auto& p : s.probabilities) numbers += p.size();
  std::string out;
  out.reserve(64 + 24 * numbers);
  auto it = std::back_inserter(out);
  out += "{\"candidates\":[";
  for (std::size_t i = 0; i < s.candidates.size(); ++i) {
    if (i) out += ',';
    fmt::format_to(it, "{}", s.candidates[i]);
  }
  out += "],\"probabilities\":[";
  for (std::size_t i = 0; i < s.probabilities.size(); ++i) {
    out += i ? ",[" : "[";
    for (std::size_t t = 0; t < s.probabilities[i].size(); ++t) {
      if (t) out += ',';
      append_double(out, s.probabilities[i][t]);
    }
    out += ']';
  }
  out += "],\"user\":";
  if (s.user)
    fmt::format_to(it, "{}", *s.user);
  else
    out += "null";
  out += '}';
  return out;
}

}  // namespace hstu::serve
