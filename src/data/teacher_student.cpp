#include <tessera/core/error.hpp>
#include <tessera/core/rng.hpp>
#include <tessera/data/dataset.hpp>
#include <tessera/nn/layers.hpp>

#include "core/range.hpp"

namespace tessera::data {
namespace {

// Kernels live in free functions: nvcc does not allow a device lambda in a constructor or a
// private member function.
void fill_normal(const View2D<float>& x, std::uint64_t key) {
  const std::size_t dim = x.extent(1);
  Kokkos::parallel_for(
      "tessera::ts::inputs", Range(0, x.extent(0) * dim),
      KOKKOS_LAMBDA(std::size_t k) { x(k / dim, k % dim) = normal01(key, k); });
}

void gather_rows(const View1D<const std::int64_t>& rows, const View2D<const float>& x, const View2D<const float>& t,
                 const View2D<float>& inputs, const View2D<float>& targets) {
  const std::size_t dim = x.extent(1);
  Kokkos::parallel_for(
      "tessera::ts::gather", Range(0, rows.extent(0) * dim), KOKKOS_LAMBDA(std::size_t k) {
        const std::size_t r = k / dim, j = k % dim;
        const auto s = static_cast<std::size_t>(rows(r));
        inputs(r, j) = x(s, j);
        targets(r, j) = t(s, j);
      });
}

class TeacherStudent final : public Dataset {
 public:
  TeacherStudent(std::int64_t samples, std::size_t dim, std::size_t teacher_layers, std::uint64_t seed)
      : samples_(samples), dim_(dim), teacher_layers_(teacher_layers) {
    if (samples <= 0 || dim == 0 || teacher_layers == 0)
      throw ConfigError("the synthetic task needs samples >= 1, dim >= 1 and a teacher of >= 1 layer");
    // The whole set is made once: per-step loading is then a copy, as from a real dataset.
    inputs_ = View2D<float>("tessera::ts::inputs", static_cast<std::size_t>(samples), dim);
    targets_ = View2D<float>("tessera::ts::targets", static_cast<std::size_t>(samples), dim);
    fill_normal(inputs_, stream_key(seed, "data.inputs"));
    // The teacher runs a layer at a time over the whole set, each layer built, applied and
    // dropped in turn, so that making the data never holds more than one layer: the memory a
    // run shows is training's. Its values depend only on (seed, name, index), as ever.
    Kokkos::deep_copy(targets_, inputs_);
    const std::size_t chunk = 256;
    for (std::size_t l = 0; l < teacher_layers; ++l) {
      nn::ParameterStore store;
      nn::Linear layer(store, "teacher." + std::to_string(l), dim, dim);
      layer.set_input_grad(false);
      nn::GELU gelu;
      store.initialize(seed ^ 0x7EAC4E55ull);  // a stream the student's parameters never use
      for (std::size_t begin = 0; begin < static_cast<std::size_t>(samples); begin += chunk) {
        const auto rows = std::make_pair(begin, std::min(begin + chunk, static_cast<std::size_t>(samples)));
        const auto h = Kokkos::subview(targets_, rows, Kokkos::ALL());
        auto y = layer.forward(h);
        if (l + 1 < teacher_layers) y = gelu.forward(y);
        Kokkos::deep_copy(h, y);
      }
    }
  }
  std::int64_t size() const noexcept override { return samples_; }
  std::size_t input_dim() const noexcept override { return dim_; }
  std::size_t target_dim() const noexcept override { return dim_; }
  std::string describe() const override {
    return "synthetic teacher-student task (" + std::to_string(samples_) + " samples, dimension " +
           std::to_string(dim_) + ", teacher of " + std::to_string(teacher_layers_) +
           (teacher_layers_ == 1 ? " layer)" : " layers)");
  }

  void read(const std::vector<std::int64_t>& indices, const View2D<float>& inputs, const View2D<float>& targets,
            const View1D<std::int64_t>&) override {
    if (rows_.extent(0) != indices.size()) rows_ = View1D<std::int64_t>("tessera::ts::rows", indices.size());
    auto h = Kokkos::create_mirror_view(rows_);
    for (std::size_t r = 0; r < indices.size(); ++r) h(r) = indices[r];
    Kokkos::deep_copy(rows_, h);
    gather_rows(rows_, inputs_, targets_, inputs, targets);
  }

 private:
  std::int64_t samples_;
  std::size_t dim_, teacher_layers_;
  View2D<float> inputs_, targets_;
  View1D<std::int64_t> rows_;
};

}  // namespace

std::unique_ptr<Dataset> make_teacher_student(std::int64_t samples, std::size_t dim, std::size_t teacher_layers,
                                              std::uint64_t seed) {
  return std::make_unique<TeacherStudent>(samples, dim, teacher_layers, seed);
}

}  // namespace tessera::data
