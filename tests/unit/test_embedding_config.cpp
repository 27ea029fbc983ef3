// [[embedding.tables]] in a config file: reading, --set, the round trip through the stored
// settings, the errors (file and line, what to change), and the memory check before any data.
#include <gtest/gtest.h>

#include <fstream>

#include "hstu/core/error.h"
#include "hstu/train/train_config.h"
#include "hstu/train/trainer.h"
#include "test_util.h"

namespace hstu {
namespace {

class EmbeddingConfig : public test::TempDirTest {
 protected:
  std::string write(const std::string& text) {
    const std::string p = path("config.toml");
    std::ofstream(p) << "[model]\nkind = \"ranking\"\n\n" << text;
    return p;
  }
  std::string error_of(const std::string& text, const std::vector<std::string>& sets = {}) {
    try {
      load_train_config(write(text), sets).validate();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(EmbeddingConfig, EntriesAreReadSetAndWrittenBack) {
  const std::string p = write(
      "[[embedding.tables]]\ntable = \"items\"\nkind = \"hashed\"\nrows = 5000000\nstorage = \"cached\"\n"
      "cache_fraction = 0.1\npolicy = \"lfu\"\noptimizer = \"adagrad\"\n\n"
      "[[embedding.tables]]\ntable = \"features.0\"\n");
  TrainConfig c = load_train_config(p, {"embedding.tables.1.storage=cached", "embedding.tables.1.cache_rows=4096"});
  c.validate();
  ASSERT_EQ(c.embedding_tables.size(), 2u);
  EXPECT_EQ(c.embedding_tables[0].kind, "hashed");
  EXPECT_EQ(c.embedding_tables[0].rows, 5000000);
  EXPECT_EQ(c.embedding_tables[0].policy, "lfu");
  EXPECT_EQ(c.embedding_tables[1].storage, "cached");
  EXPECT_EQ(c.embedding_tables[1].cache_rows, 4096);
  const TrainConfig back = load_train_config_text(train_config_to_toml(c), "stored settings");
  ASSERT_EQ(back.embedding_tables.size(), 2u);
  EXPECT_EQ(back.embedding_tables[0].optimizer, "adagrad");
  EXPECT_EQ(back.embedding_tables[0].cache_fraction, 0.1);
  EXPECT_EQ(back.embedding_tables[1].cache_rows, 4096);

  // The resolved tables take the model's widths and the data's rows.
  RankingConfig model = c.ranking_model_settings();
  model.num_items = 1000;
  model.num_actions = 8;
  model.feature_sizes = {30000};
  const auto tables = ranking_embedding_tables(c, model, Device::CPU);
  ASSERT_TRUE(tables[kItemTable].has_value());
  EXPECT_EQ(tables[kItemTable]->rows, 5000000);
  EXPECT_EQ(tables[kItemTable]->cache_rows, 500000);
  EXPECT_EQ(tables[kItemTable]->dim, model.item_dim);
  EXPECT_FALSE(tables[kActionTable].has_value());
  ASSERT_TRUE(tables[kFeatureTable0].has_value());
  EXPECT_EQ(tables[kFeatureTable0]->rows, 30000);
}

TEST_F(EmbeddingConfig, BadEntriesAreOneLineNamingFileAndLine) {
  EXPECT_NE(
      error_of("[[embedding.tables]]\ntable = \"items\"\nstorage = \"disk\"\n").find("config.toml:4: storage 'disk'"),
      std::string::npos);
  EXPECT_NE(
      error_of("[[embedding.tables]]\ntable = \"items\"\ncolour = 3\n").find("config.toml:6: unknown key 'colour'"),
      std::string::npos);
  EXPECT_NE(error_of("[[embedding.tables]]\ntable = \"users\"\n").find("table 'users' is not a table"),
            std::string::npos);
  EXPECT_NE(error_of("[[embedding.tables]]\ntable = \"items\"\nkind = \"hashed\"\n").find("a hashed table needs rows"),
            std::string::npos);
  EXPECT_NE(error_of("[[embedding.tables]]\ntable = \"items\"\nstorage = \"cached\"\n").find("needs cache_rows"),
            std::string::npos);
  EXPECT_NE(error_of("[[embedding.tables]]\ntable = \"items\"\n[[embedding.tables]]\ntable = \"items\"\n")
                .find("two entries"),
            std::string::npos);
  EXPECT_NE(
      error_of("[[embedding.tables]]\ntable = \"items\"\n", {"embedding.tables.3.rows=5"}).find("has 1 [[embedding"),
      std::string::npos);
  EXPECT_NE(error_of("[embedding]\nsize = 3\n").find("unknown key 'embedding.size'"), std::string::npos);
}

TEST_F(EmbeddingConfig, TablesTheMachineCannotHoldAreRefusedBeforeAnyData) {
  TrainConfig c = load_train_config(write("[[embedding.tables]]\ntable = \"items\"\n"), {});
  RankingConfig model = c.ranking_model_settings();
  model.num_items = std::int64_t{1} << 36;  // 2^36 rows of 64 floats and their Adam state: 48 TiB
  model.num_actions = 8;
  try {
    ranking_embedding_tables(c, model, Device::CPU);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GiB of host memory"), std::string::npos) << e.what();
  }
}

TEST_F(EmbeddingConfig, ARetrievalModelServesNoTable) {
  EXPECT_NE(error_of("[[embedding.tables]]\ntable = \"items\"\n", {"model.kind=retrieval"})
                .find("serve a ranking model's tables"),
            std::string::npos);
}

}  // namespace
}  // namespace hstu
