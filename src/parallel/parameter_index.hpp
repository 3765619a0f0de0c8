#pragma once
// Internal: where DDP and ZeRO find a parameter that the model's hooks report.

#include <cstddef>
#include <string>
#include <unordered_map>

#include <tessera/core/error.hpp>
#include <tessera/nn/parameter.hpp>

namespace tessera::parallel::detail {

/// The bucket (or unit) of `p` in `index`; an Error that names the parameter where it has
/// none: a model built on another ParameterStore than the strategy's reports parameters the
/// strategy never laid out (this was std::out_of_range's "unordered_map::at", from inside
/// backward).
inline std::size_t index_of(const std::unordered_map<const nn::Parameter*, std::size_t>& index, const nn::Parameter& p,
                            const char* strategy) {
  const auto it = index.find(&p);
  if (it == index.end())
    throw Error(std::string(strategy) + ": the model reported its parameter '" + p.name +
                "', which is not in the ParameterStore the strategy was given; build the model on that store, or give "
                "the strategy the store the model was built on");
  return it->second;
}

}  // namespace tessera::parallel::detail
