#pragma once
// Internal: checks an HDF5 call (negative herr_t/hid_t means failure) and throws
// tessera::CheckpointError naming the call and place.

#include <hdf5.h>

#include <string>
#include <utility>
#include <vector>

#include <tessera/core/error.hpp>

#define TESSERA_CHECK_HDF5(call)                                                                                 \
  [&]() {                                                                                                        \
    auto tessera_h5_rc_ = (call);                                                                                \
    if (tessera_h5_rc_ < 0) {                                                                                    \
      std::string tessera_call_(#call);                                                                          \
      throw ::tessera::CheckpointError(                                                                          \
          tessera_call_.substr(0, tessera_call_.find('(')) + " failed: " + ::tessera::detail::hdf5_error_text(), \
          __FILE__, __LINE__);                                                                                   \
    }                                                                                                            \
    return tessera_h5_rc_;                                                                                       \
  }()

namespace tessera::detail {

/// The most specific entry of HDF5's current error stack ("H5Dopen2: not a dataset"), so that
/// a message says what HDF5 saw without its printed stack (which QuietHdf5 silences).
inline std::string hdf5_error_text() {
  std::string text;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* e, void* out) -> herr_t {
        if (n == 0 && e != nullptr)
          *static_cast<std::string*>(out) =
              std::string(e->func_name ? e->func_name : "?") + ": " + (e->desc ? e->desc : "unknown error");
        return 0;
      },
      &text);
  return text.empty() ? "HDF5 gave no reason" : text;
}

/// Where a dataset is compressed with a filter this HDF5 cannot decode (h5py's lzf, blosc
/// without their plugins), "is compressed with the filter 'lzf' (HDF5 filter 32000), which
/// this HDF5 cannot decode"; else empty. Every read of it would fail, naming a plugin directory.
inline std::string missing_filter(hid_t dataset) {
  const hid_t plist = H5Dget_create_plist(dataset);
  if (plist < 0) return {};
  std::string missing;
  for (int i = 0, n = H5Pget_nfilters(plist); i < n && missing.empty(); ++i) {
    unsigned flags = 0;
    std::size_t values = 0;
    char name[128] = "";
    const H5Z_filter_t id =
        H5Pget_filter2(plist, static_cast<unsigned>(i), &flags, &values, nullptr, sizeof name, name, nullptr);
    if (id >= 0 && H5Zfilter_avail(id) <= 0)
      missing = "is compressed with the filter '" + std::string(name) + "' (HDF5 filter " + std::to_string(id) +
                "), which this HDF5 cannot decode";
  }
  H5Pclose(plist);
  return missing;
}

/// A dataset's shape as a message shows it: "[90]", "[100, 3]", "a scalar".
inline std::string shape_text(const std::vector<hsize_t>& dims) {
  if (dims.empty()) return "a scalar";
  std::string text = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

/// Owns an HDF5 id and closes it with the matching function (H5Fclose, H5Dclose, ...).
class H5Handle {
 public:
  H5Handle() = default;
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      close_ = o.close_;
    }
    return *this;
  }
  ~H5Handle() { reset(); }
  void reset() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = -1;
  }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  /// Gives up the id without closing it (the caller closes it, checked).
  hid_t release() { return std::exchange(id_, -1); }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

/// Silences HDF5's printing of its error stack while in scope: Tessera reports the failure
/// itself, with the file and what to do.
class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace tessera::detail
