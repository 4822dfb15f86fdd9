// Metrics files (JSON Lines) as the end-to-end tests read them.
#pragma once

#include <fstream>
#include <map>
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

// `metric` at every "eval" line, by the step it was taken at.
inline std::map<int, double> evaluations_by_step(const std::string& path,
                                                 const std::string& metric = "test_accuracy") {
  std::map<int, double> out;
  for (const auto& line : read_json_lines(path)) {
    if (line["event"] == "eval") out[line["step"].get<int>()] = line[metric].get<double>();
  }
  return out;
}

}  // namespace gradwire::testing
