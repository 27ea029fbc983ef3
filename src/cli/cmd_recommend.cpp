// hstu recommend --checkpoint FILE (--user ID | --history ID,ID,... | --input FILE) [--k K]
// [--include-seen] [--out FILE]: the top-K items of a retrieval checkpoint, one JSON line per
// user. A bad request is one error naming it (the input's line), and no output is written.
#include <memory>

#include "commands.h"
#include "hstu/core/error.h"
#include "hstu/io/json_lines.h"
#include "hstu/serve/recommender.h"

namespace hstu::cli {
namespace {

struct RecommendOptions {
  std::string checkpoint, history, input, out, device = "cpu";
  std::vector<std::int64_t> users;
  std::int64_t k = 10;
  bool include_seen = false;
};

std::vector<serve::RecommendRequest> read_requests(const RecommendOptions& o) {
  std::vector<serve::RecommendRequest> requests;
  for (std::int64_t u : o.users) {
    serve::RecommendRequest q;
    q.user = u;
    q.k = o.k;
    q.include_seen = o.include_seen;
    requests.push_back(q);
  }
  if (!o.history.empty()) {
    serve::RecommendRequest q;
    q.history = parse_id_list(o.history, "--history");
    q.k = o.k;
    q.include_seen = o.include_seen;
    requests.push_back(q);
  }
  if (!o.input.empty())
    for (const auto& [where, j] : read_json_lines(o.input)) {
      serve::RecommendRequest q = serve::parse_recommend_request(j, where, o.k);
      if (!j.contains("include_seen")) q.include_seen = o.include_seen;
      requests.push_back(std::move(q));
    }
  HSTU_CHECK(!requests.empty(), "hstu recommend", "no user, history or input file was given",
             "give --user ID, --history ID,ID,... or --input FILE");
  return requests;
}

}  // namespace

void add_recommend_command(CLI::App& app) {
  auto o = std::make_shared<RecommendOptions>();
  CLI::App* cmd = app.add_subcommand(
      "recommend", "Top-K items of a retrieval checkpoint for users given by id or by a history (raw item ids)");
  cmd->add_option("--checkpoint", o->checkpoint, "checkpoint.safetensors written by hstu train (retrieval)")
      ->required();
  cmd->add_option("--user", o->users, "user id(s) of the checkpoint's data: their whole history");
  cmd->add_option("--history", o->history, "a history of raw item ids, oldest first, separated by commas");
  cmd->add_option("--input", o->input,
                  "JSON lines, one request each: {\"user\": ID} or {\"history\": [..], \"timestamps\": [..]}, "
                  "optional \"k\", \"include_seen\"");
  cmd->add_option("--k", o->k, "items per user")
      ->check(CLI::Range(std::int64_t{1}, serve::kMaxK))
      ->capture_default_str();
  add_switch(cmd, "include-seen", &o->include_seen, "recommend items already in the history too");
  cmd->add_option("--device", o->device, "where the catalogue is ranked: cpu, cuda or auto (bf16 on the GPU)")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "write the JSON lines to FILE (atomically) instead of stdout");
  cmd->callback([o] {
    const std::vector<serve::RecommendRequest> requests = read_requests(*o);
    const serve::Recommender recommender(o->checkpoint, serve::use_gpu(o->device, "--device"));
    const auto answers = recommender.recommend(requests, o->input.empty() ? "request" : o->input + " request");
    std::string text;
    for (const auto& a : answers) text += serve::recommendation_json(a).dump() + "\n";
    write_answers(o->out, text);
  });
}

}  // namespace hstu::cli
