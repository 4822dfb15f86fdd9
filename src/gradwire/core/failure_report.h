// A rank's note to its launcher naming the ranks it blames for its own failure: the ranks
// that never arrived at a collective, or never joined the job. With it the launcher names
// the root cause (the rank that hung or died first) instead of the first rank that exited
// because of it. torchrun's TORCHELASTIC_ERROR_FILE plays the same part for Python.
//
// The launcher gives every rank its own path (GRADWIRE_ERROR_FILE, read by
// InitOptions::from_environment()); nothing is written where no path was given. The file is
// text: "gradwire-failure 1", "blame R1 R2 ...", then the message on one line.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gradwire {

struct FailureReport {
  std::vector<int> blamed;  // global ranks
  std::string message;
};

// Writes the report unless `path` is empty or a report is already there: the first failure
// of a process is the cause, later ones its consequences. Never throws: a report that cannot
// be written costs only the better diagnosis.
void write_failure_report(const std::string& path, const FailureReport& report) noexcept;

// The report at `path`; nullopt when there is none or it is not one.
std::optional<FailureReport> read_failure_report(const std::string& path);

// The root cause the reports of a failed job name (rank -> its report): a rank blamed by
// some rank and itself blaming nobody (the victims of a hang blame the hung rank; it writes
// nothing), the lowest such rank when there are several, with a line saying so: "rank 2 did
// not arrive: ranks 0, 1 failed waiting for it (MESSAGE)". nullopt when no report blames one.
struct RootCause {
  int rank = 0;
  std::string line;
};
std::optional<RootCause> root_cause(const std::map<int, FailureReport>& reports);

}  // namespace gradwire
