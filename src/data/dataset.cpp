// Dataset::load: the checks every dataset's read() is spared.
#include <tessera/core/error.hpp>
#include <tessera/data/dataset.hpp>

#include <string>

namespace tessera::data {

void Dataset::load(const std::vector<std::int64_t>& indices, const View2D<float>& inputs, const View2D<float>& targets,
                   const View1D<std::int64_t>& labels) {
  const auto n = indices.size();
  for (std::size_t r = 0; r < n; ++r)
    if (indices[r] < 0 || indices[r] >= size())
      throw ConfigError(describe() + ": sample " + std::to_string(indices[r]) + " (index " + std::to_string(r) +
                        " of the batch) is outside its " + std::to_string(size()) + " samples");
  const auto view_fits = [&](const std::string& name, std::size_t rows, std::size_t columns, std::size_t want) {
    if (rows < n || columns != want)
      throw ConfigError(describe() + ": Dataset::load of " + std::to_string(n) + " samples into " + name + " of " +
                        std::to_string(rows) + " x " + std::to_string(columns) + "; give a view of " +
                        std::to_string(n) + " x " + std::to_string(want) + " (a row per sample, " +
                        std::to_string(want) + " columns)");
  };
  view_fits("inputs", inputs.extent(0), inputs.extent(1), input_dim());
  if (has_labels()) {
    if (labels.extent(0) < n)
      throw ConfigError(describe() + ": Dataset::load of " + std::to_string(n) + " samples into labels of " +
                        std::to_string(labels.extent(0)) + "; this dataset has labels, so give a view of " +
                        std::to_string(n) + " labels");
  } else {
    view_fits("targets", targets.extent(0), targets.extent(1), target_dim());
  }
  if (n == 0) return;
  // read() sees the batch's rows alone: a dataset that fills a host mirror and copies it
  // back whole would overwrite the rows past them on a GPU (not on a CPU, where the mirror
  // is the view itself).
  const auto rows = Kokkos::make_pair(std::size_t{0}, n);
  const View2D<float> in = Kokkos::subview(inputs, rows, Kokkos::ALL);
  if (has_labels())
    read(indices, in, View2D<float>(), Kokkos::subview(labels, rows));
  else
    read(indices, in, Kokkos::subview(targets, rows, Kokkos::ALL), View1D<std::int64_t>());
}

}  // namespace tessera::data
