#include "gradwire/comm/local_collectives.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include "gradwire/core/error.h"
#include "gradwire/core/half.h"

namespace gradwire::comm {

LocalGroup::LocalGroup(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout), slots_(size), present_(size, false) {
  if (size < 1) throw ConfigError("a local group needs at least one rank");
}

std::shared_ptr<const std::vector<Bytes>> LocalGroup::exchange(int rank, Bytes contribution,
                                                               const std::string& op) {
  std::unique_lock lock(mutex_);
  if (!broken_.empty()) throw TimeoutError(broken_);
  const uint64_t my_generation = generation_;
  slots_[rank] = std::move(contribution);
  present_[rank] = true;
  if (++arrived_ == size_) {
    published_ = std::make_shared<const std::vector<Bytes>>(std::move(slots_));
    slots_.assign(size_, Bytes());
    present_.assign(size_, false);
    arrived_ = 0;
    ++generation_;
    arrived_cv_.notify_all();
    return published_;
  }
  const bool done = arrived_cv_.wait_for(
      lock, timeout_, [&] { return generation_ != my_generation || !broken_.empty(); });
  if (generation_ != my_generation) return published_;
  if (!broken_.empty()) throw TimeoutError(broken_);
  (void)done;
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (!present_[r]) missing.push_back(r);
  }
  broken_ = op + " timed out after " + std::to_string(timeout_.count()) +
            " ms: " + describe_ranks(missing) + " did not arrive (" +
            std::to_string(size_ - missing.size()) + " of " + std::to_string(size_) + " arrived)";
  arrived_cv_.notify_all();
  throw TimeoutError(broken_);
}

LocalCollectives::LocalCollectives(std::shared_ptr<LocalGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  if (rank < 0 || rank >= group_->size()) {
    throw ConfigError("rank " + std::to_string(rank) + " is outside a group of " +
                      std::to_string(group_->size()));
  }
}

std::unique_ptr<Work> LocalCollectives::allreduce_sum_async(void* data, size_t count,
                                                            DataType type) {
  const size_t bytes = count * data_type_size(type);
  const auto* raw = static_cast<const uint8_t*>(data);
  count_allreduce(bytes);
  auto all =
      group_->exchange(rank_, Bytes(raw, raw + bytes), "allreduce #" + std::to_string(++sequence_));
  for (const Bytes& b : *all) {
    if (b.size() != bytes) {
      return std::make_unique<CompletedWork>(std::make_exception_ptr(
          MismatchError("allreduce size mismatch: this rank sent " + std::to_string(bytes) +
                        " bytes, another sent " + std::to_string(b.size()))));
    }
  }
  if (type == DataType::kInt8) {  // in rank order, wrapping as Gloo's int8 sum does
    std::vector<int> sum(count, 0);
    for (const Bytes& b : *all) {
      for (size_t i = 0; i < count; ++i) sum[i] += static_cast<int8_t>(b[i]);
    }
    auto* out = static_cast<int8_t*>(data);
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<int8_t>(sum[i]);
    return std::make_unique<CompletedWork>();
  }
  // Sum in rank order into a float accumulator so every rank gets the same bits.
  std::vector<float> sum(count, 0.0f), tmp(count);
  for (const Bytes& b : *all) {
    if (type == DataType::kFloat32) {
      std::memcpy(tmp.data(), b.data(), bytes);
    } else {
      half_to_float(reinterpret_cast<const uint16_t*>(b.data()), tmp);
    }
    for (size_t i = 0; i < count; ++i) sum[i] += tmp[i];
  }
  if (type == DataType::kFloat32) {
    std::memcpy(data, sum.data(), bytes);
  } else {
    float_to_half(sum, static_cast<uint16_t*>(data), 1.0f);
  }
  return std::make_unique<CompletedWork>();
}

void LocalCollectives::allreduce_max(float* data, size_t count) {
  const size_t bytes = count * sizeof(float);
  const auto* raw = reinterpret_cast<const uint8_t*>(data);
  count_allreduce(bytes);
  auto all = group_->exchange(rank_, Bytes(raw, raw + bytes),
                              "allreduce-max #" + std::to_string(++sequence_));
  std::vector<float> value(count);
  for (size_t r = 0; r < all->size(); ++r) {
    const Bytes& b = (*all)[r];
    if (b.size() != bytes) {
      throw MismatchError("allreduce-max size mismatch: this rank sent " + std::to_string(bytes) +
                          " bytes, another sent " + std::to_string(b.size()));
    }
    std::memcpy(value.data(), b.data(), bytes);
    for (size_t i = 0; i < count; ++i) data[i] = r == 0 ? value[i] : std::max(data[i], value[i]);
  }
}

void LocalCollectives::allgather_bytes(std::span<const uint8_t> data, std::vector<Bytes>& out) {
  auto all = group_->exchange(rank_, Bytes(data.begin(), data.end()),
                              "allgather #" + std::to_string(++sequence_));
  size_t padded = 1;  // as Gloo pads every contribution to the largest (at least 1 byte)
  for (const Bytes& b : *all) padded = std::max(padded, b.size());
  count_allgather(data.size(), padded);
  out.resize(all->size());
  for (size_t r = 0; r < all->size(); ++r) out[r].assign((*all)[r].begin(), (*all)[r].end());
}

// Each rank deposits its messages as u64 length + bytes, in destination order, and reads
// its own from every deposit.
void LocalCollectives::alltoall_bytes(std::span<const Bytes> to, std::vector<Bytes>& out) {
  if (static_cast<int>(to.size()) != size()) {
    throw Error("alltoall_bytes: " + std::to_string(to.size()) + " messages for " +
                std::to_string(size()) + " ranks");
  }
  Bytes mine;
  ByteWriter writer(mine);
  for (const Bytes& message : to) {
    writer.put<uint64_t>(message.size());
    writer.put_array<uint8_t>(message);
  }
  count_alltoall(to);
  auto all = group_->exchange(rank_, std::move(mine), "alltoall #" + std::to_string(++sequence_));
  out.resize(size());
  for (int r = 0; r < size(); ++r) {
    ByteReader reader((*all)[r]);
    for (int d = 0; d < size(); ++d) {
      const auto length = reader.get<uint64_t>("alltoall message length");
      const auto bytes = reader.get_bytes(static_cast<size_t>(length), "alltoall message");
      if (d == rank_) out[r].assign(bytes.begin(), bytes.end());
    }
  }
}

void LocalCollectives::broadcast(void* data, size_t bytes, int root) {
  const auto* raw = static_cast<const uint8_t*>(data);
  Bytes mine;
  if (rank_ == root) mine.assign(raw, raw + bytes);
  count_broadcast(bytes, root);
  auto all = group_->exchange(rank_, std::move(mine), "broadcast #" + std::to_string(++sequence_));
  const Bytes& from_root = (*all)[root];
  if (from_root.size() != bytes) {
    throw MismatchError("broadcast size mismatch: root rank " + std::to_string(root) + " sent " +
                        std::to_string(from_root.size()) + " bytes, rank " + std::to_string(rank_) +
                        " expected " + std::to_string(bytes));
  }
  if (rank_ != root && bytes) std::memcpy(data, from_root.data(), bytes);
}

void LocalCollectives::barrier() {
  group_->exchange(rank_, Bytes(), "barrier #" + std::to_string(++sequence_));
}

void run_local_ranks(int size, std::chrono::milliseconds timeout,
                     const std::function<void(Collectives&)>& fn) {
  auto group = std::make_shared<LocalGroup>(size, timeout);
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        LocalCollectives collectives(group, r);
        fn(collectives);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace gradwire::comm
