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
#include <unordered_set>

#include "hstu/core/error.h"
#include "hstu/data/readers.h"

namespace hstu {
namespace {

using std::int32_t;
using std::int64_t;
using std::string_view;

// Actions index an embedding table; a larger value is almost surely a wrong column.
constexpr int64_t kMaxAction = 65535;
// Detection reads this much of a file: enough for the sample's thousand lines of any real log.
constexpr std::size_t kDetectBytes = 256 * 1024;
// The lines that detection and the delimited format's delimiter and header rules look at.
constexpr std::size_t kSampleLines = 1000;
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

// A rating in half steps: true, with *twice = 2 * rating, when the whole field is a
// non-negative multiple of 0.5 whose double is at most max_twice.
bool to_half_steps(string_view s, int64_t max_twice, int32_t* twice) {
  double r = -1;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), r);
  const double t = r * 2;
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !(r >= 0) || t > static_cast<double>(max_twice) ||
      t != std::floor(t))
    return false;
  *twice = static_cast<int32_t>(t);
  return true;
}

// A MovieLens half-star rating (0.5, 1.0, ... ) as the action 2 * rating.
int32_t parse_half_star(string_view field, const Where& where) {
  const string_view s = trim(field);
  int32_t twice = 0;
  if (!to_half_steps(s, kMaxAction, &twice))
    throw Error(where, fmt::format("rating {} is not a non-negative multiple of 0.5", quoted(s)),
                "MovieLens ratings are 0.5 .. 5 in half stars");
  return twice;
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
               "this format has one line per user with all of its items; for one interaction per line, pass "
               "--format delimited");
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

// ---------------------------------------------------------------- the delimited format

// What a delimited column holds.
enum class Column { Skip, User, Item, Timestamp, Action, Rating };

const char* column_name(Column c) {
  switch (c) {
    case Column::Skip: return "-";
    case Column::User: return "user";
    case Column::Item: return "item";
    case Column::Timestamp: return "timestamp";
    case Column::Action: return "action";
    case Column::Rating: return "rating";
  }
  return "?";
}

// A header's or a column list's name as a column (the names and aliases of readers.h,
// case-insensitive); false for a name that is none of them.
bool column_of(string_view name, Column* c) {
  static const std::pair<const char*, Column> kNames[] = {
      {"user", Column::User},       {"userid", Column::User},     {"user_id", Column::User},
      {"item", Column::Item},       {"itemid", Column::Item},     {"item_id", Column::Item},
      {"movieid", Column::Item},    {"movie_id", Column::Item},   {"timestamp", Column::Timestamp},
      {"time", Column::Timestamp},  {"ts", Column::Timestamp},    {"action", Column::Action},
      {"label", Column::Action},    {"rating", Column::Rating}};
  const std::string n = lower(trim(name));
  for (const auto& [alias, column] : kNames)
    if (n == alias) {
      *c = column;
      return true;
    }
  return false;
}

// The column of each field of a line, and the fields the reader uses (-1: none).
struct Layout {
  std::vector<Column> cols;
  int user = -1, item = -1, timestamp = -1, action = -1, rating = -1;

  std::string text() const {
    std::string out;
    for (Column c : cols) {
      if (!out.empty()) out += ',';
      out += column_name(c);
    }
    return out;
  }
};

// Finds the used fields of l->cols; returns "" or what is wrong, worded to follow "the header
// 'x' " or "the column list 'x' ".
std::string index_layout(Layout* l) {
  for (std::size_t i = 0; i < l->cols.size(); ++i) {
    const Column c = l->cols[i];
    int* slot = c == Column::User        ? &l->user
                : c == Column::Item      ? &l->item
                : c == Column::Timestamp ? &l->timestamp
                : c == Column::Action    ? &l->action
                : c == Column::Rating    ? &l->rating
                                         : nullptr;
    if (slot == nullptr) continue;
    if (*slot >= 0)
      return fmt::format("names the {} column twice (fields {} and {})", column_name(c), *slot + 1, i + 1);
    *slot = static_cast<int>(i);
  }
  if (l->user < 0) return "names no user column (user, userId or user_id)";
  if (l->item < 0) return "names no item column (item, itemId, item_id, movieId or movie_id)";
  if (l->action >= 0 && l->rating >= 0) return "names both an action and a rating column (only one can be the action)";
  return {};
}

// A column list ("user,item,-,timestamp") as a layout; returns "" or what is wrong.
std::string layout_from_list(string_view list, Layout* l) {
  std::vector<string_view> names;
  split_on(list, ",", names);
  *l = Layout{};
  for (string_view raw : names) {
    const string_view name = trim(raw);
    Column c = Column::Skip;
    if (name.empty()) return "has an empty entry";
    if (name != "-" && name != "_" && !column_of(name, &c))
      return fmt::format("names an unknown column {} (use user, item, timestamp, action or rating, - to skip one)",
                         quoted(name));
    l->cols.push_back(c);
  }
  return index_layout(l);
}

// A header's fields as a layout, columns with other names skipped; returns "" or what is wrong.
std::string layout_from_header(const std::vector<string_view>& fields, Layout* l) {
  *l = Layout{};
  for (string_view name : fields) {
    Column c = Column::Skip;
    column_of(name, &c);
    l->cols.push_back(c);
  }
  return index_layout(l);
}

void split_fields(string_view line, Delimiter d, std::vector<string_view>& out) {
  switch (d) {
    case Delimiter::Tab: return split_on(line, "\t", out);
    case Delimiter::Comma: return split_on(line, ",", out);
    case Delimiter::Semicolon: return split_on(line, ";", out);
    case Delimiter::Space:
    case Delimiter::Auto: return split_whitespace(line, out);
  }
}

// Tab if every sampled line has a tab, else comma, else semicolon likewise, else space.
Delimiter sniff_delimiter(string_view text) {
  bool tab = true, comma = true, semicolon = true;
  std::size_t lines = 0;
  for_each_line(text, [&](int64_t, string_view line) {
    tab = tab && line.find('\t') != string_view::npos;
    comma = comma && line.find(',') != string_view::npos;
    semicolon = semicolon && line.find(';') != string_view::npos;
    return ++lines < kSampleLines;
  });
  return tab ? Delimiter::Tab : comma ? Delimiter::Comma : semicolon ? Delimiter::Semicolon : Delimiter::Space;
}

// A whole field as a finite decimal number (an id, a timestamp, a rating such as 3.5).
bool is_number(string_view s) {
  s = trim(s);
  double v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size() && std::isfinite(v);
}

bool all_numbers(const std::vector<string_view>& fields) {
  return std::all_of(fields.begin(), fields.end(), [](string_view f) { return is_number(f); });
}

// header = auto: a first line is a header when not all its fields are numbers. With a column
// list, when none of the fields the list uses is a number: a skipped column may hold text (a
// title), and a header's names are then free, so a data line with one bad field must not pass
// for a header and vanish.
bool looks_like_header(const std::vector<string_view>& f, const Layout* list) {
  if (list == nullptr) return !all_numbers(f);
  for (std::size_t i = 0; i < f.size() && i < list->cols.size(); ++i)
    if (list->cols[i] != Column::Skip && is_number(f[i])) return false;
  return true;
}

constexpr const char* kColumnListFix =
    "name the columns by position: user, item and optionally timestamp and action or rating, - to skip one "
    "(e.g. user,item,rating,timestamp)";

// The layout of a delimited file without a column list, from its first line: the names of a
// header, else the default for its number of fields (2, 3 or 4; readers.h).
Layout layout_of_first_line(const std::vector<string_view>& f, bool header, bool header_guessed, string_view line,
                            const Where& w) {
  Layout l;
  if (header) {
    const std::string bad = layout_from_header(f, &l);
    if (!bad.empty())
      throw Error(w,
                  fmt::format("the header {} {}{}", quoted(line), bad,
                              header_guessed && std::any_of(f.begin(), f.end(), is_number)
                                  ? " (taken as a header: not all its fields are numbers)"
                                  : ""),
                  "name the columns user, item and optionally timestamp and action or rating in the header, or "
                  "pass a column list (--columns)");
    return l;
  }
  static const char* const kByCount[] = {"user,item", "user,item,timestamp", "user,item,rating,timestamp"};
  if (f.size() < 2 || f.size() > 4)
    throw Error(w, fmt::format("{} field{} per line and no header: which column is which is not known", f.size(),
                               f.size() == 1 ? "" : "s"),
                "pass a column list (--columns, e.g. user,item,rating,timestamp,-) or add a header; or check the "
                "delimiter (--delimiter)");
  layout_from_list(kByCount[f.size() - 2], &l);
  return l;
}

int32_t parse_rating(string_view field, const Where& where) {
  const string_view s = trim(field);
  int32_t twice = 0;
  if (!to_half_steps(s, 2 * kMaxAction, &twice))
    throw Error(where, fmt::format("rating {} is not a non-negative whole number or half star", quoted(s)),
                fmt::format("ratings are numbers such as 4 or 3.5, at most {}", kMaxAction));
  return twice;
}

// Records hold 2 * rating; whole ratings stay as they are (u.data's 1..5, as in ml-dat), but
// one half star in the file doubles them all (as in ml-csv), so that 3.5 stays below 4.
void ratings_to_actions(std::vector<Record>& recs, bool half_stars, const std::string& path) {
  for (Record& r : recs) {
    if (!half_stars) {
      r.action /= 2;
    } else if (r.action > kMaxAction) {
      throw Error(Where{path, r.line},
                  fmt::format("rating {} becomes the action {}, above {} (the file has half stars, so actions are "
                              "2 * rating)",
                              r.action / 2.0, r.action, kMaxAction),
                  fmt::format("with half stars, ratings must be at most {}", kMaxAction / 2.0));
    }
  }
}

std::vector<Record> parse_delimited(const std::string& path, string_view text, const ReadOptions& options,
                                    bool* has_ts, bool* has_actions) {
  const Delimiter delim = options.delimiter == Delimiter::Auto ? sniff_delimiter(text) : options.delimiter;
  Layout layout;
  if (!options.columns.empty()) {
    const std::string bad = layout_from_list(options.columns, &layout);
    HSTU_CHECK(bad.empty(), path, fmt::format("the column list {} {}", quoted(options.columns), bad), kColumnListFix);
  }
  std::vector<Record> recs;
  std::vector<string_view> f;
  bool first = true, half_stars = false;
  for_each_line(text, [&](int64_t ln, string_view line) {
    const Where w{path, ln};
    split_fields(line, delim, f);
    if (first) {
      first = false;
      const bool guessed = options.header == HeaderMode::Auto;
      const bool header = options.header == HeaderMode::Yes ||
                          (guessed && looks_like_header(f, options.columns.empty() ? nullptr : &layout));
      if (options.columns.empty()) layout = layout_of_first_line(f, header, guessed, line, w);
      else if (header && f.size() != layout.cols.size())
        throw Error(w, fmt::format("the header has {} fields, the column list {} ({})", f.size(), layout.cols.size(),
                                   layout.text()),
                    "give the column list one name per column of the file");
      if (header) return true;
    }
    if (f.size() != layout.cols.size())
      throw Error(w, fmt::format("malformed line: expected {} fields ({}), found {}", layout.cols.size(), layout.text(),
                                 f.size()),
                  fmt::format("every line needs one field per column (quoting is not supported); the delimiter is "
                              "{}, --delimiter sets it",
                              delimiter_name(delim)));
    Record r{parse_id(f[layout.user], "user", w), parse_id(f[layout.item], "item", w),
             layout.timestamp >= 0 ? parse_timestamp(f[layout.timestamp], w) : 0, ln, 0};
    if (layout.action >= 0) r.action = parse_action(f[layout.action], w);
    if (layout.rating >= 0) {
      r.action = parse_rating(f[layout.rating], w);
      half_stars = half_stars || r.action % 2 != 0;
    }
    recs.push_back(r);
    return true;
  });
  if (layout.rating >= 0) ratings_to_actions(recs, half_stars, path);
  *has_ts = layout.timestamp >= 0;
  *has_actions = layout.action >= 0 || layout.rating >= 0;
  return recs;
}

// ---------------------------------------------------------------- detection

// Rules 4 and 6: the line's fields, split by `d`, name a user and an item column.
bool names_user_and_item(string_view line, Delimiter d) {
  std::vector<string_view> f;
  split_fields(line, d, f);
  bool user = false, item = false;
  for (string_view name : f) {
    Column c = Column::Skip;
    column_of(name, &c);
    user = user || c == Column::User;
    item = item || c == Column::Item;
  }
  return user && item;
}

// Rules 7 and 8: every sampled line, split by `d`, has the same number (lo..hi) of fields, all
// numbers, and some first field (the user) is on two lines, which a user-items file never has.
bool numeric_table(const std::vector<string_view>& sample, Delimiter d, std::size_t lo, std::size_t hi) {
  std::vector<string_view> f;
  std::unordered_set<string_view> users;
  bool repeated = false;
  std::size_t n = 0;
  for (string_view line : sample) {
    split_fields(line, d, f);
    if (n == 0) n = f.size();
    if (f.size() != n || n < lo || n > hi || !all_numbers(f)) return false;
    repeated = !users.insert(trim(f[0])).second || repeated;
  }
  return repeated;
}

// Rule 8's timestamps: field `col` of every sampled line (split by spaces) is an integer of at
// least 10^8, a Unix time in seconds after 1973 (or finer). This is what tells "user item rating
// timestamp" from a user-items file whose users each have 3 items, where a repeated user is the
// file's defect to report, not a sign of another format.
bool unix_times(const std::vector<string_view>& sample, std::size_t col) {
  constexpr int64_t kUnix1973 = 100'000'000;
  std::vector<string_view> f;
  int64_t t = 0;
  for (string_view line : sample) {
    split_whitespace(line, f);
    if (f.size() <= col || !to_int(f[col], &t) || t < kUnix1973) return false;
  }
  return true;
}

DataFormat detect_in_text(const std::string& path, string_view text) {
  std::vector<string_view> sample;
  int64_t first_line = 0;
  for_each_line(text, [&](int64_t ln, string_view line) {
    if (sample.empty()) first_line = ln;
    sample.push_back(line);
    return sample.size() < kSampleLines;
  });
  HSTU_CHECK(!sample.empty(), path, "no interactions (only blank lines)", "pass a file with interactions");
  const string_view first = sample.front();
  if (first.find("::") != string_view::npos) return DataFormat::MovieLensDat;
  if (is_ml_csv_header(first)) return DataFormat::MovieLensCsv;
  if (first.find(',') != string_view::npos) {
    CsvColumns cols;
    const std::string bad = read_csv_header(first, &cols);
    if (bad.empty()) return DataFormat::GenericCsv;
    if (names_user_and_item(first, Delimiter::Comma)) return DataFormat::Delimited;
    std::vector<string_view> f;
    split_on(first, ",", f);
    const std::string why = all_numbers(f) ? "comma-separated fields without a header" : bad;
    throw Error(where_line(path, first_line), "cannot tell the format: " + why,
                "pass --format delimited with --columns (e.g. user,item,timestamp), or give the file a header naming "
                "its user, item and timestamp columns");
  }
  if (first.find('\t') != string_view::npos && names_user_and_item(first, Delimiter::Tab)) return DataFormat::Delimited;
  if (numeric_table(sample, Delimiter::Tab, 2, 6)) return DataFormat::Delimited;
  if (numeric_table(sample, Delimiter::Space, 4, 4) && unix_times(sample, 3)) return DataFormat::Delimited;
  std::vector<string_view> f;
  for (string_view line : sample) {
    split_whitespace(line, f);
    if (f.size() >= 3) return DataFormat::UserItemsLines;
  }
  return DataFormat::UserItemPairs;
}

bool has_delimited_settings(const ReadOptions& o) {
  return o.delimiter != Delimiter::Auto || o.header != HeaderMode::Auto || !o.columns.empty();
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
    case DataFormat::Delimited: return "delimited";
  }
  return "?";
}

DataFormat parse_format(const std::string& name, const std::string& where) {
  for (DataFormat f : {DataFormat::Auto, DataFormat::MovieLensDat, DataFormat::MovieLensCsv, DataFormat::UserItemsLines,
                       DataFormat::UserItemPairs, DataFormat::GenericCsv, DataFormat::Delimited})
    if (name == format_name(f)) return f;
  throw Error(where, fmt::format("unknown data format '{}'", name),
              "use auto, ml-dat, ml-csv, user-items, user-item, csv or delimited");
}

const char* delimiter_name(Delimiter d) {
  switch (d) {
    case Delimiter::Auto: return "auto";
    case Delimiter::Tab: return "tab";
    case Delimiter::Comma: return "comma";
    case Delimiter::Semicolon: return "semicolon";
    case Delimiter::Space: return "space";
  }
  return "?";
}

Delimiter parse_delimiter(const std::string& name, const std::string& where) {
  for (Delimiter d : {Delimiter::Auto, Delimiter::Tab, Delimiter::Comma, Delimiter::Semicolon, Delimiter::Space})
    if (name == delimiter_name(d)) return d;
  throw Error(where, fmt::format("unknown delimiter {}", quoted(name)), "use auto, tab, comma, semicolon or space");
}

const char* header_mode_name(HeaderMode h) {
  switch (h) {
    case HeaderMode::Auto: return "auto";
    case HeaderMode::Yes: return "yes";
    case HeaderMode::No: return "no";
  }
  return "?";
}

HeaderMode parse_header_mode(const std::string& name, const std::string& where) {
  for (HeaderMode h : {HeaderMode::Auto, HeaderMode::Yes, HeaderMode::No})
    if (name == header_mode_name(h)) return h;
  throw Error(where, fmt::format("unknown header setting {}", quoted(name)), "use auto, yes or no");
}

std::string parse_columns(const std::string& list, const std::string& where) {
  if (list.empty()) return list;
  Layout l;
  const std::string bad = layout_from_list(list, &l);
  HSTU_CHECK(bad.empty(), where, fmt::format("the column list {} {}", quoted(list), bad), kColumnListFix);
  return l.text();
}

DataFormat detect_format(const std::string& path, const ReadOptions& options) {
  if (has_delimited_settings(options)) return DataFormat::Delimited;
  return detect_in_text(path, read_text(path, kDetectBytes));
}

Dataset read_interactions(const std::string& path, DataFormat format, const ReadOptions& options) {
  const std::string text = read_text(path);
  const bool delimited_settings = has_delimited_settings(options);
  if (format == DataFormat::Auto) format = delimited_settings ? DataFormat::Delimited : detect_in_text(path, text);
  HSTU_CHECK(format == DataFormat::Delimited || !delimited_settings, path,
             fmt::format("a delimiter, header or column list is set, but the file is read as {}", format_name(format)),
             "those settings are the delimited format's: leave them out, or read the file as delimited");
  std::vector<Record> recs;
  bool has_ts = true, has_actions = true;
  switch (format) {
    case DataFormat::MovieLensDat: recs = parse_ml_dat(path, text); break;
    case DataFormat::MovieLensCsv: recs = parse_ml_csv(path, text); break;
    case DataFormat::GenericCsv: recs = parse_generic_csv(path, text, &has_actions); break;
    case DataFormat::Delimited: recs = parse_delimited(path, text, options, &has_ts, &has_actions); break;
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
