#include "gradwire/core/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gradwire/core/error.h"

namespace gradwire {
namespace {

namespace fs = std::filesystem;

Bytes pattern(size_t n, uint8_t seed) {
  Bytes out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + i * 31u + (i >> 8));
  return out;
}

Bytes as_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// Names of the entries in `dir`, sorted.
std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir();
    if (tmpl.empty() || tmpl.back() != '/') tmpl += '/';
    tmpl += "gradwire_atomic_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << "mkdtemp(" << tmpl << ") failed";
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

TEST_F(AtomicFileTest, RoundTrip) {
  const Bytes data = pattern(10000, 7);
  write_file_atomically(path("ckpt.bin"), data);
  const std::optional<Bytes> read = read_file_if_exists(path("ckpt.bin"));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, data);
}

TEST_F(AtomicFileTest, EmptyFileRoundTrips) {
  write_file_atomically(path("empty"), Bytes{});
  const auto read = read_file_if_exists(path("empty"));
  ASSERT_TRUE(read.has_value());
  EXPECT_TRUE(read->empty());
}

TEST_F(AtomicFileTest, OverwriteReplacesContent) {
  write_file_atomically(path("ckpt.bin"), pattern(5000, 1));
  const Bytes shorter = as_bytes("second version");
  write_file_atomically(path("ckpt.bin"), shorter);
  EXPECT_EQ(read_file_if_exists(path("ckpt.bin")), shorter);
}

TEST_F(AtomicFileTest, NoTemporaryFileLeftAfterSuccess) {
  write_file_atomically(path("a.bin"), pattern(100, 2));
  write_file_atomically(path("a.bin"), pattern(200, 3));
  write_file_atomically(path("b.bin"), pattern(300, 4));
  EXPECT_EQ(list_dir(dir_), (std::vector<std::string>{"a.bin", "b.bin"}));
}

TEST_F(AtomicFileTest, RelativePathInCurrentDirectory) {
  // A path without a directory part fsyncs "." as its directory.
  const fs::path saved = fs::current_path();
  fs::current_path(dir_);
  try {
    write_file_atomically("relative.bin", as_bytes("x"));
  } catch (...) {
    fs::current_path(saved);
    throw;
  }
  fs::current_path(saved);
  EXPECT_EQ(read_file_if_exists(path("relative.bin")), as_bytes("x"));
}

// Exit codes of the full-disk child; anything else is an unexpected failure.
enum FullDiskChildResult : int {
  kChildOk = 0,
  kChildSetupFailed = 10,
  kChildGoodWriteFailed = 11,
  kChildDidNotThrow = 12,
  kChildMessageLacksPath = 13,
  kChildMessageLacksReason = 14,
  kChildOldContentChanged = 15,
  kChildTempFileLeft = 16,
  kChildWrongException = 17,
};

// Runs in the forked child only: no gtest assertions, no allocation-heavy work beyond what
// the code under test does, and _exit with a code the parent checks.
int full_disk_child(const std::string& dir, const std::string& target) {
  if (::signal(SIGXFSZ, SIG_IGN) == SIG_ERR) return kChildSetupFailed;
  struct rlimit limit {};
  limit.rlim_cur = 4096;
  limit.rlim_max = 4096;
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return kChildSetupFailed;

  const Bytes good = pattern(1000, 42);
  try {
    write_file_atomically(target, good);
  } catch (...) {
    return kChildGoodWriteFailed;
  }
  try {
    write_file_atomically(target, pattern(64 * 1024, 99));
    return kChildDidNotThrow;
  } catch (const SystemError& e) {
    const std::string message = e.what();
    if (message.find(target) == std::string::npos) return kChildMessageLacksPath;
    if (message.find("File too large") == std::string::npos) return kChildMessageLacksReason;
  } catch (...) {
    return kChildWrongException;
  }
  try {
    if (read_file_if_exists(target) != good) return kChildOldContentChanged;
  } catch (...) {
    return kChildOldContentChanged;
  }
  if (list_dir(dir) != std::vector<std::string>{"ckpt.bin"}) return kChildTempFileLeft;
  return kChildOk;
}

TEST_F(AtomicFileTest, FullDiskThrowsAndKeepsPreviousFile) {
  // RLIMIT_FSIZE stands in for a full disk: with SIGXFSZ ignored, writes past the limit fail
  // with EFBIG, the same path as ENOSPC. It runs in a child so the limit and the signal
  // disposition never touch the test process.
  const std::string target = path("ckpt.bin");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0) << "fork failed";
  if (child == 0) ::_exit(full_disk_child(dir_, target));

  int status = 0;
  pid_t done = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((done = ::waitpid(child, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "full-disk child did not finish within 60 s";
  }
  ASSERT_EQ(done, child);
  ASSERT_TRUE(WIFEXITED(status)) << "child died with signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : -1);
  EXPECT_EQ(WEXITSTATUS(status), kChildOk)
      << "10 setup, 11 good write failed, 12 no throw, 13 message lacks path, 14 message lacks "
         "reason, 15 old content changed, 16 temp file left, 17 wrong exception type";
  // And from the parent's point of view as well.
  EXPECT_EQ(read_file_if_exists(target), pattern(1000, 42));
  EXPECT_EQ(list_dir(dir_), std::vector<std::string>{"ckpt.bin"});
}

// Writing `target` fails with a SystemError that names it and the OS reason.
void expect_write_fails(const std::string& target, const std::string& reason) {
  try {
    write_file_atomically(target, as_bytes("data"));
    FAIL() << "expected SystemError";
  } catch (const SystemError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(target), std::string::npos) << message;
    EXPECT_NE(message.find(reason), std::string::npos) << message;
  }
}

TEST_F(AtomicFileTest, ParentIsRegularFileThrowsSystemError) {
  write_file_atomically(path("plain"), as_bytes("not a directory"));
  expect_write_fails(path("plain/ckpt.bin"), "Not a directory");
  EXPECT_EQ(list_dir(dir_), std::vector<std::string>{"plain"});
}

TEST_F(AtomicFileTest, MissingDirectoryThrowsSystemError) {
  expect_write_fails(path("no/such/dir/ckpt.bin"), "No such file or directory");
}

TEST_F(AtomicFileTest, RenameFailureRemovesTemporaryAndKeepsTarget) {
  // The target is a non-empty directory: the write succeeds but the rename cannot replace it.
  make_directories(path("occupied/inside"));
  try {
    write_file_atomically(path("occupied"), as_bytes("data"));
    FAIL() << "expected SystemError";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find(path("occupied")), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_directory(path("occupied/inside")));
  EXPECT_EQ(list_dir(dir_), std::vector<std::string>{"occupied"});
}

TEST_F(AtomicFileTest, ReadMissingFileReturnsNullopt) {
  EXPECT_EQ(read_file_if_exists(path("missing.bin")), std::nullopt);
}

TEST_F(AtomicFileTest, ReadDirectoryThrowsSystemError) {
  try {
    read_file_if_exists(dir_);
    FAIL() << "expected SystemError";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find(dir_), std::string::npos) << e.what();
  }
}

TEST_F(AtomicFileTest, MakeDirectoriesCreatesNestedAndIsIdempotent) {
  const std::string nested = path("a/b/c");
  make_directories(nested);
  EXPECT_TRUE(fs::is_directory(nested));
  make_directories(nested);  // already there: fine
  make_directories(path("a/b/c/"));
  make_directories(path("a//b/d"));
  EXPECT_TRUE(fs::is_directory(path("a/b/d")));
  write_file_atomically(nested + "/ckpt.bin", as_bytes("ok"));
  EXPECT_EQ(read_file_if_exists(nested + "/ckpt.bin"), as_bytes("ok"));
}

TEST_F(AtomicFileTest, MakeDirectoriesUnderRegularFileFails) {
  write_file_atomically(path("file"), as_bytes("x"));
  for (const std::string& target : {path("file"), path("file/sub"), path("file/sub/deeper")}) {
    try {
      make_directories(target);
      FAIL() << "expected SystemError for " << target;
    } catch (const SystemError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(target), std::string::npos) << message;
      EXPECT_NE(message.find("Not a directory"), std::string::npos) << message;
    }
  }
}

TEST(Crc32, MatchesStandardCheckValue) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32(as_bytes(check)), 0xCBF43926u);
  EXPECT_EQ(crc32(Bytes{}), 0u);
  EXPECT_EQ(crc32(as_bytes("The quick brown fox jumps over the lazy dog")), 0x414FA339u);
}

TEST(Checkpoint, FrameUnframeRoundTrip) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{70000}}) {
    const Bytes payload = pattern(n, 5);
    const Bytes file = frame_checkpoint(payload);
    ASSERT_EQ(file.size(), n + kCheckpointFramingBytes);
    EXPECT_EQ(file[0], 'G');
    EXPECT_EQ(file[1], 'W');
    EXPECT_EQ(file[2], 'C');
    EXPECT_EQ(file[3], 'K');
    EXPECT_EQ(unframe_checkpoint(file), payload);
  }
}

TEST(Checkpoint, FramedFileSurvivesAtomicWrite) {
  std::string dir = ::testing::TempDir();
  if (dir.empty() || dir.back() != '/') dir += '/';
  dir += "gradwire_checkpoint_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const Bytes payload = pattern(3000, 9);
  write_file_atomically(dir + "/model.gwck", frame_checkpoint(payload));
  const auto read = read_file_if_exists(dir + "/model.gwck");
  std::error_code ec;
  fs::remove_all(dir, ec);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(unframe_checkpoint(*read), payload);
}

// Expects unframe_checkpoint to throw PayloadError whose message contains `needle`.
void expect_payload_error(const Bytes& file, const std::string& needle) {
  try {
    unframe_checkpoint(file);
    FAIL() << "expected PayloadError containing '" << needle << "'";
  } catch (const PayloadError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, CorruptPayloadByteFailsCrc) {
  const Bytes good = frame_checkpoint(pattern(500, 3));
  for (size_t at : {size_t{16}, size_t{200}, good.size() - 5}) {
    Bytes bad = good;
    bad[at] ^= 0x01;
    expect_payload_error(bad, "CRC-32");
  }
  Bytes bad_crc = good;
  bad_crc[good.size() - 1] ^=
      0x80;  // the stored CRC (not .back(): GCC 12 false -Wstringop-overflow)
  expect_payload_error(bad_crc, "CRC-32");
}

TEST(Checkpoint, TruncationIsReported) {
  const Bytes good = frame_checkpoint(pattern(500, 3));
  for (size_t keep : {size_t{0}, size_t{3}, size_t{19}, size_t{20}, good.size() - 1}) {
    expect_payload_error(Bytes(good.begin(), good.begin() + keep), "truncated checkpoint");
  }
}

TEST(Checkpoint, TrailingBytesAreReported) {
  Bytes bad = frame_checkpoint(pattern(10, 3));
  bad.push_back(0);
  expect_payload_error(bad, "extra bytes");
}

TEST(Checkpoint, WrongMagicIsReported) {
  Bytes bad = frame_checkpoint(pattern(10, 3));
  bad[0] = 'X';
  expect_payload_error(bad, "not a gradwire checkpoint");
}

TEST(Checkpoint, WrongVersionIsReported) {
  Bytes bad = frame_checkpoint(pattern(10, 3));
  bad[4] = 2;
  expect_payload_error(bad, "unsupported checkpoint format version 2");
}

TEST(Checkpoint, OversizedLengthIsTruncationNotOverflow) {
  Bytes bad = frame_checkpoint(pattern(10, 3));
  for (size_t i = 8; i < 16; ++i) bad[i] = 0xFF;  // length = 2^64 - 1
  expect_payload_error(bad, "truncated checkpoint");
}

}  // namespace
}  // namespace gradwire
