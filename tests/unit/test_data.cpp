// The data stage: readers (every format and every bad input), the binary cache (round trip,
// staleness, damage), the leave-one-out split and batches, the synthetic generator, the real
// datasets in ../shared/data when present, and `hstu data inspect` as a user runs it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "hstu/core/error.h"
#include "hstu/data/dataset.h"
#include "hstu/data/dataset_cache.h"
#include "hstu/data/readers.h"
#include "hstu/data/split.h"
#include "hstu/data/synthetic.h"
#include "test_util.h"

namespace hstu {
namespace {

namespace fs = std::filesystem;

std::vector<std::int32_t> seq(const Dataset& d, std::int64_t u) {
  const auto s = d.user_items(u);
  return {s.begin(), s.end()};
}

// The raw ids of user u's items, oldest first.
std::vector<std::int64_t> raw_seq(const Dataset& d, std::int64_t u) {
  std::vector<std::int64_t> out;
  for (std::int32_t i : d.user_items(u)) out.push_back(d.raw_item_ids[i]);
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class DataTest : public test::TempDirTest {
 protected:

  std::string write(const std::string& name, const std::string& content) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }

  // Runs `fn`, which must throw hstu::Error whose where is `where` and whose message holds `what`.
  static void expect_error(const std::function<void()>& fn, const std::string& where, const std::string& what) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected " << where << ": " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), where) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "not one line: " << e.what();
    }
  }

};

// ---------------------------------------------------------------- readers: good files

TEST_F(DataTest, MovieLensDatSortsByTimeStablyAndRemaps) {
  // User 7's lines are out of time order and two of them tie at t = 50 (file order must hold);
  // CRLF and LF mixed; item 0104257 is the integer 104257.
  const std::string p = write("ratings.dat",
                              "7::30::4::100\r\n"
                              "7::0104257::5::50\n"
                              "3::30::1::10\n"
                              "7::20::3::50\r\n"
                              "3::20::2::5\n"
                              "\n"
                              "3::10::0::20\n"
                              "7::10::2::200\n");
  const Dataset d = read_interactions(p, DataFormat::MovieLensDat);
  d.validate("test");
  ASSERT_EQ(d.num_users(), 2);
  EXPECT_EQ(d.raw_user_ids, (std::vector<std::int64_t>{3, 7}));  // users in raw id order
  EXPECT_EQ(d.raw_item_ids, (std::vector<std::int64_t>{0, 10, 20, 30, 104257}));
  EXPECT_EQ(raw_seq(d, 0), (std::vector<std::int64_t>{20, 30, 10}));
  EXPECT_EQ(raw_seq(d, 1), (std::vector<std::int64_t>{104257, 20, 30, 10}));
  EXPECT_EQ(d.timestamps, (std::vector<std::int64_t>{5, 10, 20, 50, 50, 100, 200}));
  EXPECT_EQ(d.actions, (std::vector<std::int32_t>{2, 1, 0, 5, 3, 4, 2}));
  EXPECT_EQ(d.num_actions, 6);
  EXPECT_EQ(d.num_items, 4);
  EXPECT_EQ(d.dropped_users, 0);
}

TEST_F(DataTest, MovieLensCsvWithCrlfHeaderAndHalfStars) {
  const std::string p = write("ratings.csv",
                              "userId,movieId,rating,timestamp\r\n"
                              "1,5,4.0,30\r\n"
                              "1,6,0.5,10\r\n"
                              "1,7,3.5,20\r\n"
                              "2,5,5,1\r\n"
                              "2,8,1.0,2\r\n"
                              "2,9,2.5,3\r\n"
                              "\r\n");
  const Dataset d = read_interactions(p, DataFormat::MovieLensCsv);
  ASSERT_EQ(d.num_users(), 2);
  EXPECT_EQ(raw_seq(d, 0), (std::vector<std::int64_t>{6, 7, 5}));
  EXPECT_EQ(d.actions, (std::vector<std::int32_t>{1, 7, 8, 10, 2, 5}));  // 2 * rating
  EXPECT_EQ(d.num_actions, 11);
  EXPECT_EQ(read_interactions(p).items, d.items);  // detected as ml-csv
}

TEST_F(DataTest, UserItemsLinesKeepOrderAndDenseIds) {
  const std::string p = write("seq.txt", "1 1 2 3 4\n2 5 1\t3\n\n3 2 5 4 1 3\n");
  const Dataset d = read_interactions(p, DataFormat::UserItemsLines);
  ASSERT_EQ(d.num_users(), 3);
  EXPECT_EQ(seq(d, 0), (std::vector<std::int32_t>{1, 2, 3, 4}));  // dense ids stay as they are
  EXPECT_EQ(seq(d, 1), (std::vector<std::int32_t>{5, 1, 3}));
  EXPECT_EQ(seq(d, 2), (std::vector<std::int32_t>{2, 5, 4, 1, 3}));
  EXPECT_FALSE(d.has_timestamps());
  EXPECT_FALSE(d.has_actions());
  EXPECT_EQ(detect_format(p), DataFormat::UserItemsLines);
}

TEST_F(DataTest, UserItemPairsKeepFileOrderPerUser) {
  const std::string p = write("pairs.txt", "9 100\n4 7\n9 50\n4 8\n9 100\n4 6\n9 1\n");
  const Dataset d = read_interactions(p);
  EXPECT_EQ(detect_format(p), DataFormat::UserItemPairs);
  ASSERT_EQ(d.num_users(), 2);
  EXPECT_EQ(raw_seq(d, 0), (std::vector<std::int64_t>{7, 8, 6}));
  EXPECT_EQ(raw_seq(d, 1), (std::vector<std::int64_t>{100, 50, 100, 1}));  // repeats are kept
}

TEST_F(DataTest, GenericCsvColumnsInAnyOrder) {
  const std::string p = write("log.csv",
                              "timestamp, Item ,extra,user,action\n"
                              "3,11,x,1,2\n1,12,y,1,0\n2,13,z,1,1\n"
                              "5,11,,2,1\n6,12,,2,1\n7,14,,2,3\n");
  const Dataset d = read_interactions(p);
  EXPECT_EQ(detect_format(p), DataFormat::GenericCsv);
  EXPECT_EQ(raw_seq(d, 0), (std::vector<std::int64_t>{12, 13, 11}));
  EXPECT_EQ(d.actions, (std::vector<std::int32_t>{0, 1, 2, 1, 1, 3}));
  EXPECT_EQ(d.num_actions, 4);
  // Without an action column there are no actions.
  const Dataset e = read_interactions(write("noact.csv", "user,item,timestamp\n1,2,3\n1,3,4\n1,4,5\n"));
  EXPECT_FALSE(e.has_actions());
  EXPECT_EQ(e.num_actions, 0);
}

TEST_F(DataTest, AutoDetection) {
  EXPECT_EQ(detect_format(write("a", "\n1::2::3::4\n")), DataFormat::MovieLensDat);
  EXPECT_EQ(detect_format(write("b", "USERID,movieId,rating,timestamp\n")), DataFormat::MovieLensCsv);
  EXPECT_EQ(detect_format(write("c", "user,item,timestamp\n")), DataFormat::GenericCsv);
  EXPECT_EQ(detect_format(write("d", "1 2\n1 3\n2 4 5\n")), DataFormat::UserItemsLines);
  EXPECT_EQ(detect_format(write("e", "1 2\n1 3\n")), DataFormat::UserItemPairs);
  expect_error([&] { detect_format(write("f.csv", "1,2,3\n")); }, (dir_ / "f.csv").string() + ":1",
               "cannot tell the format");
  EXPECT_EQ(parse_format("user-items", "x"), DataFormat::UserItemsLines);
  expect_error([] { parse_format("parquet", "--format"); }, "--format", "unknown data format 'parquet'");
}

// ---------------------------------------------------------------- readers: bad input

TEST_F(DataTest, EmptyFilesAndMissingFiles) {
  const std::string empty = write("empty.dat", "");
  expect_error([&] { read_interactions(empty); }, empty, "empty file");
  expect_error([&] { read_interactions(empty, DataFormat::MovieLensDat); }, empty, "empty file");
  const std::string blank = write("blank.txt", "\n  \r\n\n");
  expect_error([&] { read_interactions(blank); }, blank, "no interactions");
  expect_error([&] { read_interactions(blank, DataFormat::UserItemPairs); }, blank, "no interactions");
  const std::string header_only = write("h.csv", "userId,movieId,rating,timestamp\r\n");
  expect_error([&] { read_interactions(header_only); }, header_only, "no interactions");
  const std::string missing = (dir_ / "missing.dat").string();
  expect_error([&] { read_interactions(missing); }, missing, "cannot open");
  expect_error([&] { read_interactions(dir_.string()); }, dir_.string(), "not a regular file");
}

TEST_F(DataTest, MalformedLinesNameFileAndLine) {
  const std::string dat = write("r.dat", "1::2::3::4\n1::2::3\n");
  expect_error([&] { read_interactions(dat); }, dat + ":2", "expected 4 fields");
  const std::string csv = write("r.csv", "userId,movieId,rating,timestamp\n1,2,3.0,4\n\n1,2,3.0,4,5\n");
  expect_error([&] { read_interactions(csv); }, csv + ":4", "expected 4 fields");
  const std::string pairs = write("p.txt", "1 2\n1 2\n1 2 3\n");
  expect_error([&] { read_interactions(pairs, DataFormat::UserItemPairs); }, pairs + ":3", "expected 2 fields");
  const std::string gen = write("g.csv", "user,item,timestamp\n1,2,3\n1,2\n");
  expect_error([&] { read_interactions(gen); }, gen + ":3", "the header has 3 columns, this line 2");
}

TEST_F(DataTest, NonNumericValuesNameTheField) {
  const std::string a = write("a.dat", "1::2::3::4\nu7::2::3::4\n");
  expect_error([&] { read_interactions(a); }, a + ":2", "user id 'u7' is not a non-negative integer");
  const std::string b = write("b.dat", "1::2x::3::4\n");
  expect_error([&] { read_interactions(b); }, b + ":1", "item id '2x'");
  const std::string c = write("c.dat", "1::2::3::yesterday\n");
  expect_error([&] { read_interactions(c); }, c + ":1", "timestamp 'yesterday' is not an integer");
  const std::string d = write("d.dat", "-1::2::3::4\n");
  expect_error([&] { read_interactions(d); }, d + ":1", "user id '-1'");
  const std::string e = write("e.csv", "userId,movieId,rating,timestamp\n1,2,3.25,4\n");
  expect_error([&] { read_interactions(e); }, e + ":2", "rating '3.25' is not a non-negative multiple of 0.5");
  const std::string f = write("f.txt", "1 2 3 x4 5\n");
  expect_error([&] { read_interactions(f); }, f + ":1", "item id 'x4'");
  const std::string g = write("g.dat", "1::99999999999999999999::3::4\n");
  expect_error([&] { read_interactions(g); }, g + ":1", "item id '99999999999999999999'");
  const std::string h = write("h.csv", "user,item,timestamp,action\n1,2,3,-1\n");
  expect_error([&] { read_interactions(h); }, h + ":2", "action '-1' is not an integer in 0..65535");
}

TEST_F(DataTest, WrongHeaders) {
  const std::string a = write("ratings.csv", "user,movie,rating,time\n1,2,3,4\n");
  expect_error([&] { read_interactions(a, DataFormat::MovieLensCsv); }, a + ":1",
               "expected the header userId,movieId,rating,timestamp");
  const std::string b = write("b.csv", "user,item,time\n1,2,3\n");
  expect_error([&] { read_interactions(b, DataFormat::GenericCsv); }, b + ":1", "names no 'timestamp' column");
  const std::string c = write("c.csv", "user,item,timestamp,user\n1,2,3,4\n");
  expect_error([&] { read_interactions(c, DataFormat::GenericCsv); }, c + ":1", "names column 'user' twice");
}

TEST_F(DataTest, UserOnTwoLinesIsAnError) {
  const std::string p = write("s.txt", "1 1 2 3\n2 1 2 3\n1 4 5 6\n");
  expect_error([&] { read_interactions(p); }, p + ":3", "user 1 already has a line (line 1)");
}

TEST_F(DataTest, ShortUsersFailOrAreDropped) {
  // User 5 (2 interactions, first seen on line 2) is the first short user in file order.
  const std::string p = write("r.dat",
                              "9::1::1::1\n5::1::1::1\n9::2::1::2\n5::2::1::2\n9::3::1::3\n8::7::1::1\n");
  expect_error([&] { read_interactions(p); }, p + ":2",
               "user 5 has 2 interactions; leave-one-out needs at least 3 (2 users are this short)");
  ReadOptions drop;
  drop.drop_short_users = true;
  const Dataset d = read_interactions(p, DataFormat::Auto, drop);
  EXPECT_EQ(d.num_users(), 1);
  EXPECT_EQ(d.dropped_users, 2);
  EXPECT_EQ(d.raw_user_ids, (std::vector<std::int64_t>{9}));
  EXPECT_EQ(d.num_items, 3);  // item 7 belonged to a dropped user only
  EXPECT_EQ(summarize(d).dropped_users, 2);
  // A user-items line with no items is a user with 0 interactions.
  const std::string q = write("q.txt", "1 1 2 3\n2\n");
  expect_error([&] { read_interactions(q); }, q + ":2", "user 2 has 0 interactions");
  // Every user short, even when dropping.
  const std::string r = write("s.dat", "1::1::1::1\n");
  expect_error([&] { read_interactions(r, DataFormat::Auto, drop); }, r, "no user has at least 3 interactions");
}

// ---------------------------------------------------------------- summary

TEST_F(DataTest, SummaryPercentilesNearestRank) {
  Dataset d;
  for (std::int64_t u = 0; u < 10; ++u) {  // lengths 3, 4, ..., 12
    for (std::int64_t i = 0; i < u + 3; ++i) d.items.push_back(1);
    d.user_offsets.push_back(static_cast<std::int64_t>(d.items.size()));
    d.raw_user_ids.push_back(u);
  }
  d.num_items = 1;
  d.raw_item_ids = {0, 1};
  d.validate("test");
  const DatasetSummary s = summarize(d);
  EXPECT_EQ(s.users, 10);
  EXPECT_EQ(s.interactions, 75);
  EXPECT_EQ(s.min_len, 3);
  EXPECT_EQ(s.p50, 7);   // 5th smallest
  EXPECT_EQ(s.p90, 11);  // 9th
  EXPECT_EQ(s.p99, 12);  // 10th
  EXPECT_EQ(s.max_len, 12);
  EXPECT_DOUBLE_EQ(s.mean_len, 7.5);
}

// ---------------------------------------------------------------- cache

const char* kSmallDat = "1::10::5::3\n1::20::4::1\n1::30::3::2\n2::20::1::9\n2::40::2::8\n2::10::3::7\n";

TEST_F(DataTest, CacheRoundTripIsBitwiseEqual) {
  const std::string src = write("r.dat", kSmallDat);
  const Dataset d = read_interactions(src);
  const CacheKey key = cache_key_for(src, DataFormat::MovieLensDat, {});
  const std::string c1 = (dir_ / "a.hstu-cache").string(), c2 = (dir_ / "b.hstu-cache").string();
  write_dataset_cache(c1, d, key);
  write_dataset_cache(c2, d, key);
  EXPECT_EQ(slurp(c1), slurp(c2));  // deterministic bytes
  Dataset back;
  std::string why;
  ASSERT_EQ(read_dataset_cache(c1, key, &back, &why), CacheStatus::Ok) << why;
  EXPECT_TRUE(back == d);
  // Also without timestamps and actions.
  const Dataset s = read_interactions(write("s.txt", "1 1 2 3\n2 3 2 1 4\n"));
  write_dataset_cache(c1, s, key);
  ASSERT_EQ(read_dataset_cache(c1, key, &back, &why), CacheStatus::Ok) << why;
  EXPECT_TRUE(back == s);
}

TEST_F(DataTest, LoadOrBuildUsesTheCacheAndRebuildsWhenStale) {
  const std::string src = write("ratings.dat", kSmallDat);
  const std::string cache_dir = (dir_ / "cache").string();  // created on demand
  CacheInfo ci;
  const Dataset a = load_or_build(src, DataFormat::Auto, cache_dir, {}, &ci);
  EXPECT_FALSE(ci.loaded);
  EXPECT_TRUE(ci.written);
  EXPECT_EQ(ci.path, cache_path_for(src, cache_dir));
  EXPECT_EQ(fs::path(ci.path).parent_path(), dir_ / "cache");
  const Dataset b = load_or_build(src, DataFormat::Auto, cache_dir, {}, &ci);
  EXPECT_TRUE(ci.loaded);
  EXPECT_TRUE(a == b);

  // A changed source is parsed again.
  write("ratings.dat", std::string(kSmallDat) + "2::50::1::10\n");
  const Dataset c = load_or_build(src, DataFormat::Auto, cache_dir, {}, &ci);
  EXPECT_FALSE(ci.loaded);
  EXPECT_EQ(c.num_interactions(), a.num_interactions() + 1);
  // Other read options are another dataset.
  ReadOptions drop;
  drop.drop_short_users = true;
  load_or_build(src, DataFormat::Auto, cache_dir, drop, &ci);
  EXPECT_FALSE(ci.loaded);
  load_or_build(src, DataFormat::Auto, cache_dir, drop, &ci);
  EXPECT_TRUE(ci.loaded);
  // No cache dir: parse only.
  load_or_build(src, DataFormat::Auto, "", {}, &ci);
  EXPECT_TRUE(ci.path.empty());
  EXPECT_FALSE(ci.loaded);
}

// The cache stands for the source's bytes and its place: an edit that keeps the size and the
// modification time is parsed again, and two sources of one name in different folders keep a
// cache each instead of evicting each other.
TEST_F(DataTest, CacheIsKeyedByContentAndFullPath) {
  const std::string src = write("ratings.dat", kSmallDat);
  const std::string cache_dir = (dir_ / "cache").string();
  CacheInfo ci;
  const Dataset a = load_or_build(src, DataFormat::Auto, cache_dir, {}, &ci);
  ASSERT_TRUE(ci.written);
  // Same length, one digit changed (item 10 of user 1 becomes 19), same mtime.
  const auto mtime = fs::last_write_time(src);
  std::string edited = kSmallDat;
  edited[4] = '9';
  ASSERT_EQ(edited.size(), std::string(kSmallDat).size());
  write("ratings.dat", edited);
  fs::last_write_time(src, mtime);
  const Dataset b = load_or_build(src, DataFormat::Auto, cache_dir, {}, &ci);
  EXPECT_FALSE(ci.loaded) << "an edit that kept the size and mtime was served from the old cache";
  EXPECT_NE(a.raw_item_ids, b.raw_item_ids);
  // Another folder's ratings.dat: its own cache; the first one's stays valid.
  fs::create_directories(dir_ / "other");
  const std::string other = (dir_ / "other" / "ratings.dat").string();
  std::ofstream(other) << kSmallDat;
  load_or_build(other, DataFormat::Auto, cache_dir, {}, &ci);
  EXPECT_TRUE(ci.written);
  EXPECT_NE(ci.path, cache_path_for(src, cache_dir));
  load_or_build(src, DataFormat::Auto, cache_dir, {}, &ci);
  EXPECT_TRUE(ci.loaded) << "the other folder's file evicted this one's cache";
  load_or_build(other, DataFormat::Auto, cache_dir, {}, &ci);
  EXPECT_TRUE(ci.loaded);
}

TEST_F(DataTest, DamagedCacheIsRebuiltWithOneWarning) {
  const std::string src = write("ratings.dat", kSmallDat);
  const std::string cache_dir = dir_.string();
  CacheInfo ci;
  const Dataset good = load_or_build(src, DataFormat::Auto, cache_dir, {}, &ci);
  const std::string cache = ci.path;
  const std::string original = slurp(cache);

  const auto damaged = [&](const std::string& bytes, const std::string& reason) {
    std::ofstream(cache, std::ios::binary | std::ios::trunc) << bytes;
    ::testing::internal::CaptureStderr();
    const Dataset d = load_or_build(src, DataFormat::Auto, cache_dir, {}, &ci);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(ci.loaded) << reason;
    EXPECT_TRUE(d == good) << reason;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << reason << ": " << err;
    EXPECT_EQ(err.rfind("hstu: warning: " + cache + ": ", 0), 0u) << reason << ": " << err;
    EXPECT_NE(err.find(reason), std::string::npos) << err;
    EXPECT_NE(err.find("rebuilding it"), std::string::npos) << err;
    EXPECT_EQ(slurp(cache), original) << reason << ": the rebuilt cache differs";
  };
  damaged(original.substr(0, original.size() - 8), "truncated");
  damaged(original.substr(0, 40), "truncated");
  damaged("", "truncated");
  std::string flipped = original;
  flipped[flipped.size() - 20] ^= 0x40;  // inside the raw item ids
  damaged(flipped, "checksum mismatch");
  flipped = original;
  flipped[60] ^= 0x01;  // the header's interaction count
  damaged(flipped, "checksum mismatch");
  damaged(std::string(200, 'x'), "bad magic");
}

TEST_F(DataTest, FailedRebuildLeavesTheOldCacheAlone) {
  const std::string src = write("ratings.dat", kSmallDat);
  CacheInfo ci;
  load_or_build(src, DataFormat::Auto, dir_.string(), {}, &ci);
  const std::string before = slurp(ci.path);
  const auto mtime = fs::last_write_time(src);
  write("ratings.dat", std::string(kSmallDat) + "2::oops::1::10\n");
  fs::last_write_time(src, mtime + std::chrono::seconds(5));
  expect_error([&] { load_or_build(src, DataFormat::Auto, dir_.string()); }, src + ":7", "item id 'oops'");
  EXPECT_EQ(slurp(ci.path), before);
  for (const auto& e : fs::directory_iterator(dir_))  // no temporary left behind
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

TEST_F(DataTest, UnwritableCacheDirIsAWarning) {
  const std::string src = write("ratings.dat", kSmallDat);
  const std::string not_a_dir = write("plainfile", "x");
  CacheInfo ci;
  ::testing::internal::CaptureStderr();
  const Dataset d = load_or_build(src, DataFormat::Auto, not_a_dir, {}, &ci);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(d.num_users(), 2);
  EXPECT_FALSE(ci.written);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("continuing without a cache"), std::string::npos) << err;
}

// ---------------------------------------------------------------- split and batches

// Users: 0 -> items 1..6 (with actions and times), 1 -> 7 8 9 (n = 3), 2 -> 1 3 5 7 9.
Dataset hand_made() {
  Dataset d;
  const std::vector<std::vector<std::int32_t>> users{{1, 2, 3, 4, 5, 6}, {7, 8, 9}, {1, 3, 5, 7, 9}};
  for (std::size_t u = 0; u < users.size(); ++u) {
    for (std::int32_t i : users[u]) {
      d.items.push_back(i);
      d.actions.push_back(i % 2);
      d.timestamps.push_back(100 * static_cast<std::int64_t>(u) + i);
    }
    d.user_offsets.push_back(static_cast<std::int64_t>(d.items.size()));
    d.raw_user_ids.push_back(static_cast<std::int64_t>(u) + 100);
  }
  d.num_items = 9;
  d.num_actions = 2;
  for (std::int64_t i = 1; i <= 9; ++i) d.raw_item_ids.push_back(i * 10);
  d.validate("hand_made");
  return d;
}

std::vector<std::int32_t> vec(std::span<const std::int32_t> s) { return {s.begin(), s.end()}; }
using V = std::vector<std::int32_t>;

TEST(Split, LeaveOneOutOnAHandMadeDataset) {
  const Dataset d = hand_made();
  Example e = make_example(d, 0, Split::Train, 50);
  EXPECT_EQ(vec(e.inputs), (V{1, 2, 3}));  // train sequence 1 2 3 4
  EXPECT_EQ(vec(e.labels), (V{2, 3, 4}));
  EXPECT_EQ(e.begin, 0);
  e = make_example(d, 0, Split::Valid, 50);
  EXPECT_EQ(vec(e.inputs), (V{1, 2, 3, 4}));
  EXPECT_EQ(e.target, 5);
  EXPECT_TRUE(e.labels.empty());
  e = make_example(d, 0, Split::Test, 50);
  EXPECT_EQ(vec(e.inputs), (V{1, 2, 3, 4, 5}));
  EXPECT_EQ(e.target, 6);
  // Truncation keeps the most recent max_len items.
  e = make_example(d, 0, Split::Train, 2);
  EXPECT_EQ(vec(e.inputs), (V{2, 3}));
  EXPECT_EQ(vec(e.labels), (V{3, 4}));
  EXPECT_EQ(e.begin, 1);
  e = make_example(d, 0, Split::Test, 2);
  EXPECT_EQ(vec(e.inputs), (V{4, 5}));
  EXPECT_EQ(e.begin, 3);
  EXPECT_EQ(e.target, 6);
  // n = 3: no training pair; validation sees one item, test two.
  e = make_example(d, 1, Split::Train, 50);
  EXPECT_TRUE(e.inputs.empty());
  e = make_example(d, 1, Split::Valid, 50);
  EXPECT_EQ(vec(e.inputs), (V{7}));
  EXPECT_EQ(e.target, 8);
  e = make_example(d, 2, Split::Test, 1);
  EXPECT_EQ(vec(e.inputs), (V{7}));
  EXPECT_EQ(e.begin, 9 + 3);
  EXPECT_EQ(e.target, 9);
}

TEST(Split, TrainingThroughTheValidationTarget) {
  const Dataset d = hand_made();
  Example e = make_example(d, 0, Split::Train, 50, true);
  EXPECT_EQ(vec(e.inputs), (V{1, 2, 3, 4}));  // train sequence 1 2 3 4 5: the validation target 5 is a label
  EXPECT_EQ(vec(e.labels), (V{2, 3, 4, 5}));
  e = make_example(d, 1, Split::Train, 50, true);  // n = 3 now has a training pair
  EXPECT_EQ(vec(e.inputs), (V{7}));
  EXPECT_EQ(vec(e.labels), (V{8}));
  e = make_example(d, 0, Split::Test, 50, true);  // evaluation is unchanged
  EXPECT_EQ(e.target, 6);
  BatcherConfig bc;
  bc.train_through_valid = true;
  EXPECT_EQ(static_cast<std::int64_t>(Batcher(d, Split::Train, bc).order().size()), d.num_users());
}

TEST(Split, TrainBatchesAreJaggedWithNextItemLabels) {
  const Dataset d = hand_made();
  BatcherConfig cfg;
  cfg.batch_size = 8;
  cfg.max_len = 2;
  Batcher b(d, Split::Train, cfg);
  ASSERT_EQ(b.num_batches(), 1);
  const Batch batch = b.batch(0);
  ASSERT_EQ(batch.size(), 2);  // user 1 has no training pair
  EXPECT_EQ(std::set<std::int64_t>(batch.users.begin(), batch.users.end()), (std::set<std::int64_t>{0, 2}));
  for (std::int64_t i = 0; i < batch.size(); ++i) {
    const std::int64_t u = batch.users[i];
    const Example e = make_example(d, u, Split::Train, 2);
    const auto from = batch.seq_offsets[i], to = batch.seq_offsets[i + 1];
    EXPECT_EQ(V(batch.items.begin() + from, batch.items.begin() + to), vec(e.inputs));
    EXPECT_EQ(V(batch.labels.begin() + from, batch.labels.begin() + to), vec(e.labels));
    for (auto t = from; t < to; ++t) {  // actions and times belong to the input tokens
      EXPECT_EQ(batch.actions[t], batch.items[t] % 2);
      EXPECT_EQ(batch.timestamps[t], 100 * u + batch.items[t]);
    }
  }
  EXPECT_TRUE(batch.targets.empty());
  EXPECT_NO_THROW(batch.jagged().validate(cfg.max_len, "batch"));
}

TEST(Split, EvalBatchesInUserOrderWithTargets) {
  const Dataset d = hand_made();
  BatcherConfig cfg;
  cfg.batch_size = 2;
  cfg.max_len = 3;
  Batcher b(d, Split::Test, cfg);
  ASSERT_EQ(b.num_batches(), 2);
  const Batch first = b.batch(0), last = b.batch(1);
  EXPECT_EQ(first.users, (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(first.targets, (V{6, 9}));
  EXPECT_EQ(first.items, (V{3, 4, 5, 7, 8}));
  EXPECT_EQ(first.seq_offsets, (std::vector<std::int64_t>{0, 3, 5}));
  EXPECT_TRUE(first.labels.empty());
  EXPECT_EQ(last.users, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(last.targets, (V{9}));
  cfg.drop_last = true;
  EXPECT_EQ(Batcher(d, Split::Valid, cfg).num_batches(), 1);
}

TEST(Split, ShuffleIsDeterministicAndCoversEveryUserOncePerEpoch) {
  SyntheticConfig sc;
  sc.users = 1000;
  const Dataset d = make_synthetic(sc);
  BatcherConfig cfg;
  cfg.batch_size = 64;
  cfg.max_len = 20;
  cfg.seed = 7;
  Batcher a(d, Split::Train, cfg), b(d, Split::Train, cfg);
  std::vector<std::vector<std::int64_t>> orders;
  for (std::int64_t epoch : {0, 1, 2}) {
    a.set_epoch(epoch);
    b.set_epoch(epoch);
    EXPECT_EQ(a.order(), b.order());
    std::vector<std::int64_t> seen;
    for (std::int64_t i = 0; i < a.num_batches(); ++i) {
      const Batch x = a.batch(i);
      EXPECT_EQ(x.items, b.batch(i).items);
      EXPECT_LE(x.size(), 64);
      EXPECT_NO_THROW(x.jagged().validate(cfg.max_len, "batch"));
      seen.insert(seen.end(), x.users.begin(), x.users.end());
    }
    std::sort(seen.begin(), seen.end());
    std::vector<std::int64_t> all(static_cast<std::size_t>(d.num_users()));
    std::iota(all.begin(), all.end(), 0);  // every synthetic user has n >= 10
    EXPECT_EQ(seen, all) << "epoch " << epoch;
    orders.push_back(a.order());
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  cfg.seed = 8;
  EXPECT_NE(Batcher(d, Split::Train, cfg).order(), orders[0]);
  a.set_epoch(0);
  EXPECT_EQ(a.order(), orders[0]);  // an epoch can be revisited (resume)
}

TEST(Split, BadConfigAndShortUsersAreErrors) {
  const Dataset d = hand_made();
  BatcherConfig cfg;
  cfg.batch_size = 0;
  EXPECT_THROW(Batcher(d, Split::Train, cfg), Error);
  cfg.batch_size = 4;
  cfg.max_len = 0;
  EXPECT_THROW(Batcher(d, Split::Train, cfg), Error);
  Dataset s = hand_made();
  s.user_offsets = {0, 6, 8, 14};  // user 101 would have 2 items
  try {
    Batcher(s, Split::Test, BatcherConfig{});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "user 101");
    EXPECT_NE(std::string(e.what()).find("has 2 interactions"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- synthetic

TEST(Synthetic, DeterministicPerSeed) {
  SyntheticConfig c;
  c.users = 300;
  const Dataset a = make_synthetic(c), b = make_synthetic(c);
  EXPECT_TRUE(a == b);
  c.seed = 43;
  EXPECT_FALSE(make_synthetic(c).items == a.items);
}

TEST(Synthetic, HasTheStructureItPromises) {
  const SyntheticConfig c;  // the defaults
  const Dataset d = make_synthetic(c);
  d.validate("synthetic");
  EXPECT_EQ(d.num_users(), c.users);
  EXPECT_EQ(d.num_items, c.items);
  std::int64_t pairs = 0, successor = 0;
  std::vector<std::int64_t> item_count(static_cast<std::size_t>(c.items) + 1);
  for (std::int64_t u = 0; u < d.num_users(); ++u) {
    const auto s = d.user_items(u);
    EXPECT_GE(std::ssize(s), c.min_len);
    EXPECT_LE(std::ssize(s), c.max_len);
    std::set<std::int32_t> clusters;
    for (std::size_t t = 0; t < s.size(); ++t) {
      clusters.insert(synthetic_cluster(c, s[t]));
      if (t + 2 < s.size()) ++item_count[s[t]];  // popularity from training items only
      if (t > 0) {
        ++pairs;
        successor += s[t] == synthetic_successor(c, s[t - 1]);
      }
    }
    EXPECT_LE(clusters.size(), 2u) << "user " << u;
  }
  // Half the steps follow the successor rule, plus the few fresh draws that land on it.
  const double rate = static_cast<double>(successor) / static_cast<double>(pairs);
  EXPECT_GT(rate, 0.5);
  EXPECT_LT(rate, 0.6);

  // On the test targets, "the successor of the last item" must beat the 10 most popular
  // items by a wide margin: the signal a sequential model can learn and popularity cannot.
  std::vector<std::int32_t> by_pop(static_cast<std::size_t>(c.items));
  std::iota(by_pop.begin(), by_pop.end(), 1);
  std::stable_sort(by_pop.begin(), by_pop.end(),
                   [&](std::int32_t x, std::int32_t y) { return item_count[x] > item_count[y]; });
  const std::set<std::int32_t> top10(by_pop.begin(), by_pop.begin() + 10);
  std::int64_t hit_next = 0, hit_pop = 0;
  for (std::int64_t u = 0; u < d.num_users(); ++u) {
    const Example e = make_example(d, u, Split::Test, 50);
    hit_next += e.target == synthetic_successor(c, e.inputs.back());
    hit_pop += top10.count(e.target);
  }
  const double hr_next = static_cast<double>(hit_next) / static_cast<double>(d.num_users());
  const double hr_pop = static_cast<double>(hit_pop) / static_cast<double>(d.num_users());
  EXPECT_GT(hr_next, 0.45);
  EXPECT_LT(hr_pop, 0.2);
  EXPECT_GT(hr_next, 3 * hr_pop);
}

TEST(Synthetic, ClustersAndSuccessorsTileTheItems) {
  SyntheticConfig c;
  c.items = 103;
  c.clusters = 7;
  std::map<std::int32_t, std::int32_t> size;
  for (std::int32_t i = 1; i <= c.items; ++i) {
    const std::int32_t k = synthetic_cluster(c, i);
    ASSERT_GE(k, 0);
    ASSERT_LT(k, c.clusters);
    if (i > 1) {
      EXPECT_GE(k, synthetic_cluster(c, i - 1));  // contiguous blocks
    }
    EXPECT_EQ(synthetic_cluster(c, synthetic_successor(c, i)), k);
    ++size[k];
  }
  EXPECT_EQ(size.size(), 7u);
  for (const auto& [k, n] : size) EXPECT_TRUE(n == 14 || n == 15) << k;
}

TEST(Synthetic, BadConfigNamesTheField) {
  SyntheticConfig c;
  c.min_len = 2;
  try {
    make_synthetic(c);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "synthetic.min_len");
  }
  c = SyntheticConfig{};
  c.clusters = c.items + 1;
  EXPECT_THROW(make_synthetic(c), Error);
  c = SyntheticConfig{};
  c.successor_prob = 1.5;
  EXPECT_THROW(make_synthetic(c), Error);
}

// ---------------------------------------------------------------- the real datasets

fs::path shared_data() { return fs::path(HSTU_SOURCE_DIR) / ".." / "shared" / "data"; }

#define REQUIRE_FILE(p)                                                      \
  do {                                                                       \
    if (!fs::exists(p)) GTEST_SKIP() << "../shared/data not found (" << (p) << ")"; \
  } while (0)

class RealData : public DataTest {};

TEST_F(RealData, BeautyUserItemsLines) {
  const fs::path p = shared_data() / "s3rec-amazon" / "Beauty.txt";
  REQUIRE_FILE(p);
  const Dataset d = load_or_build(p.string(), DataFormat::Auto, dir_.string());
  EXPECT_EQ(detect_format(p.string()), DataFormat::UserItemsLines);
  EXPECT_EQ(d.num_users(), 22363);
  EXPECT_EQ(d.num_items, 12101);
  EXPECT_EQ(d.num_interactions(), 198502);
  const DatasetSummary s = summarize(d);
  EXPECT_EQ(s.min_len, 5);
  EXPECT_EQ(s.max_len, 204);
  for (std::int32_t i = 0; i <= d.num_items; ++i) ASSERT_EQ(d.raw_item_ids[i], i);  // already dense: kept
  EXPECT_EQ(seq(d, 0), (V{1, 2, 3, 4, 5}));
  CacheInfo ci;
  EXPECT_TRUE(load_or_build(p.string(), DataFormat::Auto, dir_.string(), {}, &ci) == d);
  EXPECT_TRUE(ci.loaded);
}

TEST_F(RealData, MovieLensLatestSmallCsv) {
  const fs::path p = shared_data() / "ml-latest-small" / "ratings.csv";
  REQUIRE_FILE(p);
  const Dataset d = load_or_build(p.string(), DataFormat::Auto, dir_.string());
  EXPECT_EQ(d.num_users(), 610);
  EXPECT_EQ(d.num_items, 9724);
  EXPECT_EQ(d.num_interactions(), 100836);
  EXPECT_EQ(d.num_actions, 11);
  EXPECT_NO_THROW(d.validate("ml-latest-small"));  // includes time order per user
  CacheInfo ci;
  EXPECT_TRUE(load_or_build(p.string(), DataFormat::Auto, dir_.string(), {}, &ci) == d);
  EXPECT_TRUE(ci.loaded);
}

TEST_F(RealData, MovieTweetingsDatNeedsDropShortUsers) {
  const fs::path p = shared_data() / "movietweetings-100k" / "ratings.dat";
  REQUIRE_FILE(p);
  expect_error([&] { read_interactions(p.string()); }, p.string() + ":1", "user 1 has 2 interactions");
  ReadOptions drop;
  drop.drop_short_users = true;
  const Dataset d = load_or_build(p.string(), DataFormat::Auto, dir_.string(), drop);
  EXPECT_EQ(d.num_users(), 6769);
  EXPECT_EQ(d.dropped_users, 9785);
  EXPECT_EQ(d.num_interactions(), 87887);
  EXPECT_EQ(d.num_items, 9957);
  // "0104257" in the file is the integer id 104257.
  EXPECT_TRUE(std::binary_search(d.raw_item_ids.begin() + 1, d.raw_item_ids.end(), 104257));
}

// ---------------------------------------------------------------- the command

class DataCli : public DataTest {
 protected:
  struct Result {
    int status;
    std::string out, err;
  };
  Result run(const std::string& args) {
    const std::string out = (dir_ / "stdout.txt").string(), err = (dir_ / "stderr.txt").string();
    const std::string cmd = std::string(HSTU_BINARY) + " data inspect " + args + " >'" + out + "' 2>'" + err + "'";
    const int raw = std::system(cmd.c_str());
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw), slurp(out), slurp(err)};
  }
};

TEST_F(DataCli, InspectsAFileAndTheSyntheticDefault) {
  const std::string src = write("ratings.dat", kSmallDat);
  const std::string cache = "--cache-dir '" + (dir_ / "c").string() + "'";
  Result r = run("'" + src + "' " + cache);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("users          2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(parsed, written)"), std::string::npos) << r.out;
  r = run("'" + src + "' " + cache + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"loaded\": true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"interactions\": 6"), std::string::npos) << r.out;
  r = run("--json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"source\": \"synthetic\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"users\": 2000"), std::string::npos) << r.out;
}

TEST_F(DataCli, BadInputIsOneErrorLine) {
  const std::map<std::string, std::string> cases{
      {"malformed.dat", "1::2::3::4\n1::2::3\n"},
      {"empty.dat", ""},
      {"short.dat", "1::2::3::4\n"},
      {"nonnumeric.txt", "a 1 2 3\n"},
  };
  for (const auto& [name, content] : cases) {
    const std::string src = write(name, content);
    const Result r = run("'" + src + "' --no-cache");
    EXPECT_EQ(r.status, 1) << name;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << name << ": " << r.err;
    EXPECT_EQ(r.err.rfind("hstu: error: " + src, 0), 0u) << name << ": " << r.err;
  }
  const Result r = run("x --format parquet");
  EXPECT_EQ(r.status, 2);
}

// ---------------------------------------------------------------- the delimited format

// MovieLens-100K's u.data layout: user, item, rating, timestamp, tab-separated, no header. Lines
// are out of time order per user, and users 22 and 186 each have two lines at one time.
const char* kUData =
    "196\t242\t3\t881250949\n"
    "186\t302\t3\t891717742\n"
    "22\t377\t1\t878887116\n"
    "196\t51\t2\t881250000\n"
    "186\t346\t1\t886397596\n"
    "22\t51\t5\t878887116\n"
    "196\t302\t4\t891000000\n"
    "186\t51\t2\t891717742\n"
    "22\t242\t4\t878800000\n";

// kUData's rows as fields: user, item, rating, timestamp.
std::vector<std::vector<std::string>> udata_rows() {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(kUData);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::vector<std::string> row(4);
    fields >> row[0] >> row[1] >> row[2] >> row[3];
    rows.push_back(row);
  }
  return rows;
}

// The rows with the fields in `order` (indices into user, item, rating, timestamp; -1: a text
// field), joined by `sep`, after an optional header line.
std::string udata_table(const std::string& sep, const std::string& header,
                        const std::vector<int>& order = {0, 1, 2, 3}) {
  std::string out = header.empty() ? "" : header + "\n";
  for (const auto& row : udata_rows()) {
    for (std::size_t i = 0; i < order.size(); ++i)
      out += (i ? sep : "") + (order[i] < 0 ? std::string("Toy Story (1995)") : row[order[i]]);
    out += "\n";
  }
  return out;
}

// What kUData must give.
void expect_udata(const Dataset& d) {
  EXPECT_NO_THROW(d.validate("u.data"));
  ASSERT_EQ(d.num_users(), 3);
  EXPECT_EQ(d.raw_user_ids, (std::vector<std::int64_t>{22, 186, 196}));
  EXPECT_EQ(d.raw_item_ids, (std::vector<std::int64_t>{0, 51, 242, 302, 346, 377}));
  EXPECT_EQ(raw_seq(d, 0), (std::vector<std::int64_t>{242, 377, 51}));  // the tie keeps file order
  EXPECT_EQ(raw_seq(d, 1), (std::vector<std::int64_t>{346, 302, 51}));
  EXPECT_EQ(raw_seq(d, 2), (std::vector<std::int64_t>{51, 242, 302}));
  EXPECT_EQ(d.timestamps, (std::vector<std::int64_t>{878800000, 878887116, 878887116, 886397596, 891717742,
                                                     891717742, 881250000, 881250949, 891000000}));
  EXPECT_EQ(d.actions, (std::vector<std::int32_t>{4, 1, 5, 1, 3, 2, 2, 3, 4}));  // the ratings as they are
  EXPECT_EQ(d.num_actions, 6);
}

ReadOptions delimited(Delimiter delim, HeaderMode header, const std::string& columns = "") {
  ReadOptions o;
  o.delimiter = delim;
  o.header = header;
  o.columns = columns;
  return o;
}

TEST_F(DataTest, UDataLoadsByAutoDetection) {
  const std::string p = write("u.data", kUData);
  EXPECT_EQ(detect_format(p), DataFormat::Delimited);
  expect_udata(read_interactions(p));
  expect_udata(read_interactions(p, DataFormat::Delimited));
  CacheInfo ci;
  expect_udata(load_or_build(p, DataFormat::Auto, dir_.string(), {}, &ci));
  EXPECT_TRUE(load_or_build(p, DataFormat::Auto, dir_.string(), {}, &ci) == read_interactions(p));
  EXPECT_TRUE(ci.loaded);
  EXPECT_STREQ(format_name(DataFormat::Delimited), "delimited");
  EXPECT_EQ(parse_format("delimited", "x"), DataFormat::Delimited);
}

TEST_F(DataTest, DelimitedColumnsInAnotherOrder) {
  // timestamp, a title to skip, item, user, rating; the title is text, but a skipped column
  // does not make the first line a header.
  const std::string p = write("log.tsv", udata_table("\t", "", {3, -1, 1, 0, 2}));
  expect_udata(read_interactions(p, DataFormat::Delimited,
                                 delimited(Delimiter::Auto, HeaderMode::Auto, "timestamp,-,item,user,rating")));
  // Aliases and "_" in the list, any case and spaces; a list alone means delimited under auto.
  expect_udata(read_interactions(p, DataFormat::Auto,
                                 delimited(Delimiter::Auto, HeaderMode::Auto, " TS ,_,movieId,User_Id,rating")));
  EXPECT_EQ(detect_format(p, delimited(Delimiter::Auto, HeaderMode::Auto, "ts,-,item,user,rating")),
            DataFormat::Delimited);
  // The same file with a header: the list replaces its names.
  const std::string h = write("h.tsv", udata_table("\t", "a\tb\tc\td\te", {3, -1, 1, 0, 2}));
  expect_udata(read_interactions(h, DataFormat::Delimited,
                                 delimited(Delimiter::Tab, HeaderMode::Yes, "timestamp,-,item,user,rating")));
}

TEST_F(DataTest, DelimitedSeparatorsWithAndWithoutHeaders) {
  const std::vector<std::pair<std::string, Delimiter>> seps{
      {"\t", Delimiter::Tab}, {",", Delimiter::Comma}, {";", Delimiter::Semicolon}, {" ", Delimiter::Space},
      {" \t  ", Delimiter::Space}};
  for (const auto& [sep, delim] : seps) {
    for (const bool header : {false, true}) {
      const std::string head = header ? "user" + sep + "item" + sep + "rating" + sep + "timestamp" : "";
      const std::string p = write("t.txt", udata_table(sep, head));
      SCOPED_TRACE(delimiter_name(delim) + std::string(header ? " with" : " without") + " a header");
      expect_udata(read_interactions(p, DataFormat::Delimited));  // delimiter and header detected
      expect_udata(read_interactions(p, DataFormat::Delimited,
                                     delimited(delim, header ? HeaderMode::Yes : HeaderMode::No)));
    }
  }
  // Headers name the columns in any order; columns with other names are left out.
  const std::string p = write("o.csv", "Rating;comment;MovieId;UserID;TIME\n" + udata_table(";", "", {2, -1, 1, 0, 3}));
  expect_udata(read_interactions(p, DataFormat::Delimited));
  // Whitespace runs, CRLF and blank lines.
  std::string crlf;
  for (char c : udata_table("  ", "")) crlf += c == '\n' ? std::string("\r\n\r\n") : std::string(1, c);
  expect_udata(read_interactions(write("crlf.txt", crlf), DataFormat::Delimited));
}

TEST_F(DataTest, DelimitedDefaultLayoutsAndAliases) {
  // Two fields: user, item in file order, no timestamps or actions.
  const Dataset two = read_interactions(write("two.csv", "5,1\n5,3\n5,2\n"), DataFormat::Delimited);
  EXPECT_EQ(raw_seq(two, 0), (std::vector<std::int64_t>{1, 3, 2}));
  EXPECT_FALSE(two.has_timestamps());
  EXPECT_FALSE(two.has_actions());
  // Three fields: user, item, timestamp.
  const Dataset three = read_interactions(write("three.csv", "5,1,30\n5,3,10\n5,2,20\n"), DataFormat::Delimited);
  EXPECT_EQ(raw_seq(three, 0), (std::vector<std::int64_t>{3, 2, 1}));
  EXPECT_FALSE(three.has_actions());
  // Every alias of readers.h, any case; label is the action.
  const Dataset a = read_interactions(write("a.csv", "USER_ID,ItemId,Time,Label\n5,1,3,0\n5,2,1,1\n5,3,2,7\n"));
  EXPECT_EQ(raw_seq(a, 0), (std::vector<std::int64_t>{2, 3, 1}));
  EXPECT_EQ(a.actions, (std::vector<std::int32_t>{1, 7, 0}));
  for (const char* head : {"user,item,ts", "userid,item_id,timestamp", "user_id,movie_id,time", "userId,movieid,ts",
                           "user,itemid,ts"}) {
    const std::string p = write("alias.csv", std::string(head) + "\n5,1,3\n5,2,1\n5,3,2\n");
    EXPECT_EQ(raw_seq(read_interactions(p, DataFormat::Delimited), 0), (std::vector<std::int64_t>{2, 3, 1})) << head;
  }
  EXPECT_EQ(parse_columns(" userId , movie_id ,_, TS,label", "x"), "user,item,-,timestamp,action");
  EXPECT_EQ(parse_columns("", "x"), "");
  EXPECT_EQ(parse_delimiter("semicolon", "x"), Delimiter::Semicolon);
  EXPECT_EQ(parse_header_mode("no", "x"), HeaderMode::No);
}

TEST_F(DataTest, DelimitedRatingsWholeOrHalfStars) {
  // Whole ratings stay; one half star doubles every rating, so 3.5 stays below 4.
  const Dataset whole = read_interactions(write("w.csv", "user,item,rating\n1,1,4\n1,2,5.0\n1,3,1\n"));
  EXPECT_EQ(whole.actions, (std::vector<std::int32_t>{4, 5, 1}));
  const Dataset half = read_interactions(write("h.csv", "user,item,rating\n1,1,4\n1,2,3.5\n1,3,0.5\n"));
  EXPECT_EQ(half.actions, (std::vector<std::int32_t>{8, 7, 1}));
  EXPECT_EQ(half.num_actions, 9);
  // ml-latest-small's layout read as delimited matches ml-csv.
  const std::string ml = write("ratings.csv", "userId,movieId,rating,timestamp\n1,5,4.0,30\n1,6,0.5,10\n1,7,3.5,20\n");
  EXPECT_TRUE(read_interactions(ml, DataFormat::Delimited) == read_interactions(ml));
}

TEST_F(DataTest, DelimitedAutoDetectionRules) {
  // Rule 4: a comma header naming user and item by aliases (not the csv format's names).
  EXPECT_EQ(detect_format(write("a.csv", "user_id,item_id,rating,timestamp\n1,2,3,4\n")), DataFormat::Delimited);
  EXPECT_EQ(detect_format(write("b.csv", "user,item,time\n1,2,3\n")), DataFormat::Delimited);
  // Rule 6: a tab header.
  EXPECT_EQ(detect_format(write("c.tsv", "userId\tmovieId\trating\n1\t2\t3\n")), DataFormat::Delimited);
  // Rule 7: tab-separated numbers, 2 to 6 per line, a user on two lines.
  EXPECT_EQ(detect_format(write("d.tsv", "1\t2\n1\t3\n")), DataFormat::Delimited);
  EXPECT_EQ(detect_format(write("e.tsv", "1\t2\t3\t4\t5\t6\n1\t2\t3\t4\t5\t6\n")), DataFormat::Delimited);
  EXPECT_EQ(detect_format(write("f.tsv", "1\t2\t3\t4\t5\t6\t7\n1\t2\t3\t4\t5\t6\t7\n")), DataFormat::UserItemsLines);
  EXPECT_EQ(detect_format(write("g.tsv", "1\t2\t3\t4\n2\t5\t6\t7\n")), DataFormat::UserItemsLines);  // no user twice
  EXPECT_EQ(detect_format(write("h.tsv", "1\t2\t3\t4\n1\t5\t6\n")), DataFormat::UserItemsLines);   // unequal lines
  EXPECT_EQ(detect_format(write("i.tsv", "1\t2\t3.5\t4\n1\t5\t4\t6\n")), DataFormat::Delimited);   // half stars
  // Rule 8: 4 space-separated numbers with Unix times and a repeated user.
  EXPECT_EQ(detect_format(write("j.txt", "1 2 3 881250949\n1 5 4 881250950\n")), DataFormat::Delimited);
  EXPECT_EQ(detect_format(write("k.txt", "1 2 3 881250949\n2 5 4 881250950\n")), DataFormat::UserItemsLines);
  EXPECT_EQ(detect_format(write("l.txt", "1 2 3 4\n1 5 6 7\n")), DataFormat::UserItemsLines);
  // Any delimited setting chooses delimited without looking at the file.
  EXPECT_EQ(detect_format(write("m.dat", "1::2::3::4\n"), delimited(Delimiter::Comma, HeaderMode::Auto)),
            DataFormat::Delimited);
  EXPECT_EQ(detect_format(write("n.dat", "1::2::3::4\n"), delimited(Delimiter::Auto, HeaderMode::No)),
            DataFormat::Delimited);
}

TEST_F(DataTest, DelimitedDefectsAreOneErrorNamingTheLine) {
  const auto as_delimited = [](const std::string& p, const ReadOptions& o = {}) {
    return [p, o] { read_interactions(p, DataFormat::Delimited, o); };
  };
  const std::string fields = write("fields.tsv", "1\t2\t3\t4\n1\t2\t3\n");
  expect_error([&] { read_interactions(fields, DataFormat::Delimited); }, fields + ":2",
               "expected 4 fields (user,item,rating,timestamp), found 3");
  const std::string id = write("id.tsv", std::string(kUData) + "196\tx7\t3\t881250949\n");
  expect_error(as_delimited(id), id + ":10", "item id 'x7' is not a non-negative integer");
  // Past detection's 1000-line sample, auto-detection still reads the file as delimited.
  std::string long_log;
  for (int i = 0; i < 112; ++i) long_log += kUData;  // 1008 lines
  const std::string late = write("late.tsv", long_log + "196\t242\tthree\t881250949\n");
  expect_error([&] { read_interactions(late); }, late + ":1009", "rating 'three' is not");
  const std::string user = write("user.csv", "user,item\n1,2\nu1,3\n");
  expect_error(as_delimited(user), user + ":3", "user id 'u1' is not a non-negative integer");
  const std::string empty = write("empty.tsv", "");
  expect_error(as_delimited(empty), empty, "empty file");
  const std::string header_only = write("header.csv", "user,item,rating\n\n");
  expect_error(as_delimited(header_only), header_only, "no interactions");
  const std::string no_item = write("noitem.csv", "user,product,rating,timestamp\n1,2,3,4\n");
  expect_error(as_delimited(no_item), no_item + ":1",
               "the header 'user,product,rating,timestamp' names no item column");
  expect_error([&] { read_interactions(no_item); }, no_item + ":1", "cannot tell the format");
  const std::string guessed = write("guessed.tsv", "u1\t2\t3\t4\n1\t2\t3\t4\n");
  expect_error(as_delimited(guessed), guessed + ":1", "taken as a header");
  const std::string twice = write("twice.csv", "user,item_id,movieId\n1,2,3\n");
  expect_error(as_delimited(twice), twice + ":1", "names the item column twice (fields 2 and 3)");
  const std::string both = write("both.csv", "user,item,action,rating\n1,2,3,4\n");
  expect_error(as_delimited(both), both + ":1", "names both an action and a rating column");
  const std::string wide = write("wide.tsv", "1\t2\t3\t4\t5\n1\t2\t3\t4\t5\n");
  expect_error([&] { read_interactions(wide); }, wide + ":1", "5 fields per line and no header");
  const std::string rating = write("rating.csv", "user,item,rating\n1,2,3.25\n");
  expect_error(as_delimited(rating), rating + ":2", "rating '3.25' is not a non-negative whole number or half star");
  const std::string big = write("big.csv", "user,item,rating\n1,2,0.5\n1,3,40000\n");
  expect_error(as_delimited(big), big + ":3", "rating 40000 becomes the action 80000, above 65535");
  const std::string action = write("action.csv", "user,item,action\n1,2,-1\n");
  expect_error(as_delimited(action), action + ":2", "action '-1' is not an integer in 0..65535");
  const std::string time = write("time.csv", "user,item,ts\n1,2,soon\n");
  expect_error(as_delimited(time), time + ":2", "timestamp 'soon' is not an integer");
  // A column list: unknown or missing names, and a header of another width.
  const std::string ok = write("ok.tsv", kUData);
  expect_error(as_delimited(ok, delimited(Delimiter::Auto, HeaderMode::Auto, "user,product")), ok,
               "the column list 'user,product' names an unknown column 'product'");
  expect_error([] { parse_columns("user,,item", "--columns"); }, "--columns", "has an empty entry");
  expect_error([] { parse_columns("item,rating", "--columns"); }, "--columns", "names no user column");
  expect_error(as_delimited(ok, delimited(Delimiter::Tab, HeaderMode::Yes, "user,item,rating")), ok + ":1",
               "the header has 4 fields, the column list 3 (user,item,rating)");
  expect_error(as_delimited(ok, delimited(Delimiter::Comma, HeaderMode::No)), ok + ":1",
               "1 field per line and no header");
  // With a list, a first line with one bad id is no header: it is reported, not skipped.
  const std::string bad_first = write("bad_first.tsv", "u196\t242\t3\t881250949\n" + std::string(kUData));
  expect_error(as_delimited(bad_first, delimited(Delimiter::Auto, HeaderMode::Auto, "user,item,rating,timestamp")),
               bad_first + ":1", "user id 'u196' is not a non-negative integer");
  // Delimited settings with another format, even when that format's cache exists.
  const std::string dat = write("ratings.dat", kSmallDat);
  load_or_build(dat, DataFormat::MovieLensDat, dir_.string());
  const ReadOptions tab = delimited(Delimiter::Tab, HeaderMode::Auto);
  expect_error([&] { load_or_build(dat, DataFormat::MovieLensDat, dir_.string(), tab); }, dat,
               "a delimiter, header or column list is set, but the file is read as ml-dat");
  expect_error([] { parse_delimiter("pipe", "--delimiter"); }, "--delimiter", "unknown delimiter 'pipe'");
  expect_error([] { parse_header_mode("maybe", "--header"); }, "--header", "unknown header setting 'maybe'");
}

TEST_F(DataTest, DelimitedSettingsAreInTheCacheKey) {
  // One file, two readings: user,item,timestamp and item,user,timestamp.
  const std::string src =
      write("log.tsv", "1\t10\t3\n1\t20\t1\n1\t30\t2\n2\t10\t5\n2\t20\t4\n2\t30\t6\n3\t10\t7\n3\t20\t9\n3\t30\t8\n");
  const std::string cache_dir = (dir_ / "cache").string();
  const ReadOptions swapped = delimited(Delimiter::Auto, HeaderMode::Auto, "item,user,timestamp");
  CacheInfo ci;
  const Dataset a = load_or_build(src, DataFormat::Delimited, cache_dir, {}, &ci);
  EXPECT_TRUE(ci.written);
  const Dataset b = load_or_build(src, DataFormat::Delimited, cache_dir, swapped, &ci);
  EXPECT_FALSE(ci.loaded);
  EXPECT_EQ(a.raw_user_ids, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(b.raw_user_ids, (std::vector<std::int64_t>{10, 20, 30}));  // the items are the users now
  EXPECT_TRUE(load_or_build(src, DataFormat::Delimited, cache_dir, swapped, &ci) == b);
  EXPECT_TRUE(ci.loaded);
  const ReadOptions tab = delimited(Delimiter::Tab, HeaderMode::Auto);
  EXPECT_TRUE(load_or_build(src, DataFormat::Delimited, cache_dir, tab, &ci) == a);
  EXPECT_FALSE(ci.loaded);
  EXPECT_NE(cache_key_for(src, DataFormat::Delimited, {}).delimited_options,
            cache_key_for(src, DataFormat::Delimited, swapped).delimited_options);
}

TEST_F(RealData, MovieLens100kUData) {
  const fs::path p = shared_data() / "ml-100k" / "u.data";
  if (!fs::exists(p)) GTEST_SKIP() << "MovieLens-100K's u.data is not in ../shared/data (looked for " << p << ")";
  EXPECT_EQ(detect_format(p.string()), DataFormat::Delimited);
  const Dataset d = load_or_build(p.string(), DataFormat::Auto, dir_.string());
  EXPECT_EQ(d.num_users(), 943);
  EXPECT_EQ(d.num_items, 1682);
  EXPECT_EQ(d.num_interactions(), 100000);
  EXPECT_EQ(d.num_actions, 6);  // ratings 1..5
  EXPECT_NO_THROW(d.validate("ml-100k"));
}

TEST_F(DataCli, InspectsDelimitedFiles) {
  const std::string udata = write("u.data", kUData);
  Result r = run("'" + udata + "' --no-cache");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("format         delimited\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("interactions   9\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("actions        6 (ids 0..5)\n"), std::string::npos) << r.out;
  const std::string swapped = write("s.txt", udata_table(";", "x;y;z;w", {3, 1, 0, 2}));
  r = run("'" + swapped +
          "' --no-cache --delimiter semicolon --header yes --columns timestamp,item,user,rating --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"format\": \"delimited\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"users\": 3"), std::string::npos) << r.out;
  r = run("'" + udata + "' --no-cache --columns user,bogus");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("hstu: error: --columns: the column list 'user,bogus' names an unknown column 'bogus'", 0), 0u)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = run("'" + udata + "' --no-cache --format delimited --columns user,item,rating");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("hstu: error: " + udata + ":1: malformed line: expected 3 fields", 0), 0u) << r.err;
  EXPECT_EQ(run("'" + udata + "' --delimiter pipe").status, 2);
  EXPECT_EQ(run("'" + udata + "' --header maybe").status, 2);
}

}  // namespace
}  // namespace hstu
