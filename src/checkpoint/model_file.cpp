#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <system_error>
#include <vector>

#include <tessera/checkpoint/model_file.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/files.hpp>
#include <tessera/parallel/zero.hpp>

#include "core/hdf5_check.hpp"

namespace tessera::checkpoint {

namespace {

/// The model file's bytes: HDF5's core driver, without a backing store, builds it in memory.
/// `values` is freed once written into it, so that rank 0 holds the file's bytes at most twice
/// (HDF5's and the copy returned), for the moment of the copy.
std::vector<char> file_image(const nn::ParameterStore& store, std::vector<float>& values) {
  std::size_t bytes = 64 * 1024;  // the superblock, the group and a header per dataset, with room
  for (const auto& p : store.parameters()) bytes += p.numel * sizeof(float) + 1024;
  detail::H5Handle fapl(TESSERA_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  TESSERA_CHECK_HDF5(H5Pset_fapl_core(fapl.get(), bytes, 0));
  detail::H5Handle file(
      TESSERA_CHECK_HDF5(H5Fcreate("tessera-model-in-memory.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get())), H5Fclose);
  {
    detail::H5Handle group(TESSERA_CHECK_HDF5(H5Gcreate2(file.get(), "/model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                           H5Gclose);
    for (const auto& p : store.parameters()) {
      std::vector<hsize_t> dims(p.shape.begin(), p.shape.end());
      detail::H5Handle space(TESSERA_CHECK_HDF5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)),
                             H5Sclose);
      detail::H5Handle ds(TESSERA_CHECK_HDF5(H5Dcreate2(group.get(), p.name.c_str(), H5T_IEEE_F32LE, space.get(),
                                                        H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                          H5Dclose);
      TESSERA_CHECK_HDF5(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data() + p.offset));
    }
  }
  std::vector<float>().swap(values);
  TESSERA_CHECK_HDF5(H5Fflush(file.get(), H5F_SCOPE_GLOBAL));
  const ssize_t size = TESSERA_CHECK_HDF5(H5Fget_file_image(file.get(), nullptr, 0));
  std::vector<char> image(static_cast<std::size_t>(size));
  TESSERA_CHECK_HDF5(H5Fget_file_image(file.get(), image.data(), image.size()));
  return image;
}

/// Writes `bytes` to `copy`, this save's own file beside `target` (open_copy: the target's
/// permissions from the start; a copy left by a killed run of the same process id is emptied);
/// errno's words where a write fails. replace_file flushes it to the disk.
void write_copy(const std::filesystem::path& copy, const std::filesystem::path& target,
                const std::vector<char>& bytes) {
  const int fd = open_copy(copy, target);
  const auto fail = [&copy](const char* doing) {
    const int e = errno;
    return std::system_error(e, std::generic_category(),
                             "could not " + std::string(doing) + " '" + copy.string() + "'");
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;  // a write that takes nothing: the disk has no room
      const auto error = fail("write");
      ::close(fd);
      throw error;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) throw fail("close");
}

/// `text` (up to 1024 characters) from rank `root` to every rank of `comm` (collective).
std::string text_from(comm::Communicator& comm, const std::string& text, int root) {
  std::vector<std::int32_t> word(1024, 0);
  for (std::size_t i = 0; comm.rank() == root && i < text.size() && i < word.size(); ++i)
    word[i] = static_cast<unsigned char>(text[i]);
  comm.broadcast({word.data(), word.size()}, root);
  std::string out;
  for (std::size_t i = 0; i < word.size() && word[i] != 0; ++i) out += static_cast<char>(word[i]);
  return out;
}

}  // namespace

void save_model(const std::string& path, const nn::ParameterStore& store, comm::Communicator& comm) {
  // On every rank, before any collective: rank 0 alone failed in the gather (Kokkos' "extents
  // of views don't match"), and the others waited at the broadcast below for the timeout.
  if (!store.allocated())
    throw CheckpointError("could not write the model to '" + path +
                          "': its parameters have no memory yet; save after store.allocate() (or after making the "
                          "DistributedDataParallel or ZeroDataParallel strategy, which allocates what each rank keeps) "
                          "and store.initialize() or load_model()");
  for (const auto& p : store.parameters())
    if (p.shard.parts > 1)
      throw CheckpointError("'" + p.name + "' is cut into " + std::to_string(p.shard.parts) +
                            " tensor-parallel blocks, and model files hold whole tensors; writing blocks comes with "
                            "the parallel checkpoints");
  std::int32_t failed = 0;
  std::string error;
  // The whole model on rank 0 alone: gathered from the ranks' shards where values are sharded
  // (collective: a rank 0 without the memory stops every rank there), else rank 0's own copy,
  // taken inside its try below, so that its failure reaches the other ranks' broadcast.
  std::vector<float> values;
  const bool sharded = store.value_residency() != nn::Residency::Full;
  if (sharded) values = parallel::gather_values(store, comm, /*root=*/0);
  if (comm.rank() == 0) {
    std::string tmp;
    std::optional<UnfinishedFile> unfinished;  // removed by an app's handler if the job is stopped
    detail::QuietHdf5 quiet;
    try {
      if (!sharded) values = parallel::gather_values(store, comm, /*root=*/0);
      // Written beside where `path` leads (through symbolic links, which stay links) and
      // renamed into place.
      const std::filesystem::path target = write_target(path);
      tmp = target.string() + ".tmp." + std::to_string(getpid());
      unfinished.emplace(tmp);
      const auto dir = target.parent_path();
      if (!dir.empty() && std::filesystem::exists(dir) && !std::filesystem::is_directory(dir))
        throw CheckpointError("'" + dir.string() + "' is a file, not a directory");
      if (!dir.empty() && !std::filesystem::is_directory(dir))
        throw CheckpointError("the directory '" + dir.string() + "' does not exist");
      if (std::filesystem::is_directory(target)) throw CheckpointError("it is a directory; give a file name");
      if (std::filesystem::exists(target) && !std::filesystem::is_regular_file(target))
        throw CheckpointError("'" + target.string() + "' is not a regular file (a device, FIFO or socket)");
      // HDF5 builds the file in memory, and it reaches the disk through plain writes: a disk
      // that fills (or a quota, or a file-size limit) then fails a write of ours, reported
      // with errno's words. A write that failed inside HDF5 left the file in HDF5's tables
      // after a failed close, and HDF5 1.10 crashed closing it again in MPI_Finalize. The
      // price: the file's bytes twice in rank 0's host memory for a moment (file_image).
      const std::vector<char> image = file_image(store, values);
      write_copy(tmp, target, image);
      replace_file(tmp, target);
    } catch (const std::exception& e) {
      std::error_code ignore;
      if (!tmp.empty()) std::filesystem::remove(tmp, ignore);
      failed = 1;
      const auto* tessera_error = dynamic_cast<const Error*>(&e);
      error = tessera_error != nullptr ? tessera_error->message() : e.what();  // decorated once, below
    }
  }
  // Every rank learns whether the file was written, and why not: all say the same words.
  comm.broadcast({&failed, 1}, 0);
  if (failed) error = text_from(comm, error, 0);
  if (failed)
    throw CheckpointError("could not write the model to '" + path + "'" + (error.empty() ? "" : ": " + error));
}

void load_model(const std::string& path, nn::ParameterStore& store) {
  for (const auto& p : store.parameters())
    if (p.shard.parts > 1)
      throw CheckpointError("'" + p.name + "' is cut into " + std::to_string(p.shard.parts) +
                            " tensor-parallel blocks, and model files are read as whole tensors; reading blocks "
                            "comes with the parallel checkpoints");
  if (!std::filesystem::exists(path)) throw CheckpointError("model file '" + path + "' does not exist");
  if (!store.allocated())
    throw CheckpointError("cannot load '" + path +
                          "': the model's parameters have no memory yet; load after store.allocate(), or after making "
                          "the DistributedDataParallel or ZeroDataParallel strategy, which allocates what each rank "
                          "keeps");
  detail::QuietHdf5 quiet;
  detail::H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) {
    // HDF5's reason: a file another program holds open for writing (HDF5's lock) is no fault
    // of the file, and a truncated one is.
    const std::string why = detail::hdf5_error_text();
    if (why.find("unable to lock file") != std::string::npos)
      throw CheckpointError("'" + path + "' cannot be opened: " + why +
                            ". Another program has it open for writing (close it first); on a file system without "
                            "file locks (some Lustre and NFS mounts) set HDF5_USE_FILE_LOCKING=FALSE");
    throw CheckpointError("'" + path + "' is not a readable HDF5 file (" + why + ")");
  }
  // Every check before the first value is read: a refused file leaves the store as it was.
  if (H5Lexists(file.get(), "/model", H5P_DEFAULT) <= 0)
    throw CheckpointError("'" + path + "' has no /model group; it is not a Tessera model file");
  for (const auto& p : store.parameters()) {
    const std::string name = "/model/" + p.name;
    if (H5Lexists(file.get(), name.c_str(), H5P_DEFAULT) <= 0)
      throw CheckpointError("'" + path + "' has no " + name + "; it holds another model");
    {
      // A group, or a link that leads nowhere (a soft link, an external link to a file not
      // there): named, where HDF5 said "H5Dopen2 failed: not a dataset".
      const detail::H5Handle object(H5Oopen(file.get(), name.c_str(), H5P_DEFAULT), H5Oclose);
      if (!object.valid())
        throw CheckpointError("'" + path + "': " + name + " cannot be opened (" + detail::hdf5_error_text() + ")");
      if (H5Iget_type(object.get()) != H5I_DATASET)
        throw CheckpointError("'" + path + "': " + name + " is a group, not a dataset; it is not a Tessera model file");
    }
    detail::H5Handle ds(TESSERA_CHECK_HDF5(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT)), H5Dclose);
    // A compression filter this HDF5 lacks would fail the read, after the parameters before
    // it were loaded.
    if (const std::string missing = detail::missing_filter(ds.get()); !missing.empty())
      throw CheckpointError("'" + path + "': " + name + " " + missing +
                            "; rewrite the file without it (h5repack -f NONE in.h5 out.h5), or put the filter's "
                            "plugin on HDF5_PLUGIN_PATH");
    detail::H5Handle space(TESSERA_CHECK_HDF5(H5Dget_space(ds.get())), H5Sclose);
    std::vector<hsize_t> dims(static_cast<std::size_t>(TESSERA_CHECK_HDF5(H5Sget_simple_extent_ndims(space.get()))));
    TESSERA_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
    // Floating point of any width reads as float32; integers, strings or compounds would be
    // converted in silence, or fail halfway through the reads below.
    detail::H5Handle type(TESSERA_CHECK_HDF5(H5Dget_type(ds.get())), H5Tclose);
    if (H5Tget_class(type.get()) != H5T_FLOAT)
      throw CheckpointError("'" + path + "': " + name +
                            " does not hold floating-point values; it is not a Tessera model file");
    const std::vector<hsize_t> want(p.shape.begin(), p.shape.end());
    if (dims != want)
      throw CheckpointError("'" + path + "': " + name + " is " + detail::shape_text(dims) + " and the model's is " +
                            detail::shape_text(want) + "; it holds another model");
  }
  // A tensor the model does not have: a file of a deeper or wider model would otherwise load
  // its first layers into this one in silence.
  detail::H5Handle group(TESSERA_CHECK_HDF5(H5Gopen2(file.get(), "/model", H5P_DEFAULT)), H5Gclose);
  H5G_info_t info;
  TESSERA_CHECK_HDF5(H5Gget_info(group.get(), &info));
  for (hsize_t k = 0; k < info.nlinks; ++k) {
    const ssize_t length = TESSERA_CHECK_HDF5(
        H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, k, nullptr, 0, H5P_DEFAULT));
    std::string name(static_cast<std::size_t>(length) + 1, '\0');
    TESSERA_CHECK_HDF5(
        H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, k, name.data(), name.size(), H5P_DEFAULT));
    name.resize(static_cast<std::size_t>(length));
    const auto& params = store.parameters();
    if (std::none_of(params.begin(), params.end(), [&](const nn::Parameter& p) { return p.name == name; }))
      throw CheckpointError("'" + path + "' holds /model/" + name + ", which the model does not have (" +
                            std::to_string(info.nlinks) + " tensors in the file, " +
                            std::to_string(store.parameters().size()) + " in the model); it holds another model");
  }
  // Read a tensor at a time (the whole model at once would be too much for a rank that keeps
  // a shard of it). What fails now (a damaged chunk, a value no float32 holds) fails after
  // the tensors before it were loaded, and says so.
  std::size_t loaded = 0;
  const auto partly = [&] {
    return loaded == 0 ? std::string("; the model is as it was")
                       : "; the " + std::to_string(loaded) + (loaded == 1 ? " tensor" : " tensors") +
                             " before it were loaded, so the model is now partly this file's: load another, or "
                             "initialize it";
  };
  for (auto& p : store.parameters()) {
    const std::string name = "/model/" + p.name;
    detail::H5Handle ds(TESSERA_CHECK_HDF5(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT)), H5Dclose);
    HostView1D<float> h("tessera::load_model", p.numel);
    if (H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, h.data()) < 0)
      throw CheckpointError("'" + path + "': reading " + name + " failed: " + detail::hdf5_error_text() + partly());
    // NaN, or a float64 beyond float32's range (read as an infinity): a model that could
    // only train to NaN.
    for (std::size_t i = 0; i < p.numel; ++i)
      if (!std::isfinite(h(i)))
        throw CheckpointError("'" + path + "': " + name + " holds " +
                              (std::isnan(h(i)) ? "NaN" : "an infinity (or a value beyond float32's range)") +
                              " at element " + std::to_string(i) + ", which no model trains from" + partly());
    ++loaded;
    if (store.value_residency() == nn::Residency::Full) {
      Kokkos::deep_copy(p.value, h);
    } else if (p.shard.end > p.shard.begin) {  // this rank keeps only its owned part
      const auto part = Kokkos::subview(h, std::make_pair(p.shard.begin, p.shard.end));
      const View1D<float> mine(store.values().data() + (p.offset + p.shard.begin - store.owned_begin()),
                               p.shard.end - p.shard.begin);
      Kokkos::deep_copy(mine, part);
    }
  }
}

void load_model(const std::string& path, nn::ParameterStore& store, comm::Communicator& comm) {
  std::string error;
  try {
    load_model(path, store);
  } catch (const Error& e) {
    error = e.message().empty() ? "cannot load '" + path + "'" : e.message();
  } catch (const std::exception& e) {  // a file system's error (a link loop), memory: told the same way
    error = "cannot load '" + path + "': " + e.what();
  }
  const std::int32_t mine = error.empty() ? 0 : 1;
  std::vector<std::int32_t> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather({&mine, 1}, {all.data(), all.size()});
  const auto first = std::find(all.begin(), all.end(), 1);
  if (first == all.end()) return;
  const int who = static_cast<int>(first - all.begin());
  const auto count = std::count(all.begin(), all.end(), 1);
  const std::string words = text_from(comm, error, who);
  if (count == comm.size()) throw CheckpointError(words);
  throw CheckpointError("rank " + std::to_string(who) +
                        (count > 1 ? " and " + std::to_string(count - 1) + " more" : "") + " of communicator '" +
                        comm.name() + "' could not load the model (" + words +
                        "), and every rank stops: the ranks that loaded it hold its values, the others not (is '" +
                        path + "' on node-local disk, missing on some nodes?)");
}

}  // namespace tessera::checkpoint
