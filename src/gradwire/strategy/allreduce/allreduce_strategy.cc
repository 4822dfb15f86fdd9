#include "gradwire/strategy/allreduce/allreduce_strategy.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "gradwire/compress/policy.h"
#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/agreement.h"
#include "gradwire/strategy/allreduce/sparse_exchange.h"

namespace gradwire::strategy {

struct AllreduceStrategy::Bucket {
  std::vector<size_t> tensors;  // indices into tensors_
  std::vector<size_t> offsets;  // element offset of each tensor in the wire buffer
  size_t elements = 0;
  std::optional<compress::WireType> wire;  // set: additive path
  bool int8 = false;                       // shared-scale path (int8 codec)
  bool sparse_codecs = false;              // message path, every codec sends_sparse
  std::vector<uint8_t> wire_buffer;
  // Shared-scale path: each tensor's first block in `maxima`, and the blocks' maxima.
  std::vector<size_t> block_offsets;
  std::vector<float> maxima;
  // Message path, kept across steps so that a step allocates nothing once they are large
  // enough: this rank's message, every rank's, and every rank's payload in it.
  Bytes message;
  std::vector<Bytes> gathered;
  std::vector<std::vector<std::span<const uint8_t>>> payloads;
  // Sparse codecs only (every tensor's codec sends_sparse): the split and dense paths,
  // this rank's decoded payloads and the sum, n floats each.
  std::unique_ptr<SparseExchange> sparse;
  comm::SparsePath last_path = comm::SparsePath::kAllgather;
  std::vector<float> mine, sum;
};

AllreduceStrategy::AllreduceStrategy(comm::Collectives& collectives, AllreduceOptions options)
    : collectives_(collectives), options_(std::move(options)) {
  if (options_.bucket_bytes == 0) throw ConfigError("bucket size must be positive");
  const std::string& path = options_.sparse_aggregation;
  if (path == "allgather") {
    sparse_path_ = comm::SparsePath::kAllgather;
  } else if (path == "split") {
    sparse_path_ = comm::SparsePath::kSplit;
  } else if (path == "dense") {
    sparse_path_ = comm::SparsePath::kDense;
  } else if (path != "auto") {
    throw ConfigError("unknown sparse aggregation '" + path +
                      "'; it is one of auto, allgather, split, dense");
  }
}

AllreduceStrategy::~AllreduceStrategy() = default;

void AllreduceStrategy::start(std::span<const compress::TensorInfo> tensors,
                              const FloatSpans& params) {
  if (started_) throw Error("AllreduceStrategy::start called twice");
  if (tensors.size() != params.size()) {
    throw Error("start: " + std::to_string(tensors.size()) + " tensor descriptions for " +
                std::to_string(params.size()) + " parameters");
  }
  const auto policy = compress::CodecPolicy::parse(options_.codec);
  if (options_.agree_at_start) {
    auto lines = configuration_lines(name(), policy, tensors);
    lines.push_back("sparse aggregation " + options_.sparse_aggregation);
    check_same_configuration(collectives_, lines);
    broadcast_from_rank0(collectives_, params);
  }

  tensors_.assign(tensors.begin(), tensors.end());
  for (const auto& t : tensors_) codecs_.push_back(policy.create(t));

  // Reverse registration order approximates the order backward finishes gradients. A
  // tensor of at least the first bucket's size closes its bucket: its own bytes amortize a
  // collective's latency, and the smaller tensors backward finishes after it would only
  // hold its exchange back (DDP lets them join up to the cap).
  const size_t big = std::min(options_.first_bucket_bytes, options_.bucket_bytes);
  bool closed = false;  // the last bucket takes no more tensors
  size_t p_size = 0, q_size = 0;
  for (size_t k = tensors_.size(); k-- > 0;) {
    if (auto* face = codecs_[k]->low_rank()) {
      low_rank_.push_back(k);
      p_size += face->p_size();
      q_size += face->q_size();
      continue;
    }
    const size_t n = tensors_[k].numel();
    const auto wire = codecs_[k]->additive_wire();
    auto* shared = codecs_[k]->shared_scale();
    const bool int8 = shared != nullptr;
    const bool sparse = !wire && !int8 && compress::sends_sparse(codecs_[k]->id());
    const size_t cap = buckets_.size() == 1
                           ? std::min(options_.first_bucket_bytes, options_.bucket_bytes)
                           : options_.bucket_bytes;
    const bool fits = !buckets_.empty() && !closed && buckets_.back().wire == wire &&
                      buckets_.back().int8 == int8 && buckets_.back().sparse_codecs == sparse &&
                      (buckets_.back().elements + n) * sizeof(float) <= cap;
    if (!fits) {
      buckets_.emplace_back();
      buckets_.back().wire = wire;
      buckets_.back().int8 = int8;
      buckets_.back().sparse_codecs = sparse;
    }
    Bucket& bucket = buckets_.back();
    closed = n * sizeof(float) >= big;
    bucket.tensors.push_back(k);
    bucket.offsets.push_back(bucket.elements);
    bucket.elements += n;
    if (int8) {
      bucket.block_offsets.push_back(bucket.maxima.size());
      bucket.maxima.resize(bucket.maxima.size() + shared->blocks());
    }
  }
  for (Bucket& bucket : buckets_) {
    if (bucket.wire) {
      bucket.wire_buffer.resize(bucket.elements * compress::wire_type_size(*bucket.wire));
    } else if (bucket.int8) {
      if (compress::shared_scale_levels(collectives_.size()) == 0) {
        throw ConfigError(
            "the int8 codec sums the ranks' values in int8, which overflows "
            "beyond 127 ranks; this job has " +
            std::to_string(collectives_.size()));
      }
      bucket.wire_buffer.resize(bucket.elements);
    } else if (bucket.sparse_codecs) {
      bucket.sparse = std::make_unique<SparseExchange>(bucket.elements);
    }
  }
  p_buffer_.resize(p_size);
  q_buffer_.resize(q_size);
  bucket_of_.assign(tensors_.size(), kNoBucket);
  bucket_tensors_.assign(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t k : buckets_[b].tensors) bucket_of_[k] = b;
    bucket_tensors_[b] = buckets_[b].tensors.size();
  }
  executor_ = std::make_unique<InOrderExecutor>(collectives_, [this](size_t b) { run_bucket(b); });
  started_ = true;
}

void AllreduceStrategy::count_dense(size_t bytes) {
  step_dense_.bytes_dense += bytes;
  step_dense_.bytes_dense_on_wire += comm::ring_allreduce_wire_bytes(bytes, collectives_.size());
}

void AllreduceStrategy::open_step() {
  step_grads_.assign(tensors_.size(), std::span<float>());
  reported_.assign(tensors_.size(), 0);
  step_start_ = collectives_.traffic();  // the executor is idle between steps
  step_dense_ = TrafficStats{};
  executor_->begin_step(bucket_tensors_);
}

void AllreduceStrategy::report(size_t k, std::span<float> grad) {
  if (grad.size() != tensors_[k].numel()) {
    throw Error("gradient of '" + tensors_[k].name + "' has " + std::to_string(grad.size()) +
                " elements, the parameter " + std::to_string(tensors_[k].numel()));
  }
  step_grads_[k] = grad;
  reported_[k] = 1;
  executor_->tensor_ready(bucket_of_[k]);
}

void AllreduceStrategy::gradient_ready(size_t index, std::span<float> grad) {
  if (!options_.overlap || !started_ || index >= tensors_.size() ||
      bucket_of_[index] == kNoBucket) {
    return;
  }
  std::lock_guard<std::mutex> lock(step_mutex_);
  if (!executor_->in_step()) open_step();
  if (reported_[index]) {
    throw Error("the gradient of '" + tensors_[index].name +
                "' was produced twice before the step that exchanges it; buckets are "
                "exchanged as backward finishes them, so accumulating several backward "
                "passes per step needs overlap off (DistributedOptions::overlap = false)");
  }
  report(index, grad);
}

std::string AllreduceStrategy::timeline_args(const Bucket& bucket) const {
  if (!Timeline::global().enabled()) return {};
  return "{\"bucket\":" + std::to_string(&bucket - buckets_.data()) +
         ",\"tensors\":" + std::to_string(bucket.tensors.size()) +
         ",\"fp32_bytes\":" + std::to_string(bucket.elements * sizeof(float)) + "}";
}

void AllreduceStrategy::run_bucket(size_t b) {
  Bucket& bucket = buckets_[b];
  if (bucket.wire) {
    synchronize_additive(bucket, step_grads_);
  } else if (bucket.int8) {
    synchronize_int8(bucket, step_grads_);
  } else {
    synchronize_messages(bucket, step_grads_);
  }
  count_dense(bucket.elements * sizeof(float));
}

comm::SparsePath AllreduceStrategy::next_sparse_path(const Bucket& bucket,
                                                     const comm::LinkModel& link) const {
  // Every rank has the same totals, so every rank takes the same path.
  if (sparse_path_) return *sparse_path_;
  const SparseStepTotals& totals = bucket.sparse->totals();
  if (!totals.known) return comm::SparsePath::kAllgather;
  const int world = collectives_.size();
  return comm::cheapest_sparse_path(link, totals.load(bucket.elements, world), world);
}

comm::SparsePath AllreduceStrategy::last_sparse_path(size_t b) const {
  if (b >= buckets_.size()) throw Error("no bucket " + std::to_string(b));
  return buckets_[b].last_path;
}

std::optional<std::vector<double>> AllreduceStrategy::predicted_bucket_seconds(
    const comm::LinkModel& link) const {
  if (!started_) throw Error("AllreduceStrategy::predicted_bucket_seconds called before start");
  const int world = collectives_.size();
  const auto ring = [&](size_t bytes) {
    return comm::ring_allreduce_seconds(link, static_cast<double>(bytes), world);
  };
  std::vector<double> seconds;
  for (const Bucket& bucket : buckets_) {
    if (bucket.wire) {
      seconds.push_back(ring(bucket.wire_buffer.size()));
    } else if (bucket.int8) {
      seconds.push_back(ring(bucket.maxima.size() * sizeof(float)) +
                        ring(bucket.wire_buffer.size()));
    } else if (bucket.sparse && bucket.sparse->totals().known) {
      seconds.push_back(
          comm::sparse_path_seconds(link, next_sparse_path(bucket, link),
                                    bucket.sparse->totals().load(bucket.elements, world), world));
    } else if (!bucket.message.empty()) {
      seconds.push_back(
          comm::allgather_seconds(link, static_cast<double>(bucket.message.size()), world));
    } else {
      return std::nullopt;
    }
  }
  return seconds;
}

std::optional<double> AllreduceStrategy::predicted_exchange_seconds(
    const comm::LinkModel& link) const {
  if (!started_) throw Error("AllreduceStrategy::predicted_exchange_seconds called before start");
  const auto buckets = predicted_bucket_seconds(link);
  if (!buckets) return std::nullopt;
  double total = 0;
  for (double s : *buckets) total += s;
  if (!low_rank_.empty()) {
    const int world = collectives_.size();
    total += comm::ring_allreduce_seconds(
                 link, static_cast<double>(p_buffer_.size() * sizeof(float)), world) +
             comm::ring_allreduce_seconds(
                 link, static_cast<double>(q_buffer_.size() * sizeof(float)), world);
  }
  return total;
}

std::vector<std::vector<size_t>> AllreduceStrategy::bucket_layout() const {
  std::vector<std::vector<size_t>> layout;
  for (const Bucket& bucket : buckets_) layout.push_back(bucket.tensors);
  return layout;
}

// State: tag, tensor count, the traffic counters, one section per tensor with its codec's
// state (compress::Codec::save_state), then the last step's totals of every sparse bucket
// (they choose the next step's path).
namespace {
constexpr uint32_t kAllreduceStateTag = 0x32525741;  // "AWR2"
}  // namespace

void AllreduceStrategy::save_state(Bytes& out) const {
  if (!started_) throw Error("AllreduceStrategy::save_state called before start");
  ByteWriter writer(out);
  writer.put<uint32_t>(kAllreduceStateTag);
  writer.put<uint64_t>(codecs_.size());
  for (const uint64_t counter : {traffic_.steps, traffic_.bytes_contributed, traffic_.bytes_on_wire,
                                 traffic_.bytes_dense, traffic_.bytes_dense_on_wire}) {
    writer.put<uint64_t>(counter);
  }
  Bytes codec_state;
  for (const auto& codec : codecs_) {
    codec_state.clear();
    codec->save_state(codec_state);
    put_section(out, codec_state);
  }
  for (const Bucket& bucket : buckets_) {
    if (bucket.sparse) bucket.sparse->totals().save(out);
  }
}

void AllreduceStrategy::load_state(ByteReader& in) {
  if (!started_) throw Error("AllreduceStrategy::load_state called before start");
  if (in.get<uint32_t>("allreduce state tag") != kAllreduceStateTag) {
    throw PayloadError("the checkpoint holds no allreduce strategy state where one was expected");
  }
  const auto count = in.get<uint64_t>("tensor count");
  if (count != codecs_.size()) {
    throw PayloadError("the checkpoint's exchange state is for " + std::to_string(count) +
                       " tensors; this model has " + std::to_string(codecs_.size()));
  }
  TrafficStats traffic;
  for (uint64_t* counter : {&traffic.steps, &traffic.bytes_contributed, &traffic.bytes_on_wire,
                            &traffic.bytes_dense, &traffic.bytes_dense_on_wire}) {
    *counter = in.get<uint64_t>("traffic counter");
  }
  for (size_t k = 0; k < codecs_.size(); ++k) {
    ByteReader section = get_section(in, "codec state");
    codecs_[k]->load_state(section);
    section.expect_end(("codec state of tensor " + std::to_string(k)).c_str());
  }
  for (Bucket& bucket : buckets_) {
    if (bucket.sparse) bucket.sparse->set_totals(SparseStepTotals::load_from(in));
  }
  traffic_ = traffic;
}

void AllreduceStrategy::synchronize(const FloatSpans& grads) {
  if (!started_) throw Error("AllreduceStrategy::synchronize called before start");
  if (grads.size() != tensors_.size()) {
    throw Error("synchronize: expected " + std::to_string(tensors_.size()) + " gradients, got " +
                std::to_string(grads.size()));
  }
  {
    // What backward did not report (overlap off, a parameter without a gradient, a
    // gradient no hook could see) is reported now; the buckets run in order as before.
    std::lock_guard<std::mutex> lock(step_mutex_);
    if (!executor_->in_step()) open_step();
    for (size_t k = 0; k < tensors_.size(); ++k) {
      if (bucket_of_[k] != kNoBucket && !reported_[k]) report(k, grads[k]);
    }
  }
  {
    TimelineSpan wait("wait for the exchange", "wait");
    executor_->finish_step();  // rethrows what stopped a bucket
  }
  if (!low_rank_.empty()) {
    TimelineSpan span("low-rank exchange", "communicate");
    synchronize_low_rank(grads);
  }
  const comm::CollectiveTraffic& after = collectives_.traffic();
  traffic_.bytes_contributed += after.contributed - step_start_.contributed;
  traffic_.bytes_on_wire += after.on_wire - step_start_.on_wire;
  traffic_.bytes_dense += step_dense_.bytes_dense;
  traffic_.bytes_dense_on_wire += step_dense_.bytes_dense_on_wire;
  ++traffic_.steps;
}

void AllreduceStrategy::synchronize_additive(Bucket& bucket, const FloatSpans& grads) {
  const size_t element_size = compress::wire_type_size(*bucket.wire);
  const float scale = 1.0f / static_cast<float>(collectives_.size());
  const std::string args = timeline_args(bucket);
  {
    TimelineSpan span("encode", "compute");
    span.set_args(args);
    for (size_t j = 0; j < bucket.tensors.size(); ++j) {
      const size_t k = bucket.tensors[j];
      codecs_[k]->to_wire(grads[k], scale,
                          bucket.wire_buffer.data() + bucket.offsets[j] * element_size);
    }
  }
  {
    TimelineSpan span("communicate", "communicate");
    span.set_args(args);
    collectives_.allreduce_sum(bucket.wire_buffer.data(), bucket.elements,
                               *bucket.wire == compress::WireType::kFloat16
                                   ? comm::DataType::kFloat16
                                   : comm::DataType::kFloat32);
  }
  TimelineSpan span("decode", "compute");
  span.set_args(args);
  for (size_t j = 0; j < bucket.tensors.size(); ++j) {
    const size_t k = bucket.tensors[j];
    codecs_[k]->from_wire(bucket.wire_buffer.data() + bucket.offsets[j] * element_size, grads[k]);
  }
}

// The shared-scale protocol of compress::SharedScaleFace: every rank's block maxima, an
// allreduce-max, int8 quantization with the agreed scales, an int8 allreduce-sum.
void AllreduceStrategy::synchronize_int8(Bucket& bucket, const FloatSpans& grads) {
  const int world = collectives_.size();
  const int levels = compress::shared_scale_levels(world);
  const std::string args = timeline_args(bucket);
  auto* wire = reinterpret_cast<int8_t*>(bucket.wire_buffer.data());
  const auto maxima_of = [&](size_t j) {
    auto* face = codecs_[bucket.tensors[j]]->shared_scale();
    return std::span<float>(bucket.maxima).subspan(bucket.block_offsets[j], face->blocks());
  };
  {
    TimelineSpan span("encode", "compute");
    span.set_args(args);
    for (size_t j = 0; j < bucket.tensors.size(); ++j) {
      codecs_[bucket.tensors[j]]->shared_scale()->local_maxima(grads[bucket.tensors[j]],
                                                               maxima_of(j));
    }
  }
  {
    TimelineSpan span("communicate", "communicate");
    span.set_args(args);
    collectives_.allreduce_max(bucket.maxima.data(), bucket.maxima.size());
  }
  {
    TimelineSpan span("encode", "compute");
    span.set_args(args);
    for (size_t j = 0; j < bucket.tensors.size(); ++j) {
      const size_t k = bucket.tensors[j];
      codecs_[k]->shared_scale()->quantize(grads[k], maxima_of(j), levels,
                                           wire + bucket.offsets[j]);
    }
  }
  {
    TimelineSpan span("communicate", "communicate");
    span.set_args(args);
    collectives_.allreduce_sum(wire, bucket.elements, comm::DataType::kInt8);
  }
  TimelineSpan span("decode", "compute");
  span.set_args(args);
  for (size_t j = 0; j < bucket.tensors.size(); ++j) {
    const size_t k = bucket.tensors[j];
    codecs_[k]->shared_scale()->dequantize(wire + bucket.offsets[j], maxima_of(j), levels, world,
                                           grads[k]);
  }
}

// Message layout per bucket and rank: for each tensor of the bucket, u32 length + payload.
void AllreduceStrategy::synchronize_messages(Bucket& bucket, const FloatSpans& grads) {
  std::string args = timeline_args(bucket);
  {
    // Each payload is encoded straight into the message, behind its length.
    TimelineSpan span("encode", "compute");
    span.set_args(args);
    bucket.message.clear();
    for (size_t k : bucket.tensors) {
      const size_t length_at = bucket.message.size();
      bucket.message.resize(length_at + sizeof(uint32_t));
      codecs_[k]->encode(grads[k], bucket.message);  // appends
      const auto length =
          static_cast<uint32_t>(bucket.message.size() - length_at - sizeof(uint32_t));
      std::memcpy(bucket.message.data() + length_at, &length, sizeof length);
    }
  }
  if (bucket.sparse) {
    bucket.last_path = next_sparse_path(bucket, options_.link);
    if (!args.empty()) {
      args.back() = ',';
      args += "\"path\":\"" + std::string(comm::sparse_path_name(bucket.last_path)) + "\"}";
    }
    if (bucket.last_path != comm::SparsePath::kAllgather) {
      synchronize_sparse(bucket, grads, bucket.last_path, args);
      return;
    }
  }
  {
    TimelineSpan span("communicate", "communicate");
    span.set_args(args);
    collectives_.allgather_bytes(bucket.message, bucket.gathered);
  }
  TimelineSpan decode_span("decode", "compute");
  decode_span.set_args(args);
  const std::vector<Bytes>& all = bucket.gathered;

  // Split every rank's message before touching any gradient, so a malformed one changes
  // nothing.
  const int world = collectives_.size();
  auto& payloads = bucket.payloads;
  payloads.resize(world);
  for (int r = 0; r < world; ++r) {
    payloads[r].clear();
    ByteReader reader(all[r]);
    try {
      for (size_t j = 0; j < bucket.tensors.size(); ++j) {
        const uint32_t length = reader.get<uint32_t>("payload length");
        payloads[r].push_back(reader.get_bytes(length, "payload"));
      }
      reader.expect_end("bucket message");
    } catch (const PayloadError& e) {
      throw PayloadError("gradient message from rank " + std::to_string(r) + ": " + e.what());
    }
  }
  const float scale = 1.0f / static_cast<float>(world);
  for (size_t j = 0; j < bucket.tensors.size(); ++j) {
    const size_t k = bucket.tensors[j];
    std::span<float> grad = grads[k];
    std::fill(grad.begin(), grad.end(), 0.0f);
    for (int r = 0; r < world; ++r) {
      try {
        codecs_[k]->decode_add(payloads[r][j], grad);
      } catch (const MismatchError& e) {
        throw MismatchError("payload from rank " + std::to_string(r) + " for '" + tensors_[k].name +
                            "': " + e.what());
      } catch (const PayloadError& e) {
        throw PayloadError("payload from rank " + std::to_string(r) + " for '" + tensors_[k].name +
                           "': " + e.what());
      }
    }
    for (float& v : grad) v *= scale;
  }
  if (bucket.sparse) {
    uint64_t payload_bytes = 0, union_count = 0;
    for (int r = 0; r < world; ++r) {
      for (const auto& payload : payloads[r]) payload_bytes += payload.size();
    }
    for (size_t k : bucket.tensors) {
      for (const float v : grads[k]) union_count += v != 0.0f;
    }
    bucket.sparse->record_allgather(payload_bytes, union_count);
  }
}

void AllreduceStrategy::synchronize_sparse(Bucket& bucket, const FloatSpans& grads,
                                           comm::SparsePath path, const std::string& args) {
  uint64_t payload_bytes = 0;
  {
    // This rank's payloads as every rank would decode them.
    TimelineSpan span("decode", "compute");
    span.set_args(args);
    bucket.mine.assign(bucket.elements, 0.0f);
    ByteReader reader(bucket.message);
    for (size_t j = 0; j < bucket.tensors.size(); ++j) {
      const size_t k = bucket.tensors[j];
      const uint32_t length = reader.get<uint32_t>("payload length");
      codecs_[k]->decode_add(
          reader.get_bytes(length, "payload"),
          std::span<float>(bucket.mine).subspan(bucket.offsets[j], grads[k].size()));
      payload_bytes += length;
    }
  }
  bucket.sum.resize(bucket.elements);
  {
    TimelineSpan span("communicate", "communicate");
    span.set_args(args);
    if (path == comm::SparsePath::kSplit) {
      bucket.sparse->split(collectives_, bucket.mine, payload_bytes, bucket.sum);
    } else {
      bucket.sparse->dense(collectives_, bucket.mine, payload_bytes, bucket.sum);
    }
  }
  TimelineSpan span("decode", "compute");
  span.set_args(args);
  const float scale = 1.0f / static_cast<float>(collectives_.size());
  for (size_t j = 0; j < bucket.tensors.size(); ++j) {
    const float* sum = bucket.sum.data() + bucket.offsets[j];
    std::span<float> grad = grads[bucket.tensors[j]];
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = sum[i] * scale;
  }
}

// PowerSGD: P = M Q for every tensor, one allreduce; orthonormalise, Q = M^T P, one
// allreduce; the averaged factors give every rank the same P Q^T. Tensors in their codec's
// dense start go in one fp32 allreduce-mean of their own instead.
void AllreduceStrategy::synchronize_low_rank(const FloatSpans& grads) {
  const float scale = 1.0f / static_cast<float>(collectives_.size());
  // Decided once for the step: counting a dense step may end the dense start.
  dense_now_.resize(low_rank_.size());
  dense_buffer_.clear();
  for (size_t j = 0; j < low_rank_.size(); ++j) {
    const size_t k = low_rank_[j];
    dense_now_[j] = codecs_[k]->low_rank()->dense_now() ? 1 : 0;
    if (dense_now_[j]) dense_buffer_.insert(dense_buffer_.end(), grads[k].begin(), grads[k].end());
  }
  if (!dense_buffer_.empty()) {
    collectives_.allreduce_sum(dense_buffer_.data(), dense_buffer_.size(),
                               comm::DataType::kFloat32);
    size_t offset = 0;
    for (size_t j = 0; j < low_rank_.size(); ++j) {
      if (!dense_now_[j]) continue;
      const size_t k = low_rank_[j];
      for (float& v : grads[k]) v = dense_buffer_[offset++] * scale;
      codecs_[k]->low_rank()->count_dense_step();
      count_dense(grads[k].size_bytes());
    }
  }
  size_t p_used = 0;
  for (size_t j = 0; j < low_rank_.size(); ++j) {
    if (dense_now_[j]) continue;
    auto* face = codecs_[low_rank_[j]]->low_rank();
    face->begin(grads[low_rank_[j]], std::span<float>(p_buffer_).subspan(p_used, face->p_size()));
    p_used += face->p_size();
  }
  if (p_used == 0) return;  // every low-rank tensor is still in its dense start
  collectives_.allreduce_sum(p_buffer_.data(), p_used, comm::DataType::kFloat32);
  for (size_t i = 0; i < p_used; ++i) p_buffer_[i] *= scale;
  size_t p_offset = 0, q_used = 0;
  for (size_t j = 0; j < low_rank_.size(); ++j) {
    if (dense_now_[j]) continue;
    auto* face = codecs_[low_rank_[j]]->low_rank();
    face->middle(std::span<const float>(p_buffer_).subspan(p_offset, face->p_size()),
                 std::span<float>(q_buffer_).subspan(q_used, face->q_size()));
    p_offset += face->p_size();
    q_used += face->q_size();
  }
  collectives_.allreduce_sum(q_buffer_.data(), q_used, comm::DataType::kFloat32);
  for (size_t i = 0; i < q_used; ++i) q_buffer_[i] *= scale;
  size_t q_offset = 0;
  for (size_t j = 0; j < low_rank_.size(); ++j) {
    if (dense_now_[j]) continue;
    const size_t k = low_rank_[j];
    auto* face = codecs_[k]->low_rank();
    face->end(std::span<const float>(q_buffer_).subspan(q_offset, face->q_size()), grads[k]);
    q_offset += face->q_size();
    count_dense(grads[k].size_bytes());
  }
}

}  // namespace gradwire::strategy
