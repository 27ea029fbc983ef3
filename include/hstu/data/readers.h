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
//
// Auto-detection looks at the first non-blank line (and a few more for the last rule):
//   1. it contains "::"                                  -> ml-dat
//   2. it is userId,movieId,rating,timestamp             -> ml-csv   (case-insensitive)
//   3. it contains ',' and names user, item, timestamp   -> csv
//   4. it contains ',' otherwise                         -> error: pass the format explicitly
//   5. whitespace-separated: if any of the first 1000 non-blank lines has 3 or more fields ->
//      user-items, else user-item.
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

enum class DataFormat { Auto, MovieLensDat, MovieLensCsv, UserItemsLines, UserItemPairs, GenericCsv };

// "auto", "ml-dat", "ml-csv", "user-items", "user-item", "csv".
const char* format_name(DataFormat fmt);
// The inverse of format_name; throws hstu::Error naming `where` for an unknown name.
DataFormat parse_format(const std::string& name, const std::string& where);

struct ReadOptions {
  // Users with fewer than kMinInteractions interactions are an error unless this is set; then
  // they are left out and counted in Dataset::dropped_users.
  bool drop_short_users = false;
};

// The format of `path` by the rules above (reads only the start of the file).
DataFormat detect_format(const std::string& path);

// Parses the whole file. fmt = Auto detects it.
Dataset read_interactions(const std::string& path, DataFormat fmt = DataFormat::Auto, const ReadOptions& options = {});

}  // namespace hstu
