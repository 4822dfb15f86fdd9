// AllreduceStrategy's measured layout (allreduce_strategy.h, bucket_layout.h).
#include <algorithm>
#include <cstdio>

#include "gradwire/compress/codec.h"
#include "gradwire/core/error.h"
#include "gradwire/core/statistics.h"
#include "gradwire/strategy/allreduce/allreduce_bucket.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"
#include "gradwire/strategy/allreduce/bucket_layout.h"

namespace gradwire::strategy {
namespace {

std::string milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms", 1e3 * seconds);
  return text;
}

}  // namespace

std::string AllreduceStrategy::bucket_layout_summary() const {
  std::string text;
  for (const Bucket& bucket : buckets_) {
    text += text.empty() ? "[" : " [";
    for (size_t i = 0; i < bucket.tensors.size(); ++i) {
      text += (i ? " " : "") + tensors_[bucket.tensors[i]].name;
    }
    text += "]";
  }
  for (const LowRankGroup& group : low_rank_groups_) {
    text += text.empty() ? "low-rank [" : " low-rank [";
    for (size_t i = 0; i < group.tensors.size(); ++i) {
      text += (i ? " " : "") + tensors_[group.tensors[i]].name;
    }
    text += "]";
    if (group.q_bucket != kNoBucket)
      text += " (Q in bucket " + std::to_string(group.q_bucket) + ")";
  }
  return layout_summary_.empty() ? text : text + "; " + layout_summary_;
}

std::vector<size_t> AllreduceStrategy::bucket_ends() const {
  std::vector<size_t> ends;
  for (const Bucket& bucket : buckets_) {
    ends.push_back((ends.empty() ? 0 : ends.back()) + bucket.tensors.size());
  }
  return ends;
}

bool AllreduceStrategy::layout_measuring() const {
  return !layout_done_ && layout_seen_ >= options_.layout_after;
}

void AllreduceStrategy::measure_layout_step(Clock::time_point backward_end) {
  if (measuring_) {
    const double span = std::chrono::duration<double>(Clock::now() - step_opened_).count();
    if (!layout_trial_) {
      for (size_t k : fill_order_) {
        ready_samples_[k].push_back(
            std::max(0.0, std::chrono::duration<double>(backward_end - ready_at_[k]).count()));
      }
      exchange_samples_.push_back(step_exchange_s_);
    } else {
      (trial_on_proposal_ ? spans_after_ : spans_before_).push_back(span);
    }
  }
  ++layout_seen_;
  const uint64_t measured = options_.layout_after + options_.layout_steps;
  if (!layout_trial_ && layout_seen_ >= measured) {
    layout_trial_ = relayout();
    trial_on_proposal_ = layout_trial_;
    if (!layout_trial_) end_layout();
  } else if (layout_trial_ && layout_seen_ >= measured + 2 * options_.layout_pairs) {
    judge_layout();
    end_layout();
  } else if (layout_trial_) {
    // The two layouts take turns, step by step: what drifts meanwhile hits both alike.
    trial_on_proposal_ = !trial_on_proposal_;
    assign_buckets(trial_on_proposal_ ? proposal_ends_ : first_ends_);
  }
}

void AllreduceStrategy::end_layout() {
  layout_done_ = true;
  layout_trial_ = false;
  ready_samples_.assign(tensors_.size(), {});
  exchange_samples_.clear();
  spans_before_.clear();
  spans_after_.clear();
}

void AllreduceStrategy::judge_layout() {
  // Each pair: a step under the proposal, then one under the first layout. The median of
  // the pairs' differences, not the difference of medians: a stall spoils one pair, and
  // half of them must stall to move it. Agreed as the slowest rank's (allreduce-max): the
  // gain on the rank that gains least, and each layout's median for the summary.
  std::vector<double> differences;
  for (size_t i = 0; i < spans_after_.size() && i < spans_before_.size(); ++i) {
    differences.push_back(spans_after_[i] - spans_before_[i]);
  }
  float words[3] = {static_cast<float>(median(spans_before_)),
                    static_cast<float>(median(spans_after_)),
                    static_cast<float>(median(differences))};
  collectives_.allreduce_max(words, 3);
  const bool keep = words[2] < -kLayoutMargin * words[0];
  layout_summary_ += "; backward and exchange measured " + milliseconds(words[0]) + " -> " +
                     milliseconds(words[1]) + " (median of " + std::to_string(differences.size()) +
                     " pairs' differences " + milliseconds(words[2]) + ")" +
                     (keep ? ": kept" : ": not faster, the first layout kept");
  assign_buckets(keep ? proposal_ends_ : first_ends_);
}

double AllreduceStrategy::measure_alpha() {
  // The ranks leave the agreement before this together: a tiny allreduce now takes its
  // message steps' latency, not another rank's lateness. On hosts whose cores the ranks
  // share, that latency is the scheduler's, often milliseconds, not the network's.
  constexpr int kProbes = 3;
  const int world = collectives_.size();
  std::vector<double> seconds;
  for (int i = 0; i < kProbes; ++i) {
    float word = 0;
    const Clock::time_point begin = Clock::now();
    collectives_.allreduce_sum_async(&word, 1, comm::DataType::kFloat32)->wait();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - begin).count());
  }
  float alpha = static_cast<float>(median(seconds) / (2.0 * (world - 1)));
  collectives_.allreduce_max(&alpha, 1);  // agreed: the slowest rank's
  return alpha;
}

bool AllreduceStrategy::relayout() {
  const size_t n = fill_order_.size();
  // Agreed: the latest readiness and the shortest exchange of any rank (the rank that
  // reaches a collective last waits least in it: its time is the exchange's own).
  std::vector<float> words(n + 1);
  for (size_t i = 0; i < n; ++i)
    words[i] = -static_cast<float>(median(ready_samples_[fill_order_[i]]));
  words[n] = -static_cast<float>(median(exchange_samples_));
  collectives_.allreduce_max(words.data(), words.size());
  const int world = collectives_.size();
  LayoutInput input;
  input.link = options_.link;
  const double alpha = measure_alpha();
  if (alpha > 0) input.link.alpha_s = alpha;

  input.world = world;
  input.bucket_bytes = options_.bucket_bytes;
  input.tie_s = kBucketTie;
  input.last_waits_for_end = status_bucket_ != kNoBucket;
  for (size_t i = 0; i < n; ++i) {
    const size_t k = fill_order_[i];
    compress::Codec& codec = *codecs_[k];
    LayoutTensor t;
    t.elements = tensors_[k].numel();
    t.ready_s = std::max(0.0f, -words[i]);
    t.kind = bucket_kind(codec);
    if (const auto wire = codec.additive_wire()) {
      t.wire_bytes = static_cast<double>(t.elements * compress::wire_type_size(*wire));
    } else {
      t.wire_bytes =
          static_cast<double>(t.elements + codec.shared_scale()->blocks() * sizeof(float));
      t.collectives = 2;
    }
    input.tensors.push_back(t);
  }
  // The model, calibrated on the layout that was measured.
  const std::vector<size_t> ends = bucket_ends();
  const double measured = std::max(0.0f, -words[n]);
  input.link = calibrated_link(input, ends, measured);
  const double before = layout_exposed_seconds(input, ends);
  const PlannedLayout planned = plan_bucket_layout(input);
  layout_predicted_saving_s_ = std::max(0.0, before - planned.exposed_s);
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.3g", 8 / input.link.beta_s_per_byte / 1e6);
  char latency[32];
  std::snprintf(latency, sizeof latency, "%.3g", 1e6 * input.link.alpha_s);
  layout_summary_ = std::to_string(ends.size()) + " -> " + std::to_string(planned.ends.size()) +
                    " buckets; exchange measured " + milliseconds(measured) + " (as " + rate +
                    " Mbit/s, " + latency + " us a message step); exposed after backward " +
                    "predicted " + milliseconds(before) + " -> " + milliseconds(planned.exposed_s);
  // A proposal predicted to save less than a tenth of the wait is not worth its trial.
  if (planned.ends == ends || planned.exposed_s > kProposalGain * before) {
    layout_summary_ += ": the first layout kept";
    return false;
  }
  first_ends_ = ends;
  proposal_ends_ = planned.ends;
  assign_buckets(planned.ends);
  return true;
}

}  // namespace gradwire::strategy
