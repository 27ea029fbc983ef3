// hstu score --checkpoint FILE (--user ID --candidates ID,ID,... | --input FILE) [--out FILE]
// [--device cpu|cuda|auto]:
// a ranking checkpoint's per-task probabilities for candidates after a history, one JSON line
// per request. A bad request is one error naming it (the input's line), and no output is written.
#include <memory>

#include "commands.h"
#include "hstu/core/error.h"
#include "hstu/io/json_lines.h"
#include "hstu/serve/recommender.h"
#include "hstu/serve/scorer.h"

namespace hstu::cli {
namespace {

struct ScoreOptions {
  std::string checkpoint, candidates, input, out, device = "cpu";
  std::vector<std::int64_t> users;
};

std::vector<serve::ScoreRequest> read_requests(const ScoreOptions& o) {
  std::vector<serve::ScoreRequest> requests;
  HSTU_CHECK(o.users.empty() || !o.candidates.empty(), "--user", "needs --candidates",
             "give the items to score, e.g. --candidates 12,7,31");
  for (std::int64_t u : o.users) {
    serve::ScoreRequest q;
    q.user = u;
    q.candidates = parse_id_list(o.candidates, "--candidates");
    requests.push_back(q);
  }
  if (!o.input.empty())
    for (const auto& [where, j] : read_json_lines(o.input)) requests.push_back(serve::parse_score_request(j, where));
  HSTU_CHECK(!requests.empty(), "hstu score", "no user or input file was given",
             "give --user ID --candidates ID,ID,... or --input FILE");
  return requests;
}

}  // namespace

void add_score_command(CLI::App& app) {
  auto o = std::make_shared<ScoreOptions>();
  CLI::App* cmd = app.add_subcommand(
      "score", "Per-task probabilities of a ranking checkpoint for candidate items after a history (raw item ids)");
  cmd->add_option("--checkpoint", o->checkpoint, "checkpoint.safetensors written by hstu train (ranking)")->required();
  cmd->add_option("--user", o->users, "user id(s) of the checkpoint's data: their whole history and features");
  cmd->add_option("--candidates", o->candidates, "raw item ids to score after each --user, separated by commas");
  cmd->add_option("--input", o->input,
                  "JSON lines, one request each: {\"user\": ID, \"candidates\": [..]} or {\"history\": [..], "
                  "\"actions\": [..], \"features\": [..], \"timestamps\": [..], \"candidates\": [..]}");
  cmd->add_option("--out", o->out, "write the JSON lines to FILE (atomically) instead of stdout");
  cmd->add_option("--device", o->device, "where the model runs: cpu, cuda or auto (bf16 activations on the GPU)")
      ->capture_default_str();
  cmd->callback([o] {
    const bool on_gpu = serve::use_gpu(o->device, "--device");
    const std::vector<serve::ScoreRequest> requests = read_requests(*o);
    const serve::Scorer scorer(o->checkpoint, 0, on_gpu);
    const auto answers = scorer.score(requests, o->input.empty() ? "request" : o->input + " request");
    std::string text;
    for (const auto& a : answers) text += serve::scores_json_text(a) + "\n";
    write_answers(o->out, text);
  });
}

}  // namespace hstu::cli
