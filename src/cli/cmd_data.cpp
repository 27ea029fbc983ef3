// hstu data inspect [PATH] [--format F] [--delimiter D] [--header H] [--columns LIST]
//                   [--cache-dir DIR | --no-cache] [--drop-short-users] [--json]
#include <chrono>
#include <cstdio>
#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "hstu/data/dataset_cache.h"
#include "hstu/data/synthetic.h"

namespace hstu::cli {
namespace {

struct DataInspectOptions {
  std::string path;  // empty: the built-in synthetic dataset
  std::string format = "auto";
  std::string delimiter = "auto", header = "auto", columns;  // the delimited format's settings
  std::string cache_dir;  // empty: default_cache_dir()
  bool no_cache = false;
  bool drop_short_users = false;
  bool json = false;
};

void run_data_inspect(const DataInspectOptions& opt) {
  nlohmann::ordered_json out;
  Dataset data;
  const auto t0 = std::chrono::steady_clock::now();
  if (opt.path.empty()) {
    const SyntheticConfig cfg;
    data = make_synthetic(cfg);
    out["source"] = "synthetic";
    out["format"] = fmt::format(
        "synthetic ({} users, {} items, {} clusters, zipf {}, lengths {}..{}, successor {}, seed {})", cfg.users,
        cfg.items, cfg.clusters, cfg.zipf_exponent, cfg.min_len, cfg.max_len, cfg.successor_prob, cfg.seed);
    out["cache"] = nullptr;
  } else {
    ReadOptions ro;
    ro.drop_short_users = opt.drop_short_users;
    ro.delimiter = parse_delimiter(opt.delimiter, "--delimiter");
    ro.header = parse_header_mode(opt.header, "--header");
    ro.columns = parse_columns(opt.columns, "--columns");
    DataFormat format = parse_format(opt.format, "--format");
    if (format == DataFormat::Auto) format = detect_format(opt.path, ro);  // a delimited setting means delimited
    CacheInfo ci;
    const std::string dir = opt.no_cache ? "" : (opt.cache_dir.empty() ? default_cache_dir() : opt.cache_dir);
    data = load_or_build(opt.path, format, dir, ro, &ci);
    out["source"] = opt.path;
    out["format"] = format_name(format);
    if (ci.path.empty()) out["cache"] = nullptr;
    else out["cache"] = {{"path", ci.path}, {"loaded", ci.loaded}, {"written", ci.written}};
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const DatasetSummary s = summarize(data);
  out["users"] = s.users;
  out["items"] = s.items;
  out["interactions"] = s.interactions;
  out["actions"] = s.actions;
  out["has_timestamps"] = s.has_timestamps;
  out["dropped_users"] = s.dropped_users;
  out["length"] = {{"min", s.min_len}, {"mean", s.mean_len}, {"p50", s.p50}, {"p90", s.p90},
                   {"p99", s.p99},     {"max", s.max_len}};
  out["load_ms"] = ms;
  if (opt.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("source         %s\n", out["source"].get<std::string>().c_str());
  std::printf("format         %s\n", out["format"].get<std::string>().c_str());
  std::printf("users          %lld\n", static_cast<long long>(s.users));
  std::printf("items          %lld\n", static_cast<long long>(s.items));
  std::printf("interactions   %lld\n", static_cast<long long>(s.interactions));
  const std::string actions = s.has_actions ? fmt::format("{} (ids 0..{})", s.actions, s.actions - 1) : "none";
  std::printf("actions        %s\n", actions.c_str());
  std::printf("timestamps     %s\n", s.has_timestamps ? "yes" : "no");
  std::printf("length         min %lld, mean %.2f, p50 %lld, p90 %lld, p99 %lld, max %lld\n",
              static_cast<long long>(s.min_len), s.mean_len, static_cast<long long>(s.p50),
              static_cast<long long>(s.p90), static_cast<long long>(s.p99), static_cast<long long>(s.max_len));
  std::printf("dropped users  %lld (fewer than %lld interactions)\n", static_cast<long long>(s.dropped_users),
              static_cast<long long>(kMinInteractions));
  if (out["cache"].is_null()) {
    std::printf("cache          none\n");
  } else {
    const auto& c = out["cache"];
    std::printf("cache          %s (%s)\n", c["path"].get<std::string>().c_str(),
                c["loaded"].get<bool>() ? "loaded" : (c["written"].get<bool>() ? "parsed, written" : "parsed, not written"));
  }
  std::printf("load time      %.1f ms\n", ms);
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Datasets: interaction logs and the built-in synthetic data");
  data->require_subcommand(1);

  auto opt = std::make_shared<DataInspectOptions>();
  CLI::App* inspect = data->add_subcommand(
      "inspect", "Summarise a dataset (users, items, interactions, length percentiles); no PATH: the synthetic one");
  inspect->add_option("path", opt->path, "interaction log (ratings.dat, ratings.csv, u.data, user-items lines, ...)");
  inspect->add_option("--format", opt->format, "auto, ml-dat, ml-csv, user-items, user-item, csv or delimited")
      ->check(CLI::IsMember({"auto", "ml-dat", "ml-csv", "user-items", "user-item", "csv", "delimited"}))
      ->capture_default_str();
  inspect
      ->add_option("--delimiter", opt->delimiter,
                   "delimited format: the field separator (space: any run of spaces and tabs; auto: tab, comma or "
                   "semicolon when each of the first 1000 lines has one, else space)")
      ->check(CLI::IsMember({"auto", "tab", "comma", "semicolon", "space"}))
      ->capture_default_str();
  inspect
      ->add_option("--header", opt->header,
                   "delimited format: whether the first line names the columns (auto: when not all its fields are "
                   "numbers)")
      ->check(CLI::IsMember({"auto", "yes", "no"}))
      ->capture_default_str();
  inspect->add_option("--columns", opt->columns,
                      "delimited format: the columns by position, e.g. user,item,rating,timestamp (- skips one; "
                      "default: the header's names, else by field count: user,item[,timestamp] or "
                      "user,item,rating,timestamp)");
  inspect->add_option("--cache-dir", opt->cache_dir,
                      "where the parsed dataset is cached (default $XDG_CACHE_HOME/hstu or ~/.cache/hstu)");
  inspect->add_flag("--no-cache", opt->no_cache, "parse the file without reading or writing a cache");
  inspect->add_flag("--drop-short-users", opt->drop_short_users,
                    "leave out users with fewer than 3 interactions instead of failing");
  inspect->add_flag("--json", opt->json, "print the summary as JSON");
  inspect->callback([opt] { run_data_inspect(*opt); });
}

}  // namespace hstu::cli
