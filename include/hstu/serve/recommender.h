// `hstu recommend`: the top-K items of a retrieval checkpoint for users given by id or by a
// history, with raw item ids in and out (the ids of the log the model was trained on).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "hstu/serve/top_k.h"

namespace hstu {
struct TrainedRetrieval;
}

namespace hstu::serve {

struct RecommendRequest {
  std::optional<std::int64_t> user;      // a user of the checkpoint's data: their whole history
  std::vector<std::int64_t> history;     // or raw item ids, oldest first
  std::vector<std::int64_t> timestamps;  // one per history item; models with a time bias need them
  std::int64_t k = 10;
  bool include_seen = false;  // else the history's items are left out of the answer
};

struct Recommendation {
  std::optional<std::int64_t> user;
  std::vector<std::int64_t> items;  // raw ids, best first
  std::vector<float> scores;        // cosine of the user's and the item's embeddings
};

// "cpu", "cuda" or "auto" (the GPU where one is visible) as Recommender's and Scorer's on_gpu;
// hstu::Error naming `where` for another word, or for "cuda" without a GPU.
bool use_gpu(const std::string& device, const std::string& where);

// The most items a request may ask for.
inline constexpr std::int64_t kMaxK = 10000;

class Recommender {
 public:
  // Loads the checkpoint and the data it names (hstu::Error naming the file when either fails).
  // With `on_gpu`, the top-K over the catalogue runs on the GPU (gpu_top_k.h: bf16 embeddings,
  // fp32 sums, so near-equal scores may order differently from the CPU's fp32 path); the users'
  // embeddings are made on the CPU either way.
  explicit Recommender(const std::string& checkpoint, bool on_gpu = false);
  ~Recommender();
  Recommender(Recommender&&) noexcept;

  // Checks every request first (one hstu::Error naming the first bad one: `where` and its index),
  // then answers them all, in order. Every answer is a pure function of its request.
  std::vector<Recommendation> recommend(const std::vector<RecommendRequest>& requests,
                                        const std::string& where = "request") const;

  // Throws the error recommend would give for `q` (named `where`), without answering it.
  void check(const RecommendRequest& q, const std::string& where) const;

  std::int64_t num_items() const;
  std::int64_t num_users() const;
  bool on_gpu() const;

 private:
  // q as the model's item ids (and times), checked.
  void resolve(const RecommendRequest& q, const std::string& at, std::vector<std::int32_t>& ids,
               std::vector<std::int64_t>& times) const;
  struct State;
  std::unique_ptr<State> s_;
};

// A request from JSON: {"user": ID} or {"history": [ID, ...], "timestamps": [T, ...]}, with
// optional "k" (default `default_k`) and "include_seen" (default false). hstu::Error naming
// `where` and the field when it is malformed.
RecommendRequest parse_recommend_request(const nlohmann::json& j, const std::string& where, std::int64_t default_k);
nlohmann::json recommendation_json(const Recommendation& r);

}  // namespace hstu::serve
