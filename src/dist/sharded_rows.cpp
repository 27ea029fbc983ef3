#include "hstu/dist/sharded_rows.h"

#include <fmt/format.h>

#include <algorithm>

#include "dist/dist_kernels.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"

namespace hstu::dist {
namespace {

const char* const kWhere = "sharded table rows";

// `t` with room for `n` elements of `dtype` on the GPU: reallocated only to grow.
Tensor room(Tensor& t, DType dtype, std::int64_t n, const char* what) {
  if (!t.defined() || t.dtype() != dtype || t.numel() < n)
    t = Tensor::empty(dtype, {std::max<std::int64_t>(n, 1)}, Device::CUDA, what);
  return t;
}

void check_rows(const Tensor& t, std::size_t rows, std::int64_t dim, const char* what) {
  HSTU_CHECK(t.device() == Device::CUDA && t.dtype() == DType::F32 && t.dim() == 2 &&
                 t.size(0) == static_cast<std::int64_t>(rows) && t.size(1) == dim && t.is_contiguous(),
             kWhere, fmt::format("{} is {}, expected F32 [{}, {}] on the GPU", what, t.describe(), rows, dim),
             "this is a bug in hstu");
}

}  // namespace

void DeviceRowExchange::rows_to_batch(const IdExchange& x, const Tensor& owner_rows, const Tensor& batch_rows) {
  const std::int64_t dim = batch_rows.size(1);
  check_rows(owner_rows, x.recv_ids.size(), dim, "the owner's rows");
  check_rows(batch_rows, x.slot.size(), dim, "the batch's rows");
  const auto sent = static_cast<std::int64_t>(x.send_ids.size());
  float* by_id = room(by_id_, DType::F32, sent * dim, "a sharded table's rows by id").data<float>();
  // The way back is the way out reversed: what came in from rank q goes back to rank q.
  comm_.all_to_all_v(owner_rows.data<float>(), byte_counts(x.recv_counts, 4 * dim), by_id,
                     byte_counts(x.send_counts, 4 * dim));
  std::vector<std::int32_t> slot(x.slot.begin(), x.slot.end());
  std::int32_t* index =
      room(index_, DType::I32, static_cast<std::int64_t>(slot.size()), "a batch's slots").data<std::int32_t>();
  copy_bytes(index, Device::CUDA, slot.data(), Device::CPU, slot.size() * sizeof(std::int32_t));
  gather_rows_on_device(by_id, dim, index, static_cast<std::int64_t>(slot.size()), batch_rows.data<float>());
}

void DeviceRowExchange::gradients_to_owners(const IdExchange& x, const Tensor& batch_grads, float scale,
                                            const Tensor& owner_grads) {
  const std::int64_t dim = batch_grads.size(1);
  check_rows(batch_grads, x.slot.size(), dim, "the batch's gradients");
  check_rows(owner_grads, x.recv_ids.size(), dim, "the owner's gradients");
  const auto sent = static_cast<std::int64_t>(x.send_ids.size());
  const PositionsById groups = positions_by_id(x);
  const auto n_offsets = static_cast<std::int64_t>(groups.offsets.size());
  std::int32_t* index =
      room(index_, DType::I32, n_offsets + static_cast<std::int64_t>(groups.positions.size()), "a batch's ids")
          .data<std::int32_t>();
  copy_bytes(index, Device::CUDA, groups.offsets.data(), Device::CPU, groups.offsets.size() * sizeof(std::int32_t));
  copy_bytes(index + n_offsets, Device::CUDA, groups.positions.data(), Device::CPU,
             groups.positions.size() * sizeof(std::int32_t));
  float* by_id = room(by_id_, DType::F32, sent * dim, "a sharded table's rows by id").data<float>();
  sum_rows_by_group_on_device(batch_grads.data<float>(), dim, index, index + n_offsets, sent, scale, by_id);
  comm_.all_to_all_v(by_id, byte_counts(x.send_counts, 4 * dim), owner_grads.data<float>(),
                     byte_counts(x.recv_counts, 4 * dim));
}

}  // namespace hstu::dist
