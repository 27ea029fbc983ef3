// Writes the seed corpus of every fuzz target with the project's own writers:
//   make_seeds DIR   ->   DIR/<target>/<seed>
// The committed corpus (tests/fuzz/corpus/) was made by it; rerun it after a format change
// (tests/fuzz/README.md says how). Near-valid seeds are valid ones with one defect.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fuzz_util.h"
#include "hstu/io/checkpoint.h"
#include "hstu/io/safetensors.h"
#include "hstu/optim/ranking_optim.h"
#include "hstu/train/train_config.h"

namespace fs = std::filesystem;
using namespace hstu;

namespace {

fs::path g_out;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_out / target;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

// Writes with write_safetensors into the corpus and returns the bytes.
std::string put_st(const std::string& target, const std::string& name, const NamedTensors& tensors,
                   const std::map<std::string, std::string>& meta) {
  const fs::path p = g_out / target / name;
  fs::create_directories(p.parent_path());
  write_safetensors(p.string(), tensors, meta);
  return slurp(p);
}

// Deterministic small values, a different stream per tensor.
Tensor filled(DType dtype, const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(dtype, shape);
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>((seed * 7919 + static_cast<std::uint64_t>(i) * 104729) % 2001) / 1000.0 - 1.0;
    switch (dtype) {
      case DType::F32: t.data<float>()[i] = static_cast<float>(v); break;
      case DType::F64: t.data<double>()[i] = v; break;
      case DType::BF16: t.data<bf16>()[i] = bf16(static_cast<float>(v)); break;
      case DType::I32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v * 1000); break;
      case DType::I64: t.data<std::int64_t>()[i] = static_cast<std::int64_t>(v * 1000); break;
    }
  }
  return t;
}

Tensor i64(const std::vector<std::int64_t>& v) {
  Tensor t = Tensor::empty(DType::I64, {static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<std::int64_t>());
  return t;
}

// The 8-byte length prefix of a safetensors file, rewritten.
std::string with_header_len(std::string bytes, std::uint64_t n) {
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return bytes;
}

// A safetensors file with some metadata values replaced (the header re-encoded, the data kept).
std::string with_metadata(const std::string& bytes, const std::map<std::string, std::string>& values) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(bytes.substr(8, n));
  for (const auto& [k, v] : values) header["__metadata__"][k] = v;
  std::string head = header.dump();
  head.append((8 - head.size() % 8) % 8, ' ');
  return with_header_len(std::string(8, '\0'), head.size()) + head + bytes.substr(8 + n);
}

void safetensors_seeds() {
  const std::string t = "fuzz_safetensors";
  const std::string all = put_st(t, "all_dtypes", {{"f32", filled(DType::F32, {2, 3}, 1)},
                                                   {"f64", filled(DType::F64, {3}, 2)},
                                                   {"bf16", filled(DType::BF16, {2, 2}, 3)},
                                                   {"i32", filled(DType::I32, {1, 2, 2}, 4)},
                                                   {"i64", filled(DType::I64, {2}, 5)}},
                                 {{"format", "pt"}, {"note", "five dtypes"}});
  put_st(t, "scalar_and_empty", {{"scalar", filled(DType::F32, {}, 6)}, {"empty", filled(DType::F32, {0, 4}, 7)}}, {});
  put_st(t, "metadata_only", {}, {{"hstu.kind", "x"}, {"k", "v"}});
  // Near-valid: truncated data, a header length past the end, a dtype hstu does not read.
  put(t, "truncated_data", all.substr(0, all.size() - 3));
  put(t, "header_len_too_big", with_header_len(all, all.size()));
  std::string f16 = all;
  if (const auto p = f16.find("\"BF16\""); p != std::string::npos) f16.replace(p, 6, "\"F16\" ");
  put(t, "unsupported_dtype", f16);
  // A hand-written header: offsets out of order and a shape of zeros.
  const std::string head = R"({"b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},"a":{"dtype":"F32","shape":[0,0],"data_offsets":[0,0]},"__metadata__":{"m":"1"}})";
  put(t, "hand_written", with_header_len(std::string(8, '\0'), head.size()) + head + std::string(16, '\x01'));
  // Sizes at the edge: a shape whose element count overflows int64 (2^32 x 2^32 x 4), a zero
  // dimension beside a huge one, offsets at 2^64 - 1.
  const std::string edge = R"({"big":{"dtype":"F64","shape":[4294967296,4294967296,4],"data_offsets":[0,8]},)"
                           R"("zero":{"dtype":"I32","shape":[0,9223372036854775807],"data_offsets":[8,8]},)"
                           R"("far":{"dtype":"I64","shape":[1],"data_offsets":[18446744073709551615,18446744073709551615]}})";
  put(t, "sizes_at_the_edge", with_header_len(std::string(8, '\0'), edge.size()) + edge + std::string(8, '\0'));
}

TrainConfig tiny_train_config(bool ranking) {
  TrainConfig c;
  c.model_kind = ranking ? "ranking" : "retrieval";
  c.model.d_model = 4;
  c.model.num_layers = 1;
  c.model.heads = 1;
  c.model.dqk = c.model.dv = 2;
  c.model.max_seq_len = ranking ? 8 : 5;
  c.epochs = 1;
  return c;
}

void checkpoint_seeds() {
  const std::string t = "fuzz_checkpoint";
  const fs::path dir = g_out / t;
  fs::create_directories(dir);
  TrainerPosition pos;
  pos.step = 3;
  pos.epoch = 1;
  pos.next_batch = 0;
  pos.best_value = 0.25;
  pos.best_epoch = 0;
  pos.loss_sum = 1.5;
  pos.loss_n = 2;

  {  // Retrieval, as retrieval_trainer.cpp writes it.
    const RetrievalConfig m = fuzz::tiny_retrieval();
    RetrievalParams params = RetrievalParams::init(m, DType::F32, 1), grads = RetrievalParams::zeros(m, DType::F32);
    const RetrievalParams best = RetrievalParams::init(m, DType::F32, 2);
    AdamW dense(AdamConfig{});
    const auto np = params.named(), ng = grads.named();
    for (std::size_t k = 0; k < np.size(); ++k)
      if (np[k].first != "item_embedding.weight") dense.add(np[k].first, *np[k].second, *ng[k].second);
    SparseRowAdam sparse("item_embedding.weight", m.num_items + 1, m.d_model, AdamConfig{});
    const std::string toml = train_config_to_toml(tiny_train_config(false));
    save_checkpoint((dir / "retrieval_best").string(), params, &best, dense, sparse, pos, toml);
    TrainerPosition fresh;
    save_checkpoint((dir / "retrieval_no_best").string(), params, nullptr, dense, sparse, fresh, toml);
    // A position at the edges of int64 (one step from where epoch - 1 overflows) and a NaN best
    // value: metadata no writer makes, edited into the header.
    put(t, "retrieval_edge_position",
        with_metadata(slurp(dir / "retrieval_no_best"), {{"hstu.step", "9223372036854775807"},
                                                         {"hstu.epoch", "9223372036854775807"},
                                                         {"hstu.best_epoch", "-9223372036854775807"},
                                                         {"hstu.best_value", "nan"},
                                                         {"hstu.loss_n", "-1"}}));
    // Near-valid: cut inside the data; the kind of the other model.
    const std::string bytes = slurp(dir / "retrieval_best");
    put(t, "retrieval_truncated", bytes.substr(0, bytes.size() - 40));
    std::string other = slurp(dir / "retrieval_no_best");
    // ("retrieval" becomes "ranking" plus two blanks after the string: the header keeps its length.)
    if (const auto p = other.find("\"hstu-retrieval-checkpoint-"); p != std::string::npos) {
      const auto q = other.find('"', p + 1);
      std::string kind = other.substr(p, q + 1 - p);
      kind.replace(6, 9, "ranking");
      other.replace(p, q + 1 - p, kind + "  ");
    }
    put(t, "retrieval_as_ranking", other);
  }
  {  // Ranking, as ranking_trainer.cpp writes it.
    const RankingConfig m = fuzz::tiny_ranking();
    m.validate("make_seeds");
    RankingParams params = RankingParams::init(m, DType::F32, 3), grads = RankingParams::zeros(m, DType::F32);
    RankingOptimizers optim(params, grads, AdamConfig{}, 1e-3);
    save_ranking_checkpoint((dir / "ranking").string(), params, optim.dense(), optim.sparse(), pos,
                            train_config_to_toml(tiny_train_config(true)));
  }
}

void layer_seeds() {
  const std::string t = "fuzz_layer_io";
  // B = 3 sequences (lengths 2, 0, 3), d = 4, one head, dqk = dv = 2.
  HstuLayerConfig cfg;
  cfg.d_model = 4;
  cfg.heads = 1;
  cfg.dqk = cfg.dv = 2;
  cfg.max_seq_len = 4;
  HstuLayerParams p = HstuLayerParams::init(cfg, DType::F32, 3);
  NamedTensors base{{"x", filled(DType::F32, {5, 4}, 1)}, {"seq_offsets", i64({0, 2, 2, 5})}};
  for (auto& [name, w] : p.named()) base.emplace_back(name, *w);
  const std::map<std::string, std::string> meta{{"num_heads", "1"}, {"dqk", "2"}, {"dv", "2"}, {"max_seq_len", "4"}};
  put_st(t, "forward", base, meta);

  NamedTensors train = base;
  train.emplace_back("num_targets", i64({1, 0, 1}));
  train.emplace_back("grad_out", filled(DType::F32, {5, 4}, 2));
  std::map<std::string, std::string> train_meta = meta;
  train_meta.insert({{"dropout", "0.2"}, {"seed", "7"}, {"step", "3"}, {"layer_index", "1"}, {"silu", "u"},
                     {"alpha", "0.5"}, {"max_attn_len", "2"}, {"num_contextual", "1"}});
  put_st(t, "backward_dropout", train, train_meta);

  // Near-valid: a missing weight; offsets that end before x does.
  NamedTensors missing(base.begin(), base.end() - 1);
  put_st(t, "missing_weight", missing, meta);
  // Settings whose products overflow int64 (num_heads x 4 (dqk + dv)), and the largest window.
  std::map<std::string, std::string> huge = meta;
  huge["num_heads"] = "4611686018427387904";
  huge["max_attn_len"] = "9223372036854775807";
  put_st(t, "huge_settings", base, huge);
  NamedTensors short_offsets = base;
  short_offsets[1].second = i64({0, 2, 4});
  put_st(t, "offsets_short", short_offsets, meta);
}

void reader_seeds() {
  const std::string t = "fuzz_readers";
  // Byte 0 picks the format: 0 auto, 1 ml-dat, 2 ml-csv, 3 user-items, 4 user-item, 5 csv,
  // 6 delimited; +0x80 sets drop_short_users; +0x40: byte 1 holds the delimited settings
  // (delimiter + 5 * header mode, +0x80: a column list line follows). fuzz_readers.cpp has it all.
  auto seed = [&](const std::string& name, unsigned char selector, const std::string& text) {
    put(t, name, std::string(1, static_cast<char>(selector)) + text);
  };
  seed("ml_dat", 1, "1::10::5::978300760\n1::11::3::978300761\n1::12::4::978300762\n2::10::1::978300000\r\n2::13::2::978300001\n2::11::5::978300002\n");
  seed("ml_csv", 2, "userId,movieId,rating,timestamp\n1,10,4.5,964982703\n1,11,3.0,964981247\n1,12,0.5,964982224\n");
  seed("user_items", 3, "1 5 6 7 8\n2\t5\t9\t6\n0003 7 7 5\n");
  seed("user_item", 4, "1 5\n1 6\n1 7\n2 5\n2 8\n2 9\n");
  seed("csv", 5, "timestamp,user,extra,item,action\n3,a1,x,10,1\n1,1,x,11,0\n2,1,x,12,2\n1,2,,10,0\n2,2,,11,1\n3,2,,12,0\n");
  seed("auto_bom_dat", 0, "\xEF\xBB\xBF" "1::1::1::1\n1::2::1::2\n1::3::1::3\n");
  seed("auto_short_user_dropped", 0x80 | 4, "1 5\n1 6\n1 7\n2 5\n");
  seed("auto_comma_unknown", 0, "a,b,c\n1,2,3\n");
  seed("auto_udata_tabs", 0, "196\t242\t3\t881250949\n186\t302\t3\t891717742\n196\t377\t1\t878887116\n196\t51\t2\t880606923\n");
  seed("auto_tab_header", 0, "user_id\titem_id\ttime\n1\t2\t3\n1\t3\t4\n1\t4\t5\n");
  seed("delimited_plain", 6, "1;7;2.5;100\n1;8;4;101\n1;9;1;102\n");
  // Semicolon (3), no header (+5 * 2), a column list.
  put(t, "delimited_semicolon_columns", std::string("\x46") + static_cast<char>(0x80 | (3 + 5 * 2)) +
                                             "user,-,item,label\n1;x;7;1\n1;y;8;0\n1;z;9;1\n");
  // Space (4), header yes (+5 * 1), with the auto format.
  put(t, "auto_space_header", std::string("\x40") + static_cast<char>(4 + 5 * 1) + "user item ts\n1 2 3\n1 3 4\n1 5 6\n");
}

void config_seeds() {
  const std::string t = "fuzz_config";
  const fs::path configs = fs::path(HSTU_SOURCE_DIR) / "configs";
  for (const char* name : {"synthetic.toml", "ranking-synthetic.toml", "bench-e2e.toml"})
    put(t, name, slurp(configs / name));
  put(t, "all_keys.toml", train_config_to_toml(TrainConfig{}));
  // Lines are --set overrides too; a few that a run is given on the command line.
  put(t, "overrides", "model.num_layers=1\nmodel.d_model=8\ntrain.epochs=1\neval.ks=1,5\neval.select_metric=hr@5\n"
                      "model.silu=u\nloss.negatives=in-batch\noptim.decay=cosine\ndata.drop_short_users=true\n");
  put(t, "overrides_ranking", "model.kind=ranking\nranking.num_tasks=4\nranking_synthetic.feature_sizes=3,4\n"
                              "model.dropout=0.0\noptim.lr=2e-3\ntrain.seed=9\n");
  put(t, "overrides_extreme", "model.num_heads=4611686018427387904\nmodel.d_model=9223372036854775807\n"
                              "model.max_seq_len=-9223372036854775808\nsynthetic.items=4294967297\n"
                              "ranking.hidden=2147483648\neval.ks=9223372036854775807,1\noptim.lr=1e308\n");
  put(t, "bad_value.toml", "[model]\nnum_layers = \"two\"\n[train]\nepochs = -1\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  g_out = argv[1];
  try {
    safetensors_seeds();
    checkpoint_seeds();
    layer_seeds();
    reader_seeds();
    config_seeds();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
