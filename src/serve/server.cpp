#include "hstu/serve/server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "hstu/core/error.h"
#include "hstu/core/host_trace.h"
#include "hstu/io/checkpoint.h"
#include "hstu/serve/recommender.h"
#include "hstu/serve/scorer.h"
#include "server_metrics.h"

namespace hstu::serve {
namespace {

using Clock = std::chrono::steady_clock;

// Requests one connection may carry before the server closes it (it closes idle ones anyway).
constexpr std::size_t kKeepAliveRequests = 100000;

// One checkpoint, loaded: a retrieval model's recommender or a ranking model's scorer.
struct Model {
  std::string path;
  std::unique_ptr<Recommender> recommender;
  std::unique_ptr<Scorer> scorer;
  const char* kind() const { return recommender ? "retrieval" : "ranking"; }
};

std::shared_ptr<const Model> load_model(const std::string& path, const ServerOptions& o) {
  auto m = std::make_shared<Model>();
  m->path = path;
  if (checkpoint_model_kind(path) == "ranking")
    m->scorer = std::make_unique<Scorer>(path, o.cache_bytes, o.on_gpu, o.host_cache_bytes);
  else
    m->recommender = std::make_unique<Recommender>(path, o.on_gpu);
  return m;
}

struct Answer {
  Answer(int status, nlohmann::json body) : status(status), body(std::move(body)) {}
  explicit Answer(Scores s) : scores(std::move(s)) {}

  int status = 200;
  nlohmann::json body;
  // A /score answer's scores, made JSON on the request's own thread (body is then unset): on the
  // batcher's thread, a batch's JSON would hold the GPU's next batch back.
  std::optional<Scores> scores;
};

Answer error_answer(int status, const std::string& message) { return {status, {{"error", message}}}; }

// A request waiting for the batcher. A /score request is prepared (checked and laid out as the
// model's batch) when it comes in, on its connection's thread, with the model of that moment.
struct Job {
  bool score = false;
  RecommendRequest recommend;
  ScoreRequest score_request;
  RankingBatch score_batch;
  std::shared_ptr<const Model> prepared_with;
  std::promise<Answer> done;
  Clock::time_point queued_at;
};

}  // namespace

void ServerOptions::validate() const {
  HSTU_CHECK(port >= 0 && port <= 65535, "--port", fmt::format("is {}", port), "give a port in 0 .. 65535");
  HSTU_CHECK(batch_window_ms >= 0 && batch_window_ms <= 1000, "--batch-window-ms",
             fmt::format("is {}", batch_window_ms), "give 0 .. 1000 ms");
  HSTU_CHECK(max_batch >= 1, "--max-batch", fmt::format("is {}", max_batch), "give 1 or more");
  HSTU_CHECK(max_score_part >= 1, "--max-score-part", fmt::format("is {}", max_score_part), "give 1 or more");
  HSTU_CHECK(max_queue >= 1, "--max-queue", fmt::format("is {}", max_queue), "give 1 or more");
  HSTU_CHECK(max_body_bytes >= 64, "--max-body-kib", fmt::format("is {} bytes", max_body_bytes), "give 1 KiB or more");
  HSTU_CHECK(threads >= 1 && threads <= 1024, "--threads", fmt::format("is {}", threads), "give 1 .. 1024");
}

struct Server::Impl {
  ServerOptions options;
  httplib::Server http;
  ServerMetrics metrics;

  std::mutex model_mutex;
  std::shared_ptr<const Model> model;

  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<std::shared_ptr<Job>> queue;
  bool stopping = false;
  std::thread batcher;

  std::shared_ptr<const Model> current() {
    std::lock_guard<std::mutex> lock(model_mutex);
    return model;
  }

  void reload(const std::string& checkpoint) {
    const std::string path = checkpoint.empty() ? current()->path : checkpoint;
    std::shared_ptr<const Model> fresh = load_model(path, options);
    {
      std::lock_guard<std::mutex> lock(model_mutex);
      model = std::move(fresh);
    }
    metrics.reloaded();
  }

  // Answers `list` with answer_batch (the jobs in, their JSON answers out) as one batch; if that
  // throws, job by job, so that one bad request (after a reload) fails alone.
  template <typename AnswerBatch>
  static void answer_together(const std::vector<std::shared_ptr<Job>>& list, AnswerBatch&& answer_batch) {
    if (list.empty()) return;
    try {
      std::vector<Answer> a = answer_batch(list);
      for (std::size_t i = 0; i < list.size(); ++i) list[i]->done.set_value(std::move(a[i]));
      return;
    } catch (const std::exception&) {
    }
    for (const auto& j : list) {
      try {
        j->done.set_value(std::move(answer_batch(std::vector<std::shared_ptr<Job>>{j})[0]));
      } catch (const Error& e) {
        j->done.set_value(error_answer(400, e.what()));
      } catch (const std::exception& e) {
        j->done.set_value(error_answer(500, e.what()));
      }
    }
  }

  // The /score requests of `list` and their batches as model m's scorer takes them: a request
  // prepared with another model (a reload since) is prepared again, into `again`.
  static void requests_of(const std::vector<std::shared_ptr<Job>>& list, const std::shared_ptr<const Model>& m,
                          std::vector<const ScoreRequest*>& qs, std::vector<const RankingBatch*>& prepared,
                          std::deque<RankingBatch>& again) {
    HSTU_CHECK(m->scorer != nullptr, "score", "this server holds a retrieval model", "POST /recommend");
    for (const auto& j : list) {
      qs.push_back(&j->score_request);
      if (j->prepared_with == m) {
        prepared.push_back(&j->score_batch);
      } else {
        again.push_back(m->scorer->prepare(j->score_request, "request"));
        prepared.push_back(&again.back());
      }
    }
  }

  // /score requests answered at once, as one batch (what a batch in flight falls back to when
  // it fails: answer_together then answers its requests one by one).
  static std::vector<Answer> score_now(const std::shared_ptr<const Model>& m,
                                       const std::vector<std::shared_ptr<Job>>& list) {
    std::vector<const ScoreRequest*> qs;
    std::vector<const RankingBatch*> prepared;
    std::deque<RankingBatch> again;
    requests_of(list, m, qs, prepared, again);
    std::vector<Answer> out;
    for (Scores& s : m->scorer->score_prepared(qs, prepared)) out.emplace_back(std::move(s));
    return out;
  }

  // A part of a batch of /score requests whose forward is queued on the GPU.
  struct InFlight {
    std::vector<std::shared_ptr<Job>> jobs;
    std::shared_ptr<const Model> model;
    ScoringInFlight scoring;
    Clock::time_point taken;
    bool last_of_batch = false;  // its batch's time is counted when it is answered
  };

  // Starts one batch with the model of the moment: its /score requests in parts of at most
  // max_score_part, each queued (InFlight); its /recommend requests answered here, as one batch.
  // The requests were checked when they came in; should a reload since have made one bad, its
  // part is answered request by request.
  std::vector<InFlight> start(const std::vector<std::shared_ptr<Job>>& jobs, Clock::time_point taken) {
    const HostSpan span("serve: batch queued");
    const std::shared_ptr<const Model> m = current();
    std::vector<std::shared_ptr<Job>> recs, scores;
    for (const auto& j : jobs) (j->score ? scores : recs).push_back(j);
    std::vector<InFlight> started;
    const auto part = static_cast<std::size_t>(options.max_score_part);
    for (std::size_t first = 0; first < scores.size(); first += part) {
      const std::size_t last = std::min(scores.size(), first + part);
      InFlight f;
      f.jobs.assign(scores.begin() + static_cast<std::ptrdiff_t>(first),
                    scores.begin() + static_cast<std::ptrdiff_t>(last));
      f.model = m;
      f.taken = taken;
      try {
        std::vector<const ScoreRequest*> qs;
        std::vector<const RankingBatch*> prepared;
        std::deque<RankingBatch> again;
        requests_of(f.jobs, m, qs, prepared, again);
        f.scoring = m->scorer->start_scoring(qs, prepared);
        started.push_back(std::move(f));
      } catch (const std::exception&) {
        answer_together(f.jobs, [&](const auto& list) { return score_now(m, list); });
      }
    }
    answer_together(recs, [&](const std::vector<std::shared_ptr<Job>>& list) {
      HSTU_CHECK(m->recommender != nullptr, "recommend", "this server holds a ranking model", "POST /score");
      std::vector<RecommendRequest> qs;
      for (const auto& j : list) qs.push_back(j->recommend);
      std::vector<Answer> out;
      for (const Recommendation& r : m->recommender->recommend(qs)) out.emplace_back(200, recommendation_json(r));
      return out;
    });
    if (started.empty())
      metrics.batch_answered(std::chrono::duration<double, std::milli>(Clock::now() - taken).count());
    else
      started.back().last_of_batch = true;
    return started;
  }

  // Waits for a started part's logits and answers its requests.
  void finish(InFlight& f) {
    {
      const HostSpan span("serve: batch answered");
      try {
        std::vector<Scores> s = f.model->scorer->finish_scoring(std::move(f.scoring));
        for (std::size_t i = 0; i < f.jobs.size(); ++i) f.jobs[i]->done.set_value(Answer(std::move(s[i])));
      } catch (const std::exception&) {
        answer_together(f.jobs, [&](const auto& list) { return score_now(f.model, list); });
      }
    }
    if (f.last_of_batch)
      metrics.batch_answered(std::chrono::duration<double, std::milli>(Clock::now() - f.taken).count());
  }

  // The next batch: with `wait`, what arrives within the window after its first request came in,
  // up to max_batch (the window counts from the request's arrival, not from when the batcher is
  // free: requests that queued behind a batch go without a further wait); otherwise what is
  // queued now. Empty when stopping with nothing queued, or when nothing is queued and not `wait`.
  std::vector<std::shared_ptr<Job>> take(bool wait) {
    std::vector<std::shared_ptr<Job>> jobs;
    std::unique_lock<std::mutex> lock(queue_mutex);
    if (wait) {
      queue_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return jobs;
      const auto until = queue.front()->queued_at +
                         std::chrono::microseconds(static_cast<std::int64_t>(options.batch_window_ms * 1e3));
      queue_cv.wait_until(lock, until,
                          [&] { return stopping || static_cast<std::int64_t>(queue.size()) >= options.max_batch; });
    }
    while (!queue.empty() && static_cast<std::int64_t>(jobs.size()) < options.max_batch) {
      jobs.push_back(std::move(queue.front()));
      queue.pop_front();
    }
    return jobs;
  }

  // Batches in a pipeline: the next batch is taken and queued on the GPU while the one before it
  // runs there, then the one before is answered; so the GPU is not idle while the host answers a
  // batch and prepares the next (cache lookups, pages, inputs, launches). A batch whose forward
  // has already run (the CPU, the GPU without the cache) is answered at once: holding it back
  // would only make it wait for the next one's forward. When nothing is queued, the batch in
  // flight is answered before the loop waits for requests.
  void batch_loop() {
    std::vector<InFlight> previous;
    for (;;) {
      std::vector<std::shared_ptr<Job>> jobs = take(previous.empty());
      if (jobs.empty() && previous.empty()) return;  // stopping, and nothing left to answer
      std::vector<InFlight> current;
      if (!jobs.empty()) {
        metrics.batch(static_cast<std::int64_t>(jobs.size()));
        const auto taken = Clock::now();
        for (const auto& j : jobs)
          metrics.queue_waited(std::chrono::duration<double, std::milli>(taken - j->queued_at).count());
        current = start(jobs, taken);
      }
      for (InFlight& f : previous) finish(f);
      previous.clear();
      for (InFlight& f : current) {
        if (f.scoring.ready())
          finish(f);
        else
          previous.push_back(std::move(f));
      }
    }
  }

  // Checks a request against the model, queues it, and waits for its answer.
  Answer submit(std::shared_ptr<Job> job) {
    std::future<Answer> f = job->done.get_future();
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      if (stopping) return error_answer(503, "the server is shutting down");
      if (static_cast<std::int64_t>(queue.size()) >= options.max_queue)
        return error_answer(503, fmt::format("{} requests are waiting (--max-queue); try again later", queue.size()));
      job->queued_at = Clock::now();
      queue.push_back(std::move(job));
    }
    queue_cv.notify_all();
    return f.get();
  }

  Answer handle(const std::string& endpoint, const std::string& body) {
    std::optional<HostSpan> span(std::in_place, "serve: request parsed and checked");
    auto job = std::make_shared<Job>();
    std::optional<ScoreRequest> plain;
    if (endpoint == "/score") plain = read_plain_score_request(body);
    nlohmann::json j;
    if (!plain) {
      j = nlohmann::json::parse(body, nullptr, false);
      if (j.is_discarded()) return error_answer(400, "the body is not valid JSON");
    }
    try {
      const std::shared_ptr<const Model> m = current();
      if (endpoint == "/recommend") {
        HSTU_CHECK(m->recommender != nullptr, endpoint, "this server holds a ranking model", "POST /score");
        job->recommend = parse_recommend_request(j, "request", 10);
        m->recommender->check(job->recommend, "request");
      } else {
        HSTU_CHECK(m->scorer != nullptr, endpoint, "this server holds a retrieval model", "POST /recommend");
        job->score = true;
        job->score_request = plain ? std::move(*plain) : parse_score_request(j, "request");
        job->score_batch = m->scorer->prepare(job->score_request, "request");
        job->prepared_with = m;
      }
    } catch (const Error& e) {
      return error_answer(400, e.what());
    } catch (const std::exception& e) {
      return error_answer(500, e.what());
    }
    span.reset();
    return submit(std::move(job));
  }

  void routes() {
    http.set_payload_max_length(options.max_body_bytes);
    // Answers go out whole at once: with Nagle's algorithm a reply written in two parts waits for
    // the client's delayed ACK (40 ms on Linux).
    http.set_tcp_nodelay(true);
    // A client's connection stays open for its requests (the library closes it after 5 by
    // default): reconnecting clients overflow the library's listen backlog of 5, and a dropped
    // SYN is retried only a second later.
    http.set_keep_alive_max_count(kKeepAliveRequests);
    const int threads = options.threads;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
    auto reply = [this](const std::string& endpoint, httplib::Response& res, const Answer& a, Clock::time_point t0) {
      res.status = a.status;
      res.set_content(a.scores ? scores_json_text(*a.scores) : a.body.dump(), "application/json");
      metrics.answered(endpoint, a.status, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    };
    for (const std::string endpoint : {"/recommend", "/score"})
      http.Post(endpoint, [this, endpoint, reply](const httplib::Request& req, httplib::Response& res) {
        const auto t0 = Clock::now();
        const HostSpan span("serve: request answered");
        reply(endpoint, res, handle(endpoint, req.body), t0);
      });
    http.Post("/reload", [this, reply](const httplib::Request& req, httplib::Response& res) {
      const auto t0 = Clock::now();
      std::string path;
      if (!req.body.empty()) {
        const nlohmann::json j = nlohmann::json::parse(req.body, nullptr, false);
        if (j.is_discarded() || !j.is_object() || (j.contains("checkpoint") && !j["checkpoint"].is_string()))
          return reply("/reload", res, error_answer(400, "give {\"checkpoint\": PATH} or no body"), t0);
        path = j.value("checkpoint", "");
      }
      try {
        reload(path);
        const auto m = current();
        reply("/reload", res, {200, {{"status", "reloaded"}, {"checkpoint", m->path}, {"model", m->kind()}}}, t0);
      } catch (const Error& e) {
        reply("/reload", res, error_answer(400, e.what()), t0);
      } catch (const std::exception& e) {
        reply("/reload", res, error_answer(500, e.what()), t0);
      }
    });
    http.Get("/health", [this, reply](const httplib::Request&, httplib::Response& res) {
      const auto t0 = Clock::now();
      const auto m = current();
      reply("/health", res, {200, {{"status", "ok"}, {"model", m->kind()}, {"checkpoint", m->path}}}, t0);
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::int64_t queued = 0;
      {
        std::lock_guard<std::mutex> lock(queue_mutex);
        queued = static_cast<std::int64_t>(queue.size());
      }
      nlohmann::json j = metrics.to_json(queued);
      const std::shared_ptr<const Model> m = current();
      const auto cache = m->scorer ? m->scorer->cache_stats() : std::nullopt;
      if (cache) {
        j["cache_hit_rate"] = cache->lookups > 0 ? static_cast<double>(cache->hits) / cache->lookups : 0.0;
        j["cache"] = {{"lookups", cache->lookups}, {"hits", cache->hits},
                      {"tokens", cache->tokens},   {"cached_tokens", cache->cached_tokens},
                      {"entries", cache->entries}, {"evictions", cache->evictions},
                      {"bytes", cache->bytes},     {"budget_bytes", cache->budget}};
        if (cache->second_budget > 0)
          j["cache"]["host_tier"] = {{"entries", cache->second_entries},     {"bytes", cache->second_bytes},
                                     {"budget_bytes", cache->second_budget}, {"moved_there", cache->spills},
                                     {"hits", cache->second_hits},           {"evictions", cache->second_evictions}};
      } else {
        j["cache"] = {{"off", m->scorer ? m->scorer->cache_off_reason() : "a retrieval model has no history cache"}};
      }
      // Where the process's host time went, by phase (HostSpan's totals): the batcher's requests
      // prepared, cache lookups and inserts, the forward's parts and its wait for the GPU.
      nlohmann::json spans = nlohmann::json::array();
      for (const HostSpanTotal& t : host_span_totals())
        spans.push_back({{"name", t.name}, {"calls", t.calls}, {"ms", t.ms}});
      j["host_spans"] = spans;
      res.set_content(j.dump(), "application/json");
    });
    // Anything else, and errors the library answers itself (413 for a body over the limit): JSON.
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;  // a handler's own JSON error
      metrics.refused(req.path, res.status);
      const std::string message = res.status == 413 ? "the body is larger than --max-body-kib"
                                  : res.status == 404
                                      ? "no such endpoint: use /recommend, /score, /health, /metrics, /reload"
                                      : fmt::format("HTTP {}", res.status);
      res.set_content(nlohmann::json{{"error", message}}.dump(), "application/json");
    });
  }
};

Server::Server(const ServerOptions& options) : p_(std::make_unique<Impl>()) {
  options.validate();
  p_->options = options;
  p_->model = load_model(options.checkpoint, options);
  p_->routes();
}

Server::~Server() {
  stop();
  if (p_->batcher.joinable()) p_->batcher.join();
}

void Server::run(const std::function<void(int)>& on_ready) {
  Impl& p = *p_;
  int port = p.options.port;
  if (port == 0) {
    port = p.http.bind_to_any_port(p.options.host);
    HSTU_CHECK(port > 0, p.options.host, "no port could be bound", "give --port, or free one");
  } else {
    HSTU_CHECK(p.http.bind_to_port(p.options.host, port), fmt::format("{}:{}", p.options.host, port),
               "cannot be bound (in use, or not an address of this machine)", "give another --port or --host");
  }
  p.batcher = std::thread([&p] { p.batch_loop(); });
  if (on_ready) on_ready(port);
  p.http.listen_after_bind();
  // Stopped: the handlers have returned; let the batcher finish what is queued.
  {
    std::lock_guard<std::mutex> lock(p.queue_mutex);
    p.stopping = true;
  }
  p.queue_cv.notify_all();
  if (p.batcher.joinable()) p.batcher.join();
}

void Server::stop() {
  {
    std::lock_guard<std::mutex> lock(p_->queue_mutex);
    p_->stopping = true;
  }
  p_->queue_cv.notify_all();
  p_->http.stop();
}

void Server::reload(const std::string& checkpoint) { p_->reload(checkpoint); }

}  // namespace hstu::serve
