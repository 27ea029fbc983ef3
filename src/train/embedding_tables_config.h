// [[embedding.tables]] in a config file: reading, writing back and checking the entries.
#pragma once

#include <toml++/toml.h>

#include <string>

#include "hstu/train/train_config.h"

namespace hstu {

// Reads the [embedding] section (its only key: `tables`, an array of tables) into
// config.embedding_tables; an unknown key or a bad value is an hstu::Error naming path:line.
void read_embedding_section(TrainConfig& config, const toml::table& section, const std::string& path);
// --set embedding.tables.N.KEY=VALUE (N from 0): one setting of an entry the file gave.
void set_embedding_table_key(TrainConfig& config, const std::string& key, const std::string& value,
                             const std::string& where);
// The entries as [[embedding.tables]] blocks ("" when there are none).
std::string embedding_tables_to_toml(const TrainConfig& config);
// Checks each entry's names and ranges; throws hstu::Error naming its file:line.
void validate_embedding_tables(const TrainConfig& config);

}  // namespace hstu
