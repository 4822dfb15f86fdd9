#include "gradwire/core/failure_report.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace gradwire {
namespace {

constexpr const char* kMagic = "gradwire-failure 1";

}  // namespace

void write_failure_report(const std::string& path, const FailureReport& report) noexcept {
  if (path.empty()) return;
  try {
    std::string text = kMagic;
    text += "\nblame";
    for (const int rank : report.blamed) {
      text += ' ';
      text += std::to_string(rank);
    }
    text += '\n';
    for (const char c : report.message) text += (c == '\n' || c == '\r') ? ' ' : c;
    text += '\n';
    // O_EXCL: the first report stands.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return;
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(fd);
  } catch (...) {
  }
}

std::optional<FailureReport> read_failure_report(const std::string& path) {
  std::ifstream in(path);
  std::string magic, blame_line, message;
  if (!in || !std::getline(in, magic) || magic != kMagic || !std::getline(in, blame_line)) {
    return std::nullopt;
  }
  std::getline(in, message);
  std::istringstream words(blame_line);
  std::string word;
  if (!(words >> word) || word != "blame") return std::nullopt;
  FailureReport report;
  for (int rank; words >> rank;) report.blamed.push_back(rank);
  if (!words.eof()) return std::nullopt;
  report.message = message;
  return report;
}

std::optional<RootCause> root_cause(const std::map<int, FailureReport>& reports) {
  std::map<int, std::vector<int>> blamers;   // blamed rank -> the ranks that blame it
  std::map<int, std::string> first_message;  // blamed rank -> the first blamer's message
  for (const auto& [rank, report] : reports) {
    for (const int blamed : report.blamed) {
      if (blamed == rank) continue;
      blamers[blamed].push_back(rank);
      first_message.emplace(blamed, report.message);
    }
  }
  for (const auto& [blamed, by] : blamers) {
    const auto own = reports.find(blamed);
    if (own != reports.end() && !own->second.blamed.empty()) continue;  // a victim too
    std::string line = "rank " + std::to_string(blamed) + " did not arrive: rank";
    if (by.size() > 1) line += "s";
    for (size_t i = 0; i < by.size(); ++i) line += (i ? ", " : " ") + std::to_string(by[i]);
    line += " failed waiting for it (" + first_message[blamed] + ")";
    return RootCause{blamed, std::move(line)};
  }
  return std::nullopt;
}

}  // namespace gradwire
