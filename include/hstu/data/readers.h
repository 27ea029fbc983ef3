// Readers of interaction logs. Each builds per-user, time-ordered sequences and remaps ids.
//
// Formats (lines may end in LF or CRLF; blank lines are skipped; ids are decimal integers
// 0 .. 2^63-1, so leading zeros are ignored: "0104257" and "104257" are the same id):
//   ml-dat      MovieLens ratings.dat: user::item::rating::timestamp. The rating (an integer)
//               becomes the action.
//   ml-csv      MovieLens ratings.csv: the header userId,movieId,rating,timestamp, then one row
//               per rating. The rating (0.5 .. 5 in half stars) becomes the action 2 * rating.
//   user-items  "user item item ...": one user per line, items already in time order, fields
//               separated by spaces or tabs; a user on two lines is an error. No timestamps.
//   user-item   "user item": one interaction per line, in time order. No timestamps.
//   csv         a comma-separated file whose header names the columns user, item, timestamp and
//               optionally action (any order, other columns ignored, no quoting); timestamps
//               are integers, actions non-negative integers.
//   delimited   one interaction per line in columns, set by ReadOptions (no quoting):
//               - delimiter: tab, comma, semicolon, space (any run of spaces and tabs), or auto:
//                 tab if every one of the first 1000 non-blank lines has a tab, else comma if
//                 every one has a comma, else semicolon likewise, else space.
//               - header: yes, no, or auto: the first line is a header when not all of its
//                 fields are numbers; with a column list, when none of the fields it does not
//                 skip is a number (so a data line with one bad id is an error, not a header).
//               - columns: a header names them; names are case-insensitive and trimmed:
//                   user       user, userid, user_id
//                   item       item, itemid, item_id, movieid, movie_id
//                   timestamp  timestamp, time, ts
//                   action     action, label
//                   rating     rating
//                 other names are ignored. Or a column list names them by position, with the
//                 same names, "-" or "_" skipping a column: "user,item,rating,timestamp"
//                 (with a header too, whose names it then replaces). Without header or list, a
//                 file with 2 fields per line is user,item; 3 fields user,item,timestamp; 4
//                 fields user,item,rating,timestamp (MovieLens-100K's u.data); more need a list.
//                 user and item are required, timestamp is optional (without it a user's lines
//                 keep file order), and action and rating exclude each other.
//               - an action is a non-negative integer as in csv. A rating is a whole number or
//                 a half star (3.5): when every rating of the file is whole, the action is the
//                 rating (u.data's 1..5 stay 1..5, as in ml-dat); when any is a half star,
//                 every action is 2 * rating (as in ml-csv), so the ratings keep their order.
//               Every line has as many fields as the header or the list. The delimiter,
//               header and columns options are this format's only: set with another, an error.
//
// Auto-detection looks at the first non-blank line, and for the last rules at the first 1000
// non-blank lines (the sample); a delimiter, header or column list other than the defaults
// (auto, auto, none) chooses delimited without looking.
//   1. it contains "::"                                  -> ml-dat
//   2. it is userId,movieId,rating,timestamp             -> ml-csv   (case-insensitive)
//   3. it contains ',' and names user, item, timestamp   -> csv
//   4. it contains ',' and its fields name a user and an item column by the delimited
//      format's names                                    -> delimited, with that header
//   5. it contains ',' otherwise                         -> error: pass the format explicitly
//   6. it contains a tab and its tab-separated fields name a user and an item column
//                                                        -> delimited, with that header
//   7. every sampled line has the same number (2..6) of tab-separated fields, all numbers,
//      and some user (first field) is on two lines      -> delimited (u.data)
//   8. every sampled line has exactly 4 whitespace-separated fields, all numbers, some user is
//      on two lines, and every 4th field is an integer >= 10^8 (a Unix time after 1973)
//                                                        -> delimited (user item rating timestamp)
//   9. whitespace-separated: if any sampled line has 3 or more fields -> user-items, else
//      user-item.
// The repeated user in rules 7 and 8 keeps a user-items file (one line per user) out of them;
// rule 8's timestamps keep out a broken one (a user on two lines, each with 3 items), whose
// defect user-items then reports.
//
// Ordering and ids: a user's interactions are sorted by timestamp; ties (and formats without
// time) keep file order. Users are numbered 0 .. U-1 and items 1 .. I in increasing raw id, so a
// file whose ids are already dense (1 .. I) keeps its item ids.
//
// Every defect is an hstu::Error whose where is "FILE" or "FILE:LINE".
#pragma once

#include <string>

#include "hstu/data/dataset.h"

namespace hstu {

enum class DataFormat { Auto, MovieLensDat, MovieLensCsv, UserItemsLines, UserItemPairs, GenericCsv, Delimited };

// "auto", "ml-dat", "ml-csv", "user-items", "user-item", "csv", "delimited".
const char* format_name(DataFormat fmt);
// The inverse of format_name; throws hstu::Error naming `where` for an unknown name.
DataFormat parse_format(const std::string& name, const std::string& where);

// The delimited format's field separator (Space: any run of spaces and tabs).
enum class Delimiter { Auto, Tab, Comma, Semicolon, Space };
// "auto", "tab", "comma", "semicolon", "space".
const char* delimiter_name(Delimiter d);
// The inverse of delimiter_name; throws hstu::Error naming `where` for an unknown name.
Delimiter parse_delimiter(const std::string& name, const std::string& where);

// Whether a delimited file starts with a header line.
enum class HeaderMode { Auto, Yes, No };
// "auto", "yes", "no".
const char* header_mode_name(HeaderMode h);
// The inverse of header_mode_name; throws hstu::Error naming `where` for an unknown name.
HeaderMode parse_header_mode(const std::string& name, const std::string& where);

// A column list ("user,item,rating,timestamp", "-" or "_" skips a column, names as above) in
// canonical form: trimmed, lower case, aliases replaced by their column, skips as "-". Throws
// hstu::Error naming `where` for an unknown or repeated name, an empty entry, no user or no
// item column, or both action and rating. "" stays "" (no list).
std::string parse_columns(const std::string& list, const std::string& where);

struct ReadOptions {
  // Users with fewer than kMinInteractions interactions are an error unless this is set; then
  // they are left out and counted in Dataset::dropped_users.
  bool drop_short_users = false;
  // The delimited format's settings (above). Any of them set to other than its default makes
  // Auto mean delimited, and is an error with another format.
  Delimiter delimiter = Delimiter::Auto;
  HeaderMode header = HeaderMode::Auto;
  std::string columns;  // "": from the header, or from the number of fields
};

// The format of `path` by the rules above (reads only the start of the file); Delimited without
// reading when `options` sets a delimited setting.
DataFormat detect_format(const std::string& path, const ReadOptions& options = {});

// Parses the whole file. fmt = Auto detects it.
Dataset read_interactions(const std::string& path, DataFormat fmt = DataFormat::Auto, const ReadOptions& options = {});

}  // namespace hstu
