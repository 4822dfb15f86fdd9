// Codec states for checkpoints (Codec::save_state / load_state): a codec that loads another
// one's state then sends, step after step, exactly (bit for bit) what that one sends, on the
// face the allreduce strategy drives it through and on the message face the other
// strategies use; a state that does not fit (truncated, corrupt, another codec's, another
// tensor's) is refused with PayloadError and changes nothing.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "codec_test_util.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"

namespace gradwire::compress {
namespace {

// A convolution weight: PowerSGD sees a 50 x 144 matrix, filter-topk 50 filters. 7200 is no
// multiple of the quantizers' 128-element groups, qsgd's 512-element buckets or the FFT
// chunks, so the tails are in play too.
const TensorInfo kTensor{"layer3.conv.weight", {50, 16, 3, 3}, LayerKind::kConvWeight};
constexpr size_t kSize = 7200;
const TensorInfo kSmallerTensor{"layer3.conv.weight", {40, 16, 3, 3}, LayerKind::kConvWeight};

// Every registered codec (EveryRegisteredCodecHasACase checks), with and without error
// feedback, with momentum, with warm-ups and schedules that run across the save, and with
// PowerSGD's dense start ending before, at and after it.
const std::vector<std::string> kSpecs = {
    "none",
    "none:ef=1",
    "fp16",
    "fp16:ef=1",
    "bf16",
    "bf16:ef=1",
    "int8",
    "int8:ef=0",
    "int8:momentum=0.9",
    "int4",
    "int4:block=16,ef=0",
    "topk:density=0.01",
    "topk:density=0.01,ef=0,warmup=8",
    "topk:density=0.01,warmup=8,momentum=0.9",
    "laplace-topk:density=0.01",
    "laplace-topk:density=0.01,warmup=10",
    "laplace-topk:density=0.01,center=median,momentum=0.9",
    "laplace-topk:density=0.01,ef=0",
    "gaussiank:density=0.01",
    "gaussiank:density=0.01,warmup=8,ef=0",
    "dgc:density=0.01",
    "dgc:density=0.01,momentum=0.9,warmup=10",
    "randomk:density=0.01",
    "randomk:density=0.01,warmup=8,seed=3,ef=0",
    "filter-topk",
    "filter-topk:ef=0",
    "filter-topk:rate=0.25,momentum=0.9",
    "2bit",
    "2bit:ef=0",
    "2bit:threshold=0.5",
    "2bit:momentum=0.9",
    "qsgd",
    "qsgd:ef=1,levels=4,seed=5",
    "terngrad",
    "terngrad:ef=1",
    "signsgd",
    "signsgd:ef=0",
    "signsgd:momentum=0.9",
    "spectral",
    "spectral:ef=0,chunk=4096",
    "spectral:theta=0.5,theta_end=0.9,theta_steps=8",
    "powersgd:rank=2",
    "powersgd:rank=2,start=3",
    "powersgd:rank=2,start=5",
    "powersgd:rank=2,start=7",
    "powersgd:rank=1,ef=0",
    "sparseloco",
    "sparseloco:chunk=64,density=0.1,bits=3,beta=1",
    "sparseloco:chunk=256,bits=1,ef=0",
};

// The gradient of step `step` in run `run`: its own seed, and a scale that shrinks as
// training goes on.
std::vector<float> gradient(int step, uint32_t run = 0) {
  return testing::random_vector(kSize, 1000 * run + static_cast<uint32_t>(step),
                                1.0f / (1.0f + 0.1f * static_cast<float>(step)));
}

enum class Face { kMessage, kAllreduce };

template <typename T>
void append(Bytes& out, std::span<const T> values) {
  ByteWriter(out).put_array<T>(values);
}

// One step of `codec` on gradient `g`, as a strategy drives it, as one of two ranks (the
// collectives are left out: a mean of this rank's values alone is the identity). Returns
// what the rank sends and, on the allreduce faces, what it is handed back.
//  * kMessage: encode() (parameter servers, gossip, allreduce of a non-additive codec).
//  * kAllreduce: the face AllreduceStrategy::start() picks: low-rank (PowerSGD matrices),
//    additive (to_wire with scale 1/W, then from_wire), shared-scale (int8), else encode().
Bytes step(Codec& codec, std::vector<float> g, Face face) {
  Bytes out;
  if (face == Face::kAllreduce) {
    if (LowRankFace* low_rank = codec.low_rank()) {
      if (low_rank->dense_now()) {
        low_rank->count_dense_step();
        append<float>(out, g);
        return out;
      }
      std::vector<float> p(low_rank->p_size()), q(low_rank->q_size());
      low_rank->begin(g, p);
      append<float>(out, p);
      low_rank->middle(p, q);
      append<float>(out, q);
      low_rank->end(q, g);
      append<float>(out, g);
      return out;
    }
    if (const auto wire = codec.additive_wire()) {
      out.resize(g.size() * wire_type_size(*wire));
      codec.to_wire(g, 0.5f, out.data());
      std::vector<float> back(g.size());
      codec.from_wire(out.data(), back);
      append<float>(out, back);
      return out;
    }
    if (SharedScaleFace* shared = codec.shared_scale()) {
      std::vector<float> maxima(shared->blocks());
      shared->local_maxima(g, maxima);
      append<float>(out, maxima);
      const int levels = shared_scale_levels(2);
      std::vector<int8_t> wire(g.size());
      shared->quantize(g, maxima, levels, wire.data());
      append<int8_t>(out, wire);
      shared->dequantize(wire.data(), maxima, levels, 2, g);
      append<float>(out, g);
      return out;
    }
  }
  codec.encode(g, out);
  return out;
}

Bytes state_of(const Codec& codec) {
  Bytes state;
  codec.save_state(state);
  return state;
}

// As AllreduceStrategy::load_state() loads each tensor's section: the codec reads its state
// and nothing may be left over (a stateless codec reads nothing).
void load(Codec& codec, std::span<const uint8_t> state) {
  ByteReader in(state);
  codec.load_state(in);
  in.expect_end("codec state");
}

::testing::AssertionResult same_bytes(const Bytes& a, const Bytes& b) {
  if (a == b) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return ::testing::AssertionFailure()
         << "sizes " << a.size() << " and " << b.size() << ", first difference at byte " << i;
}

std::string test_name(std::string text) {
  for (char& c : text) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return text;
}

TEST(CodecState, EveryRegisteredCodecHasACase) {
  std::set<std::string> canonical, names;
  for (const auto& spec : kSpecs) {
    EXPECT_TRUE(canonical.insert(canonical_spec(spec)).second) << spec << " is listed twice";
    names.insert(Spec::parse(spec).name);
  }
  for (const auto& name : codec_names()) EXPECT_EQ(names.count(name), 1u) << name;
}

class CodecStateTest : public ::testing::TestWithParam<std::tuple<std::string, Face>> {};

// Saved after 0 steps (before any buffer exists) and after 5; the codec that loads has run
// 3 steps of its own, so loading must replace all of its state.
TEST_P(CodecStateTest, ARestoredCodecSendsWhatTheSavedOneSends) {
  const auto& [spec, face] = GetParam();
  for (const int saved_at : {0, 5}) {
    SCOPED_TRACE(spec + ", saved after " + std::to_string(saved_at) + " steps");
    auto saved = create_codec(spec, kTensor);
    for (int s = 0; s < saved_at; ++s) step(*saved, gradient(s), face);
    const Bytes state = state_of(*saved);
    EXPECT_TRUE(same_bytes(state_of(*saved), state));  // saving changes nothing

    auto restored = create_codec(spec, kTensor);
    for (int s = 0; s < 3; ++s) step(*restored, gradient(s, 1), face);
    load(*restored, state);
    EXPECT_TRUE(same_bytes(state_of(*restored), state));
    for (int s = saved_at; s < saved_at + 5; ++s) {
      ASSERT_TRUE(same_bytes(step(*saved, gradient(s), face), step(*restored, gradient(s), face)))
          << "step " << s;
    }
    EXPECT_TRUE(same_bytes(state_of(*saved), state_of(*restored)));
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, CodecStateTest,
                         ::testing::Combine(::testing::ValuesIn(kSpecs),
                                            ::testing::Values(Face::kMessage, Face::kAllreduce)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, Face>>& info) {
                           return test_name(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) == Face::kMessage ? "_message"
                                                                             : "_allreduce");
                         });

// Codecs that carry nothing from one step to the next write nothing.
TEST(CodecState, StatelessCodecsWriteNothing) {
  for (const std::string spec :
       {"none", "fp16", "bf16", "int8:ef=0", "2bit:ef=0", "signsgd:ef=0", "filter-topk:ef=0"}) {
    auto codec = create_codec(spec, kTensor);
    for (int s = 0; s < 3; ++s) step(*codec, gradient(s), Face::kAllreduce);
    EXPECT_TRUE(state_of(*codec).empty()) << spec;
  }
  // PowerSGD sends a vector as it is.
  auto vector = create_codec("powersgd:rank=2", testing::tensor_of(kSize));
  for (int s = 0; s < 3; ++s) step(*vector, gradient(s), Face::kAllreduce);
  EXPECT_TRUE(state_of(*vector).empty());
}

// `bad` must be refused with PayloadError and leave `codec` exactly as `twin`, which was
// never offered it (the same state, and so, by the test above, the same payloads).
void expect_refused(Codec& codec, const Codec& twin, std::span<const uint8_t> bad,
                    const std::string& what) {
  try {
    load(codec, bad);
    ADD_FAILURE() << what << ": accepted";
  } catch (const PayloadError&) {
  }
  EXPECT_TRUE(same_bytes(state_of(codec), state_of(twin))) << what << ": the codec changed";
}

// Each case's state after 5 steps on the allreduce face, made once.
const std::map<std::string, Bytes>& saved_states() {
  static const std::map<std::string, Bytes> states = [] {
    std::map<std::string, Bytes> out;
    for (const auto& spec : kSpecs) {
      auto codec = create_codec(spec, kTensor);
      for (int s = 0; s < 5; ++s) step(*codec, gradient(s, 3), Face::kAllreduce);
      out[spec] = state_of(*codec);
    }
    return out;
  }();
  return states;
}

class CodecStateRefusalTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CodecStateRefusalTest, AStateThatDoesNotFitIsRefusedAndChangesNothing) {
  const std::string& spec = GetParam();
  auto codec = create_codec(spec, kTensor);
  auto twin = create_codec(spec, kTensor);
  for (int s = 0; s < 3; ++s) {
    step(*codec, gradient(s, 2), Face::kAllreduce);
    step(*twin, gradient(s, 2), Face::kAllreduce);
  }

  // Every other case's state (two stateless codecs' empty states fit each other: there is
  // nothing to tell apart).
  for (const auto& other : kSpecs) {
    if (other == spec) continue;
    const Bytes& state = saved_states().at(other);
    if (state.empty() && state_of(*codec).empty()) continue;
    expect_refused(*codec, *twin, state, "the state of " + other);
  }

  const Bytes& state = saved_states().at(spec);
  auto smaller = create_codec(spec, kSmallerTensor);
  for (int s = 0; s < 5; ++s) {
    step(*smaller, testing::random_vector(kSmallerTensor.numel(), static_cast<uint32_t>(s)),
         Face::kAllreduce);
  }
  const Bytes smaller_state = state_of(*smaller);
  if (!state.empty()) {
    // Truncated anywhere in the first 80 bytes (the header and the fields after it), and
    // further in (error feedback's residual, PowerSGD's Q and error, the inner section).
    std::set<size_t> cuts;
    for (size_t n = 0; n < std::min<size_t>(80, state.size()); ++n) cuts.insert(n);
    for (const size_t n :
         {state.size() / 4, state.size() / 2, state.size() - 9, state.size() - 1}) {
      if (n < state.size()) cuts.insert(n);
    }
    for (const size_t n : cuts) {
      expect_refused(*codec, *twin, std::span<const uint8_t>(state).first(n),
                     "truncated to " + std::to_string(n) + " bytes");
    }
    // Bytes after the state are the caller's to refuse (as AllreduceStrategy's expect_end
    // does), after the codec has loaded: a codec cannot tell where its section ends.
    Bytes longer = state;
    longer.push_back(0);
    EXPECT_THROW(load(*create_codec(spec, kTensor), longer), PayloadError);
    Bytes corrupt = state;
    corrupt[0] ^= 0x40;
    expect_refused(*codec, *twin, corrupt, "a corrupt tag");
    expect_refused(*codec, *twin, smaller_state, "the state of a smaller tensor");
  } else {
    EXPECT_TRUE(smaller_state.empty());
  }

  // After all that the codec goes on as its twin, and takes a state that fits.
  for (int s = 3; s < 6; ++s) {
    ASSERT_TRUE(same_bytes(step(*codec, gradient(s, 2), Face::kAllreduce),
                           step(*twin, gradient(s, 2), Face::kAllreduce)))
        << "step " << s;
  }
  load(*codec, state);
  EXPECT_TRUE(same_bytes(state_of(*codec), state));
}

INSTANTIATE_TEST_SUITE_P(Codecs, CodecStateRefusalTest, ::testing::ValuesIn(kSpecs),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return test_name(info.param);
                         });

std::string refusal_message(const std::string& loader, const TensorInfo& loader_tensor,
                            const Bytes& state) {
  auto codec = create_codec(loader, loader_tensor);
  try {
    load(*codec, state);
  } catch (const PayloadError& e) {
    return e.what();
  }
  ADD_FAILURE() << loader << " accepted the state";
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The messages say what was expected and what was found.
TEST(CodecState, RefusalsNameWhatWasExpectedAndWhatWasFound) {
  auto topk = create_codec("topk:density=0.01,ef=0", kTensor);
  const Bytes topk_state = state_of(*topk);

  const std::string codec = refusal_message("dgc:density=0.01,ef=0", kTensor, topk_state);
  EXPECT_TRUE(contains(codec, "codec 'topk'")) << codec;
  EXPECT_TRUE(contains(codec, "'dgc:")) << codec;

  const std::string params = refusal_message("topk:density=0.02,ef=0", kTensor, topk_state);
  EXPECT_TRUE(contains(params, "density=0.01")) << params;
  EXPECT_TRUE(contains(params, "density=0.02")) << params;

  const std::string ef = refusal_message("topk:density=0.01", kTensor, topk_state);
  EXPECT_TRUE(contains(ef, "ef=0")) << ef;
  EXPECT_TRUE(contains(ef, "ef=1")) << ef;

  const std::string size = refusal_message("topk:density=0.01,ef=0", kSmallerTensor, topk_state);
  EXPECT_TRUE(contains(size, "7200")) << size;
  EXPECT_TRUE(contains(size, "5760")) << size;

  const std::string empty = refusal_message("topk:density=0.01,ef=0", kTensor, Bytes{});
  EXPECT_TRUE(contains(empty, "no checkpoint state")) << empty;

  Bytes not_a_state = topk_state;
  not_a_state[0] ^= 0x40;
  const std::string tag = refusal_message("topk:density=0.01,ef=0", kTensor, not_a_state);
  EXPECT_TRUE(contains(tag, "not a codec checkpoint state")) << tag;
}

// Error feedback loads its inner codec's state before it can see that the section holds more
// than that codec reads: the inner codec's previous state goes back.
TEST(CodecState, ErrorFeedbackPutsItsInnerStateBackWhenTheSectionHasMore) {
  const std::string spec = "topk:density=0.01,warmup=8";
  auto source = create_codec(spec, kTensor);
  auto bare = create_codec("topk:density=0.01,warmup=8,ef=0", kTensor);
  for (int s = 0; s < 5; ++s) {
    step(*source, gradient(s), Face::kMessage);
    step(*bare, gradient(s), Face::kMessage);
  }
  // The state ends with the section: u64 length, then the inner (bare) codec's state.
  const Bytes state = state_of(*source);
  const size_t inner = state_of(*bare).size();
  ASSERT_GT(state.size(), inner + 8);
  Bytes bad = state;
  const size_t length_at = state.size() - inner - 8;
  uint64_t length;
  std::memcpy(&length, bad.data() + length_at, 8);
  ASSERT_EQ(length, inner);
  ++length;
  std::memcpy(bad.data() + length_at, &length, 8);
  bad.push_back(0);

  auto codec = create_codec(spec, kTensor);
  auto twin = create_codec(spec, kTensor);
  step(*codec, gradient(0, 1), Face::kMessage);
  step(*twin, gradient(0, 1), Face::kMessage);
  expect_refused(*codec, *twin, bad, "an inner section with a byte more");
  for (int s = 1; s < 10; ++s) {  // across the warm-up, whose position the inner codec holds
    ASSERT_TRUE(same_bytes(step(*codec, gradient(s, 1), Face::kMessage),
                           step(*twin, gradient(s, 1), Face::kMessage)))
        << "step " << s;
  }
}

}  // namespace
}  // namespace gradwire::compress
