// The interaction-log readers: text -> records (one per interaction, with its line for error
// messages) -> per-user sorted, remapped CSR sequences (build_dataset).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <string_view>
#include <sys/stat.h>
#include <unordered_map>

#include "hstu/core/error.h"
#include "hstu/data/readers.h"

namespace hstu {
namespace {

using std::int32_t;
using std::int64_t;
using std::string_view;

// Actions index an embedding table; a larger value is almost surely a wrong column.
constexpr int64_t kMaxAction = 65535;
// Detection reads this much of a file: enough for rule 5's thousand lines of any real log.
constexpr std::size_t kDetectBytes = 256 * 1024;
constexpr const char* kFormatFix = "check the file's format or pass --format explicitly";

struct Record {
  int64_t user, item, ts, line;
  int32_t action;
};

std::string where_line(const std::string& path, int64_t line) { return fmt::format("{}:{}", path, line); }

// "FILE:LINE" for messages, formatted only when an error is thrown (not once per line).
struct Where {
  const std::string& path;
  int64_t line;
  operator std::string() const { return where_line(path, line); }
};

// A field as it appears in a message: at most 40 characters, control bytes shown as '?'.
std::string quoted(string_view s) {
  std::string out(s.substr(0, 40));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  if (s.size() > 40) out += "...";
  return "'" + out + "'";
}

string_view trim(string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_blank(string_view s) { return trim(s).empty(); }

std::string lower(string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The file's bytes; a missing, unreadable or empty file is an error naming it.
std::string read_text(const std::string& path, std::size_t max_bytes = SIZE_MAX) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(path, std::string("cannot open: ") + std::strerror(errno), "check the path");
  HSTU_CHECK(S_ISREG(st.st_mode), path, "not a regular file", "pass the path of an interaction log");
  std::ifstream in(path, std::ios::binary);
  HSTU_CHECK(in, path, std::string("cannot open: ") + std::strerror(errno), "check the file's permissions");
  const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(static_cast<std::uint64_t>(st.st_size), max_bytes));
  std::string text(want, '\0');
  in.read(text.data(), static_cast<std::streamsize>(want));
  HSTU_CHECK(static_cast<std::size_t>(in.gcount()) == want, path, "read failed (the file changed while being read?)",
             "read it again");
  HSTU_CHECK(!text.empty(), path, "empty file", "pass a file with interactions");
  // A UTF-8 byte-order mark (spreadsheet exports) is not part of the first field.
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  return text;
}

// Calls fn(line_number, line) for each non-blank line, without its LF or CRLF; stops when fn
// returns false.
template <typename Fn> void for_each_line(string_view text, Fn&& fn) {
  int64_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == string_view::npos) end = text.size();
    string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = end + 1;
    ++line_no;
    if (is_blank(line)) continue;
    if (!fn(line_no, line)) return;
  }
}

void split_on(string_view line, string_view sep, std::vector<string_view>& out) {
  out.clear();
  std::size_t pos = 0;
  for (;;) {
    const std::size_t next = line.find(sep, pos);
    if (next == string_view::npos) {
      out.push_back(line.substr(pos));
      return;
    }
    out.push_back(line.substr(pos, next - pos));
    pos = next + sep.size();
  }
}

void split_whitespace(string_view line, std::vector<string_view>& out) {
  out.clear();
  std::size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
    std::size_t end = pos;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
    if (end > pos) out.push_back(line.substr(pos, end - pos));
    pos = end;
  }
}

// A whole field as a signed decimal integer, or false.
bool to_int(string_view s, int64_t* v) {
  s = trim(s);
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

int64_t parse_id(string_view field, const char* what, const Where& where) {
  int64_t v = 0;
  if (!to_int(field, &v) || v < 0)
    throw Error(where, fmt::format("{} id {} is not a non-negative integer", what, quoted(trim(field))),
                "ids must be decimal integers; " + std::string(kFormatFix));
  return v;
}

int64_t parse_timestamp(string_view field, const Where& where) {
  int64_t v = 0;
  if (!to_int(field, &v))
    throw Error(where, fmt::format("timestamp {} is not an integer", quoted(trim(field))),
                "timestamps must be integers (e.g. Unix seconds)");
  return v;
}

int32_t parse_action(string_view field, const Where& where) {
  int64_t v = 0;
  if (!to_int(field, &v) || v < 0 || v > kMaxAction)
    throw Error(where, fmt::format("action {} is not an integer in 0..{}", quoted(trim(field)), kMaxAction),
                "actions must be small non-negative integers");
  return static_cast<int32_t>(v);
}

// A MovieLens half-star rating (0.5, 1.0, ... ) as the action 2 * rating.
int32_t parse_half_star(string_view field, const Where& where) {
  const string_view s = trim(field);
  double r = -1;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), r);
  const double twice = r * 2;
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !(r >= 0) || twice > kMaxAction ||
      twice != std::floor(twice))
    throw Error(where, fmt::format("rating {} is not a non-negative multiple of 0.5", quoted(s)),
                "MovieLens ratings are 0.5 .. 5 in half stars");
  return static_cast<int32_t>(twice);
}

void expect_fields(const std::vector<string_view>& f, std::size_t n, const char* layout, const Where& where) {
  if (f.size() != n)
    throw Error(where, fmt::format("malformed line: expected {} fields ({}), found {}", n, layout, f.size()),
                kFormatFix);
}

std::vector<Record> parse_ml_dat(const std::string& path, string_view text) {
  std::vector<Record> recs;
  std::vector<string_view> f;
  for_each_line(text, [&](int64_t ln, string_view line) {
    const Where w{path, ln};
    split_on(line, "::", f);
    expect_fields(f, 4, "user::item::rating::timestamp", w);
    recs.push_back({parse_id(f[0], "user", w), parse_id(f[1], "item", w), parse_timestamp(f[3], w), ln,
                    parse_action(f[2], w)});
    return true;
  });
  return recs;
}

bool is_ml_csv_header(string_view line) {
  std::vector<string_view> f;
  split_on(line, ",", f);
  static const char* names[] = {"userid", "movieid", "rating", "timestamp"};
  if (f.size() != 4) return false;
  for (int i = 0; i < 4; ++i)
    if (lower(trim(f[i])) != names[i]) return false;
  return true;
}

std::vector<Record> parse_ml_csv(const std::string& path, string_view text) {
  std::vector<Record> recs;
  std::vector<string_view> f;
  bool header = true;
  for_each_line(text, [&](int64_t ln, string_view line) {
    const Where w{path, ln};
    if (header) {
      HSTU_CHECK(is_ml_csv_header(line), w,
                 fmt::format("expected the header userId,movieId,rating,timestamp, found {}", quoted(line)),
                 "a MovieLens ratings.csv starts with that header; for other CSV files use --format csv");
      header = false;
      return true;
    }
    split_on(line, ",", f);
    expect_fields(f, 4, "userId,movieId,rating,timestamp", w);
    recs.push_back({parse_id(f[0], "user", w), parse_id(f[1], "item", w), parse_timestamp(f[3], w), ln,
                    parse_half_star(f[2], w)});
    return true;
  });
  return recs;
}

// Column positions named by a generic CSV header.
struct CsvColumns {
  int user = -1, item = -1, timestamp = -1, action = -1;
  std::size_t count = 0;
};

// Fills `cols` from a header line; returns an empty string or what is wrong with it.
std::string read_csv_header(string_view line, CsvColumns* cols) {
  std::vector<string_view> f;
  split_on(line, ",", f);
  *cols = CsvColumns{};
  cols->count = f.size();
  for (std::size_t i = 0; i < f.size(); ++i) {
    const std::string name = lower(trim(f[i]));
    int* slot = name == "user" ? &cols->user
                : name == "item" ? &cols->item
                : name == "timestamp" ? &cols->timestamp
                : name == "action" ? &cols->action
                                   : nullptr;
    if (slot == nullptr) continue;
    if (*slot >= 0) return fmt::format("the header names column '{}' twice", name);
    *slot = static_cast<int>(i);
  }
  for (auto [slot, name] : {std::pair{cols->user, "user"}, {cols->item, "item"}, {cols->timestamp, "timestamp"}})
    if (slot < 0) return fmt::format("the header {} names no '{}' column", quoted(line), name);
  return {};
}

std::vector<Record> parse_generic_csv(const std::string& path, string_view text, bool* has_actions) {
  std::vector<Record> recs;
  std::vector<string_view> f;
  CsvColumns cols;
  bool header = true;
  for_each_line(text, [&](int64_t ln, string_view line) {
    const Where w{path, ln};
    if (header) {
      const std::string bad = read_csv_header(line, &cols);
      HSTU_CHECK(bad.empty(), w, bad,
                 "the first line must name the columns user, item, timestamp and optionally action");
      header = false;
      return true;
    }
    split_on(line, ",", f);
    if (f.size() != cols.count)
      throw Error(w, fmt::format("malformed line: the header has {} columns, this line {}", cols.count, f.size()),
                  "every row needs one field per header column (quoted fields are not supported)");
    recs.push_back({parse_id(f[cols.user], "user", w), parse_id(f[cols.item], "item", w),
                    parse_timestamp(f[cols.timestamp], w), ln, cols.action >= 0 ? parse_action(f[cols.action], w) : 0});
    return true;
  });
  *has_actions = cols.action >= 0;
  return recs;
}

std::vector<Record> parse_user_items(const std::string& path, string_view text) {
  std::vector<Record> recs;
  std::vector<string_view> f;
  std::unordered_map<int64_t, int64_t> first_line;  // a user on two lines is a broken file
  for_each_line(text, [&](int64_t ln, string_view line) {
    const Where w{path, ln};
    split_whitespace(line, f);
    const int64_t user = parse_id(f[0], "user", w);
    const auto [it, fresh] = first_line.emplace(user, ln);
    HSTU_CHECK(fresh, w, fmt::format("user {} already has a line (line {})", user, it->second),
               "this format has one line per user with all of its items");
    if (f.size() == 1) {
      // A user without items: one placeholder record (item -1) so that the length check sees
      // the user; it is counted as 0 interactions, so the user is reported or dropped.
      recs.push_back({user, -1, 0, ln, 0});
      return true;
    }
    for (std::size_t i = 1; i < f.size(); ++i) recs.push_back({user, parse_id(f[i], "item", w), 0, ln, 0});
    return true;
  });
  return recs;
}

std::vector<Record> parse_user_item(const std::string& path, string_view text) {
  std::vector<Record> recs;
  std::vector<string_view> f;
  for_each_line(text, [&](int64_t ln, string_view line) {
    const Where w{path, ln};
    split_whitespace(line, f);
    expect_fields(f, 2, "user item", w);
    recs.push_back({parse_id(f[0], "user", w), parse_id(f[1], "item", w), 0, ln, 0});
    return true;
  });
  return recs;
}

DataFormat detect_in_text(const std::string& path, string_view text) {
  DataFormat found = DataFormat::Auto;
  int lines = 0;
  std::vector<string_view> f;
  for_each_line(text, [&](int64_t ln, string_view line) {
    if (lines++ == 0) {
      if (line.find("::") != string_view::npos) found = DataFormat::MovieLensDat;
      else if (is_ml_csv_header(line)) found = DataFormat::MovieLensCsv;
      else if (line.find(',') != string_view::npos) {
        CsvColumns cols;
        const std::string bad = read_csv_header(line, &cols);
        HSTU_CHECK(bad.empty(), where_line(path, ln), "cannot tell the format: " + bad,
                   "pass --format, or give a CSV file a header naming user, item, timestamp");
        found = DataFormat::GenericCsv;
      }
      if (found != DataFormat::Auto) return false;
      found = DataFormat::UserItemPairs;
    }
    split_whitespace(line, f);
    if (f.size() >= 3) {
      found = DataFormat::UserItemsLines;
      return false;
    }
    return lines < 1000;
  });
  HSTU_CHECK(found != DataFormat::Auto, path, "no interactions (only blank lines)", "pass a file with interactions");
  return found;
}

// Sorts, checks lengths, remaps: records in file order -> a Dataset.
Dataset build_dataset(std::vector<Record>& recs, const std::string& path, bool has_ts, bool has_actions,
                      const ReadOptions& options) {
  HSTU_CHECK(!recs.empty(), path, "no interactions (only a header or blank lines)", "pass a file with interactions");
  std::stable_sort(recs.begin(), recs.end(),
                   [](const Record& a, const Record& b) { return a.user != b.user ? a.user < b.user : a.ts < b.ts; });

  // One pass over the user groups: keep the long enough, find the earliest short one.
  struct Group {
    std::size_t begin, end;
  };
  std::vector<Group> kept;
  int64_t short_users = 0, first_short_line = INT64_MAX, first_short_user = 0, first_short_count = 0;
  for (std::size_t b = 0; b < recs.size();) {
    std::size_t e = b;
    int64_t line = INT64_MAX, count = 0;
    for (; e < recs.size() && recs[e].user == recs[b].user; ++e) {
      line = std::min(line, recs[e].line);
      count += recs[e].item >= 0;  // -1 marks a user-items line without items
    }
    if (count >= kMinInteractions) {
      kept.push_back({b, e});
    } else {
      ++short_users;
      if (line < first_short_line) {
        first_short_line = line;
        first_short_user = recs[b].user;
        first_short_count = count;
      }
    }
    b = e;
  }
  if (short_users > 0 && !options.drop_short_users)
    throw Error(where_line(path, first_short_line),
                fmt::format("user {} has {} interaction{}; leave-one-out needs at least {} ({} user{} this short)",
                            first_short_user, first_short_count, first_short_count == 1 ? "" : "s", kMinInteractions,
                            short_users, short_users == 1 ? " is" : "s are"),
                "remove such users from the file, or drop them (hstu data inspect --drop-short-users; hstu train --set data.drop_short_users=true)");
  HSTU_CHECK(!kept.empty(), path, fmt::format("no user has at least {} interactions", kMinInteractions),
             "pass a larger file");

  Dataset d;
  d.dropped_users = options.drop_short_users ? short_users : 0;
  std::vector<int64_t> raw_items;
  for (const Group& g : kept)
    for (std::size_t i = g.begin; i < g.end; ++i) raw_items.push_back(recs[i].item);
  std::sort(raw_items.begin(), raw_items.end());
  raw_items.erase(std::unique(raw_items.begin(), raw_items.end()), raw_items.end());
  HSTU_CHECK(raw_items.size() < static_cast<std::size_t>(INT32_MAX), path,
             fmt::format("{} distinct items do not fit 32-bit ids", raw_items.size()), "split the dataset");
  d.num_items = static_cast<int32_t>(raw_items.size());
  d.raw_item_ids.insert(d.raw_item_ids.end(), raw_items.begin(), raw_items.end());

  std::size_t n = 0;
  for (const Group& g : kept) n += g.end - g.begin;
  d.items.reserve(n);
  if (has_ts) d.timestamps.reserve(n);
  if (has_actions) d.actions.reserve(n);
  int32_t max_action = 0;
  for (const Group& g : kept) {
    d.raw_user_ids.push_back(recs[g.begin].user);
    for (std::size_t i = g.begin; i < g.end; ++i) {
      const Record& r = recs[i];
      const auto id = std::lower_bound(raw_items.begin(), raw_items.end(), r.item) - raw_items.begin() + 1;
      d.items.push_back(static_cast<int32_t>(id));
      if (has_ts) d.timestamps.push_back(r.ts);
      if (has_actions) {
        d.actions.push_back(r.action);
        max_action = std::max(max_action, r.action);
      }
    }
    d.user_offsets.push_back(static_cast<int64_t>(d.items.size()));
  }
  d.num_actions = has_actions ? max_action + 1 : 0;
  return d;
}

}  // namespace

const char* format_name(DataFormat format) {
  switch (format) {
    case DataFormat::Auto: return "auto";
    case DataFormat::MovieLensDat: return "ml-dat";
    case DataFormat::MovieLensCsv: return "ml-csv";
    case DataFormat::UserItemsLines: return "user-items";
    case DataFormat::UserItemPairs: return "user-item";
    case DataFormat::GenericCsv: return "csv";
  }
  return "?";
}

DataFormat parse_format(const std::string& name, const std::string& where) {
  for (DataFormat f : {DataFormat::Auto, DataFormat::MovieLensDat, DataFormat::MovieLensCsv, DataFormat::UserItemsLines,
                       DataFormat::UserItemPairs, DataFormat::GenericCsv})
    if (name == format_name(f)) return f;
  throw Error(where, fmt::format("unknown data format '{}'", name),
              "use auto, ml-dat, ml-csv, user-items, user-item or csv");
}

DataFormat detect_format(const std::string& path) { return detect_in_text(path, read_text(path, kDetectBytes)); }

Dataset read_interactions(const std::string& path, DataFormat format, const ReadOptions& options) {
  const std::string text = read_text(path);
  if (format == DataFormat::Auto) format = detect_in_text(path, text);
  std::vector<Record> recs;
  bool has_ts = true, has_actions = true;
  switch (format) {
    case DataFormat::MovieLensDat: recs = parse_ml_dat(path, text); break;
    case DataFormat::MovieLensCsv: recs = parse_ml_csv(path, text); break;
    case DataFormat::GenericCsv: recs = parse_generic_csv(path, text, &has_actions); break;
    case DataFormat::UserItemsLines:
      recs = parse_user_items(path, text);
      has_ts = has_actions = false;
      break;
    case DataFormat::UserItemPairs:
      recs = parse_user_item(path, text);
      has_ts = has_actions = false;
      break;
    case DataFormat::Auto: break;
  }
  return build_dataset(recs, path, has_ts, has_actions, options);
}

}  // namespace hstu
