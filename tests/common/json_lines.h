// Metrics files (JSON Lines) as the end-to-end tests read them.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gradwire::testing {

// Every line of `path`, parsed; empty when the file is missing.
inline std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The last line (the job's "summary"); null when the file is empty or missing.
inline nlohmann::json last_json_line(const std::string& path) {
  const auto lines = read_json_lines(path);
  return lines.empty() ? nlohmann::json() : lines.back();
}

}  // namespace gradwire::testing
