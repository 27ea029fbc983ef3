// Whole-model operations on a parameter struct (RetrievalParams, RankingParams) through its
// named() list, so that each model states its tensors once.
#pragma once

#include <fmt/format.h>

#include "hstu/core/error.h"
#include "hstu/core/tensor.h"

namespace hstu::model_detail {

// A copy of `src` with every tensor on `device`.
template <typename Params>
Params params_on(const Params& src, Device device) {
  Params out = src;  // the same structure; every tensor is replaced below
  auto dst = out.named();
  const auto from = src.named();
  for (std::size_t k = 0; k < dst.size(); ++k) *dst[k].second = from[k].second->to(device);
  return out;
}

// Copies every tensor of `src` into `dst` (same model shape; Tensor::copy_from checks each).
template <typename Params>
void copy_params(Params& dst, const Params& src, const char* model) {
  auto to = dst.named();
  const auto from = src.named();
  HSTU_CHECK(to.size() == from.size(), model, fmt::format("cannot copy {} parameters into {}", from.size(), to.size()),
             "this is a bug in hstu");
  for (std::size_t k = 0; k < to.size(); ++k) to[k].second->copy_from(*from[k].second);
}

}  // namespace hstu::model_detail
