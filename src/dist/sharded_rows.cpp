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
  partial_.resize(std::max(partial_.size(), tables.size()));
  // Every table's positions by id and their chunks, end to end: one upload.
  std::vector<std::int32_t> arrays;
  std::vector<std::size_t> at;
  for (const TableRows& r : tables) {
    check_table(r);
    const PositionsById& g = r.x->by_id;
    HSTU_CHECK(g.first_chunk.size() == r.x->send_ids.size() + 1, kWhere, "an exchange without its positions by id",
               "this is a bug in hstu");
    at.push_back(arrays.size());
    for (const auto* v : {&g.offsets, &g.positions, &g.first_chunk, &g.chunk_id, &g.chunk_begin})
      arrays.insert(arrays.end(), v->begin(), v->end());
  }
  std::int32_t* index =
      grow_to(index_, DType::I32, static_cast<std::int64_t>(arrays.size()), Device::CUDA, "a batch's ids")
          .data<std::int32_t>();
  copy_bytes(index, Device::CUDA, arrays.data(), Device::CPU, arrays.size() * sizeof(std::int32_t));
  std::vector<AllToAllV> ops;
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const TableRows& r = tables[t];
    const IdExchange& x = *r.x;
    const PositionsById& g = x.by_id;
    const std::int64_t dim = r.batch.size(1);
    const auto sent = static_cast<std::int64_t>(x.send_ids.size());
    const auto chunks = static_cast<std::int64_t>(g.chunk_id.size());
    float* by_id =
        grow_to(by_id_[t], DType::F32, sent * dim, Device::CUDA, "a sharded table's rows by id").data<float>();
    float* partial = grow_to(partial_[t], DType::F32, std::max<std::int64_t>(chunks * dim, 1), Device::CUDA,
                             "a sharded table's gradient chunks")
                         .data<float>();
    const std::int32_t* offsets = index + at[t];
    const std::int32_t* positions = offsets + g.offsets.size();
    const std::int32_t* first_chunk = positions + g.positions.size();
    const std::int32_t* chunk_id = first_chunk + g.first_chunk.size();
    const std::int32_t* chunk_begin = chunk_id + g.chunk_id.size();
    sum_rows_by_id_on_device(r.batch.data<float>(), dim, offsets, positions, first_chunk, chunk_id, chunk_begin, sent,
                             chunks, scale, partial, by_id);
    ops.push_back(
        {by_id, byte_counts(x.send_counts, 4 * dim), r.owner.data<float>(), byte_counts(x.recv_counts, 4 * dim)});
  }
  comm_.all_to_all_v_many(ops);
}

}  // namespace hstu::dist
