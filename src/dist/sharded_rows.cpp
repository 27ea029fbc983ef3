#include "hstu/dist/sharded_rows.h"

#include <fmt/format.h>

#include <algorithm>

#include "dist/dist_kernels.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"

namespace hstu::dist {
namespace {

const char* const kWhere = "sharded table rows";

void check_rows(const Tensor& t, std::size_t rows, std::int64_t dim, const char* what) {
  HSTU_CHECK(t.device() == Device::CUDA && t.dtype() == DType::F32 && t.dim() == 2 &&
                 t.size(0) == static_cast<std::int64_t>(rows) && t.size(1) == dim && t.is_contiguous(),
             kWhere, fmt::format("{} is {}, expected F32 [{}, {}] on the GPU", what, t.describe(), rows, dim),
             "this is a bug in hstu");
}

void check_table(const TableRows& t) {
  HSTU_CHECK(t.x && t.batch.defined() && t.batch.dim() == 2, kWhere, "a table without its exchange or rows",
             "this is a bug in hstu");
  check_rows(t.owner, t.x->recv_ids.size(), t.batch.size(1), "the owner's rows");
  check_rows(t.batch, t.x->slot.size(), t.batch.size(1), "the batch's rows");
}

}  // namespace

void DeviceRowExchange::rows_to_batch(const std::vector<TableRows>& tables) {
  by_id_.resize(std::max(by_id_.size(), tables.size()));
  std::vector<std::int32_t> slots;  // every table's, end to end: one upload
  std::vector<AllToAllV> ops;
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const TableRows& r = tables[t];
    check_table(r);
    const IdExchange& x = *r.x;
    const std::int64_t dim = r.batch.size(1);
    float* by_id = grow_to(by_id_[t], DType::F32, static_cast<std::int64_t>(x.send_ids.size()) * dim, Device::CUDA,
                           "a sharded table's rows by id")
                       .data<float>();
    // The way back is the way out reversed: what came in from rank q goes back to rank q.
    ops.push_back(
        {r.owner.data<float>(), byte_counts(x.recv_counts, 4 * dim), by_id, byte_counts(x.send_counts, 4 * dim)});
    slots.insert(slots.end(), x.slot.begin(), x.slot.end());
  }
  comm_.all_to_all_v_many(ops);
  std::int32_t* index =
      grow_to(index_, DType::I32, static_cast<std::int64_t>(slots.size()), Device::CUDA, "a batch's slots")
          .data<std::int32_t>();
  copy_bytes(index, Device::CUDA, slots.data(), Device::CPU, slots.size() * sizeof(std::int32_t));
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const auto n = static_cast<std::int64_t>(tables[t].x->slot.size());
    gather_rows_on_device(by_id_[t].data<float>(), tables[t].batch.size(1), index, n, tables[t].batch.data<float>());
    index += n;
  }
}

void DeviceRowExchange::gradients_to_owners(const std::vector<TableRows>& tables, float scale) {
  by_id_.resize(std::max(by_id_.size(), tables.size()));
  // Every table's offsets and positions by id, end to end: one upload.
  std::vector<std::int32_t> groups;
  std::vector<std::size_t> at;
  for (const TableRows& r : tables) {
    check_table(r);
    const PositionsById& g = r.x->by_id;
    at.push_back(groups.size());
    groups.insert(groups.end(), g.offsets.begin(), g.offsets.end());
    groups.insert(groups.end(), g.positions.begin(), g.positions.end());
  }
  std::int32_t* index =
      grow_to(index_, DType::I32, static_cast<std::int64_t>(groups.size()), Device::CUDA, "a batch's ids")
          .data<std::int32_t>();
  copy_bytes(index, Device::CUDA, groups.data(), Device::CPU, groups.size() * sizeof(std::int32_t));
  std::vector<AllToAllV> ops;
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const TableRows& r = tables[t];
    const IdExchange& x = *r.x;
    const std::int64_t dim = r.batch.size(1);
    const auto sent = static_cast<std::int64_t>(x.send_ids.size());
    float* by_id =
        grow_to(by_id_[t], DType::F32, sent * dim, Device::CUDA, "a sharded table's rows by id").data<float>();
    const std::int32_t* offsets = index + at[t];
    sum_rows_by_group_on_device(r.batch.data<float>(), dim, offsets, offsets + sent + 1, sent, scale, by_id);
    ops.push_back(
        {by_id, byte_counts(x.send_counts, 4 * dim), r.owner.data<float>(), byte_counts(x.recv_counts, 4 * dim)});
  }
  comm_.all_to_all_v_many(ops);
}

}  // namespace hstu::dist
