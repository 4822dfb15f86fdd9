// Alpha-beta cost of gradwire's exchanges (Hockney's model), for choosing between them and
// for predicting a job's exchange time per step at any world size.
//
// Topology: every rank has its own full-duplex link to a switch (the emulated cluster's,
// and a rack of commodity hosts'). `alpha` is the time of one message step (latency plus
// the per-call overhead of Gloo and the kernel), `beta` the time per byte through a rank's
// link (1 / bandwidth). A step in which every rank sends B bytes and receives B bytes
// costs alpha + B beta. With Gloo's algorithms on CPU tensors (wire_bytes.h):
//   ring allreduce of B bytes            2(W-1) alpha + 2 (W-1)/W B beta
//   allgather_bytes, B bytes per rank    2(W-1) alpha + (W-1)(8 + B) beta  (sizes, then data)
//   alltoall_bytes, B bytes per pair     2(W-1) alpha + (W-1)(8 + B) beta  (sizes, then data)
// Gloo's allreduce of a few KiB is not a ring but the model's error there is alpha-sized.
//
// A bucket of sparse payloads (top-k and the other sparsifiers) is aggregated by one of
//   allgather  every rank receives every other rank's payload, P bytes each:
//                allgather(P)                               per-rank traffic grows with W
//   split      sparse reduce-scatter by index range, then an allgather of the reduced
//              ranges (SparCML's split allreduce): each rank sends each range owner its
//              pairs in that range (8 bytes a pair: u32 index, f32 value); owner r sums
//              its range n/W and sends it on, sparse or dense by whichever is smaller:
//                alltoall(8 k/W) + allgather(min(8 U/W, 4 n/W))
//   dense      the decoded payloads summed by a ring allreduce of n floats:
//                allreduce(4 n)
// where n is the bucket's elements, k the pairs a rank sends, U the union of the ranks'
// indices (from k, when the ranks pick the same coordinates, to W k when they pick
// disjoint ones). Per rank, split moves about 8k + min(8U, 4n) bytes whatever W, allgather
// 8k(W-1): split wins from a few ranks on, unless latency (4(W-1) alpha) dominates.
#pragma once

#include <cstdint>
#include <string>

namespace gradwire::comm {

struct LinkModel {
  double alpha_s = 50e-6;         // seconds per message step
  double beta_s_per_byte = 8e-9;  // seconds per byte (8e-9: 1 Gbit/s)

  static LinkModel from_bandwidth(double alpha_s, double bits_per_s) {
    return {alpha_s, 8.0 / bits_per_s};
  }
};

double ring_allreduce_seconds(const LinkModel& link, double bytes, int world);
double allgather_seconds(const LinkModel& link, double bytes_per_rank, int world);
double alltoall_seconds(const LinkModel& link, double bytes_per_pair, int world);

enum class SparsePath : uint8_t { kAllgather = 0, kSplit = 1, kDense = 2 };
const char* sparse_path_name(SparsePath path);  // "allgather", "split", "dense"

// One step of one sparse bucket, as the paths above see it (per rank, averaged).
struct SparseBucketLoad {
  double elements = 0;       // n
  double payload_bytes = 0;  // P: a rank's codec payloads for the bucket
  double pairs = 0;          // k: the non-zeros a rank sends
  double union_count = 0;    // U: distinct indices over all ranks
};

double sparse_path_seconds(const LinkModel& link, SparsePath path, const SparseBucketLoad& load,
                           int world);
// The path of least predicted time; ties go to the earlier of allgather, split, dense.
SparsePath cheapest_sparse_path(const LinkModel& link, const SparseBucketLoad& load, int world);

// U for W ranks each picking k = density n coordinates independently and uniformly:
// n (1 - (1 - density)^W). Ranks that agree on coordinates have less (down to k).
double independent_union(double elements, double density, int world);

}  // namespace gradwire::comm
