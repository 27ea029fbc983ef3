#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hstu/io/safetensors.h"
#include "test_util.h"

namespace hstu {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public test::TempDirTest {
 protected:

  // Writes raw bytes: an 8-byte length, the header text, then `data`.
  std::string raw_file(const std::string& name, const std::string& header, const std::string& data,
                       std::int64_t claimed_len = -1) {
    std::string bytes;
    const std::uint64_t n = claimed_len < 0 ? header.size() : static_cast<std::uint64_t>(claimed_len);
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    bytes += header + data;
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  std::string error_of(const std::string& file) {
    try {
      read_safetensors(file);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }

};

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndMetadata) {
  Tensor f = test::randn(DType::F32, {3, 4}, 1);
  Tensor d = test::randn(DType::F64, {5}, 2);
  Tensor b = test::randn(DType::F32, {2, 2}, 3).cast(DType::BF16);
  Tensor i64 = Tensor::empty(DType::I64, {3});
  Tensor i32 = Tensor::empty(DType::I32, {0});
  for (int k = 0; k < 3; ++k) i64.data<std::int64_t>()[k] = (1ll << 40) + k;
  Tensor strided = test::randn(DType::F32, {3, 6}, 4).narrow(1, 2, 3);
  write_safetensors(path("a.safetensors"),
                    {{"f", f}, {"d", d}, {"b", b}, {"i", i64}, {"empty", i32}, {"s", strided}},
                    {{"num_heads", "4"}, {"note", "x"}});
  SafetensorsFile r = read_safetensors(path("a.safetensors"));
  EXPECT_EQ(r.metadata.at("num_heads"), "4");
  ASSERT_EQ(r.tensors.size(), 6u);
  EXPECT_EQ(r.tensors[0].first, "f");  // file order is kept
  EXPECT_TRUE(test::bitwise_equal(*r.find("f"), f));
  EXPECT_TRUE(test::bitwise_equal(*r.find("d"), d));
  EXPECT_TRUE(test::bitwise_equal(*r.find("b"), b));
  EXPECT_TRUE(test::bitwise_equal(*r.find("i"), i64));
  EXPECT_EQ(r.find("empty")->shape(), (Shape{0}));
  EXPECT_TRUE(test::bitwise_equal(*r.find("s"), strided.clone()));
  EXPECT_EQ(r.find("nope"), nullptr);
  // The header is padded so the data section starts 8-byte aligned.
  std::ifstream in(path("a.safetensors"), std::ios::binary);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST_F(SafetensorsTest, DefectsAreOneLineErrorsNamingTheFile) {
  const std::string ok_header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  struct Case {
    std::string name, file, expect;
  };
  const std::vector<Case> cases = {
      {"missing", path("none.safetensors"), "no such file"},
      {"empty header", raw_file("tiny", "", "", 0), "not valid JSON"},
      {"truncated header", raw_file("th", ok_header, "", ok_header.size() + 100), "truncated or corrupt"},
      {"truncated data", raw_file("td", ok_header, "1234"), "truncated file?"},
      {"bad json", raw_file("bj", "{\"x\": [", data), "not valid JSON"},
      {"not object", raw_file("no", "[1,2]", data), "not a JSON object"},
      {"bad dtype", raw_file("bd", R"({"x":{"dtype":"F8","shape":[8],"data_offsets":[0,8]}})", data), "dtype F8"},
      {"size mismatch", raw_file("sm", R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data), "byte range holds 8"},
      {"negative shape", raw_file("ns", R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data), "non-negative"},
      {"reversed offsets", raw_file("ro", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data), "claims bytes 8..0"},
      {"no offsets", raw_file("nof", R"({"x":{"dtype":"F32","shape":[2]}})", data), "lacks dtype, shape or data_offsets"},
      {"metadata not string", raw_file("mn", R"({"__metadata__":{"a":1}})", ""), "not a string"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_of(c.file);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << c.name;
    EXPECT_EQ(msg.rfind(c.file, 0), 0u) << c.name << " must name the file: " << msg;
  }
  // Fewer than 8 bytes.
  std::ofstream(path("short"), std::ios::binary) << "abc";
  EXPECT_NE(error_of(path("short")).find("truncated: 3 bytes"), std::string::npos);
}

// With `wanted`, only the tensors it takes are read, each exactly; the header is still checked
// whole, so a file whose skipped tensor lies past its end is refused all the same.
TEST_F(SafetensorsTest, ReadsOnlyTheWantedTensorsAndChecksTheWholeHeader) {
  Tensor a = test::randn(DType::F32, {3, 4}, 1), b = test::randn(DType::F64, {5}, 2),
         c = test::randn(DType::F32, {7}, 3);
  write_safetensors(path("p.safetensors"), {{"a", a}, {"optim.b", b}, {"c", c}}, {{"k", "v"}});
  const SafetensorsFile some =
      read_safetensors(path("p.safetensors"), [](const std::string& n) { return n.rfind("optim.", 0) != 0; });
  ASSERT_EQ(some.tensors.size(), 2u);
  EXPECT_EQ(some.tensors[0].first, "a");
  EXPECT_EQ(some.tensors[1].first, "c");
  EXPECT_TRUE(test::bitwise_equal(*some.find("a"), a));
  EXPECT_TRUE(test::bitwise_equal(*some.find("c"), c));
  EXPECT_EQ(some.find("optim.b"), nullptr);
  const SafetensorsFile none = read_safetensors(path("p.safetensors"), [](const std::string&) { return false; });
  EXPECT_TRUE(none.tensors.empty());
  EXPECT_EQ(none.metadata.at("k"), "v");

  const std::string header =
      R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"skipped":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  const std::string cut = raw_file("cut", header, std::string(12, '\0'));
  EXPECT_THROW(read_safetensors(cut, [](const std::string& n) { return n == "x"; }), Error);
}

TEST_F(SafetensorsTest, FailedWriteLeavesNoFileBehind) {
  EXPECT_THROW(write_safetensors(path("no/such/dir/out.safetensors"), {{"x", test::randn(DType::F32, {2}, 1)}}), Error);
  write_safetensors(path("keep.safetensors"), {{"x", test::randn(DType::F32, {2}, 1)}});
  const auto before = fs::file_size(path("keep.safetensors"));
  // A repeated name is refused before anything is written; the old file stays whole.
  Tensor t = test::randn(DType::F32, {2}, 2);
  EXPECT_THROW(write_safetensors(path("keep.safetensors"), {{"x", t}, {"x", t}}), Error);
  EXPECT_EQ(fs::file_size(path("keep.safetensors")), before);
  std::size_t files = 0;
  for (auto& e : fs::directory_iterator(dir_)) files += e.path().string().find(".tmp.") != std::string::npos;
  EXPECT_EQ(files, 0u) << "temporary files were left behind";
}

}  // namespace
}  // namespace hstu
