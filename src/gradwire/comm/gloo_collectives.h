// GlooCollectives: Collectives over c10d's ProcessGroupGloo (CPU tensors).
//
// Each rank numbers its collectives; one that waits in a collective longer than slow_after
// (a second) writes its number to the store ("progress/<rank>"), and a collective that
// fails after such a wait names the ranks whose number is behind (they never reached it).
// Fast collectives touch the store not at all: no round trip to rank 0 on the critical path.
#pragma once

#include <memory>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "gradwire/comm/collectives.h"

namespace gradwire::comm {

struct GlooOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // A collective still waiting after this (at most a quarter of the timeout) publishes its
  // progress for the hang diagnosis above. Point-to-point transfers are not probed: they
  // may take as long as the timeout, as a large message on a slow link does.
  std::chrono::milliseconds slow_after{std::chrono::seconds(1)};
  std::string bind_hostname;   // used when bind_interface is empty
  std::string bind_interface;  // e.g. "eth0"
  // A collective that fails because ranks never arrived names them here
  // (core/failure_report.h); empty: nowhere.
  std::string failure_report_file;
};

std::unique_ptr<Collectives> make_gloo_collectives(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                   int size, const GlooOptions& options);

// Collectives over a process group the program made (torch.distributed's, for the Python
// module): rank and size are the group's. Every wait is bounded by options.timeout (the
// group's own timeout, 30 minutes by default in torch.distributed, is not waited out); the
// hang diagnosis above needs `store` (null: none, a failure names no rank). The group is
// not closed on destruction. Only options.timeout, slow_after and failure_report_file apply.
std::unique_ptr<Collectives> make_process_group_collectives(
    c10::intrusive_ptr<c10d::ProcessGroup> group, c10::intrusive_ptr<c10d::Store> store,
    const GlooOptions& options);

}  // namespace gradwire::comm
