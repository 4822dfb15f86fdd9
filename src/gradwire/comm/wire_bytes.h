// What one rank's sends put on the network in each collective, from the algorithm Gloo
// runs (ProcessGroupGloo on CPU tensors; gloo/allreduce.cc, allgather.cc, broadcast.cc):
//   allreduce  ring (reduce-scatter, then allgather): 2(W-1) chunks of ceil(B/W) bytes;
//   allgather  ring: each rank forwards W-1 contributions of B bytes (the padded size);
//   alltoall   pairwise (alltoallv): what a rank sends the others, each directly, after
//              a round of 8-byte sizes to each;
//   broadcast  binomial tree from the root: B bytes to each of a rank's children
//              (W-1 sends in all, the root making ceil(log2 W) of them).
// Exact up to Gloo's segment rounding; TCP/IP headers (a few percent) are not included.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradwire::comm {

// Per rank, since the start.
struct CollectiveTraffic {
  uint64_t contributed = 0;  // bytes this rank handed in (what its codec produced)
  uint64_t on_wire = 0;      // bytes its sends put on the network
};

inline uint64_t ring_allreduce_wire_bytes(uint64_t bytes, int world) {
  if (world < 2) return 0;
  const uint64_t w = static_cast<uint64_t>(world);
  return 2 * (w - 1) * ((bytes + w - 1) / w);
}

inline uint64_t ring_allgather_wire_bytes(uint64_t bytes_per_rank, int world) {
  return world < 2 ? 0 : static_cast<uint64_t>(world - 1) * bytes_per_rank;
}

// `sent`: the bytes this rank sends the other ranks' (sizes round included).
inline uint64_t pairwise_alltoall_wire_bytes(uint64_t sent, int world) {
  return world < 2 ? 0 : static_cast<uint64_t>(world - 1) * sizeof(int64_t) + sent;
}

// Sends of `rank` in Gloo's binomial-tree broadcast from `root`.
inline int tree_broadcast_sends(int world, int rank, int root) {
  const unsigned vrank = static_cast<unsigned>((rank - root + world) % world);
  unsigned dim = 0;
  while ((1u << dim) < static_cast<unsigned>(world)) ++dim;
  unsigned mask = (1u << dim) - 1;
  int sends = 0;
  for (unsigned i = 0; i < dim; ++i) {
    mask ^= 1u << i;  // in round i, ranks whose bits above i are clear take part
    if ((vrank & mask) != 0) continue;
    const unsigned vpeer = vrank ^ (1u << i);
    if (vpeer >= static_cast<unsigned>(world)) continue;
    if ((vrank & (1u << i)) == 0) ++sends;  // the lower of the pair sends
  }
  return sends;
}

inline uint64_t tree_broadcast_wire_bytes(uint64_t bytes, int world, int rank, int root) {
  return world < 2 ? 0 : bytes * static_cast<uint64_t>(tree_broadcast_sends(world, rank, root));
}

}  // namespace gradwire::comm
