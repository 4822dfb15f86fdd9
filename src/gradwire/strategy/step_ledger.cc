#include "gradwire/strategy/step_ledger.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "gradwire/core/error.h"

namespace gradwire::strategy {
namespace {

// `value`'s `bits` low bits as pairs (bit set, bit clear).
void put_bits(float* words, uint64_t value, int bits) {
  for (int b = 0; b < bits; ++b) {
    const bool bit = (value >> b) & 1;
    words[2 * b] = bit ? 1.0f : 0.0f;
    words[2 * b + 1] = bit ? 0.0f : 1.0f;
  }
}

// After the OR: some pair has both words set.
bool differ(const float* words, int bits) {
  for (int b = 0; b < bits; ++b) {
    if (words[2 * b] > 0 && words[2 * b + 1] > 0) return true;
  }
  return false;
}

uint64_t get_bits(const float* words, int bits) {
  uint64_t value = 0;
  for (int b = 0; b < bits; ++b) {
    if (words[2 * b] > 0) value |= uint64_t{1} << b;
  }
  return value;
}

constexpr uint64_t kZeroGradLimit = (uint64_t{1} << StepLedger::kZeroGradBits) - 1;

}  // namespace

uint64_t StepLedger::begin_exchange(std::span<float> words, bool make_up) {
  const uint64_t sequence = sequence_++;
  if (make_up) {
    carried_ = per_step_;
    zero_grads_ -= std::min(zero_grads_, per_step_);
  } else {
    carried_ = zero_grads_;
    zero_grads_ = 0;
  }
  put_bits(words.data(), sequence, kSequenceBits);
  put_bits(words.data() + 2 * kSequenceBits, std::min(carried_, kZeroGradLimit), kZeroGradBits);
  return sequence;
}

bool StepLedger::out_of_step(std::span<const float> words) {
  return differ(words.data(), kSequenceBits) ||
         differ(words.data() + 2 * kSequenceBits, kZeroGradBits);
}

void StepLedger::end_exchange(std::span<const float> words, bool failed) {
  const float* counts = words.data() + 2 * kSequenceBits;
  // Every rank carried the same count (none above the limit): the loop's calls per step.
  if (!differ(counts, kZeroGradBits)) {
    const uint64_t agreed = get_bits(counts, kZeroGradBits);
    if (agreed > 0 && agreed < kZeroGradLimit) per_step_ = agreed;
  }
  if (failed) sequence_ = 0;  // every rank counts anew from here: in step again
}

std::string StepLedger::failure_message(comm::Collectives& collectives, uint64_t sequence,
                                        const std::string& cause, bool out_of_step) {
  // Every rank's record: u64 sequence, then the cause.
  Bytes mine(sizeof sequence);
  std::memcpy(mine.data(), &sequence, sizeof sequence);
  mine.insert(mine.end(), cause.begin(), cause.end());
  std::vector<Bytes> all{mine};
  if (collectives.size() > 1) {
    all = collectives.allgather_bytes(std::span<const uint8_t>(mine.data(), mine.size()));
  }
  std::vector<uint64_t> sequences(all.size(), 0);
  std::vector<std::string> causes(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() < sizeof(uint64_t)) throw PayloadError("a malformed exchange status");
    std::memcpy(&sequences[r], all[r].data(), sizeof(uint64_t));
    causes[r].assign(all[r].begin() + sizeof(uint64_t), all[r].end());
  }
  std::string message = "the gradient exchange failed";
  bool named = false;  // some rank's cause is in the message
  for (size_t r = 0; r < causes.size(); ++r) {
    if (causes[r].empty()) continue;
    message += (named ? "; rank " : " on rank ") + std::to_string(r) + ": " + causes[r];
    named = true;
  }
  if (out_of_step) {
    // (A skip the ledger recognizes is made up for instead; this is one it could not tell
    // from the loop: before the ranks agreed on its zero_grad() calls per step, or calls
    // that vary.)
    message += std::string(named ? "; " : ": ") +
               "the ranks are out of step (the number of zero_grad(), step() and exchanges "
               "each has made since the last failure:";
    for (size_t r = 0; r < sequences.size(); ++r) {
      message +=
          (r ? ", rank " : " rank ") + std::to_string(r) + " " + std::to_string(sequences[r]);
    }
    message +=
        "): a rank with a higher number skipped an exchange that the others made (its "
        "backward threw before any gradient was final, and the program went on), so this "
        "exchange paired gradients of different steps";
  }
  return message;
}

}  // namespace gradwire::strategy
