#include "gradwire/strategy/allreduce/sparse_exchange.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "gradwire/core/error.h"

namespace gradwire::strategy {
namespace {

constexpr uint8_t kSparseRange = 0;
constexpr uint8_t kDenseRange = 1;

uint64_t count_nonzeros(std::span<const float> values) {
  uint64_t count = 0;
  for (const float v : values) count += v != 0.0f;
  return count;
}

// Reads `count` offsets (strictly increasing, below `limit`) and their values.
void read_pairs(ByteReader& reader, uint32_t count, size_t limit, std::vector<uint32_t>& offsets,
                std::vector<float>& values) {
  if (count > limit || static_cast<uint64_t>(count) * 8 > reader.remaining()) {
    throw PayloadError(std::to_string(count) + " pairs in a range of " + std::to_string(limit) +
                       " with " + std::to_string(reader.remaining()) + " bytes left");
  }
  offsets.resize(count);
  values.resize(count);
  reader.get_array<uint32_t>(std::span<uint32_t>(offsets), "offsets");
  reader.get_array<float>(std::span<float>(values), "values");
  for (uint32_t i = 0; i < count; ++i) {
    if (offsets[i] >= limit || (i > 0 && offsets[i] <= offsets[i - 1])) {
      throw PayloadError("offset " + std::to_string(offsets[i]) + " at position " +
                         std::to_string(i) + " is out of range [0, " + std::to_string(limit) +
                         ") or not increasing");
    }
  }
}

}  // namespace

comm::SparseBucketLoad SparseStepTotals::load(size_t elements, int world) const {
  const double w = std::max(1, world);
  return {static_cast<double>(elements), static_cast<double>(payload_bytes) / w,
          static_cast<double>(pairs) / w, static_cast<double>(union_count)};
}

void SparseStepTotals::save(Bytes& out) const {
  ByteWriter writer(out);
  writer.put<uint8_t>(known ? 1 : 0);
  writer.put<uint64_t>(payload_bytes);
  writer.put<uint64_t>(pairs);
  writer.put<uint64_t>(union_count);
}

SparseStepTotals SparseStepTotals::load_from(ByteReader& in) {
  SparseStepTotals totals;
  const auto known = in.get<uint8_t>("sparse totals known");
  if (known > 1) throw PayloadError("corrupt sparse totals: known flag " + std::to_string(known));
  totals.known = known == 1;
  totals.payload_bytes = in.get<uint64_t>("sparse totals payload bytes");
  totals.pairs = in.get<uint64_t>("sparse totals pairs");
  totals.union_count = in.get<uint64_t>("sparse totals union");
  return totals;
}

size_t SparseExchange::range_begin(int owner, int world) const {
  return static_cast<size_t>(static_cast<uint64_t>(elements_) * static_cast<uint64_t>(owner) /
                             static_cast<uint64_t>(world));
}

void SparseExchange::split(comm::Collectives& collectives, std::span<const float> mine,
                           uint64_t payload_bytes, std::span<float> sum) {
  const int world = collectives.size();
  const int me = collectives.rank();
  if (mine.size() != elements_ || sum.size() != elements_) {
    throw Error("SparseExchange::split: buckets of " + std::to_string(elements_) +
                " elements, given " + std::to_string(mine.size()) + " and " +
                std::to_string(sum.size()));
  }
  // 1. This rank's non-zeros, cut by range.
  to_.resize(world);
  std::vector<uint32_t> offsets;
  std::vector<float> values;
  for (int r = 0; r < world; ++r) {
    const size_t lo = range_begin(r, world), hi = range_begin(r + 1, world);
    offsets.clear();
    values.clear();
    for (size_t i = lo; i < hi; ++i) {
      if (mine[i] != 0.0f) {
        offsets.push_back(static_cast<uint32_t>(i - lo));
        values.push_back(mine[i]);
      }
    }
    to_[r].clear();
    ByteWriter writer(to_[r]);
    writer.put<uint64_t>(payload_bytes);
    writer.put<uint32_t>(static_cast<uint32_t>(offsets.size()));
    writer.put_array<uint32_t>(offsets);
    writer.put_array<float>(values);
  }
  collectives.alltoall_bytes(to_, from_);

  // 2. Sum this rank's range over the ranks, in rank order.
  const size_t lo = range_begin(me, world), hi = range_begin(me + 1, world);
  const size_t range = hi - lo;
  acc_.assign(range, 0.0f);
  touched_.assign(range, 0);
  uint64_t payload_total = 0, pairs_total = 0;
  for (int q = 0; q < world; ++q) {
    try {
      ByteReader reader(from_[q]);
      payload_total += reader.get<uint64_t>("payload bytes");
      const auto count = reader.get<uint32_t>("pair count");
      read_pairs(reader, count, range, offsets, values);
      reader.expect_end("range message");
      pairs_total += count;
    } catch (const PayloadError& e) {
      throw PayloadError("sparse range message from rank " + std::to_string(q) + ": " + e.what());
    }
    for (size_t i = 0; i < offsets.size(); ++i) {
      acc_[offsets[i]] += values[i];
      touched_[offsets[i]] = 1;
    }
  }

  // 3. The reduced range, sparse or dense by size.
  uint32_t union_count = 0;
  for (const uint8_t t : touched_) union_count += t;
  reduced_.clear();
  ByteWriter writer(reduced_);
  const bool sparse = static_cast<uint64_t>(union_count) * 8 < static_cast<uint64_t>(range) * 4;
  writer.put<uint8_t>(sparse ? kSparseRange : kDenseRange);
  writer.put<uint64_t>(payload_total);
  writer.put<uint64_t>(pairs_total);
  writer.put<uint32_t>(union_count);
  if (sparse) {
    offsets.clear();
    values.clear();
    for (size_t i = 0; i < range; ++i) {
      if (touched_[i]) {
        offsets.push_back(static_cast<uint32_t>(i));
        values.push_back(acc_[i]);
      }
    }
    writer.put_array<uint32_t>(offsets);
    writer.put_array<float>(values);
  } else {
    writer.put_array<float>(acc_);
  }
  collectives.allgather_bytes(reduced_, gathered_);

  // Check every range before writing any of `sum`.
  SparseStepTotals totals{true, 0, 0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) std::fill(sum.begin(), sum.end(), 0.0f);
    for (int r = 0; r < world; ++r) {
      const size_t r_lo = range_begin(r, world), r_range = range_begin(r + 1, world) - r_lo;
      try {
        ByteReader reader(gathered_[r]);
        const auto format = reader.get<uint8_t>("range format");
        const auto r_payload = reader.get<uint64_t>("payload bytes over ranks");
        const auto r_pairs = reader.get<uint64_t>("pairs over ranks");
        const auto r_union = reader.get<uint32_t>("union");
        if (format == kSparseRange) {
          read_pairs(reader, r_union, r_range, offsets, values);
          if (pass == 1) {
            for (size_t i = 0; i < offsets.size(); ++i) sum[r_lo + offsets[i]] = values[i];
          }
        } else if (format == kDenseRange) {
          if (r_union > r_range) throw PayloadError("a union larger than its range");
          auto out = sum.subspan(r_lo, r_range);
          if (pass == 0) {
            reader.get_bytes(r_range * sizeof(float), "range values");
          } else {
            reader.get_array<float>(out, "range values");
          }
        } else {
          throw PayloadError("unknown range format " + std::to_string(format));
        }
        reader.expect_end("reduced range");
        if (pass == 0) {
          // Every owner saw every rank's payload size: their totals agree.
          if (r == 0) {
            totals.payload_bytes = r_payload;
            totals.pairs = 0;
          } else if (r_payload != totals.payload_bytes) {
            throw PayloadError("payload total " + std::to_string(r_payload) +
                               " differs from rank 0's " + std::to_string(totals.payload_bytes));
          }
          totals.pairs += r_pairs;
          totals.union_count += r_union;
        }
      } catch (const PayloadError& e) {
        throw PayloadError("reduced range from rank " + std::to_string(r) + ": " + e.what());
      }
    }
  }
  totals_ = totals;
}

void SparseExchange::dense(comm::Collectives& collectives, std::span<const float> mine,
                           uint64_t payload_bytes, std::span<float> sum) {
  if (mine.size() != elements_ || sum.size() != elements_) {
    throw Error("SparseExchange::dense: buckets of " + std::to_string(elements_) +
                " elements, given " + std::to_string(mine.size()) + " and " +
                std::to_string(sum.size()));
  }
  // The bucket, then this rank's payload bytes and pairs as two more floats (the totals'
  // estimates: exact below 2^24, the same on every rank whatever their rounding).
  dense_.resize(elements_ + 2);
  std::copy(mine.begin(), mine.end(), dense_.begin());
  dense_[elements_] = static_cast<float>(payload_bytes);
  dense_[elements_ + 1] = static_cast<float>(count_nonzeros(mine));
  collectives.allreduce_sum(dense_.data(), dense_.size(), comm::DataType::kFloat32);
  std::copy(dense_.begin(), dense_.begin() + static_cast<std::ptrdiff_t>(elements_), sum.begin());
  totals_ = {true, static_cast<uint64_t>(dense_[elements_]),
             static_cast<uint64_t>(dense_[elements_ + 1]), count_nonzeros(sum)};
}

void SparseExchange::record_allgather(uint64_t payload_bytes_total, uint64_t union_count) {
  totals_ = {true, payload_bytes_total, payload_bytes_total / 8, union_count};
}

}  // namespace gradwire::strategy
