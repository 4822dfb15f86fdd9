#include "gradwire/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <string_view>

#include "gradwire/core/error.h"

namespace gradwire {
namespace {

// The directory holding `path`, for the directory fsync after the rename.
std::string parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Closes `fd` if open; keeps errno as it was so error paths can report the first failure.
void close_quietly(int fd) {
  if (fd < 0) return;
  const int saved = errno;
  ::close(fd);
  errno = saved;
}

void unlink_quietly(const std::string& path) {
  const int saved = errno;
  ::unlink(path.c_str());
  errno = saved;
}

// Writes all of `bytes`, retrying partial writes and EINTR. Returns 0 or the errno that
// stopped it (EFBIG once RLIMIT_FSIZE is reached with SIGXFSZ ignored, ENOSPC, EIO, ...).
int write_all(int fd, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    // write(2) returning 0 for a non-empty regular-file write means no progress is possible.
    if (n == 0) return ENOSPC;
    done += static_cast<size_t>(n);
  }
  return 0;
}

int fsync_retrying(int fd) {
  while (::fsync(fd) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

constexpr std::array<uint32_t, 256> make_crc32_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (0xEDB88320u ^ (c >> 1)) : (c >> 1);
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrc32Table = make_crc32_table();

constexpr std::array<uint8_t, 4> kCheckpointMagic = {'G', 'W', 'C', 'K'};

std::string hex32(uint32_t value) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "0x%08x", value);
  return buffer;
}

}  // namespace

void write_file_atomically(const std::string& path, std::span<const uint8_t> bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const std::string what = "cannot write '" + path + "'";

  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw SystemError(errno_message(what + ": cannot create temporary file '" + tmp + "'", errno));
  }
  // From here on every failure removes the temporary file before throwing.
  auto fail = [&](int fd_to_close, const std::string& step, int error_number) {
    close_quietly(fd_to_close);
    unlink_quietly(tmp);
    throw SystemError(errno_message(what + ": " + step + " '" + tmp + "' failed", error_number));
  };

  if (int err = write_all(fd, bytes); err != 0) fail(fd, "writing", err);
  if (int err = fsync_retrying(fd); err != 0) fail(fd, "fsync of", err);
  // close() can report deferred write errors (e.g. NFS); do not retry it on EINTR (the
  // descriptor is released either way on Linux).
  if (::close(fd) != 0 && errno != EINTR) fail(-1, "closing", errno);

  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink_quietly(tmp);
    throw SystemError(
        errno_message(what + ": renaming temporary file '" + tmp + "' over it failed", err));
  }

  // Make the rename itself durable. Some file systems cannot fsync a directory (EINVAL);
  // that is not an error worth failing a checkpoint over.
  const std::string dir = parent_directory(path);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    throw SystemError(errno_message(
        what + ": file written, but opening its directory '" + dir + "' for fsync failed", errno));
  }
  const int err = fsync_retrying(dir_fd);
  ::close(dir_fd);
  if (err != 0 && err != EINVAL) {
    throw SystemError(
        errno_message(what + ": file written, but fsync of directory '" + dir + "' failed", err));
  }
}

std::optional<Bytes> read_file_if_exists(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw SystemError(errno_message("cannot open '" + path + "' for reading", errno));
  }

  Bytes data;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    data.reserve(static_cast<size_t>(st.st_size));
  }
  std::array<uint8_t, 1 << 16> chunk;
  for (;;) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw SystemError(errno_message("cannot read '" + path + "'", err));
    }
    if (n == 0) break;
    data.insert(data.end(), chunk.data(), chunk.data() + n);
  }
  ::close(fd);
  return data;
}

void make_directories(const std::string& path) {
  if (path.empty()) throw SystemError(errno_message("cannot create directory ''", ENOENT));
  // Create every prefix ending before a '/', then the full path.
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    if (prefix.empty() || prefix.back() == '/') continue;  // "/" itself or "a//b"
    if (::mkdir(prefix.c_str(), 0777) == 0) continue;
    const int err = errno;
    if (err == EEXIST) {
      struct stat st {};
      if (::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
      throw SystemError(errno_message(
          "cannot create directory '" + path + "': '" + prefix + "' exists and is not a directory",
          ENOTDIR));
    }
    throw SystemError(
        errno_message("cannot create directory '" + path + "' (at '" + prefix + "')", err));
  }
}

uint32_t crc32(std::span<const uint8_t> bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (uint8_t b : bytes) c = kCrc32Table[(c ^ b) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

Bytes frame_checkpoint(std::span<const uint8_t> payload) {
  Bytes out;
  out.reserve(payload.size() + kCheckpointFramingBytes);
  ByteWriter writer(out);
  writer.put_array<uint8_t>(kCheckpointMagic);
  writer.put<uint32_t>(kCheckpointFormatVersion);
  writer.put<uint64_t>(payload.size());
  writer.put_array<uint8_t>(payload);
  writer.put<uint32_t>(crc32(payload));
  return out;
}

Bytes unframe_checkpoint(std::span<const uint8_t> file) {
  if (file.size() < kCheckpointFramingBytes) {
    throw PayloadError("truncated checkpoint: " + std::to_string(file.size()) +
                       " bytes, shorter than the " + std::to_string(kCheckpointFramingBytes) +
                       "-byte framing");
  }
  ByteReader reader(file);
  const auto magic = reader.get_bytes(kCheckpointMagic.size(), "magic");
  if (!std::equal(magic.begin(), magic.end(), kCheckpointMagic.begin())) {
    std::string shown;
    for (uint8_t b : magic) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "%02x", b);
      shown += buffer;
    }
    throw PayloadError("not a gradwire checkpoint: magic bytes are 0x" + shown +
                       ", expected \"GWCK\" (0x4757434b)");
  }
  const uint32_t version = reader.get<uint32_t>("format version");
  if (version != kCheckpointFormatVersion) {
    throw PayloadError("unsupported checkpoint format version " + std::to_string(version) +
                       " (this build reads version " + std::to_string(kCheckpointFormatVersion) +
                       ")");
  }
  const uint64_t length = reader.get<uint64_t>("payload length");
  const uint64_t available = file.size() - kCheckpointFramingBytes;
  if (length > available) {
    throw PayloadError("truncated checkpoint: header says the payload is " +
                       std::to_string(length) + " bytes but the file holds only " +
                       std::to_string(available) + " (file is " + std::to_string(file.size()) +
                       " bytes)");
  }
  if (length < available) {
    throw PayloadError("corrupt checkpoint: header says the payload is " + std::to_string(length) +
                       " bytes but the file has " + std::to_string(available - length) +
                       " unexpected extra bytes");
  }
  const auto payload = reader.get_bytes(static_cast<size_t>(length), "payload");
  const uint32_t stored = reader.get<uint32_t>("crc32");
  reader.expect_end("checkpoint");
  const uint32_t actual = crc32(payload);
  if (stored != actual) {
    throw PayloadError("corrupt checkpoint: CRC-32 of the " + std::to_string(length) +
                       "-byte payload is " + hex32(actual) + " but the file records " +
                       hex32(stored));
  }
  return Bytes(payload.begin(), payload.end());
}

}  // namespace gradwire
