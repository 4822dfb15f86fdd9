// Codec states for checkpoints (Codec::save_state / load_state): a codec restored from a
// saved state encodes every following step exactly as the saved one does, and a state that
// does not fit is refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codec_test_util.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

constexpr size_t kSize = 4096;

std::vector<float> gradient(int step) { return testing::random_vector(kSize, 1000 + step); }

class CodecStateTest : public ::testing::TestWithParam<std::string> {};

// 5 steps, save, a fresh codec loads it; then both encode 5 more steps alike.
TEST_P(CodecStateTest, ARestoredCodecEncodesAsTheSavedOne) {
  const TensorInfo tensor = testing::tensor_of(kSize);
  auto saved = create_codec(GetParam(), tensor);
  for (int step = 0; step < 5; ++step) testing::encode(*saved, gradient(step));
  Bytes state;
  saved->save_state(state);
  auto restored = create_codec(GetParam(), tensor);
  ByteReader in(state);
  restored->load_state(in);
  in.expect_end("codec state");
  for (int step = 5; step < 10; ++step) {
    EXPECT_EQ(testing::encode(*saved, gradient(step)), testing::encode(*restored, gradient(step)))
        << GetParam() << ", step " << step;
  }
}

// Specs whose codecs carry state: error feedback (residual, momentum), warm-up schedules,
// thresholds, random streams, the spectral schedule.
INSTANTIATE_TEST_SUITE_P(
    Codecs, CodecStateTest,
    ::testing::Values("none", "fp16", "topk:density=0.01", "topk:density=0.01,warmup=8",
                      "topk:density=0.01,momentum=0.9", "laplace-topk:density=0.01,warmup=8",
                      "dgc:density=0.01,warmup=8", "gaussiank:density=0.01",
                      "randomk:density=0.01,warmup=8", "2bit", "qsgd", "terngrad", "signsgd",
                      "spectral", "qsgd:ef=1"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      std::string name;
      for (const char c : info.param) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

// PowerSGD's allreduce face: Q (the warm start), the error and the dense start's count.
TEST(CodecState, PowerSgdRestoresItsFactorsAndError) {
  TensorInfo matrix;
  matrix.name = "fc.weight";
  matrix.shape = {64, 64};
  const std::string spec = "powersgd:rank=2,start=2";
  auto saved = create_codec(spec, matrix);
  auto restored = create_codec(spec, matrix);
  const auto run_step = [](Codec& codec, const std::vector<float>& g) {
    LowRankFace& face = *codec.low_rank();
    std::vector<float> out = g;
    if (face.dense_now()) {
      face.count_dense_step();
      return out;
    }
    std::vector<float> p(face.p_size()), q(face.q_size());
    face.begin(g, p);
    face.middle(p, q);
    face.end(q, out);
    return out;
  };
  for (int step = 0; step < 5; ++step) {
    run_step(*saved, testing::random_vector(64 * 64, static_cast<uint32_t>(step)));
  }
  Bytes state;
  saved->save_state(state);
  ByteReader in(state);
  restored->load_state(in);
  for (int step = 5; step < 8; ++step) {
    const auto g = testing::random_vector(64 * 64, static_cast<uint32_t>(step));
    EXPECT_EQ(run_step(*saved, g), run_step(*restored, g)) << "step " << step;
  }
}

TEST(CodecState, AStateThatDoesNotFitIsRefusedAndChangesNothing) {
  const TensorInfo tensor = testing::tensor_of(kSize);
  auto topk = create_codec("topk:density=0.01", tensor);  // error feedback by default
  for (int step = 0; step < 3; ++step) testing::encode(*topk, gradient(step));
  Bytes state;
  topk->save_state(state);

  auto other = create_codec("2bit", tensor);
  ByteReader wrong(state);
  EXPECT_THROW(other->load_state(wrong), PayloadError);  // another codec's

  auto fresh = create_codec("topk:density=0.01", tensor);
  const Bytes before = testing::encode(*create_codec("topk:density=0.01", tensor), gradient(9));
  Bytes truncated(state.begin(), state.begin() + static_cast<long>(state.size() / 2));
  ByteReader cut(truncated);
  EXPECT_THROW(fresh->load_state(cut), PayloadError);
  EXPECT_EQ(testing::encode(*fresh, gradient(9)), before);  // still a fresh codec
}

}  // namespace
}  // namespace gradwire::compress
