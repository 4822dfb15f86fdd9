// Every decoder validates the whole payload before touching the accumulator: corrupt bytes
// raise gradwire::Error (PayloadError, or MismatchError for another codec) and leave the
// accumulator bit-for-bit unchanged.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "codec_test_util.h"
#include "gradwire/compress/codecs.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

using testing::random_vector;
using testing::same_bits;
using testing::tensor_of;

struct Case {
  const char* spec;
  size_t n;
};

// n chosen so that tails, bitmap padding and both top-k layouts are all exercised.
const Case kCases[] = {{"none", 37},
                       {"fp16", 37},
                       {"topk:density=0.05", 203},
                       {"topk:density=0.5", 203},
                       {"2bit", 203},
                       {"2bit:threshold=0.1", 64},
                       {"qsgd", 203},
                       {"qsgd:levels=1,bucket=50", 203},
                       {"qsgd:levels=3,bucket=64", 203},
                       {"qsgd:levels=127,bucket=10", 37},
                       {"terngrad", 203},
                       {"signsgd", 203},
                       {"bf16", 37},
                       {"int8", 37},
                       {"int8:block=16", 203},
                       {"int4", 37},
                       {"int4:block=16", 203},
                       {"sparseloco:chunk=64,density=0.1", 203},
                       {"sparseloco:chunk=16,density=0.25,bits=4", 37}};

// Decoding `payload` must throw E and leave the accumulator unchanged.
template <typename E>
void expect_rejected(const Codec& codec, const Bytes& payload, size_t n, const std::string& what) {
  std::vector<float> accum = random_vector(n, 77);
  const auto before = accum;
  EXPECT_THROW(codec.decode_add(payload, accum), E) << what;
  EXPECT_TRUE(same_bits(accum, before)) << what << ": accumulator modified";
}

class PayloadCorruption : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    codec_ = create_codec(GetParam().spec, tensor_of(GetParam().n));
    auto input = random_vector(GetParam().n, 5);
    input[3] = 4.0f;  // something above every threshold
    codec_->encode(input, payload_);
    // Sanity: the untouched payload decodes.
    std::vector<float> accum(GetParam().n, 0.0f);
    ASSERT_NO_THROW(codec_->decode_add(payload_, accum));
  }
  size_t n() const { return GetParam().n; }

  std::unique_ptr<Codec> codec_;
  Bytes payload_;
};

TEST_P(PayloadCorruption, TruncatedAtEveryLength) {
  for (size_t len = 0; len < payload_.size(); ++len) {
    const Bytes truncated(payload_.begin(), payload_.begin() + static_cast<std::ptrdiff_t>(len));
    expect_rejected<PayloadError>(*codec_, truncated, n(), "length " + std::to_string(len));
  }
}

TEST_P(PayloadCorruption, TrailingBytes) {
  Bytes longer = payload_;
  longer.push_back(0);
  expect_rejected<PayloadError>(*codec_, longer, n(), "one trailing byte");
}

TEST_P(PayloadCorruption, HeaderFields) {
  Bytes bad = payload_;
  bad[0] = 0x46;
  expect_rejected<PayloadError>(*codec_, bad, n(), "magic");
  bad = payload_;
  bad[1] = bad[1] == 1 ? 2 : 1;
  expect_rejected<MismatchError>(*codec_, bad, n(), "codec id");
  bad[1] = 0;
  expect_rejected<PayloadError>(*codec_, bad, n(), "codec id 0");
  bad = payload_;
  bad[2] = 9;
  expect_rejected<PayloadError>(*codec_, bad, n(), "version");
  bad = payload_;
  bad[3] = 1;
  expect_rejected<PayloadError>(*codec_, bad, n(), "reserved");
  bad = payload_;
  bad[4] ^= 1;
  expect_rejected<PayloadError>(*codec_, bad, n(), "count field");
  // Right payload, wrong receiving tensor.
  expect_rejected<PayloadError>(*codec_, payload_, n() + 1, "accumulator size");
  expect_rejected<PayloadError>(*codec_, payload_, n() - 1, "accumulator size");
}

TEST_P(PayloadCorruption, FuzzedPayloadsDecodeOrThrowGradwireErrors) {
  EXPECT_GT(testing::decode_mutations(*codec_, payload_, n(), 1234, 3000), 0u);
}

INSTANTIATE_TEST_SUITE_P(Codecs, PayloadCorruption, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = std::to_string(info.index) + "_" + info.param.spec;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(PayloadCorruption, MismatchMessageNamesBothCodecs) {
  auto topk = create_codec("topk", tensor_of(16));
  auto two_bit = create_codec("2bit", tensor_of(16));
  Bytes payload;
  topk->encode(random_vector(16, 1), payload);
  std::vector<float> accum(16, 0.0f);
  try {
    two_bit->decode_add(payload, accum);
    FAIL() << "expected MismatchError";
  } catch (const MismatchError& e) {
    EXPECT_STREQ(e.what(),
                 "payload was encoded by codec 'topk' but this rank decodes with '2bit' (ranks "
                 "must use the same --compressor)");
  }
}

// --- top-k body ----------------------------------------------------------------------------

constexpr size_t kKOffset = PayloadHeader::kSize;
constexpr size_t kLayoutOffset = kKOffset + 4;
constexpr size_t kBodyOffset = kLayoutOffset + 1;

void put_u32(Bytes& bytes, size_t offset, uint32_t v) { std::memcpy(bytes.data() + offset, &v, 4); }
uint32_t get_u32(const Bytes& bytes, size_t offset) {
  uint32_t v;
  std::memcpy(&v, bytes.data() + offset, 4);
  return v;
}

TEST(TopKCorruption, IndexList) {
  const size_t n = 1000;
  auto codec = create_codec("topk:density=0.01,ef=0,warmup=0", tensor_of(n));
  Bytes payload;
  codec->encode(random_vector(n, 2), payload);
  ASSERT_EQ(payload[kLayoutOffset], static_cast<uint8_t>(TopKLayout::kIndexList));
  const uint32_t k = get_u32(payload, kKOffset);
  ASSERT_EQ(k, 10u);
  const size_t last = kBodyOffset + 4 * (k - 1);

  Bytes bad = payload;
  put_u32(bad, last, static_cast<uint32_t>(n));
  expect_rejected<PayloadError>(*codec, bad, n, "index == N");
  put_u32(bad, last, 0xffffffffu);
  expect_rejected<PayloadError>(*codec, bad, n, "index 2^32-1");
  bad = payload;
  put_u32(bad, last, get_u32(payload, last - 4));
  expect_rejected<PayloadError>(*codec, bad, n, "repeated index");
  bad = payload;
  put_u32(bad, kBodyOffset, get_u32(payload, kBodyOffset + 4));
  put_u32(bad, kBodyOffset + 4, get_u32(payload, kBodyOffset));
  expect_rejected<PayloadError>(*codec, bad, n, "swapped indices");
  bad = payload;
  put_u32(bad, kKOffset, static_cast<uint32_t>(n + 1));
  expect_rejected<PayloadError>(*codec, bad, n, "k > N");
  bad = payload;
  put_u32(bad, kKOffset, k - 1);
  expect_rejected<PayloadError>(*codec, bad, n, "k one short (length mismatch)");
  bad = payload;
  bad[kLayoutOffset] = 2;
  expect_rejected<PayloadError>(*codec, bad, n, "unknown layout");
  bad = payload;
  bad[kLayoutOffset] = static_cast<uint8_t>(TopKLayout::kBitmap);
  expect_rejected<PayloadError>(*codec, bad, n, "layout flipped to bitmap");
}

TEST(TopKCorruption, Bitmap) {
  const size_t n = 203;  // 26 bitmap bytes, 3 bits of padding in the last
  auto codec = create_codec("topk:density=0.5,ef=0,warmup=0", tensor_of(n));
  Bytes payload;
  codec->encode(random_vector(n, 3), payload);
  ASSERT_EQ(payload[kLayoutOffset], static_cast<uint8_t>(TopKLayout::kBitmap));
  const size_t last_bitmap_byte = kBodyOffset + (n + 7) / 8 - 1;

  Bytes bad = payload;
  bad[last_bitmap_byte] |= 0x80;  // element 207: past N (bits 3..7 of the last byte pad)
  expect_rejected<PayloadError>(*codec, bad, n, "padding bit");
  // Clear one set bit: popcount k-1 != k.
  bad = payload;
  for (size_t b = kBodyOffset; b <= last_bitmap_byte; ++b) {
    if (bad[b] != 0) {
      bad[b] &= static_cast<uint8_t>(bad[b] - 1);
      break;
    }
  }
  expect_rejected<PayloadError>(*codec, bad, n, "popcount below k");
  bad = payload;
  for (size_t b = kBodyOffset; b <= last_bitmap_byte; ++b) {
    if (bad[b] != 0xff) {
      bad[b] |= static_cast<uint8_t>(bad[b] + 1);
      break;
    }
  }
  expect_rejected<PayloadError>(*codec, bad, n, "popcount above k");
  bad = payload;
  bad[kLayoutOffset] = static_cast<uint8_t>(TopKLayout::kIndexList);
  expect_rejected<PayloadError>(*codec, bad, n, "layout flipped to index list");
}

// --- 2bit body -----------------------------------------------------------------------------

TEST(TwoBitCorruption, CodeZeroOneThresholdAndPadding) {
  const size_t n = 203;  // 3 groups of 64 + a tail of 11: the last byte has 3 codes
  auto codec = create_codec("2bit:ef=0", tensor_of(n));
  Bytes payload;
  codec->encode(random_vector(n, 4), payload);
  const size_t codes = PayloadHeader::kSize + 4;
  ASSERT_EQ(payload.size(), codes + (n + 3) / 4);

  for (size_t byte = codes; byte < payload.size(); byte += 7) {
    for (int q = 0; q < 4; ++q) {
      if (byte == payload.size() - 1 && q == 3) continue;  // padding, tested below
      Bytes bad = payload;
      bad[byte] = static_cast<uint8_t>((bad[byte] & ~(3u << (2 * q))) | (1u << (2 * q)));
      expect_rejected<PayloadError>(*codec, bad, n, "code 01 at byte " + std::to_string(byte));
    }
  }
  Bytes bad = payload;
  bad.back() |= 0xc0;  // the 4th code of the last byte is padding
  expect_rejected<PayloadError>(*codec, bad, n, "padding bits");

  for (const float t : {0.0f, -0.5f, std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()}) {
    bad = payload;
    std::memcpy(bad.data() + PayloadHeader::kSize, &t, 4);
    expect_rejected<PayloadError>(*codec, bad, n, "threshold " + std::to_string(t));
  }
}

}  // namespace
}  // namespace gradwire::compress
