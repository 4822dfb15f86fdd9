// StepLedger: what keeps the ranks of a data-parallel loop in step when one rank skips a
// batch, for the two fronts that exchange gradients every step (DistributedOptimizer, and
// DdpCommHook when it sees the optimizer).
//
// The loop is zero_grad(), backward (which exchanges), step(). A rank whose backward throws
// before any gradient is final (a bad batch, caught by the program, which goes on) opens
// no exchange, and its next exchange would pair with the others' exchange of the step it
// skipped: gradients of different steps averaged, and at the end one rank an exchange
// short, its peers waiting in an exchange that never comes. The ledger counts, per rank:
//   sequence     the loop's calls since the last failed exchange (each zero_grad(), step()
//                and exchange, as it ends): ranks in step reach every exchange at the same
//                number;
//   zero_grads   zero_grad() calls since this rank's last exchange (z);
//   per_step     z as every rank had it at the last exchange (b, agreed; 0 until known):
//                the loop's zero_grad() calls per step, 1 in the usual loop.
// Both travel in every exchange's status words, each as pairs (bit set, bit clear) of its
// low bits, OR-reduced over the ranks: a pair with both words set says the ranks' values
// differ. A zero_grad() that finds z = b already (b > 0) means no exchange came since the
// last step began: this rank skipped a step. It then takes part in that step's exchange at
// once, with zeros and its failure word raised (make_up): every rank's exchange of that
// step fails alike, naming this rank, and the next steps pair. Where that cannot be known
// (a skip before the first exchange, a loop whose zero_grad() calls vary), the exchange
// the skipping rank pairs with fails as "out of step" on every rank, naming each rank's
// sequence number, and every rank counts anew from there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "gradwire/comm/collectives.h"

namespace gradwire::strategy {

class StepLedger {
 public:
  static constexpr int kSequenceBits = 16;
  static constexpr int kZeroGradBits = 4;
  // The status words the ledger takes in an exchange's status.
  static constexpr size_t kWords = 2 * (kSequenceBits + kZeroGradBits);

  // The cause a make-up exchange names (the rank that skipped is named beside it).
  static constexpr const char* kSkippedStep =
      "it skipped a step: zero_grad() came twice with no exchange between (its backward threw "
      "before any gradient was final, or no backward ran); it took part in that step's "
      "exchange with no gradient";

  // A zero_grad() begins: true when this rank skipped the step since its last exchange
  // (see above); the caller then makes up for it (an exchange with make_up) before
  // counting the zero_grad().
  bool skipped_a_step() const { return per_step_ > 0 && zero_grads_ >= per_step_; }
  // A zero_grad() or step() ended.
  void count_zero_grad() {
    ++zero_grads_;
    ++sequence_;
  }
  void count_step() { ++sequence_; }

  // An exchange begins: its words into `words` (kWords long); returns its sequence number.
  // A make-up exchange stands for the step it skipped: it carries the agreed zero_grad()
  // count and takes one step's worth of this rank's count.
  uint64_t begin_exchange(std::span<float> words, bool make_up);
  // After the OR over the ranks: whether they reached the exchange at different sequence
  // numbers or zero_grad() counts.
  static bool out_of_step(std::span<const float> words);
  // The exchange ended (`failed`: on every rank alike, by the agreed status): learns the
  // loop's zero_grad() calls per step where the ranks agreed, counts anew after a failure.
  void end_exchange(std::span<const float> words, bool failed);

  uint64_t sequence() const { return sequence_; }

  // A failed exchange's message, the same on every rank: every rank's cause (`cause` is
  // this rank's, "" when it had none) and, `out_of_step`, every rank's sequence number
  // (`sequence`, this exchange's here), allgathered: "the gradient exchange failed on rank
  // 1: ...; the ranks are out of step (...)". Collective.
  static std::string failure_message(comm::Collectives& collectives, uint64_t sequence,
                                     const std::string& cause, bool out_of_step);

 private:
  uint64_t sequence_ = 0;
  uint64_t zero_grads_ = 0;  // since this rank's last exchange
  uint64_t carried_ = 0;     // the zero_grad() count the exchange in progress carries
  uint64_t per_step_ = 0;    // agreed; 0 while unknown
};

}  // namespace gradwire::strategy
