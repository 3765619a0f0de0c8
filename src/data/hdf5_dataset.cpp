// An HDF5 dataset: /inputs [N, d_in] float32 with /targets [N, d_out] float32 or /labels [N]
// int64. Each rank opens the file for reading on its own and reads only its rows.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <vector>

#include <tessera/core/error.hpp>
#include <tessera/data/dataset.hpp>

#include "core/hdf5_check.hpp"
#include "core/log.hpp"

namespace tessera::data {
namespace {

using tessera::detail::H5Handle;
using tessera::detail::QuietHdf5;
using tessera::detail::shape_text;

class Hdf5Dataset final : public Dataset {
 public:
  explicit Hdf5Dataset(const std::string& path) : path_(path) {
    auto bad = [&](const std::string& what) {
      return ConfigError("dataset '" + path + "': " + what +
                         ". Expected /inputs [N, d_in] float32 and /targets [N, d_out] float32 or /labels [N] int64 "
                         "(see docs/training.md)");
    };
    if (!std::filesystem::exists(path)) {
      std::string lower = path;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      throw ConfigError(
          "dataset '" + path + "' does not exist" +
          (lower == "synthetic" ? "; the synthetic task is --data.source synthetic, in lower case" : std::string()));
    }
    if (std::filesystem::is_directory(path))
      throw ConfigError("dataset '" + path + "' is a directory; give the HDF5 file in it");
    // A FIFO or a device: HDF5 would wait in open() for a writer that may never come.
    if (!std::filesystem::is_regular_file(path))
      throw ConfigError("dataset '" + path +
                        "' is not a regular file (a FIFO, socket or device); HDF5 reads a file it can seek in, "
                        "so copy the data to one");
    QuietHdf5 quiet;
    const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
    if (is_hdf5 < 0) {
      // Not a verdict on its contents: the file could not be read at all (its permissions).
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      const std::string why = fd < 0 ? std::strerror(errno) : tessera::detail::hdf5_error_text();
      if (fd >= 0) ::close(fd);
      throw ConfigError("dataset '" + path + "' cannot be read: " + why);
    }
    if (is_hdf5 == 0) throw bad("not an HDF5 file");
    file_ = H5Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file_.valid()) {
      // HDF5's reason: most often another program holds the file open for writing (HDF5's
      // file lock), which is no fault of its format.
      const std::string why = tessera::detail::hdf5_error_text();
      if (why.find("unable to lock file") != std::string::npos)
        throw ConfigError("dataset '" + path + "' cannot be opened: " + why +
                          ". Another program has it open for writing (close it first); on a file system "
                          "without file locks (some Lustre and NFS mounts) set HDF5_USE_FILE_LOCKING=FALSE");
      throw bad("cannot be opened for reading (" + why + ")");
    }
    if (H5Lexists(file_.get(), "/inputs", H5P_DEFAULT) <= 0) throw bad("has no /inputs dataset");
    const auto require_dataset = [&](const char* name) {
      const H5Handle object(H5Oopen(file_.get(), name, H5P_DEFAULT), H5Oclose);
      if (!object.valid()) throw bad(std::string(name) + " cannot be opened");
      const H5I_type_t type = H5Iget_type(object.get());
      if (type != H5I_DATASET)
        throw bad(std::string(name) + " is " + (type == H5I_GROUP ? "a group" : "a named type") + ", not a dataset");
    };
    // A compression filter this HDF5 lacks (lzf, blosc, ... as h5py and others write them)
    // fails every read; found here, before any work, and named.
    const auto require_storage = [&](const char* name, hid_t dataset) {
      if (const std::string missing = tessera::detail::missing_filter(dataset); !missing.empty())
        throw ConfigError("dataset '" + path + "': " + name + " " + missing +
                          "; rewrite the file without it (h5repack -f NONE in.h5 out.h5, or h5py's "
                          "compression='gzip'), or put the filter's plugin on HDF5_PLUGIN_PATH");
      const H5Handle plist(TESSERA_CHECK_HDF5(H5Dget_create_plist(dataset)), H5Pclose);
      // A dataset created and never written (its writer stopped before filling it) reads as
      // its fill value, zeros, in every row: the run trained on them without a word. Data
      // stored in external files has no space of its own in this one.
      // A virtual dataset whose source file is not there reads as fill values where that
      // file's data would be, in silence too (HDF5_VDS_PREFIX, where set, is HDF5's to search).
      if (H5Pget_layout(plist.get()) == H5D_VIRTUAL && std::getenv("HDF5_VDS_PREFIX") == nullptr) {
        std::size_t sources = 0;
        if (H5Pget_virtual_count(plist.get(), &sources) < 0) sources = 0;
        // Where HDF5 looks for a source: its path as given, then its name (and a relative
        // path) beside the virtual file, through symbolic links or not, and in the working
        // directory.
        std::error_code ec;
        std::vector<std::filesystem::path> beside = {std::filesystem::path(path).parent_path()};
        const auto resolved = std::filesystem::canonical(path, ec);
        if (!ec) beside.push_back(resolved.parent_path());
        beside.push_back(std::filesystem::current_path(ec));
        for (std::size_t k = 0; k < sources; ++k) {
          const ssize_t length = H5Pget_virtual_filename(plist.get(), k, nullptr, 0);
          if (length <= 0) continue;
          std::string source(static_cast<std::size_t>(length) + 1, '\0');
          H5Pget_virtual_filename(plist.get(), k, source.data(), source.size());
          source.resize(static_cast<std::size_t>(length));
          // This file, or a printf-style pattern of many (an unlimited dataset's "%b").
          if (source == "." || source.find('%') != std::string::npos) continue;
          const std::filesystem::path p(source);
          bool found = std::filesystem::exists(p, ec);
          for (const auto& dir : beside)
            found = found || std::filesystem::exists(dir / p.filename(), ec) ||
                    (p.is_relative() && std::filesystem::exists(dir / p, ec));
          if (found) continue;
          throw bad(std::string(name) + " is a virtual dataset, and its source file '" + source +
                    "' is not there (nor beside this file); HDF5 would read fill values in its place. Put it back, "
                    "or set HDF5_VDS_PREFIX to its directory");
        }
      }
      H5D_space_status_t status{};
      if (H5Pget_external_count(plist.get()) <= 0 && H5Pget_layout(plist.get()) != H5D_VIRTUAL &&
          H5Dget_space_status(dataset, &status) >= 0 && status == H5D_SPACE_STATUS_NOT_ALLOCATED &&
          H5Dget_storage_size(dataset) == 0) {
        const H5Handle space(H5Dget_space(dataset), H5Sclose);
        if (space.valid() && H5Sget_simple_extent_npoints(space.get()) > 0)
          throw bad(std::string(name) +
                    " holds no data: it was created and never written (did its writer stop before filling it?), "
                    "and would read as zeros");
      }
    };
    require_dataset("/inputs");
    inputs_ = open_data("/inputs");
    require_storage("/inputs", inputs_.get());
    const auto in_shape = shape_of(inputs_.get());
    if (in_shape.size() != 2) throw bad("/inputs has rank " + std::to_string(in_shape.size()) + ", not 2");
    if (!is_type(inputs_.get(), H5T_NATIVE_FLOAT))
      throw bad("/inputs is " + type_name(inputs_.get()) + ", not float32");
    rows_ = static_cast<std::int64_t>(in_shape[0]);
    input_dim_ = static_cast<std::size_t>(in_shape[1]);
    if (input_dim_ == 0) throw bad("/inputs is " + shape_text(in_shape) + ": its rows have no values");
    const bool has_targets = H5Lexists(file_.get(), "/targets", H5P_DEFAULT) > 0;
    const bool has_labels = H5Lexists(file_.get(), "/labels", H5P_DEFAULT) > 0;
    if (has_targets == has_labels)
      throw bad(has_targets ? "has both /targets and /labels" : "has neither /targets nor /labels");
    if (has_targets) {
      require_dataset("/targets");
      targets_ = open_data("/targets");
      require_storage("/targets", targets_.get());
      const auto t = shape_of(targets_.get());
      if (t.size() != 2 || static_cast<std::int64_t>(t[0]) != rows_)
        throw bad("/targets must be [" + std::to_string(rows_) + ", d_out], one row per row of /inputs, not " +
                  shape_text(t));
      if (!is_type(targets_.get(), H5T_NATIVE_FLOAT))
        throw bad("/targets is " + type_name(targets_.get()) + ", not float32");
      target_dim_ = static_cast<std::size_t>(t[1]);
      // 0 would read as a labels file (Dataset::has_labels).
      if (target_dim_ == 0) throw bad("/targets is " + shape_text(t) + ": its rows have no values");
    } else {
      require_dataset("/labels");
      labels_ = open_data("/labels");
      require_storage("/labels", labels_.get());
      const auto l = shape_of(labels_.get());
      if (l.size() != 1 || static_cast<std::int64_t>(l[0]) != rows_)
        throw bad("/labels must be [" + std::to_string(rows_) + "], one per row of /inputs, not " + shape_text(l));
      if (!is_type(labels_.get(), H5T_NATIVE_INT64))
        throw bad("/labels is " + type_name(labels_.get()) + ", not int64");
      std::vector<std::int64_t> all(static_cast<std::size_t>(rows_));
      if (H5Dread(labels_.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()) < 0)
        throw read_failed("/labels", "(every row, for the number of classes)");
      const auto lo = std::min_element(all.begin(), all.end()), hi = std::max_element(all.begin(), all.end());
      if (!all.empty() && *lo < 0)
        throw bad("/labels row " + std::to_string(lo - all.begin()) + " holds " + std::to_string(*lo) +
                  ", a negative label; labels are class numbers 0, 1, ..., classes - 1");
      // The classes are the top label + 1, which a label of INT64_MAX would overflow.
      if (!all.empty() && *hi == std::numeric_limits<std::int64_t>::max())
        throw bad("/labels row " + std::to_string(hi - all.begin()) + " holds " + std::to_string(*hi) +
                  ", the largest int64 (a fill value?); labels are class numbers 0, 1, ..., classes - 1");
      classes_ = all.empty() ? 0 : *hi + 1;
      top_label_row_ = all.empty() ? 0 : hi - all.begin();
    }
    if (rows_ == 0) throw bad("has no samples");
  }

  std::int64_t size() const noexcept override { return rows_; }
  std::string top_label() const override {
    return "/labels row " + std::to_string(top_label_row_) + " holds label " + std::to_string(classes_ - 1);
  }
  std::size_t input_dim() const noexcept override { return input_dim_; }
  std::size_t target_dim() const noexcept override { return target_dim_; }
  std::int64_t classes() const noexcept override { return classes_; }
  std::string describe() const override {
    return "HDF5 dataset '" + path_ + "', " + std::to_string(rows_) + " samples, " + std::to_string(input_dim_) +
           " input features, " +
           (target_dim_ ? std::to_string(target_dim_) + " targets" : std::to_string(classes_) + " classes");
  }

  void read(const std::vector<std::int64_t>& indices, const View2D<float>& inputs, const View2D<float>& targets,
            const View1D<std::int64_t>& labels) override {
    QuietHdf5 quiet;  // a failed read is reported once, as an error naming the call, not as HDF5's stack
    auto in_h = Kokkos::create_mirror_view(inputs);
    read_rows("/inputs", inputs_.get(), H5T_NATIVE_FLOAT, indices, input_dim_, in_h.data());
    warn_if_not_finite("/inputs", indices, in_h.data(), input_dim_);
    Kokkos::deep_copy(inputs, in_h);
    if (target_dim_ > 0) {
      auto t_h = Kokkos::create_mirror_view(targets);
      read_rows("/targets", targets_.get(), H5T_NATIVE_FLOAT, indices, target_dim_, t_h.data());
      warn_if_not_finite("/targets", indices, t_h.data(), target_dim_);
      Kokkos::deep_copy(targets, t_h);
    } else {
      auto l_h = Kokkos::create_mirror_view(labels);
      read_rows("/labels", labels_.get(), H5T_NATIVE_INT64, indices, 0, l_h.data());
      Kokkos::deep_copy(labels, l_h);
    }
  }

 private:
  /// Says once, the first time a loaded row holds NaN or an infinity, which row it is: the
  /// loss turns non-finite from it, and the run then stops at that step.
  void warn_if_not_finite(const char* name, const std::vector<std::int64_t>& rows, const float* data,
                          std::size_t cols) {
    if (warned_) return;
    for (std::size_t r = 0; r < rows.size(); ++r)
      for (std::size_t c = 0; c < cols; ++c)
        if (!std::isfinite(data[r * cols + c])) {
          warned_ = true;
          tessera::detail::logger().warn(
              "dataset '{}': row {} of {} holds a NaN or infinite value (column {}); training on it will make the "
              "loss non-finite, and the run will stop",
              path_, rows[r], name, c);
          return;
        }
  }

  static std::vector<hsize_t> shape_of(hid_t dataset) {
    H5Handle space(TESSERA_CHECK_HDF5(H5Dget_space(dataset)), H5Sclose);
    const int rank = TESSERA_CHECK_HDF5(H5Sget_simple_extent_ndims(space.get()));
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    TESSERA_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
    return dims;
  }
  /// True when the dataset holds what `native` holds, in any byte order (HDF5 converts it on
  /// reading): a 4-byte float for H5T_NATIVE_FLOAT, a signed 8-byte integer for INT64.
  static bool is_type(hid_t dataset, hid_t native) {
    H5Handle type(TESSERA_CHECK_HDF5(H5Dget_type(dataset)), H5Tclose);
    const H5T_class_t kind = H5Tget_class(type.get());
    if (kind != H5Tget_class(native) || H5Tget_size(type.get()) != H5Tget_size(native)) return false;
    return kind != H5T_INTEGER || H5Tget_sign(type.get()) == H5Tget_sign(native);
  }
  /// What the dataset holds, as a message says it: "float64", "uint8", "int32", "a string type", ...
  static std::string type_name(hid_t dataset) {
    H5Handle type(TESSERA_CHECK_HDF5(H5Dget_type(dataset)), H5Tclose);
    const std::string bits = std::to_string(8 * H5Tget_size(type.get()));
    switch (H5Tget_class(type.get())) {
      case H5T_FLOAT:
        return "float" + bits;
      case H5T_INTEGER:
        return (H5Tget_sign(type.get()) == H5T_SGN_NONE ? "uint" : "int") + bits;
      case H5T_STRING:
        return "a string type";
      case H5T_COMPOUND:
        return "a compound type";
      default:
        return "another type";
    }
  }
  /// Opens a dataset. A chunked one (h5py's compression) is opened with a chunk cache that
  /// holds two of its chunks: rows are read in ascending order, so each chunk is then read and
  /// decoded once per batch (HDF5's default cache, 1 MiB, keeps no chunk larger than that,
  /// and would decode it again for every row read from it).
  H5Handle open_data(const char* name) {
    H5Handle ds(H5Dopen2(file_.get(), name, H5P_DEFAULT), H5Dclose);
    if (!ds.valid()) return ds;
    const H5Handle plist(H5Dget_create_plist(ds.get()), H5Pclose);
    if (!plist.valid() || H5Pget_layout(plist.get()) != H5D_CHUNKED) return ds;
    hsize_t dims[H5S_MAX_RANK] = {};
    const int rank = H5Pget_chunk(plist.get(), H5S_MAX_RANK, dims);
    const H5Handle type(H5Dget_type(ds.get()), H5Tclose);
    if (rank <= 0 || !type.valid()) return ds;
    std::size_t chunk = H5Tget_size(type.get());
    for (int d = 0; d < rank; ++d) chunk *= static_cast<std::size_t>(dims[d]);
    if (chunk * 2 <= std::size_t{1} << 20) return ds;  // the default cache holds two already
    const H5Handle access(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
    if (!access.valid() || H5Pset_chunk_cache(access.get(), 521, chunk * 2, 1.0) < 0) return ds;
    // Closed first: HDF5 shares a dataset open twice, with the access list of its first open.
    ds.reset();
    return H5Handle(H5Dopen2(file_.get(), name, access.get()), H5Dclose);
  }

  /// Reads the given rows (any order, repeats allowed) into consecutive rows of out: in
  /// ascending order, one read per run of consecutive rows, then put in the order asked. (A
  /// selection of single elements, in the order asked, took 0.4-0.6 s for 512 rows of 4096
  /// floats, and HDF5 held 64 bytes per element to plan it.)
  /// A read that failed, named with the file, the dataset and its rows (HDF5's words alone
  /// named neither: "H5Dread failed: H5Z__filter_deflate: inflate() failed").
  ConfigError read_failed(const char* name, const std::string& rows) const {
    return ConfigError("dataset '" + path_ + "': reading " + name + " " + rows +
                       " failed: " + tessera::detail::hdf5_error_text() +
                       " (a damaged file, or data stored outside it that cannot be reached)");
  }

  void read_rows(const char* name, hid_t dataset, hid_t type, const std::vector<std::int64_t>& rows, std::size_t cols,
                 void* out) {
    for (auto r : rows)
      if (r < 0 || r >= rows_) throw ConfigError("dataset '" + path_ + "': row " + std::to_string(r) + " out of range");
    if (rows.empty()) return;
    const std::size_t width = cols == 0 ? 1 : cols;
    const std::size_t row_bytes = width * H5Tget_size(type);
    std::vector<std::size_t> order(rows.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&rows](std::size_t a, std::size_t b) { return rows[a] < rows[b]; });
    std::vector<char> sorted(rows.size() * row_bytes);
    H5Handle file_space(TESSERA_CHECK_HDF5(H5Dget_space(dataset)), H5Sclose);
    for (std::size_t k = 0; k < order.size();) {
      std::size_t end = k + 1;
      while (end < order.size() && rows[order[end]] == rows[order[end - 1]] + 1) ++end;
      const hsize_t start[2] = {static_cast<hsize_t>(rows[order[k]]), 0};
      const hsize_t count[2] = {static_cast<hsize_t>(end - k), static_cast<hsize_t>(width)};
      TESSERA_CHECK_HDF5(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr));
      const hsize_t n = count[0] * count[1];
      H5Handle mem_space(TESSERA_CHECK_HDF5(H5Screate_simple(1, &n, nullptr)), H5Sclose);
      if (H5Dread(dataset, type, mem_space.get(), file_space.get(), H5P_DEFAULT, sorted.data() + k * row_bytes) < 0)
        throw read_failed(name, count[0] == 1 ? "row " + std::to_string(start[0])
                                              : "rows " + std::to_string(start[0]) + " to " +
                                                    std::to_string(start[0] + count[0] - 1));
      k = end;
    }
    for (std::size_t i = 0; i < order.size(); ++i)
      std::memcpy(static_cast<char*>(out) + order[i] * row_bytes, sorted.data() + i * row_bytes, row_bytes);
  }

  std::string path_;
  // Declared in opening order so they close in reverse, also when the constructor throws.
  H5Handle file_, inputs_, targets_, labels_;
  std::int64_t rows_ = 0, classes_ = 0, top_label_row_ = 0;
  bool warned_ = false;
  std::size_t input_dim_ = 0, target_dim_ = 0;
};

}  // namespace

std::unique_ptr<Dataset> open_hdf5(const std::string& path) { return std::make_unique<Hdf5Dataset>(path); }

}  // namespace tessera::data
