// Writes the seed corpus of every fuzz target: valid payloads of each codec case (decode
// mode), float inputs (encode mode) and sample --compressor texts. Run by hand after a
// payload format or a case table changes:
//   build-sanitize/fuzz/gradwire_make_seed_corpus fuzz/corpus
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "codec_fuzz_cases.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/atomic_file.h"
#include "gradwire/strategy/ps/job.h"
#include "gradwire/strategy/ps/protocol.h"
#include "gradwire/strategy/ps/server_checkpoint.h"

namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// Laplace-like gradient values with a few outliers, as real gradients have.
std::vector<float> gradient_like(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::exponential_distribution<float> magnitude(200.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = (rng() & 1 ? 1.0f : -1.0f) * magnitude(rng);
    if (rng() % 97 == 0) v[i] *= 30.0f;
  }
  return v;
}

const char* const kSpecTexts[] = {"none",
                                  "fp16",
                                  "bf16:ef=1",
                                  "topk:density=0.01",
                                  "laplace-topk:density=0.001,center=median",
                                  "gaussiank",
                                  "dgc:density=0.001,sample=0.01,momentum=0.9",
                                  "randomk:density=0.1,seed=3",
                                  "filter-topk:rate=auto,p_max=0.3",
                                  "2bit",
                                  "2bit:threshold=0.5",
                                  "qsgd:levels=7,bucket=512",
                                  "terngrad:clip=2.5",
                                  "signsgd",
                                  "spectral:theta=0.9,chunk=1024,bits=8",
                                  "powersgd:rank=4",
                                  "hylo",
                                  "hylo:t_size=100,alpha=2,momentum=0.9",
                                  "conv=laplace-topk:density=0.01,fc=2bit,other=none",
                                  "conv=filter-topk,bias=fp16,norm=none"};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  size_t files = 0;
  for (const auto family : gradwire::fuzz::codec_family_names()) {
    const fs::path dir = root / std::string(family);
    fs::create_directories(dir);
    const auto& cases = gradwire::fuzz::codec_family(family);
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      const auto codec = gradwire::compress::create_codec(c.spec, c.tensor);
      const auto input = gradient_like(c.tensor.numel(), static_cast<uint32_t>(i + 1));
      // Two steps, so the second payload carries error-feedback state.
      for (int step = 0; step < 2; ++step) {
        gradwire::Bytes payload;
        codec->encode(input, payload);
        std::vector<uint8_t> seed{static_cast<uint8_t>(i)};
        seed.insert(seed.end(), payload.begin(), payload.end());
        write_file(dir / ("decode-" + std::to_string(i) + "-" + std::to_string(step)), seed);
        ++files;
      }
      std::vector<uint8_t> seed{static_cast<uint8_t>(gradwire::fuzz::kEncodeModeBit | i)};
      const auto* raw = reinterpret_cast<const uint8_t*>(input.data());
      seed.insert(seed.end(), raw, raw + std::min<size_t>(input.size(), 16) * sizeof(float));
      write_file(dir / ("encode-" + std::to_string(i)), seed);
      ++files;
    }
  }
  const fs::path spec_dir = root / "spec";
  fs::create_directories(spec_dir);
  size_t index = 0;
  for (const char* text : kSpecTexts) {
    const std::string s(text);
    write_file(spec_dir / ("spec-" + std::to_string(index++)), {s.begin(), s.end()});
    ++files;
  }
  // Parameter-server messages: one of each type, as a server or worker sends them.
  const fs::path ps_dir = root / "ps";
  fs::create_directories(ps_dir);
  namespace ps = gradwire::strategy::ps;
  ps::MessageHeader h;
  h.token = 0x0123456789abcdefULL;
  ps::HelloMessage hello;
  hello.config = ps::JobConfig{}.to_text();
  hello.slices.push_back(
      {0, {"fc.weight", {4, 2}, gradwire::compress::LayerKind::kFcWeight}, "none"});
  hello.has_initial = true;
  hello.initial.push_back(gradient_like(8, 1));
  const auto codec = gradwire::compress::create_codec("2bit", hello.slices[0].info);
  ps::SlicePayload slice{0, {}};
  codec->encode(gradient_like(8, 2), slice.payload);
  ps::PushMessage push;
  push.clock = 3;
  push.base_version = 2;
  push.stats = {64, 12.5, 1000, 4000};
  push.gradients.push_back(slice);
  ps::WeightsMessage weights;
  weights.version = 7;
  weights.progress = {128, 20.0, 2000, 8000, 2, false};
  weights.weights.push_back(slice);
  ps::FinalMessage final_message;
  final_message.weights = weights;
  final_message.staleness_histogram = {5, 3, 1};
  final_message.checksums = {"00ff00ff00ff00ff", ""};
  const std::vector<gradwire::Bytes> messages{ps::encode(h, hello),
                                              ps::encode(h, push),
                                              ps::encode(h, ps::ByeMessage{{64, 1.0, 8, 32}, "ab"}),
                                              ps::encode(h, weights),
                                              ps::encode(h, final_message),
                                              ps::encode_error(h, "no")};
  for (size_t i = 0; i < messages.size(); ++i) {
    write_file(ps_dir / ("message-" + std::to_string(i)), messages[i]);
    ++files;
  }
  // A parameter server's checkpoint, unframed (the fuzzer frames what it is given).
  const fs::path checkpoint_dir = root / "server_checkpoint";
  fs::create_directories(checkpoint_dir);
  ps::ServerCheckpoint checkpoint;
  checkpoint.version = 7;
  checkpoint.progress = {128, 20.0, 2000, 8000, 512};
  checkpoint.slices.push_back({"fc.weight", "2bit", gradient_like(8, 3)});
  checkpoint.slices.push_back({"fc.bias", "none", gradient_like(2, 4)});
  checkpoint.updater_state = {1, 2, 3, 4};
  checkpoint.staleness_counts = {5, 3, 1};
  write_file(checkpoint_dir / "checkpoint-0",
             gradwire::unframe_checkpoint(ps::encode_server_checkpoint(checkpoint)));
  ++files;
  std::printf("wrote %zu seed files under %s\n", files, root.c_str());
  return 0;
}
