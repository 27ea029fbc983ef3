// `hstu layer` as a user runs it: a good file works, and every bad file ends in one clear error
// line, a non-zero exit status, and no output file (an existing one is left untouched).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "hstu/io/safetensors.h"
#include "hstu/model/hstu_layer.h"
#include "test_util.h"

namespace hstu {
namespace {

namespace fs = std::filesystem;

struct LayerFile {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> meta;

  void set(const std::string& name, Tensor t) {
    for (auto& [n, v] : tensors)
      if (n == name) {
        v = std::move(t);
        return;
      }
    tensors.emplace_back(name, std::move(t));
  }
  void erase(const std::string& name) {
    std::erase_if(tensors, [&](const auto& p) { return p.first == name; });
  }
};

Tensor i64(const std::vector<std::int64_t>& v) {
  Tensor t = Tensor::empty(DType::I64, {static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<std::int64_t>());
  return t;
}

// A valid input: B = 3 sequences (lengths 3, 0, 4), d = 8, H = 2, Dqk = Dv = 4.
LayerFile good_file() {
  HstuLayerConfig cfg;
  cfg.d_model = 8;
  cfg.heads = 2;
  cfg.dqk = cfg.dv = 4;
  LayerFile f;
  f.meta = {{"num_heads", "2"}, {"dqk", "4"}, {"dv", "4"}, {"max_seq_len", "6"}};
  f.set("x", test::randn(DType::F32, {7, 8}, 1));
  f.set("seq_offsets", i64({0, 3, 3, 7}));
  f.set("num_targets", i64({1, 0, 1}));
  f.set("grad_out", test::randn(DType::F32, {7, 8}, 2));
  HstuLayerParams p = HstuLayerParams::init(cfg, DType::F32, 3);
  for (auto& [name, t] : p.named()) f.set(name, *t);
  return f;
}

class LayerCli : public test::TempDirTest {
 protected:

  struct Result {
    int status;
    std::string err;
  };
  Result run(const std::string& in, const std::string& out, const std::string& extra = "") {
    const std::string err_path = (dir_ / "stderr.txt").string();
    const std::string cmd =
        std::string(HSTU_BINARY) + " layer --in '" + in + "' --out '" + out + "' " + extra + " 2>'" + err_path + "'";
    const int raw = std::system(cmd.c_str());
    std::ifstream e(err_path);
    std::stringstream ss;
    ss << e.rdbuf();
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw), ss.str()};
  }
  std::string write(const LayerFile& f, const std::string& name = "in.safetensors") {
    const std::string p = (dir_ / name).string();
    write_safetensors(p, f.tensors, f.meta);
    return p;
  }
  // Runs a bad input and checks the failure contract; returns the error line.
  std::string expect_failure(const std::string& in, const std::string& what) {
    const std::string out = (dir_ / "out.safetensors").string();
    std::ofstream(out) << "previous results";
    const Result r = run(in, out);
    EXPECT_NE(r.status, 0) << what;
    EXPECT_LT(r.status, 128) << what << ": the program crashed";
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": expected one line, got: " << r.err;
    EXPECT_EQ(r.err.rfind("hstu: error: ", 0), 0u) << what << ": " << r.err;
    std::ifstream o(out);
    std::string content((std::istreambuf_iterator<char>(o)), std::istreambuf_iterator<char>());
    EXPECT_EQ(content, "previous results") << what << ": the existing output was touched";
    return r.err;
  }

};

TEST_F(LayerCli, GoodFileGivesOutputsAndGradients) {
  const std::string out = (dir_ / "out.safetensors").string();
  const Result r = run(write(good_file()), out);
  ASSERT_EQ(r.status, 0) << r.err;
  const SafetensorsFile f = read_safetensors(out);
  ASSERT_NE(f.find("out"), nullptr);
  EXPECT_EQ(f.find("out")->shape(), (Shape{7, 8}));
  for (const char* g : {"grad.x", "grad.ln_in.weight", "grad.ln_in.bias", "grad.uvqk.weight", "grad.uvqk.bias",
                        "grad.ln_attn.weight", "grad.ln_attn.bias", "grad.out.weight", "grad.out.bias"})
    EXPECT_NE(f.find(g), nullptr) << g;
  // Forward only: no gradients.
  LayerFile fwd = good_file();
  fwd.erase("grad_out");
  ASSERT_EQ(run(write(fwd, "fwd.safetensors"), out).status, 0);
  const SafetensorsFile g = read_safetensors(out);
  EXPECT_EQ(g.tensors.size(), 1u);
  EXPECT_TRUE(test::bitwise_equal(*g.find("out"), *f.find("out")));
}

TEST_F(LayerCli, MissingTensor) {
  LayerFile f = good_file();
  f.erase("uvqk.weight");
  const std::string e = expect_failure(write(f), "missing tensor");
  EXPECT_NE(e.find("tensor 'uvqk.weight' is missing"), std::string::npos) << e;
}

TEST_F(LayerCli, WrongShape) {
  LayerFile f = good_file();
  f.set("out.weight", test::randn(DType::F32, {8, 9}, 5));
  const std::string e = expect_failure(write(f), "wrong shape");
  EXPECT_NE(e.find("'out.weight' has shape [8, 9] but must be [8, 8]"), std::string::npos) << e;
}

TEST_F(LayerCli, WrongDtype) {
  LayerFile f = good_file();
  f.set("ln_in.bias", test::randn(DType::F64, {8}, 5));
  std::string e = expect_failure(write(f), "wrong dtype");
  EXPECT_NE(e.find("'ln_in.bias' is F64 but must be F32"), std::string::npos) << e;
  LayerFile g = good_file();
  g.set("seq_offsets", test::randn(DType::F32, {4}, 5));
  e = expect_failure(write(g), "float offsets");
  EXPECT_NE(e.find("'seq_offsets' is F32[4] but must be I64[B+1]"), std::string::npos) << e;
}

TEST_F(LayerCli, OffsetsNotIncreasing) {
  LayerFile f = good_file();
  f.set("seq_offsets", i64({0, 5, 3, 7}));
  const std::string e = expect_failure(write(f), "decreasing offsets");
  EXPECT_NE(e.find("decreases at index 2"), std::string::npos) << e;
  f.set("seq_offsets", i64({0, 3, 3, 6}));
  EXPECT_NE(expect_failure(write(f), "offsets short of T").find("ends at 6 but 'x' has 7 rows"), std::string::npos);
}

TEST_F(LayerCli, TruncatedFile) {
  const std::string in = write(good_file());
  fs::resize_file(in, fs::file_size(in) - 100);
  const std::string e = expect_failure(in, "truncated");
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST_F(LayerCli, BadSettings) {
  LayerFile f = good_file();
  f.meta.erase("num_heads");
  EXPECT_NE(expect_failure(write(f), "missing key").find("metadata key 'num_heads' is missing"), std::string::npos);
  f = good_file();
  f.meta["dqk"] = "four";
  EXPECT_NE(expect_failure(write(f), "bad integer").find("'dqk': 'four' is not an integer"), std::string::npos);
  f = good_file();
  f.meta["dropout"] = "1.5";
  EXPECT_NE(expect_failure(write(f), "bad dropout").find("dropout: 1.5 is outside [0, 1)"), std::string::npos);
  f = good_file();
  f.meta["silu"] = "relu";
  EXPECT_NE(expect_failure(write(f), "bad silu").find("'relu' is not a SiLU mode"), std::string::npos);
  f = good_file();
  f.meta["max_seq_len"] = "3";
  EXPECT_NE(expect_failure(write(f), "too long").find("more than max_seq_len 3"), std::string::npos);
  f = good_file();
  f.meta["num_contextual"] = "3";
  EXPECT_NE(expect_failure(write(f), "context").find("fewer than num_contextual 3"), std::string::npos);
}

TEST_F(LayerCli, MissingInputFileAndBadDevice) {
  const std::string e = expect_failure((dir_ / "nope.safetensors").string(), "missing file");
  EXPECT_NE(e.find("no such file"), std::string::npos) << e;
  const Result r = run(write(good_file()), (dir_ / "o.safetensors").string(), "--device tpu");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace
}  // namespace hstu
