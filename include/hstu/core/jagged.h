// A jagged batch: B sequences of different lengths packed row after row into [T, ...] tensors.
// Sequence b owns rows seq_offsets[b] .. seq_offsets[b+1]; it may have num_targets[b]
// candidate tokens at its end, and every sequence starts with num_contextual context tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hstu {

struct JaggedBatch {
  std::vector<std::int64_t> seq_offsets{0};  // B + 1 entries
  std::vector<std::int64_t> num_targets;     // empty (no targets) or B entries
  std::int64_t num_contextual = 0;
  // Every token's time (the relative attention bias's time term reads it), or empty.
  std::vector<std::int64_t> timestamps;
  // The first token's row in the global batch of a data-parallel step (the ranks before this
  // one hold the rows above it): dropout draws each row's mask at its global place.
  std::int64_t first_row = 0;

  static JaggedBatch from_lengths(const std::vector<std::int64_t>& lengths, std::vector<std::int64_t> num_targets = {},
                                  std::int64_t num_contextual = 0);

  std::int64_t batch_size() const { return static_cast<std::int64_t>(seq_offsets.size()) - 1; }
  std::int64_t total_tokens() const { return seq_offsets.back(); }
  std::int64_t start(std::int64_t b) const { return seq_offsets[b]; }
  std::int64_t length(std::int64_t b) const { return seq_offsets[b + 1] - seq_offsets[b]; }
  std::int64_t targets(std::int64_t b) const { return num_targets.empty() ? 0 : num_targets[b]; }
  std::int64_t max_length() const;

  // Throws hstu::Error (naming `where`) unless: offsets start at 0 and never decrease; there
  // are B targets counts in 0..n; every sequence fits the model's maximum length L; and a
  // non-empty sequence holds at least num_contextual + num_targets tokens.
  void validate(std::int64_t max_seq_len, const std::string& where) const;

  // The number of (i, j) pairs the mask allows: the P of the FLOP model of docs/math.md.
  std::int64_t attended_pairs(std::int64_t max_attn_len) const;
};

}  // namespace hstu
