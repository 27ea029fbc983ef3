#include "hstu/serve/recommender.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/data/split.h"
#include "hstu/model/retrieval_model.h"
#include "hstu/serve/gpu_top_k.h"
#include "hstu/train/trainer.h"
#include "json_fields.h"

namespace hstu::serve {

struct Recommender::State {
  TrainedRetrieval trained;
  Tensor items;  // [num_items + 1, d] F32, normalised once
  std::unique_ptr<GpuItemIndex> gpu;  // the same items on the GPU, when it ranks there
  std::unordered_map<std::int64_t, std::int32_t> item_of_raw;
  std::unordered_map<std::int64_t, std::int64_t> user_of_raw;
};

bool use_gpu(const std::string& device, const std::string& where) {
  HSTU_CHECK(device == "cpu" || device == "cuda" || device == "auto", where,
             fmt::format("'{}' is not a device", device), "use cpu, cuda or auto");
  HSTU_CHECK(device != "cuda" || cuda_available(), where,
             "is cuda but no CUDA device is visible (or this build has no CUDA)", "use cpu or auto");
  return device == "cuda" || (device == "auto" && cuda_available());
}

Recommender::Recommender(const std::string& checkpoint, bool on_gpu) : s_(std::make_unique<State>()) {
  s_->trained = load_trained_retrieval(checkpoint);
  s_->items = retrieval_item_embeddings(s_->trained.weights);
  if (on_gpu)
    s_->gpu =
        std::make_unique<GpuItemIndex>(s_->items.data<float>(), s_->trained.data.num_items, s_->trained.model.d_model);
  const Dataset& data = s_->trained.data;
  for (std::size_t i = 1; i < data.raw_item_ids.size(); ++i)
    s_->item_of_raw.emplace(data.raw_item_ids[i], static_cast<std::int32_t>(i));
  for (std::size_t u = 0; u < data.raw_user_ids.size(); ++u) s_->user_of_raw.emplace(data.raw_user_ids[u], u);
}

Recommender::~Recommender() = default;
Recommender::Recommender(Recommender&&) noexcept = default;

std::int64_t Recommender::num_items() const { return s_->trained.data.num_items; }
std::int64_t Recommender::num_users() const { return s_->trained.data.num_users(); }
bool Recommender::on_gpu() const { return s_->gpu != nullptr; }

void Recommender::check(const RecommendRequest& q, const std::string& where) const {
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> times;
  resolve(q, where, ids, times);
}

void Recommender::resolve(const RecommendRequest& q, const std::string& at, std::vector<std::int32_t>& ids,
                          std::vector<std::int64_t>& times) const {
  const Dataset& data = s_->trained.data;
  const bool needs_time = s_->trained.model.time_bias;
  ids.clear();
  times.clear();
  HSTU_CHECK(q.k >= 1 && q.k <= kMaxK, at, fmt::format("k is {}", q.k), fmt::format("ask for 1 .. {} items", kMaxK));
  if (q.user) {
    HSTU_CHECK(q.history.empty(), at, "gives both a user and a history", "give one of them");
    const auto u = s_->user_of_raw.find(*q.user);
    HSTU_CHECK(u != s_->user_of_raw.end(), at, fmt::format("user {} is not in the checkpoint's data", *q.user),
               "give a user id of the log the model was trained on, or their history");
    const auto span = data.user_items(u->second);
    ids.assign(span.begin(), span.end());
    if (data.has_timestamps())
      times.assign(data.timestamps.begin() + data.user_offsets[u->second],
                   data.timestamps.begin() + data.user_offsets[u->second + 1]);
  } else {
    HSTU_CHECK(!q.history.empty(), at, "has neither a user nor a history", "give \"user\" or a non-empty \"history\"");
    for (std::size_t i = 0; i < q.history.size(); ++i) {
      const auto it = s_->item_of_raw.find(q.history[i]);
      HSTU_CHECK(it != s_->item_of_raw.end(), at,
                 fmt::format("history item {} (position {}) is not in the checkpoint's catalogue", q.history[i], i),
                 "leave out items the model was not trained on");
      ids.push_back(it->second);
    }
    HSTU_CHECK(q.timestamps.empty() || q.timestamps.size() == q.history.size(), at,
               fmt::format("{} timestamps for {} history items", q.timestamps.size(), q.history.size()),
               "give one timestamp per history item, or none");
    HSTU_CHECK(!needs_time || !q.timestamps.empty(), at, "has no timestamps, and the model has a time bias",
               "give \"timestamps\", one per history item (seconds, oldest first)");
    for (std::size_t i = 1; i < q.timestamps.size(); ++i)
      HSTU_CHECK(q.timestamps[i] >= q.timestamps[i - 1], at,
                 fmt::format("timestamps go back in time at position {}", i), "order the history oldest first");
    times = q.timestamps;
  }
}

std::vector<Recommendation> Recommender::recommend(const std::vector<RecommendRequest>& requests,
                                                   const std::string& where) const {
  const Dataset& data = s_->trained.data;
  const RetrievalConfig& model = s_->trained.model;
  const bool needs_time = model.time_bias;
  // Each request as a sequence of internal ids (with times), checked before any work.
  Batch batch;
  batch.split = Split::Test;
  std::vector<std::vector<std::int32_t>> seen(requests.size());
  for (std::size_t r = 0; r < requests.size(); ++r) {
    const RecommendRequest& q = requests[r];
    const std::string at = fmt::format("{} {}", where, r + 1);
    std::vector<std::int32_t> ids;
    std::vector<std::int64_t> times;
    resolve(q, at, ids, times);
    if (!q.include_seen) seen[r] = ids;
    // The model reads the last max_seq_len items.
    const std::size_t from = ids.size() > static_cast<std::size_t>(model.max_seq_len)
                                 ? ids.size() - static_cast<std::size_t>(model.max_seq_len)
                                 : 0;
    batch.users.push_back(static_cast<std::int64_t>(r));
    batch.items.insert(batch.items.end(), ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
    if (data.has_timestamps() || needs_time) {
      if (times.empty()) times.assign(ids.size(), 0);
      batch.timestamps.insert(batch.timestamps.end(), times.begin() + static_cast<std::ptrdiff_t>(from), times.end());
    }
    batch.seq_offsets.push_back(static_cast<std::int64_t>(batch.items.size()));
  }
  std::vector<Recommendation> out(requests.size());
  if (requests.empty()) return out;
  const Tensor users = retrieval_user_embeddings(model, s_->trained.weights, batch);
  std::int64_t most = 1;
  for (const RecommendRequest& q : requests) most = std::max(most, q.k);
  const auto best = s_->gpu ? s_->gpu->top_k(users.data<float>(), batch.size(), most, seen)
                            : top_k_items(users.data<float>(), batch.size(), s_->items.data<float>(), data.num_items,
                                          model.d_model, most, seen);
  for (std::size_t r = 0; r < requests.size(); ++r) {
    out[r].user = requests[r].user;
    const std::size_t n = std::min(best[r].size(), static_cast<std::size_t>(requests[r].k));
    for (std::size_t i = 0; i < n; ++i) {
      out[r].items.push_back(data.raw_item_ids[static_cast<std::size_t>(best[r][i].item)]);
      out[r].scores.push_back(best[r][i].score);
    }
  }
  return out;
}

RecommendRequest parse_recommend_request(const nlohmann::json& j, const std::string& where, std::int64_t default_k) {
  HSTU_CHECK(j.is_object(), where, "is not a JSON object", "give {\"user\": ID} or {\"history\": [ID, ...]}");
  RecommendRequest q;
  q.k = default_k;
  for (const auto& [key, v] : j.items()) {
    if (key == "user")
      q.user = json_integer(v, where + " user");
    else if (key == "history")
      q.history = json_integers(v, where + " history");
    else if (key == "timestamps")
      q.timestamps = json_integers(v, where + " timestamps");
    else if (key == "k")
      q.k = json_integer(v, where + " k");
    else if (key == "include_seen") {
      HSTU_CHECK(v.is_boolean(), where + " include_seen", fmt::format("is {}", v.dump()), "give true or false");
      q.include_seen = v.get<bool>();
    } else {
      throw Error(where, fmt::format("has an unknown field '{}'", key),
                  "use user, history, timestamps, k and include_seen");
    }
  }
  return q;
}

nlohmann::json recommendation_json(const Recommendation& r) {
  nlohmann::json j;
  j["user"] = r.user ? nlohmann::json(*r.user) : nlohmann::json(nullptr);
  j["items"] = r.items;
  j["scores"] = r.scores;
  return j;
}

}  // namespace hstu::serve
