// Datasets, the distributed sampler and the model file, on one process.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <vector>

#include <tessera/checkpoint/model_file.hpp>
#include <tessera/data/dataset.hpp>
#include <tessera/nn/layers.hpp>
#include <tessera/tessera.hpp>

#include "common/output_file.hpp"
#include "test_support.hpp"

namespace {
/// fsync fails with this errno while it is not 0 (a full or over-quota file system that says
/// so only when the data is flushed, as NFS does). This binary's fsync is the one Tessera
/// calls: the program's own definition comes before the C library's.
std::atomic<int> g_fsync_error{0};
}  // namespace

extern "C" int fsync(int fd) {
  if (const int e = g_fsync_error.load()) {
    errno = e;
    return -1;
  }
  return static_cast<int>(syscall(SYS_fsync, fd));
}

namespace {
using namespace tessera;
using test::host_copy;

TEST(Sampler, EveryRankCountCutsTheSameGlobalBatches) {
  data::DistributedSampler one(1000, 24, 0, 1, 5);
  std::vector<std::vector<std::int64_t>> global;
  for (int b = 0; b < 50; ++b) global.push_back(one.next());  // crosses an epoch (41 batches)
  for (int ranks : {2, 3, 4}) {
    std::vector<data::DistributedSampler> s;
    for (int r = 0; r < ranks; ++r) s.emplace_back(1000, 24, r, ranks, 5);
    for (int b = 0; b < 50; ++b) {
      std::vector<std::int64_t> joined;
      for (auto& x : s) {
        const auto& part = x.next();
        EXPECT_EQ(part.size(), static_cast<std::size_t>(24 / ranks));
        joined.insert(joined.end(), part.begin(), part.end());
      }
      ASSERT_EQ(joined, global[static_cast<std::size_t>(b)]) << ranks << " ranks, batch " << b;
    }
  }
}

TEST(Sampler, AnEpochVisitsEverySampleOnceInANewOrderEachEpoch) {
  data::DistributedSampler s(96, 8, 0, 1, 1);
  std::vector<std::int64_t> epoch0, epoch1;
  for (int b = 0; b < 12; ++b) {
    const auto& batch = s.next();
    epoch0.insert(epoch0.end(), batch.begin(), batch.end());
  }
  for (int b = 0; b < 12; ++b) {
    const auto& batch = s.next();
    epoch1.insert(epoch1.end(), batch.begin(), batch.end());
  }
  EXPECT_EQ(std::set<std::int64_t>(epoch0.begin(), epoch0.end()).size(), 96u);
  EXPECT_NE(epoch0, epoch1);
  std::vector<std::int64_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, epoch0) << "the order must be shuffled";
}

TEST(Sampler, RestoredStateContinuesWhereItLeftOff) {
  data::DistributedSampler a(500, 10, 1, 2, 9);
  for (int i = 0; i < 57; ++i) a.next();
  const auto state = a.state();
  const auto expected = a.next();
  data::DistributedSampler b(500, 10, 1, 2, 9);
  b.restore(state);
  EXPECT_EQ(b.next(), expected);
  EXPECT_THROW_WITH(b.restore({0, 999}), ConfigError, "out of range");
  EXPECT_THROW_WITH(data::DistributedSampler(500, 10, 0, 3, 1), ConfigError, "does not divide across 3");
  EXPECT_THROW_WITH(data::DistributedSampler(5, 10, 0, 1, 1), ConfigError, "fewer than one global batch");
  // Rank and size swapped: rank 0 divided by 0, and rank 2 of 1 took samples past its part.
  EXPECT_THROW_WITH(data::DistributedSampler(500, 10, 2, 0, 1), ConfigError,
                    "DistributedSampler: rank 2 is not a rank of 0 ranks; give (..., comm.rank(), comm.size(), "
                    "seed), in that order");
  EXPECT_THROW_WITH(data::DistributedSampler(500, 10, 2, 1, 1), ConfigError, "rank 2 is not a rank of 1 rank;");
  EXPECT_THROW_WITH(data::DistributedSampler(500, 10, -1, 2, 1), ConfigError, "rank -1 is not a rank of 2 ranks;");
}

// Views that do not fit the batch are refused before anything is read: a view too narrow was
// written past its end (the heap), one too wide filled with rows out of line, and a sample
// past the end read past the synthetic set.
TEST(Dataset, LoadRefusesViewsThatDoNotFitTheBatchAndSamplesItLacks) {
  auto ds = data::make_teacher_student(64, 8, 2, 3);
  View2D<float> x("x", 2, 8), t("t", 2, 8), narrow("narrow", 2, 4), short_x("short", 1, 8);
  View1D<std::int64_t> none;
  EXPECT_THROW_WITH(ds->load({5, 64}, x, t, none), ConfigError,
                    "synthetic teacher-student task (64 samples, dimension 8, teacher of 2 layers): sample 64 (index "
                    "1 of the batch) is outside its 64 samples");
  EXPECT_THROW_WITH(ds->load({-1}, x, t, none), ConfigError, "sample -1 (index 0 of the batch)");
  EXPECT_THROW_WITH(ds->load({5, 6}, narrow, t, none), ConfigError,
                    "Dataset::load of 2 samples into inputs of 2 x 4; give a view of 2 x 8 (a row per sample, 8 "
                    "columns)");
  EXPECT_THROW_WITH(ds->load({5, 6}, short_x, t, none), ConfigError, "into inputs of 1 x 8");
  EXPECT_THROW_WITH(ds->load({5, 6}, x, narrow, none), ConfigError, "into targets of 2 x 4");
  // More rows than samples is fine: the first rows are filled, the others kept.
  View2D<float> tall("tall", 3, 8), tall_t("tall_t", 3, 8);
  Kokkos::deep_copy(tall, -7.0f);
  ds->load({5, 6}, tall, tall_t, none);
  ds->load({5, 6}, x, t, none);
  const auto a = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tall);
  const auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t j = 0; j < 8; ++j) EXPECT_EQ(a(r, j), b(r, j));
  for (std::size_t j = 0; j < 8; ++j) EXPECT_EQ(a(2, j), -7.0f) << j;
}

TEST(TeacherStudent, SamplesDependOnlyOnTheirIndex) {
  auto ds = data::make_teacher_student(64, 8, 2, 3);
  View2D<float> x1("x1", 2, 8), t1("t1", 2, 8), x2("x2", 1, 8), t2("t2", 1, 8);
  View1D<std::int64_t> none;
  ds->load({5, 40}, x1, t1, none);
  ds->load({40}, x2, t2, none);
  const auto hx1 = host_copy(x1), ht1 = host_copy(t1), hx2 = host_copy(x2), ht2 = host_copy(t2);
  for (std::size_t j = 0; j < 8; ++j) {
    EXPECT_EQ(hx1(1, j), hx2(0, j));
    EXPECT_EQ(ht1(1, j), ht2(0, j));
  }
  EXPECT_NE(hx1(0, 0), hx1(1, 0)) << "two samples must differ";
  auto again = data::make_teacher_student(64, 8, 2, 3);
  View2D<float> x3("x3", 1, 8), t3("t3", 1, 8);
  again->load({5}, x3, t3, none);
  EXPECT_EQ(host_copy(x3)(0, 7), hx1(0, 7));
  EXPECT_EQ(host_copy(t3)(0, 7), ht1(0, 7));
}

/// Writes an HDF5 file with the given datasets (each a name, dims and float or int64 data).
struct H5Writer {
  hid_t file;
  explicit H5Writer(const std::string& path) {
    file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  }
  /// Writes v (in memory as `type`) as the file type `stored` (default: the same).
  template <class T>
  void add(const char* name, std::vector<hsize_t> dims, const std::vector<T>& v, hid_t type, hid_t stored = -1) {
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t ds = H5Dcreate2(file, name, stored < 0 ? type : stored, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(ds);
    H5Sclose(space);
  }
  /// A dataset created and never written, or (with `external`) one whose data HDF5 keeps in
  /// that raw file beside it.
  void declare(const char* name, std::vector<hsize_t> dims, hid_t type, const char* external = nullptr) {
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t bytes = H5Tget_size(type);
    for (auto d : dims) bytes *= d;
    if (external != nullptr) H5Pset_external(dcpl, external, 0, bytes);
    hid_t ds = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
  }
  ~H5Writer() { H5Fclose(file); }
};

std::string temp(const std::string& name) { return (std::filesystem::temp_directory_path() / name).string(); }

TEST(Hdf5Dataset, ReadsRequestedRowsOfTargetsAndLabels) {
  const std::string reg = temp("tessera_reg.h5"), cls = temp("tessera_cls.h5");
  std::vector<float> in(6 * 3), out(6 * 2);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = 100.0f + static_cast<float>(i);
  {
    H5Writer w(reg);
    w.add("/inputs", {6, 3}, in, H5T_NATIVE_FLOAT);
    w.add("/targets", {6, 2}, out, H5T_NATIVE_FLOAT);
  }
  {
    H5Writer w(cls);
    w.add("/inputs", {6, 3}, in, H5T_NATIVE_FLOAT);
    w.add("/labels", {6}, std::vector<std::int64_t>{0, 2, 1, 2, 0, 1}, H5T_NATIVE_INT64);
  }
  auto r = data::open_hdf5(reg);
  EXPECT_EQ(r->size(), 6);
  EXPECT_EQ(r->input_dim(), 3u);
  EXPECT_EQ(r->target_dim(), 2u);
  View2D<float> x("x", 2, 3), t("t", 2, 2);
  View1D<std::int64_t> l("l", 2);
  r->load({4, 1}, x, t, l);
  EXPECT_EQ(host_copy(x)(0, 0), 12.0f);  // row 4
  EXPECT_EQ(host_copy(x)(1, 2), 5.0f);   // row 1
  EXPECT_EQ(host_copy(t)(0, 1), 109.0f);
  auto c = data::open_hdf5(cls);
  EXPECT_TRUE(c->has_labels());
  EXPECT_EQ(c->classes(), 3);
  EXPECT_EQ(c->top_label(), "/labels row 1 holds label 2");  // the first row with the largest label
  c->load({3, 2}, x, t, l);
  EXPECT_EQ(host_copy(l)(0), 2);
  EXPECT_EQ(host_copy(l)(1), 1);
  // Views of more rows than samples keep the rows past them, in device memory too (a host
  // mirror copied back whole had overwritten them there).
  View2D<float> tall("tall", 3, 3), tall_t("tall_t", 3, 2);
  View1D<std::int64_t> tall_l("tall_l", 3);
  Kokkos::deep_copy(tall, -7.0f);
  Kokkos::deep_copy(tall_t, -7.0f);
  Kokkos::deep_copy(tall_l, -7);
  r->load({4, 1}, tall, tall_t, View1D<std::int64_t>());
  c->load({3, 2}, tall, tall_t, tall_l);
  const auto h_tall = host_copy(tall), h_tall_t = host_copy(tall_t);
  EXPECT_EQ(h_tall(1, 2), 8.0f);      // row 2, by the second load
  EXPECT_EQ(h_tall_t(0, 1), 109.0f);  // row 4
  EXPECT_EQ(host_copy(tall_l)(1), 1);
  for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(h_tall(2, j), -7.0f) << j;
  for (std::size_t j = 0; j < 2; ++j) EXPECT_EQ(h_tall_t(2, j), -7.0f) << j;
  EXPECT_EQ(host_copy(tall_l)(2), -7);
  // Rows in any order, in runs, repeated (each run of consecutive rows is read at once and
  // put back in the order asked): every value of every row.
  const std::vector<std::int64_t> rows = {5, 0, 1, 2, 4, 1, 3};
  View2D<float> xs("xs", rows.size(), 3), ts("ts", rows.size(), 2);
  View1D<std::int64_t> ls("ls", rows.size());
  r->load(rows, xs, ts, ls);
  c->load(rows, xs, ts, ls);  // the same inputs, and the labels
  r->load(rows, xs, ts, View1D<std::int64_t>());
  const auto hx = host_copy(xs), ht = host_copy(ts);
  const auto hl = host_copy(ls);
  const std::vector<std::int64_t> label_of = {0, 2, 1, 2, 0, 1};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto row = static_cast<std::size_t>(rows[i]);
    for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(hx(i, j), in[row * 3 + j]) << "row " << row << " at " << i;
    for (std::size_t j = 0; j < 2; ++j) EXPECT_EQ(ht(i, j), out[row * 2 + j]) << "row " << row << " at " << i;
    EXPECT_EQ(hl(i), label_of[row]) << "row " << row << " at " << i;
  }
}

// Files written on (or by tools that default to) the other byte order hold the same types:
// HDF5 converts them as they are read.
TEST(Hdf5Dataset, ReadsBigEndianFloatsAndLabels) {
  const std::string f = temp("tessera_be.h5");
  std::vector<float> in(4 * 2);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = 0.5f + static_cast<float>(i);
  {
    H5Writer w(f);
    w.add("/inputs", {4, 2}, in, H5T_NATIVE_FLOAT, H5T_IEEE_F32BE);
    w.add("/labels", {4}, std::vector<std::int64_t>{1, 0, 1, 1}, H5T_NATIVE_INT64, H5T_STD_I64BE);
  }
  auto d = data::open_hdf5(f);
  EXPECT_EQ(d->classes(), 2);
  View2D<float> x("x", 1, 2), t("t", 1, 2);
  View1D<std::int64_t> l("l", 1);
  d->load({3}, x, t, l);
  EXPECT_EQ(host_copy(x)(0, 1), 7.5f);  // row 3, column 1
  EXPECT_EQ(host_copy(l)(0), 1);
}

TEST(Hdf5Dataset, MalformedFilesAreClearErrors) {
  const std::string f = temp("tessera_bad.h5");
  std::vector<float> in(12, 1.0f);
  auto expect = [&](const std::string& needle) { EXPECT_THROW_WITH(data::open_hdf5(f), ConfigError, needle); };
  EXPECT_THROW_WITH(data::open_hdf5(temp("tessera_missing.h5")), ConfigError, "does not exist");
  { std::ofstream(f) << "not hdf5"; }
  expect("not an HDF5 file");
  {
    H5Writer w(f);
    w.add("/targets", {4, 3}, in, H5T_NATIVE_FLOAT);
  }
  expect("has no /inputs dataset");
  {
    H5Writer w(f);
    w.add("/inputs", {4, 3}, std::vector<double>(12), H5T_NATIVE_DOUBLE);
    w.add("/targets", {4, 3}, in, H5T_NATIVE_FLOAT);
  }
  expect("/inputs is float64, not float32");
  {
    H5Writer w(f);
    w.add("/inputs", {4, 3}, in, H5T_NATIVE_FLOAT);
  }
  expect("has neither /targets nor /labels");
  {
    H5Writer w(f);
    w.add("/inputs", {4, 3}, in, H5T_NATIVE_FLOAT);
    w.add("/targets", {3, 3}, std::vector<float>(9), H5T_NATIVE_FLOAT);
  }
  expect("/targets must be [4, d_out], one row per row of /inputs, not [3, 3]");
  {
    H5Writer w(f);
    w.add("/inputs", {4, 3}, in, H5T_NATIVE_FLOAT);
    w.add("/targets", {4, 0}, std::vector<float>(1), H5T_NATIVE_FLOAT);  // would read as a labels file
  }
  expect("/targets is [4, 0]: its rows have no values");
  {
    H5Writer w(f);
    w.add("/inputs", {4, 0}, in, H5T_NATIVE_FLOAT);
    w.add("/labels", {4}, std::vector<std::int64_t>(4), H5T_NATIVE_INT64);
  }
  expect("/inputs is [4, 0]: its rows have no values");
  {
    H5Writer w(f);
    w.add("/inputs", {4, 3}, in, H5T_NATIVE_FLOAT);
    w.add("/labels", {3}, std::vector<std::int64_t>{0, 1, 0}, H5T_NATIVE_INT64);
  }
  expect("/labels must be [4], one per row of /inputs, not [3]");
  {
    H5Writer w(f);
    w.add("/inputs", {4, 3}, in, H5T_NATIVE_FLOAT);
    w.add("/labels", {4}, std::vector<std::int64_t>{0, -1, 1, 0}, H5T_NATIVE_INT64);
  }
  expect("/labels row 1 holds -1, a negative label");
  // A dataset created and never written (its writer stopped) read as zeros, without a word.
  {
    H5Writer w(f);
    w.declare("/inputs", {4, 3}, H5T_NATIVE_FLOAT);
    w.add("/targets", {4, 3}, in, H5T_NATIVE_FLOAT);
  }
  expect(
      "/inputs holds no data: it was created and never written (did its writer stop before filling it?), and "
      "would read as zeros");
  {
    H5Writer w(f);
    w.add("/inputs", {4, 3}, in, H5T_NATIVE_FLOAT);
    w.declare("/labels", {4}, H5T_NATIVE_INT64);
  }
  expect("/labels holds no data");
}

// A virtual dataset reads its source file's rows; with that file gone, it read as fill values
// (zeros) in silence, and is now refused at open, naming the source.
TEST(Hdf5Dataset, AVirtualDatasetWhoseSourceIsGoneIsRefused) {
  if (std::getenv("HDF5_VDS_PREFIX") != nullptr) GTEST_SKIP() << "HDF5_VDS_PREFIX is set: HDF5 searches there";
  const std::string source = "tessera_vds_source.h5", f = temp("tessera_vds.h5");
  std::vector<float> in(12);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = 1.0f + static_cast<float>(i);
  {
    H5Writer s(temp(source));
    s.add("/data", {4, 3}, in, H5T_NATIVE_FLOAT);
  }
  {
    H5Writer w(f);
    const hsize_t dims[2] = {4, 3};
    hid_t space = H5Screate_simple(2, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ASSERT_GE(H5Pset_virtual(dcpl, space, source.c_str(), "/data", space), 0);  // beside the virtual file
    hid_t ds = H5Dcreate2(w.file, "/inputs", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    w.add("/targets", {4, 3}, std::vector<float>(12, 1.0f), H5T_NATIVE_FLOAT);
  }
  {
    auto d = data::open_hdf5(f);
    View2D<float> x("x", 1, 3), t("t", 1, 3);
    d->load({2}, x, t, View1D<std::int64_t>());
    EXPECT_EQ(host_copy(x)(0, 0), 7.0f) << "the source's row 2";
  }
  std::filesystem::remove(temp(source));
  EXPECT_THROW_WITH(data::open_hdf5(f), ConfigError,
                    "/inputs is a virtual dataset, and its source file 'tessera_vds_source.h5' is not there (nor "
                    "beside this file); HDF5 would read fill values in its place");
  // A source named by an absolute path that moved beside the virtual file: HDF5 finds it
  // there, and so is it taken.
  const auto away = std::filesystem::path(temp("tessera_vds_away"));
  std::filesystem::create_directories(away);
  {
    H5Writer s((away / source).string());
    s.add("/data", {4, 3}, in, H5T_NATIVE_FLOAT);
  }
  {
    H5Writer w(f);
    const hsize_t dims[2] = {4, 3};
    hid_t space = H5Screate_simple(2, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ASSERT_GE(H5Pset_virtual(dcpl, space, (away / source).c_str(), "/data", space), 0);
    hid_t ds = H5Dcreate2(w.file, "/inputs", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    w.add("/targets", {4, 3}, std::vector<float>(12, 1.0f), H5T_NATIVE_FLOAT);
  }
  std::filesystem::rename(away / source, temp(source));
  {
    auto d = data::open_hdf5(f);
    View2D<float> x("x", 1, 3), t("t", 1, 3);
    d->load({3}, x, t, View1D<std::int64_t>());
    EXPECT_EQ(host_copy(x)(0, 2), 12.0f) << "the source's row 3, found beside the virtual file";
  }
  std::filesystem::remove_all(away);
  std::filesystem::remove(temp(source));
}

// A read that fails names the file, the dataset and its rows (it was "H5Dread failed: ..."
// alone): here data kept in an external raw file that is not there.
TEST(Hdf5Dataset, AReadThatFailsNamesTheFileTheDatasetAndTheRows) {
  const std::string f = temp("tessera_external.h5");
  std::filesystem::remove(temp("tessera_external_missing.bin"));
  {
    H5Writer w(f);
    w.declare("/inputs", {4, 3}, H5T_NATIVE_FLOAT, temp("tessera_external_missing.bin").c_str());
    w.add("/targets", {4, 3}, std::vector<float>(12, 1.0f), H5T_NATIVE_FLOAT);
  }
  auto d = data::open_hdf5(f);
  View2D<float> x("x", 2, 3), t("t", 2, 3);
  EXPECT_THROW_WITH(d->load({1, 2}, x, t, View1D<std::int64_t>()), ConfigError,
                    "dataset '" + f + "': reading /inputs rows 1 to 2 failed: ");
  EXPECT_THROW_WITH(d->load({3}, x, t, View1D<std::int64_t>()), ConfigError, "reading /inputs row 3 failed: ");
}

/// Writes `values` (as doubles, converted to `type`) as the dataset of `p`'s name and shape
/// under group `g`, with the creation properties `dcpl`: a tensor as another tool would.
herr_t write_tensor(hid_t g, const nn::Parameter& p, hid_t type, hid_t dcpl, const std::vector<double>& values) {
  std::vector<hsize_t> dims(p.shape.begin(), p.shape.end());
  hid_t sp = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t d = H5Dcreate2(g, p.name.c_str(), type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  const herr_t written = H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  H5Dclose(d);
  H5Sclose(sp);
  return written;
}

TEST(ModelFile, SavesEveryParameterInItsGlobalShapeAndLoadsBack) {
  auto comm = comm::Communicator::create(comm::Backend::Mpi);
  nn::ParameterStore a;
  nn::MLP mlp(a, 2, 5);
  a.initialize(11);
  const std::string path = temp("tessera_model.h5");
  std::filesystem::remove(path);
  checkpoint::save_model(path, a, *comm);
  // Read the layout with HDF5 directly, not through Tessera.
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t ds = H5Dopen2(file, "/model/layers.1.weight", H5P_DEFAULT);
  ASSERT_GE(ds, 0);
  hid_t space = H5Dget_space(ds);
  hsize_t dims[2] = {0, 0};
  EXPECT_EQ(H5Sget_simple_extent_ndims(space), 2);
  H5Sget_simple_extent_dims(space, dims, nullptr);
  EXPECT_EQ(dims[0], 5u);
  EXPECT_EQ(dims[1], 5u);
  H5Sclose(space);
  H5Dclose(ds);
  // Every parameter, every value, under its own name (two weights of the same shape swapped,
  // or one left out, would fail).
  const auto values_of = [](const nn::Parameter& p) {
    const auto h = host_copy(p.value);
    return std::vector<float>(h.data(), h.data() + h.size());
  };
  ASSERT_EQ(a.parameters().size(), 4u);
  for (const auto& p : a.parameters()) {
    hid_t d = H5Dopen2(file, ("/model/" + p.name).c_str(), H5P_DEFAULT);
    ASSERT_GE(d, 0) << p.name;
    std::vector<float> stored(p.value.size());
    EXPECT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, stored.data()), 0) << p.name;
    H5Dclose(d);
    EXPECT_EQ(stored, values_of(p)) << p.name;
  }
  H5Fclose(file);
  nn::ParameterStore b;
  nn::MLP other(b, 2, 5);
  b.initialize(12);
  ASSERT_NE(values_of(b.find("layers.1.weight")), values_of(a.find("layers.1.weight")))
      << "another seed must give other values, or loading proves nothing";
  checkpoint::load_model(path, b);
  for (const auto& p : a.parameters()) EXPECT_EQ(values_of(b.find(p.name)), values_of(p)) << p.name;
  nn::ParameterStore wrong;
  nn::MLP wide(wrong, 2, 6);
  wrong.initialize(1);
  EXPECT_THROW_WITH(checkpoint::load_model(path, wrong), CheckpointError,
                    "/model/layers.0.weight is [5, 5] and the model's is [6, 6]");
  // A file of a deeper model is refused, not loaded into the first layers in silence.
  nn::ParameterStore shallow;
  nn::MLP one_layer(shallow, 1, 5);
  shallow.initialize(1);
  EXPECT_THROW_WITH(
      checkpoint::load_model(path, shallow), CheckpointError,
      "holds /model/layers.1.bias, which the model does not have (4 tensors in the file, 2 in the model)");
  // A refused file leaves the model as it was: the first tensors match and the last does not.
  nn::ParameterStore partly;
  partly.add("layers.0.weight", {5, 5}, nn::Init::zeros(), nn::ShardSpec::full());
  partly.add("layers.0.bias", {5}, nn::Init::zeros(), nn::ShardSpec::full());
  partly.add("layers.1.weight", {5, 4}, nn::Init::zeros(), nn::ShardSpec::full());
  partly.initialize(1);
  EXPECT_THROW_WITH(checkpoint::load_model(path, partly), CheckpointError, "/model/layers.1.weight is [5, 5]");
  EXPECT_EQ(values_of(partly.find("layers.0.weight")), std::vector<float>(25, 0.0f))
      << "a refused file must not be loaded in part";
  // Integers under the model's names and shapes are refused before any value is read (they
  // were converted in silence; a string tensor failed halfway through the reads).
  {
    const std::string ints = temp("tessera_int_model.h5");
    hid_t f = H5Fcreate(ints.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "/model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (const auto& p : a.parameters())
      EXPECT_GE(write_tensor(g, p, p.name == "layers.1.bias" ? H5T_STD_I32LE : H5T_IEEE_F32LE, H5P_DEFAULT,
                             std::vector<double>(p.numel, 1.0)),
                0);
    H5Gclose(g);
    H5Fclose(f);
    nn::ParameterStore c;
    nn::MLP same(c, 2, 5);
    c.initialize(13);
    const auto before = values_of(c.find("layers.0.weight"));
    EXPECT_THROW_WITH(checkpoint::load_model(ints, c), CheckpointError,
                      "/model/layers.1.bias does not hold floating-point values");
    EXPECT_EQ(values_of(c.find("layers.0.weight")), before) << "a refused file must not be loaded in part";
    std::filesystem::remove(ints);
  }
  EXPECT_THROW_WITH(checkpoint::save_model(temp("no_such_dir/x.h5"), a, *comm), CheckpointError, "could not write");
  // A store holding a tensor-parallel block of a weight (half its rows) is refused both
  // ways, before the file is opened (reading the whole tensor would overrun the block).
  nn::ParameterStore block;
  block.add("layers.0.weight", {5, 5}, nn::Init::zeros(), nn::ShardSpec::full());
  block.add("layers.1.weight", {6, 5}, nn::Init::zeros(), nn::ShardSpec::block(0, 1, 2));
  block.initialize(1);
  EXPECT_THROW_WITH(checkpoint::load_model(path, block), CheckpointError, "tensor-parallel blocks");
  EXPECT_THROW_WITH(checkpoint::save_model(temp("tessera_block.h5"), block, *comm), CheckpointError,
                    "tensor-parallel blocks");
}

/// A pass-through HDF5 filter under an id of its own, registered only while a file is written
/// with it: a reader then lacks it, as one without h5py's lzf plugin lacks lzf.
size_t pass_through(unsigned, size_t, const unsigned[], size_t bytes, size_t*, void**) { return bytes; }
constexpr H5Z_filter_t kMissingFilter = 32555;

// Model files from other tools, or damaged: each refused naming the file and the tensor,
// and saying whether the model is as it was (it was HDF5's "H5Dopen2 failed: not a
// dataset", a plugin directory's name for a missing filter, and NaN or infinities loaded).
TEST(ModelFile, FilesOfOtherToolsAndDamagedOnesAreRefusedInWords) {
  nn::ParameterStore a;
  nn::MLP mlp(a, 2, 5);
  a.initialize(11);
  const auto values_of = [](const nn::Parameter& p) {
    const auto h = host_copy(p.value);
    return std::vector<float>(h.data(), h.data() + h.size());
  };
  // The model's tensors, with `change` applied to the one named `odd` instead of a plain write.
  const std::string path = temp("tessera_other_tool.h5");
  const auto write = [&](const std::string& odd, const std::function<void(hid_t, const nn::Parameter&)>& change) {
    hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "/model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (const auto& p : a.parameters()) {
      if (p.name == odd) {
        change(g, p);
        continue;
      }
      const auto v = values_of(p);
      write_tensor(g, p, H5T_IEEE_F32LE, H5P_DEFAULT, std::vector<double>(v.begin(), v.end()));
    }
    H5Gclose(g);
    H5Fclose(f);
  };
  const auto with_values = [&](hid_t type, hid_t dcpl, std::vector<double> v) {
    return [=](hid_t g, const nn::Parameter& p) {
      std::vector<double> all(p.numel, 0.5);
      std::copy(v.begin(), v.end(), all.begin());
      write_tensor(g, p, type, dcpl, all);
    };
  };
  nn::ParameterStore b;
  nn::MLP other(b, 2, 5);
  b.initialize(12);
  const auto before = values_of(b.find("layers.0.weight"));
  const auto as_it_was = [&] { EXPECT_EQ(values_of(b.find("layers.0.weight")), before); };
  write("layers.1.bias", [](hid_t g, const nn::Parameter& p) {
    H5Gclose(H5Gcreate2(g, p.name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  });
  EXPECT_THROW_WITH(checkpoint::load_model(path, b), CheckpointError,
                    "'" + path + "': /model/layers.1.bias is a group, not a dataset; it is not a Tessera model file");
  as_it_was();
  write("layers.1.bias", [](hid_t g, const nn::Parameter& p) {
    H5Lcreate_soft("/nowhere", g, p.name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  });
  EXPECT_THROW_WITH(checkpoint::load_model(path, b), CheckpointError, "/model/layers.1.bias cannot be opened (");
  as_it_was();
  // Written with a filter the reader lacks: refused before any tensor is read.
  H5Z_class2_t filter{H5Z_CLASS_T_VERS, kMissingFilter, 1, 1, "tessera-test-filter", nullptr, nullptr, pass_through};
  ASSERT_GE(H5Zregister(&filter), 0);
  hid_t filtered = H5Pcreate(H5P_DATASET_CREATE);
  const hsize_t chunk[1] = {5};
  H5Pset_chunk(filtered, 1, chunk);
  H5Pset_filter(filtered, kMissingFilter, H5Z_FLAG_MANDATORY, 0, nullptr);
  write("layers.1.bias", with_values(H5T_IEEE_F32LE, filtered, {}));
  H5Pclose(filtered);
  ASSERT_GE(H5Zunregister(kMissingFilter), 0);
  EXPECT_THROW_WITH(checkpoint::load_model(path, b), CheckpointError,
                    "/model/layers.1.bias is compressed with the filter 'tessera-test-filter' (HDF5 filter 32555), "
                    "which this HDF5 cannot decode");
  as_it_was();
  // Values no model trains from: a float64 beyond float32's range, read as an infinity, in
  // the first tensor; a NaN in the third, after two were loaded.
  write("layers.0.weight", with_values(H5T_IEEE_F64LE, H5P_DEFAULT, {0.25, 1e300}));
  EXPECT_THROW_WITH(checkpoint::load_model(path, b), CheckpointError,
                    "/model/layers.0.weight holds an infinity (or a value beyond float32's range) at element 1, "
                    "which no model trains from; the model is as it was");
  as_it_was();
  write("layers.1.weight", with_values(H5T_IEEE_F32LE, H5P_DEFAULT, {0.25, 0.5, 0.75, std::nan("")}));
  EXPECT_THROW_WITH(checkpoint::load_model(path, b), CheckpointError,
                    "/model/layers.1.weight holds NaN at element 3, which no model trains from; the 2 tensors before "
                    "it were loaded, so the model is now partly this file's");
  // A file another program holds open for writing (HDF5 locks it, as flock does here) names
  // the lock, and how to live without one.
  write("", {});
  const int held = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  EXPECT_THROW_WITH(checkpoint::load_model(path, b), CheckpointError, "' cannot be opened: ");
  EXPECT_THROW_WITH(checkpoint::load_model(path, b), CheckpointError, "set HDF5_USE_FILE_LOCKING=FALSE");
  ::close(held);
  checkpoint::load_model(path, b);  // and the file, let go, loads
  EXPECT_EQ(values_of(b.find("layers.0.weight")), values_of(a.find("layers.0.weight")));
}

/// A new empty folder under the temporary directory, named `prefix` and this process's id.
std::filesystem::path empty_dir(const std::string& prefix) {
  const auto dir = std::filesystem::path(temp(prefix + std::to_string(getpid())));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directory(dir);
  return dir;
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A store whose parameters have no memory yet (a model built, the strategy not yet made):
// rank 0 alone failed with Kokkos' "extents of views don't match", and the other ranks of a
// save waited for it until the timeout (the ZeRO suite runs the save on several ranks).
TEST(ModelFile, AStoreWithoutMemoryIsRefusedOnEveryRankBeforeAnyCollective) {
  auto comm = comm::Communicator::create(comm::Backend::Mpi);
  nn::ParameterStore bare;
  nn::MLP mlp(bare, 2, 5);
  const std::string path = temp("tessera_bare_model.h5");
  std::filesystem::remove(path);
  EXPECT_THROW_WITH(
      checkpoint::save_model(path, bare, *comm), CheckpointError,
      "could not write the model to '" + path + "': its parameters have no memory yet; save after store.allocate()");
  EXPECT_FALSE(std::filesystem::exists(path));
  nn::ParameterStore made;
  nn::MLP same(made, 2, 5);
  made.initialize(4);
  checkpoint::save_model(path, made, *comm);
  EXPECT_THROW_WITH(checkpoint::load_model(path, bare), CheckpointError,
                    "cannot load '" + path +
                        "': the model's parameters have no memory yet; load after "
                        "store.allocate(), or after making the DistributedDataParallel or ZeroDataParallel strategy");
  EXPECT_FALSE(bare.allocated());
  std::filesystem::remove(path);
}

// A save whose data cannot be flushed to the disk (the error a full NFS file system gives only
// then) fails and leaves the user's file as it was, and no copy beside it; once the disk takes
// the data, the new file replaces the old one.
TEST(ModelFile, ASaveTheDiskDoesNotTakeLeavesTheUsersFileAsItWas) {
  auto comm = comm::Communicator::create(comm::Backend::Mpi);
  nn::ParameterStore a;
  nn::MLP mlp(a, 2, 5);
  a.initialize(11);
  const auto dir = empty_dir("tessera_flush_");
  const std::string path = (dir / "model.h5").string();
  { std::ofstream(path) << "the user's model"; }
  g_fsync_error = ENOSPC;
  EXPECT_THROW_WITH(checkpoint::save_model(path, a, *comm), CheckpointError,
                    "could not be flushed to the disk: No space left on device");
  g_fsync_error = 0;
  EXPECT_EQ(contents(path), "the user's model");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1)
      << "the unfinished copy must be removed";
  checkpoint::save_model(path, a, *comm);
  EXPECT_EQ(contents(path).substr(1, 3), "HDF");
  std::filesystem::remove_all(dir);
}

// A disk that fills while the model is being written (here a file-size limit: the write fails
// with EFBIG as it would with ENOSPC): a clear error, the user's file as it was, no copy left,
// and nothing of the failed file left open in HDF5. (HDF5 1.10 keeps a file whose close failed
// in its tables, and crashed in MPI_Finalize closing it again: this binary ended with SIGSEGV.)
TEST(ModelFile, ADiskThatFillsDuringTheWriteLeavesTheUsersFileAndTheProcessSound) {
  auto comm = comm::Communicator::create(comm::Backend::Mpi);
  nn::ParameterStore a;
  nn::MLP mlp(a, 2, 64);  // 33 kB of values
  a.initialize(11);
  const auto dir = empty_dir("tessera_full_");
  const std::string path = (dir / "model.h5").string();
  { std::ofstream(path) << "the user's model"; }
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  rlimit small = before;
  small.rlim_cur = 16 * 1024;
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  EXPECT_THROW_WITH(checkpoint::save_model(path, a, *comm), CheckpointError, "File too large");
  setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(contents(path), "the user's model");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1)
      << "the unfinished copy must be removed";
  EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE), 0) << "a file the failed save opened is still open in HDF5";
  checkpoint::save_model(path, a, *comm);
  nn::ParameterStore b;
  nn::MLP again(b, 2, 64);
  b.initialize(12);
  checkpoint::load_model(path, b);
  EXPECT_EQ(test::host(b.values()), test::host(a.values()));
  std::filesystem::remove_all(dir);
}

// Replacing a file keeps its permissions: a model or metrics file the user made private stays
// private (the copy that replaces it was made with the default mode, 0644 under umask 022).
TEST(ModelFile, ReplacingAFileKeepsItsPermissions) {
  auto comm = comm::Communicator::create(comm::Backend::Mpi);
  nn::ParameterStore a;
  nn::MLP mlp(a, 2, 5);
  a.initialize(11);
  const auto dir = empty_dir("tessera_mode_");
  const auto path = dir / "model.h5";
  { std::ofstream(path) << "the user's model"; }
  namespace fs = std::filesystem;
  const auto mode = fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read;  // 0640
  fs::permissions(path, mode, fs::perm_options::replace);
  checkpoint::save_model(path.string(), a, *comm);
  EXPECT_EQ(contents(path.string()).substr(1, 3), "HDF");
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::mask, mode);
  const auto fresh = dir / "fresh.h5";  // a new file: the default mode, as any program's
  checkpoint::save_model(fresh.string(), a, *comm);
  const mode_t mask = umask(0);
  umask(mask);
  EXPECT_EQ(static_cast<mode_t>(fs::status(fresh).permissions() & fs::perms::mask), 0666 & ~mask);
  fs::remove_all(dir);
}

// The same for an app's output that replaces a file the user had (--metrics, --trace, a
// benchmark's --json): written beside it, and put in its place only once on the disk.
TEST(OutputFile, AFileTheDiskDoesNotTakeLeavesTheUsersFileAsItWas) {
  const auto dir = empty_dir("tessera_output_");
  const std::string path = (dir / "metrics.jsonl").string();
  { std::ofstream(path) << "the user's metrics\n"; }
  {
    apps::OutputFile file("--metrics", path);
    file.stream() << "{\"step\": 1}\n";
    g_fsync_error = EDQUOT;
    EXPECT_THROW_WITH(file.commit(), ConfigError,
                      "could not be flushed to the disk: Disk quota exceeded); it was left as it was");
    g_fsync_error = 0;
  }
  EXPECT_EQ(contents(path), "the user's metrics\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::replace);  // 0600: the user's metrics are private
  {
    apps::OutputFile file("--metrics", path);
    // The copy being written is as private as the file from the start (it was made 0644, and
    // given the file's mode only when it replaced it, hours of a run later).
    const auto copy = std::filesystem::path(path + ".tmp." + std::to_string(getpid()));
    ASSERT_TRUE(std::filesystem::exists(copy));
    EXPECT_EQ(std::filesystem::status(copy).permissions() & std::filesystem::perms::mask,
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    file.stream() << "{\"step\": 1}\n";
    file.commit();
  }
  EXPECT_EQ(contents(path), "{\"step\": 1}\n");
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::mask,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write)
      << "the replaced file must keep the mode the user gave it";
  std::filesystem::remove_all(dir);
}
}  // namespace
