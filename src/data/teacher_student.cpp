#include <tessera/core/error.hpp>
#include <tessera/core/rng.hpp>
#include <tessera/data/dataset.hpp>
#include <tessera/nn/layers.hpp>

namespace tessera::data {
namespace {

class TeacherStudent final : public Dataset {
 public:
  TeacherStudent(std::int64_t samples, std::size_t dim, std::uint64_t seed)
      : samples_(samples), dim_(dim), input_key_(stream_key(seed, "data.inputs")) {
    if (samples <= 0 || dim == 0) throw ConfigError("the synthetic task needs samples >= 1 and dim >= 1");
    hidden_ = std::make_unique<nn::Linear>(teacher_, "teacher.0", dim, dim);
    out_ = std::make_unique<nn::Linear>(teacher_, "teacher.1", dim, dim);
    // The teacher's own stream: a seed the student never uses for its parameters.
    teacher_.initialize(seed ^ 0x7EAC4E55ull);
  }
  std::int64_t size() const noexcept override { return samples_; }
  std::size_t input_dim() const noexcept override { return dim_; }
  std::size_t target_dim() const noexcept override { return dim_; }
  std::string describe() const override {
    return "synthetic teacher-student task, " + std::to_string(samples_) + " samples of dimension " +
           std::to_string(dim_);
  }

  void load(const std::vector<std::int64_t>& indices, const View2D<float>& inputs, const View2D<float>& targets,
            const View1D<std::int64_t>&) override {
    const std::size_t dim = dim_;
    const std::uint64_t key = input_key_;
    View1D<std::int64_t> rows("tessera::ts::rows", indices.size());
    auto h = Kokkos::create_mirror_view(rows);
    for (std::size_t r = 0; r < indices.size(); ++r) h(r) = indices[r];
    Kokkos::deep_copy(rows, h);
    Kokkos::parallel_for(
        "tessera::ts::inputs", Kokkos::RangePolicy<>(0, indices.size() * dim), KOKKOS_LAMBDA(std::size_t k) {
          const std::size_t r = k / dim, j = k % dim;
          inputs(r, j) = normal01(key, static_cast<std::uint64_t>(rows(r)) * dim + j);
        });
    auto h1 = hidden_->forward(inputs);
    gelu_out_ = gelu_.forward(h1);
    auto y = out_->forward(gelu_out_);
    Kokkos::deep_copy(targets, y);
  }

 private:
  std::int64_t samples_;
  std::size_t dim_;
  std::uint64_t input_key_;
  nn::ParameterStore teacher_;
  std::unique_ptr<nn::Linear> hidden_, out_;
  nn::GELU gelu_;
  View2D<float> gelu_out_;
};

}  // namespace

std::unique_ptr<Dataset> make_teacher_student(std::int64_t samples, std::size_t dim, std::uint64_t seed) {
  return std::make_unique<TeacherStudent>(samples, dim, seed);
}

}  // namespace tessera::data
