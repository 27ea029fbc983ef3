// Leave-one-out split and jagged batches.
//
// For a user with items s[0 .. n) (n >= 3, oldest first):
//   train       s[0 .. n-2): inputs s[0 .. n-3), next-item labels s[1 .. n-2) (SASRec/HSTU
//               training: position t predicts the item after it); truncated to the last
//               max_len inputs. Users with n = 3 have one training item, hence no training
//               pair, and are left out of Train batches (they still have Valid/Test examples).
//   validation  history s[0 .. n-2) truncated to its last max_len items, target s[n-2].
//   test        history s[0 .. n-1) truncated to its last max_len items, target s[n-1].
//
// Examples are views into the Dataset (no copies); batches copy the tokens into flat arrays.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hstu/core/jagged.h"
#include "hstu/data/dataset.h"

namespace hstu {

enum class Split { Train, Valid, Test };
const char* split_name(Split split);

struct Example {
  std::int64_t user = 0;
  // Dataset index of inputs[0]: the inputs' actions and timestamps start there too.
  std::int64_t begin = 0;
  std::span<const std::int32_t> inputs;
  std::span<const std::int32_t> labels;  // Train: the next item at each input position; else empty
  std::int32_t target = 0;               // Valid/Test: the held-out item; Train: 0
};

// User `user`'s example of `split`; max_len >= 1. A Train example may have no inputs (n = 3).
// train_through_valid: the Train sequence is s[0 .. n-1), so the validation target is trained on
// (Meta's research code trains so; validation metrics are then no longer held out).
Example make_example(const Dataset& data, std::int64_t user, Split split, std::int64_t max_len,
                     bool train_through_valid = false);

// B sequences packed one after the other (the layout of JaggedBatch).
struct Batch {
  Split split = Split::Train;
  std::vector<std::int64_t> users;            // B dataset user indices
  std::vector<std::int64_t> seq_offsets{0};   // B+1; sequence b is tokens seq_offsets[b] .. seq_offsets[b+1]
  std::vector<std::int32_t> items;            // T input item ids
  std::vector<std::int32_t> actions;          // T, or empty when the dataset has no actions
  std::vector<std::int64_t> timestamps;       // T, or empty when the dataset has no timestamps
  std::vector<std::int32_t> labels;           // Train: T next-item labels; else empty
  std::vector<std::int32_t> targets;          // Valid/Test: B target items; Train: empty

  std::int64_t size() const { return static_cast<std::int64_t>(users.size()); }
  std::int64_t tokens() const { return seq_offsets.back(); }
  JaggedBatch jagged() const;
};

struct BatcherConfig {
  std::int64_t batch_size = 128;
  std::int64_t max_len = 50;  // the model's maximum sequence length
  std::uint64_t seed = 0;     // of the Train order
  bool drop_last = false;     // leave out a last, smaller batch
  bool train_through_valid = false;  // see make_example

  // Throws hstu::Error naming the bad field.
  void validate() const;
};

// Batches of one split over a Dataset, which must outlive the Batcher. Train batches follow a
// permutation of the users that is a pure function of (seed, epoch) (Philox Fisher-Yates), so a
// run resumed at (epoch, batch) sees the same batches; Valid/Test batches are in user order.
// Every eligible user is in exactly one batch per epoch (drop_last aside).
class Batcher {
 public:
  Batcher(const Dataset& data, Split split, const BatcherConfig& config);

  // Moves to `epoch` (>= 0) and computes its order; the constructor starts at epoch 0.
  void set_epoch(std::int64_t epoch);
  std::int64_t epoch() const { return epoch_; }
  // The users of this epoch in batch order (Train: users with a training pair only).
  const std::vector<std::int64_t>& order() const { return order_; }
  std::int64_t num_batches() const;
  // Batch `index` (0 .. num_batches()-1) of the current epoch.
  Batch batch(std::int64_t index) const;

 private:
  const Dataset& data_;
  Split split_;
  BatcherConfig config_;
  std::vector<std::int64_t> eligible_;  // users in user order
  std::vector<std::int64_t> order_;
  std::int64_t epoch_ = 0;
};

}  // namespace hstu
