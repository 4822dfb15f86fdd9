// GlooCollectives: Collectives over c10d's ProcessGroupGloo (CPU tensors).
//
// Each collective first records this rank's sequence number in the store
// ("progress/<rank>"); when an operation fails or times out, the error compares every
// rank's progress and names those that never reached it.
#pragma once

#include <memory>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "gradwire/comm/collectives.h"

namespace gradwire::comm {

struct GlooOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  std::string bind_hostname;   // used when bind_interface is empty
  std::string bind_interface;  // e.g. "eth0"
};

std::unique_ptr<Collectives> make_gloo_collectives(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                   int size, const GlooOptions& options);

}  // namespace gradwire::comm
