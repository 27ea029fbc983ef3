// Inputs a new user or an attacker would try, run through the `hstu` program as they would run
// it: each ends in one clean error line (or the right behaviour), never a signal, and leaves the
// disk as it was. The crafted files are written byte by byte, since hstu's own writer refuses
// to make them.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hstu/core/atomic_file.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/core/tensor.h"
#include "hstu/io/checkpoint.h"
#include "hstu/io/safetensors.h"
#include "hstu/optim/optim.h"
#include "hstu/train/trainer.h"
#include "test_util.h"
#include "train/run_folder.h"
#include "train_test_util.h"

namespace hstu {
namespace {

namespace fs = std::filesystem;
using train_detail::RunFolder;

struct Outcome {
  int status;  // the exit status, or 128 + the signal
  std::string out, err;
};

class Robustness : public test::TempDirTest {
 protected:
  // `hstu ARGS` in the test's folder; stdout and stderr captured.
  Outcome hstu(const std::string& args) {
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const std::string cmd = "cd '" + dir_.string() + "' && " + std::string(HSTU_BINARY) + " " + args + " >'" + out +
                            "' 2>'" + err + "'";
    const int raw = std::system(cmd.c_str());
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw), slurp(out), slurp(err)};
  }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // The failure contract: non-zero status, no signal, one line on stderr starting "hstu: error:"
  // that holds `what`.
  void expect_clean_error(const Outcome& r, const std::string& what, const std::string& label) {
    EXPECT_NE(r.status, 0) << label;
    EXPECT_LT(r.status, 128) << label << ": the program crashed";
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << label << ": " << r.err;
    EXPECT_EQ(r.err.rfind("hstu: error: ", 0), 0u) << label << ": " << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << label << ": " << r.err;
  }
  // A safetensors file from a raw JSON header and data bytes.
  std::string raw_safetensors(const std::string& name, const std::string& header, std::size_t data_bytes) {
    std::string bytes;
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
    bytes += header + std::string(data_bytes, '\0');
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  // A short CPU run's flags.
  static std::string small_run() {
    return "--set train.device=cpu --set synthetic.users=150 --set synthetic.items=60 --set synthetic.max_len=20 "
           "--set model.max_seq_len=20 --set model.num_layers=1 --set loss.num_negatives=16 --set train.epochs=1";
  }
};

// ---- sizes that overflow ------------------------------------------------------------------

TEST_F(Robustness, ShapesWhoseElementCountOverflowsAreRejected) {
  // x of [2^62 + 10, 64] with 640 floats: the element count times 4 wraps to 2560 bytes.
  const std::string x = raw_safetensors(
      "x.safetensors",
      R"({"__metadata__":{"num_heads":"1","dqk":"4","dv":"4","max_seq_len":"4611686018427387924"},)"
      R"("x":{"dtype":"F32","shape":[4611686018427387914,64],"data_offsets":[0,2560]},)"
      R"("seq_offsets":{"dtype":"I64","shape":[3],"data_offsets":[2560,2584]}})",
      2584);
  expect_clean_error(hstu("layer --in x.safetensors --out o.safetensors"), "more than 2^48 elements", "x");
  // seq_offsets of [2^61 + 3] holding 24 bytes (the byte count wraps to 24).
  raw_safetensors("o.safetensors.in",
                  R"({"seq_offsets":{"dtype":"I64","shape":[2305843009213693955],"data_offsets":[0,24]}})", 24);
  expect_clean_error(hstu("layer --in o.safetensors.in --out o.safetensors"), "more than 2^48 elements", "offsets");
  EXPECT_FALSE(fs::exists(path("o.safetensors")));
  // A checkpoint's [2^62, 2^62] tensor.
  raw_safetensors("ck.safetensors",
                  R"({"__metadata__":{"hstu.kind":"hstu-retrieval-checkpoint-v2","hstu.config":""},)"
                  R"("item_embedding.weight":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],)"
                  R"("data_offsets":[0,0]}})",
                  0);
  expect_clean_error(hstu("eval --checkpoint ck.safetensors"), "more than 2^48 elements", "checkpoint");
  EXPECT_EQ(checked_numel({std::int64_t{1} << 62, std::int64_t{1} << 62}), -1);
  EXPECT_EQ(checked_numel({0, std::int64_t{1} << 40}), 0);
  EXPECT_THROW(Tensor::empty(DType::F32, {std::int64_t{1} << 40, std::int64_t{1} << 40}), Error);
}

TEST_F(Robustness, AbsurdConfigValuesFailAtOnce) {
  expect_clean_error(hstu("train --set model.d_model=9223372036854775807"), "must be an integer in 1..65536",
                     "d_model");
  expect_clean_error(hstu("train --set optim.lr=inf"), "must be a finite number", "lr = inf");
  expect_clean_error(hstu("train --set loss.num_negatives=100000000"), "loss.num_negatives", "negatives");
  // Within range, but more negatives than there are items to draw.
  expect_clean_error(hstu("train " + small_run() + " --set loss.num_negatives=5000"), "only 60 items", "negatives");
  // Sizes the machine cannot hold fail before any data is made.
  expect_clean_error(hstu("train --set synthetic.users=2000000000 --set synthetic.max_len=10000000"),
                     "of host memory", "synthetic data");
  EXPECT_FALSE(fs::exists(path("runs")));
}

// ---- output paths ---------------------------------------------------------------------------

TEST_F(Robustness, OutputPathsThatAreNotFilesAreRefusedNotReplaced) {
  const std::string in = path("in.safetensors");
  std::ofstream(in) << "not used";
  fs::create_directories(path("folder"));
  fs::create_symlink(path("target.txt"), path("link"));
  std::ofstream(path("target.txt")) << "the link's target";
  ASSERT_EQ(::mkfifo(path("pipe").c_str(), 0644), 0);
  for (const char* out : {"folder", "link", "pipe", "/dev/null"}) {
    const Outcome r = hstu(std::string("layer --in in.safetensors --out ") + out);
    expect_clean_error(r, "which hstu does not replace", out);
  }
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_EQ(slurp(path("target.txt")), "the link's target");
  EXPECT_TRUE(fs::is_fifo(path("pipe")));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_THROW(write_file_atomic(path("link"), "x"), Error);
  EXPECT_THROW(check_output_path(path("missing/x.json"), "--json"), Error);
  expect_clean_error(hstu("bench layer --iters 1 --seqlens 8 --json folder"), "which hstu does not replace", "bench");
}

// ---- run folders ------------------------------------------------------------------------------

TEST_F(Robustness, ARunOwnsItsFolder) {
  // A second run while the first holds the folder: one error naming the holder.
  {
    RunFolder first(path("run"), RunFolder::Mode::New);
    try {
      RunFolder second(path("run"), RunFolder::Mode::New);
      ADD_FAILURE() << "two runs shared a folder";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("in use by another hstu run (process " + std::to_string(::getpid()) + ")"),
                std::string::npos)
          << e.what();
    }
  }
  // A lock file left by a process that is gone is simply taken over.
  fs::create_directories(path("stale"));
  std::ofstream(path("stale/.hstu.lock")) << "999999999\n";
  std::ofstream(path("stale/checkpoint.safetensors.tmp.999999999")) << "half a checkpoint";
  std::ofstream(path("stale/notes.txt")) << "the user's own file";
  {
    RunFolder taken(path("stale"), RunFolder::Mode::New);
    EXPECT_FALSE(fs::exists(path("stale/checkpoint.safetensors.tmp.999999999"))) << "a dead writer's temp file stayed";
  }
  EXPECT_TRUE(fs::exists(path("stale/notes.txt"))) << "a file that is not the run's was removed";
}

TEST_F(Robustness, ANewRunDoesNotMixWithAnOldOne) {
  ASSERT_EQ(hstu("train " + small_run() + " --out a").status, 0);
  const std::string config = slurp(path("a/config.toml"));
  expect_clean_error(hstu("train " + small_run() + " --set train.seed=7 --out a"), "holds another run's files",
                     "a used folder");
  EXPECT_EQ(slurp(path("a/config.toml")), config) << "the refused run touched the old run's files";
  // --overwrite starts clean: one run's events in metrics.jsonl.
  ASSERT_EQ(hstu("train " + small_run() + " --set train.seed=7 --out a --overwrite").status, 0);
  const std::string metrics = slurp(path("a/metrics.jsonl"));
  EXPECT_EQ(metrics.find("\"event\":\"start\""), metrics.rfind("\"event\":\"start\"")) << metrics;
  // The default folder holds the latest run: a second run replaces the first.
  ASSERT_EQ(hstu("train " + small_run()).status, 0);
  ASSERT_EQ(hstu("train " + small_run() + " --set train.seed=3").status, 0);
  EXPECT_NE(slurp(path("runs/latest/config.toml")).find("seed = 3"), std::string::npos);
}

TEST_F(Robustness, AFailingRunLeavesNothingBehind) {
  expect_clean_error(hstu("train " + small_run() + " --data nothere.txt --out f1"), "current folder", "missing data");
  EXPECT_FALSE(fs::exists(path("f1")));
  // The loss blows up at the first step: no checkpoint yet, so nothing stays.
  expect_clean_error(hstu("train " + small_run() + " --set loss.temperature=1e-300 --out f2"), "at step 1",
                     "non-finite");
  EXPECT_FALSE(fs::exists(path("f2")));
  // Into a folder that exists: the folder stays, the run's files go.
  fs::create_directories(path("f3"));
  expect_clean_error(hstu("train " + small_run() + " --set loss.temperature=1e-300 --out f3"), "at step 1",
                     "non-finite");
  EXPECT_TRUE(fs::is_empty(path("f3")));
}

// ---- checkpoints ----------------------------------------------------------------------------

TEST_F(Robustness, BadCheckpointsAreCleanErrors) {
  ASSERT_EQ(hstu("train " + small_run() + " --out run").status, 0);
  expect_clean_error(hstu("eval --checkpoint run/"), "is a folder", "a folder");
  // The weights without the run's settings in the metadata.
  SafetensorsFile ck = read_safetensors(path("run/checkpoint.safetensors"));
  std::map<std::string, std::string> meta = ck.metadata;
  meta.erase("hstu.config");
  write_safetensors(path("noconfig.safetensors"), ck.tensors, meta);
  expect_clean_error(hstu("eval --checkpoint noconfig.safetensors"), "metadata 'hstu.config' is missing", "no config");
  // NaN weights are refused, not evaluated to zeros.
  std::vector<std::pair<std::string, Tensor>> nan;
  for (const auto& [name, t] : ck.tensors) nan.emplace_back(name, t.clone());  // Tensors share storage
  for (auto& [name, t] : nan)
    if (name == "layers.0.out.weight") t.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  write_safetensors(path("nan.safetensors"), nan, ck.metadata);
  expect_clean_error(hstu("eval --checkpoint nan.safetensors"), "tensor 'layers.0.out.weight' holds nan at element 3",
                     "NaN");
  // A position past the data is refused on resume.
  fs::create_directories(path("far"));
  meta = ck.metadata;
  meta["hstu.next_batch"] = "100000";
  meta["hstu.epoch"] = "1";
  write_safetensors(path("far/checkpoint.safetensors"), ck.tensors, meta);
  expect_clean_error(hstu("train --resume far/checkpoint.safetensors"), "but its run has 1 epochs", "position");
}

TEST_F(Robustness, ResumeWritesIntoTheCheckpointsFolder) {
  ASSERT_EQ(hstu("train " + small_run() + " --set train.epochs=2 --out r --stop-after-steps 3").status, 0);
  const Outcome resumed = hstu("train --resume r/checkpoint.safetensors");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_TRUE(fs::exists(path("r/final.json")));
  EXPECT_FALSE(fs::exists(path("runs"))) << "--resume without --out wrote into runs/latest";
  // Epochs count from 1 in metrics.jsonl, as on the console and in final.json.
  std::ifstream m(path("r/metrics.jsonl"));
  std::vector<std::int64_t> epochs;
  for (std::string line; std::getline(m, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e["event"] == "valid") epochs.push_back(e["epoch"].get<std::int64_t>());
  }
  EXPECT_EQ(epochs, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(read_safetensors(path("r/checkpoint.safetensors")).metadata.at("hstu.epoch"), "3");  // at the 3rd (none)
}

// ---- training guards --------------------------------------------------------------------------

TEST_F(Robustness, OptimisersNameANonFiniteGradient) {
  Tensor p = Tensor::zeros(DType::F32, {4}), g = Tensor::zeros(DType::F32, {4});
  Tensor q = Tensor::zeros(DType::F32, {3}), h = Tensor::zeros(DType::F32, {3});
  AdamW adam(AdamConfig{});
  adam.add("a", p, g);
  adam.add("b", q, h);
  adam.step();
  EXPECT_EQ(adam.non_finite_gradient(), "");
  h.data<float>()[1] = std::numeric_limits<float>::infinity();
  adam.step();
  EXPECT_EQ(adam.non_finite_gradient(), "b");
  SparseRowAdam sparse("table", 5, 2, AdamConfig{});
  Tensor table = Tensor::zeros(DType::F32, {5, 2}), rows = Tensor::zeros(DType::F32, {1, 2});
  sparse.step(table, {3}, rows);
  EXPECT_FALSE(sparse.non_finite_gradient());
  rows.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  sparse.step(table, {3}, rows);
  EXPECT_TRUE(sparse.non_finite_gradient());
}

// ---- messages ---------------------------------------------------------------------------------

TEST_F(Robustness, ErrorLinesAreOneLineOfValidUtf8) {
  const Error e("file.bin", std::string("bad field \"\xff\xfe\x01\x00z\" then\na new line", 29), "fix it");
  const std::string w = e.what();
  EXPECT_EQ(w.find('\n'), std::string::npos);
  EXPECT_NE(w.find("\\xFF\\xFE\\x01\\x00z"), std::string::npos) << w;
  for (unsigned char c : w) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << w;
  EXPECT_NE(Error("x", "caf\xc3\xa9", "").what(), std::string()) ;
  EXPECT_NE(std::string(Error("x", "caf\xc3\xa9", "").what()).find("caf\xc3\xa9"), std::string::npos);
  // Binary bytes given as a config file reach the message escaped.
  std::ofstream(path("binary.toml"), std::ios::binary) << std::string("\x00\xff\xfe[model\x01", 8);
  const Outcome r = hstu("train --config binary.toml");
  EXPECT_NE(r.status, 0);
  for (unsigned char c : r.err) EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << r.err;
}

TEST_F(Robustness, ACudaAllocationWithoutAGpuSaysSo) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is visible: this checks a machine without one";
  try {
    Tensor::empty(DType::F32, {1}, Device::CUDA);
    ADD_FAILURE() << "a GPU tensor was made without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("0.000 GiB"), std::string::npos) << e.what();
  }
}

TEST_F(Robustness, CommandLineEdges) {
  expect_clean_error(hstu("train --stop-after-steps 0"), "--stop-after-steps", "0 steps");
  expect_clean_error(hstu("train --stop-after-steps -1"), "--stop-after-steps", "-1 steps");
  for (const char* help : {"layer --help", "bench layer --help", "bench train --help"}) {
    const Outcome r = hstu(help);
    EXPECT_EQ(r.status, 0) << help;
    EXPECT_EQ(r.out.find("ENUM"), std::string::npos) << help << ": " << r.out;
    EXPECT_EQ(r.out.find("{false}"), std::string::npos) << help << ": " << r.out;
    EXPECT_EQ(r.out.find("->"), std::string::npos) << help << ": " << r.out;
  }
  // Users of 3 interactions: valid for evaluation, but nothing to train on; the error says why.
  std::ofstream(path("three.txt")) << "1 5 6 7\n2 5 7 8\n3 6 7 8\n";
  expect_clean_error(hstu("train --set train.device=cpu --data three.txt --set loss.num_negatives=2"),
                     "needs at least 4 interactions", "3 a user");
}

// hstu plan: the JSON the planner issue names, and each bad input one clean line.
// hstu recommend: answers by user, by history and from a file of requests; a bad request, a
// ranking or missing checkpoint is one error line, and --out is then not written.
TEST_F(Robustness, RecommendAnswersAndRefusesBadRequestsCleanly) {
  const std::string ck = test::one_epoch_checkpoint(test::small_retrieval_run(), path("run"));
  const Outcome one = hstu("recommend --checkpoint " + ck + " --user 0 --k 4");
  ASSERT_EQ(one.status, 0) << one.err;
  const nlohmann::json j = nlohmann::json::parse(one.out);
  EXPECT_EQ(j["items"].size(), 4u);
  EXPECT_EQ(j["user"], 0);
  std::ofstream(path("in.jsonl")) << "{\"user\": 1}\n\n{\"history\": [3, 5, 8], \"k\": 2}\n";
  const Outcome file = hstu("recommend --checkpoint " + ck + " --input in.jsonl --out out.jsonl");
  ASSERT_EQ(file.status, 0) << file.err;
  std::ifstream in(path("out.jsonl"));
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["items"].size(), 2u);
  EXPECT_TRUE(lines[1]["user"].is_null());

  std::ofstream(path("bad.jsonl")) << "{\"user\": 1}\n{\"history\": [3, \"x\"]}\n";
  expect_clean_error(hstu("recommend --checkpoint " + ck + " --input bad.jsonl --out bad_out.jsonl"), "bad.jsonl:2",
                     "a malformed request line");
  EXPECT_FALSE(std::filesystem::exists(path("bad_out.jsonl")));
  std::ofstream(path("notjson.jsonl")) << "{user: 1}\n";
  expect_clean_error(hstu("recommend --checkpoint " + ck + " --input notjson.jsonl"), "notjson.jsonl:1", "not JSON");
  expect_clean_error(hstu("recommend --checkpoint " + ck + " --user 987654"), "987654", "an unknown user");
  expect_clean_error(hstu("recommend --checkpoint " + ck + " --history 3,zz"), "zz", "a history that is not ids");
  expect_clean_error(hstu("recommend --checkpoint " + ck), "--user", "no request");
  expect_clean_error(hstu("recommend --checkpoint missing.safetensors --user 1"), "missing.safetensors",
                     "a checkpoint that is not there");
}

// hstu score: probabilities per candidate and task; bad requests and the wrong kind of
// checkpoint are one error line, and --out is then not written.
TEST_F(Robustness, ScoreAnswersAndRefusesBadRequestsCleanly) {
  const TrainConfig c = test::small_ranking_run();
  const std::string ck = test::one_epoch_checkpoint(c, path("run"));
  const Outcome one = hstu("score --checkpoint " + ck + " --user 0 --candidates 3,5");
  ASSERT_EQ(one.status, 0) << one.err;
  const nlohmann::json j = nlohmann::json::parse(one.out);
  ASSERT_EQ(j["probabilities"].size(), 2u);
  EXPECT_EQ(j["probabilities"][0].size(), static_cast<std::size_t>(c.ranking_synthetic.num_tasks));
  std::ofstream(path("bad.jsonl")) << "{\"user\": 0, \"candidates\": [3]}\n{\"user\": 0, \"candidates\": [3], \"x\": 1}\n";
  expect_clean_error(hstu("score --checkpoint " + ck + " --input bad.jsonl --out out.jsonl"), "bad.jsonl:2",
                     "an unknown field");
  EXPECT_FALSE(std::filesystem::exists(path("out.jsonl")));
  expect_clean_error(hstu("score --checkpoint " + ck + " --user 0"), "--candidates", "no candidates");
  expect_clean_error(hstu("score --checkpoint " + ck + " --user 0 --candidates 99999"), "99999", "an unknown item");
  expect_clean_error(hstu("recommend --checkpoint " + ck + " --user 0"), "ranking checkpoint",
                     "a ranking checkpoint given to recommend");
}

TEST_F(Robustness, PlanPrintsItsJsonAndRefusesImpossibleBudgets) {
  const std::string e2e = std::string(HSTU_SOURCE_DIR) + "/configs/bench-e2e.toml";
  const Outcome ok = hstu("plan --config '" + e2e + "' --device-mem 24 --host-mem 64 --json");
  ASSERT_EQ(ok.status, 0) << ok.err;
  const nlohmann::json j = nlohmann::json::parse(ok.out);
  for (const char* key : {"device_peak_gib", "host_peak_gib", "step_ms_predicted", "tables", "layers"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_LE(j["device_peak_gib"].get<double>(), 24.0);
  EXPECT_EQ(j["layers"].size(), 8u);

  expect_clean_error(hstu("plan --config '" + e2e + "' --device-mem 4 --host-mem 64"), "--device-mem",
                     "a device budget under the least the step needs");
  expect_clean_error(hstu("plan --config '" + e2e + "' --device-mem 24 --host-mem 0.5"), "--host-mem",
                     "a host budget under what the run holds");
  expect_clean_error(hstu("plan --config '" + std::string(HSTU_SOURCE_DIR) +
                          "/configs/beauty.toml' --device-mem 24 "
                          "--host-mem 64"),
                     "ranking", "a retrieval config");
  expect_clean_error(hstu("plan --config missing.toml --device-mem 24 --host-mem 64"), "missing.toml",
                     "a config that is not there");
  std::ofstream(path("rates.json")) << "{\"gemm_flops\": 1e15}";
  expect_clean_error(hstu("plan --config '" + e2e + "' --device-mem 24 --host-mem 64 --rates rates.json"),
                     "attention_flops", "a rates file without every rate");
  // train and bench train take the same budgets: both or neither, and only for a GPU run.
  const std::string ranking = std::string(HSTU_SOURCE_DIR) + "/configs/ranking-synthetic.toml";
  expect_clean_error(hstu("train --config '" + ranking + "' --device-mem 24"), "--host-mem",
                     "--device-mem without --host-mem");
  expect_clean_error(hstu("train --config '" + ranking + "' --set train.device=cpu --device-mem 24 --host-mem 64"),
                     "on the CPU", "a budget for a CPU run");
  expect_clean_error(
      hstu("bench train --config '" + ranking + "' --set train.device=cpu --device-mem 24 --host-mem 64"), "on the CPU",
      "a budget for a CPU benchmark");
}

}  // namespace
}  // namespace hstu
