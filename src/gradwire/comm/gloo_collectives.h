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
  // Every wait, and the group's own (Gloo's) timeout: after a TimeoutError no work of the
  // group outlives it by more than the time it waited, so the process can exit promptly.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // A collective still waiting after this (at most a quarter of the timeout) publishes its
  // progress for the hang diagnosis above. Point-to-point transfers are not probed: they
  // may take as long as the timeout, as a large message on a slow link does.
  std::chrono::milliseconds slow_after{std::chrono::seconds(1)};
  // Where the group's sockets bind: bind_interface (e.g. "eth0"), else bind_hostname; both
  // empty: as torch.distributed binds a Gloo group (GLOO_SOCKET_IFNAME, a comma-separated
  // list of interfaces, else the address the machine's hostname resolves to).
  std::string bind_hostname;
  std::string bind_interface;
  // A collective that fails because ranks never arrived names them here
  // (core/failure_report.h); empty: nowhere.
  std::string failure_report_file;
  // Destruction waits (a barrier, at most 30 s) until every rank leaves, so that no rank
  // closes connections a peer still reads; never after a failed collective or while an
  // exception unwinds. False for groups whose destruction the ranks do not share (the
  // Python module's: a hook state is collected whenever Python collects it).
  bool leave_together = true;
};

// A Gloo group of gradwire's own over `store` (its connections rendezvous under the
// "gloo" prefix, the hang diagnosis above under "progress/"), whose every write to its
// sockets happens with SIGPIPE blocked in the writing thread (the group's threads are made
// with it blocked; a caller's thread blocks it while it launches an operation): a write
// to a peer that closed its connection fails with EPIPE and becomes an error naming the
// peer, whatever the program's SIGPIPE disposition, which this leaves as it is.
std::unique_ptr<Collectives> make_gloo_collectives(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                   int size, const GlooOptions& options);

}  // namespace gradwire::comm
