// DistributedOptimizer::save_checkpoint and load_checkpoint (the contract is in
// distributed_optimizer.h).
//
// The file is core/atomic_file.h's framing (magic, version, length, CRC-32) around:
//   u32 tag "GWDO", u32 world size, string codec spec,
//   u64 parameter count, per parameter u64 numel and its fp32 values,
//   u64 buffer count, per buffer u64 bytes and the bytes (the buffers, then the frozen
//   parameters),
//   section: the wrapped optimizer's state (torch::serialize archive),
//   string: the caller's state,
//   per rank (world size of them) a section: that rank's strategy state, then, where the
//   ranks train apart between exchanges (DiLoCo), that rank's own model: its parameters,
//   buffers and optimizer state as above (the fields before are rank 0's).
// Rank 0 writes it; at load rank 0 reads it and broadcasts it, so only rank 0 needs the
// file (no shared file system is assumed).
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cstring>
#include <sstream>

#include "gradwire/comm/collectives.h"
#include "gradwire/core/atomic_file.h"
#include "gradwire/core/error.h"
#include "gradwire/torch/optimizer_impl.h"

namespace gradwire {
namespace {

constexpr uint32_t kCheckpointTag = 0x4f445747;  // "GWDO"

// Outcome of rank 0's part, broadcast so that every rank ends the same way.
enum class Outcome : uint8_t { kOk = 0, kAbsent = 1, kSystemError = 2, kPayloadError = 3 };

// Broadcasts rank 0's `bytes` (any size) to every rank.
void broadcast_bytes(comm::Collectives& c, int rank, Bytes& bytes) {
  uint64_t size = bytes.size();
  c.broadcast(&size, sizeof size, 0);
  if (rank != 0) bytes.resize(static_cast<size_t>(size));
  if (size > 0) c.broadcast(bytes.data(), bytes.size(), 0);
}

// Rank 0's outcome and its message (or payload) to every rank; a failure throws there.
void share_outcome(comm::Collectives& c, int rank, Outcome& outcome, Bytes& bytes) {
  uint8_t code = static_cast<uint8_t>(outcome);
  c.broadcast(&code, 1, 0);
  outcome = static_cast<Outcome>(code);
  broadcast_bytes(c, rank, bytes);
  const std::string message(bytes.begin(), bytes.end());
  if (outcome == Outcome::kSystemError) throw SystemError(message);
  if (outcome == Outcome::kPayloadError) throw PayloadError(message);
}

Bytes optimizer_state(torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  const std::string text = out.str();
  return Bytes(text.begin(), text.end());
}

void load_optimizer_state(torch::optim::Optimizer& optimizer, std::span<const uint8_t> state) {
  std::istringstream in(std::string(state.begin(), state.end()));
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(in);
    optimizer.load(archive);
  } catch (const c10::Error& e) {
    throw PayloadError(
        std::string("the checkpoint's optimizer state does not fit this optimizer: ") +
        e.what_without_backtrace());
  }
}

// Parameters, buffers and frozen parameters, as the file's first fields hold them.
using Tensors = std::vector<torch::Tensor>;

void put_model(ByteWriter& w, const Tensors& params, const Tensors& state) {
  w.put<uint64_t>(params.size());
  for (const auto& p : params) {
    w.put<uint64_t>(static_cast<uint64_t>(p.numel()));
    w.put_array<float>(std::span<const float>(p.data_ptr<float>(), p.numel()));
  }
  w.put<uint64_t>(state.size());
  for (const auto& b : state) {
    w.put<uint64_t>(b.nbytes());
    w.put_array<uint8_t>(
        std::span<const uint8_t>(static_cast<const uint8_t*>(b.data_ptr()), b.nbytes()));
  }
}

// What put_model() wrote, checked against this model (PayloadError naming `path`), as
// spans into the reader's bytes: the parameters, then the buffers and frozen parameters.
struct ModelBytes {
  std::vector<std::span<const uint8_t>> params, state;
};
ModelBytes get_model(ByteReader& in, const Tensors& params, const Tensors& state,
                     const std::string& path) {
  ModelBytes out;
  const auto param_count = in.get<uint64_t>("parameter count");
  if (param_count != params.size()) {
    throw PayloadError("checkpoint " + path + " holds " + std::to_string(param_count) +
                       " parameters; this model has " + std::to_string(params.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const auto numel = in.get<uint64_t>("parameter size");
    if (numel != static_cast<uint64_t>(params[i].numel())) {
      throw PayloadError("checkpoint " + path + ": parameter " + std::to_string(i) + " has " +
                         std::to_string(numel) + " elements; this model's has " +
                         std::to_string(params[i].numel()));
    }
    out.params.push_back(in.get_bytes(numel * sizeof(float), "parameter values"));
  }
  const auto buffer_count = in.get<uint64_t>("buffer count");
  if (buffer_count != state.size()) {
    throw PayloadError("checkpoint " + path + " holds " + std::to_string(buffer_count) +
                       " buffers and frozen parameters; this model has " +
                       std::to_string(state.size()));
  }
  for (size_t i = 0; i < state.size(); ++i) {
    const auto bytes = in.get<uint64_t>("buffer size");
    if (bytes != state[i].nbytes()) {
      throw PayloadError("checkpoint " + path + ": buffer " + std::to_string(i) + " has " +
                         std::to_string(bytes) + " bytes; this model's has " +
                         std::to_string(state[i].nbytes()));
    }
    out.state.push_back(in.get_bytes(bytes, "buffer values"));
  }
  return out;
}

void set_model(const Tensors& params, const Tensors& state, const ModelBytes& bytes) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    std::memcpy(params[i].data_ptr<float>(), bytes.params[i].data(), bytes.params[i].size());
  }
  for (size_t i = 0; i < state.size(); ++i) {
    std::memcpy(state[i].data_ptr(), bytes.state[i].data(), bytes.state[i].size());
  }
}

}  // namespace

void DistributedOptimizer::save_checkpoint(const std::string& path, const std::string& user_state) {
  Impl& m = *impl_;
  comm::Collectives& c = m.context->collectives();
  const int rank = m.context->rank();
  Bytes mine;
  m.strategy->save_state(mine);  // ConfigError, alike on every rank, for ps and gossip
  if (!m.strategy->exchanges_gradients()) {
    ByteWriter w(mine);
    put_model(w, m.params, m.state_tensors());
    put_section(mine, optimizer_state(*m.optimizer));
  }
  const std::vector<Bytes> states = c.allgather_bytes(mine);

  Outcome outcome = Outcome::kOk;
  Bytes message;
  if (rank == 0) {
    try {
      Bytes payload;
      ByteWriter w(payload);
      w.put<uint32_t>(kCheckpointTag);
      w.put<uint32_t>(static_cast<uint32_t>(m.context->world_size()));
      w.put_string(m.codec_spec);
      put_model(w, m.params, m.state_tensors());
      put_section(payload, optimizer_state(*m.optimizer));
      w.put_string(user_state);
      for (const Bytes& state : states) put_section(payload, state);
      write_file_atomically(path, frame_checkpoint(payload));
    } catch (const Error& e) {
      outcome = Outcome::kSystemError;
      const std::string text =
          "rank 0 could not write the checkpoint (the previous one, if any, "
          "is intact): " +
          std::string(e.what());
      message.assign(text.begin(), text.end());
    }
  }
  share_outcome(c, rank, outcome, message);
}

std::optional<std::string> DistributedOptimizer::load_checkpoint(const std::string& path) {
  Impl& m = *impl_;
  comm::Collectives& c = m.context->collectives();
  const int rank = m.context->rank();
  {
    Bytes probe;
    m.strategy->save_state(probe);  // refuses ps and gossip before any collective
  }
  Outcome outcome = Outcome::kOk;
  Bytes payload;
  if (rank == 0) {
    try {
      const auto file = read_file_if_exists(path);
      if (!file) {
        outcome = Outcome::kAbsent;
      } else {
        payload = unframe_checkpoint(*file);
      }
    } catch (const PayloadError& e) {
      outcome = Outcome::kPayloadError;
      const std::string text = "checkpoint " + path + ": " + e.what();
      payload.assign(text.begin(), text.end());
    } catch (const Error& e) {
      outcome = Outcome::kSystemError;
      const std::string text = e.what();
      payload.assign(text.begin(), text.end());
    }
  }
  share_outcome(c, rank, outcome, payload);
  if (outcome == Outcome::kAbsent) return std::nullopt;

  // Every rank parses the same bytes: a mismatch fails alike everywhere, before anything
  // of the model changes.
  ByteReader in(payload);
  if (in.get<uint32_t>("checkpoint tag") != kCheckpointTag) {
    throw PayloadError("checkpoint " + path + " is not a DistributedOptimizer checkpoint");
  }
  const auto world = in.get<uint32_t>("world size");
  if (static_cast<int>(world) != m.context->world_size()) {
    throw PayloadError("checkpoint " + path + " was saved by " + std::to_string(world) +
                       " ranks; this job has " + std::to_string(m.context->world_size()));
  }
  const std::string codec = in.get_string("codec spec");
  if (codec != m.codec_spec) {
    throw PayloadError("checkpoint " + path + " was saved with codec " + codec +
                       "; this job uses " + m.codec_spec);
  }
  const Tensors state = m.state_tensors();
  const ModelBytes model = get_model(in, m.params, state, path);
  ByteReader optimizer_section = get_section(in, "optimizer state");
  const auto optimizer_bytes =
      optimizer_section.get_bytes(optimizer_section.remaining(), "optimizer state");
  std::string user_state = in.get_string("caller's state");
  ByteReader my_state(std::span<const uint8_t>{});
  for (int r = 0; r < m.context->world_size(); ++r) {
    ByteReader section = get_section(in, "rank's exchange state");
    if (r == rank) my_state = section;
  }
  in.expect_end("checkpoint");

  set_model(m.params, state, model);
  load_optimizer_state(*m.optimizer, optimizer_bytes);
  m.strategy->load_state(my_state);
  if (!m.strategy->exchanges_gradients()) {  // this rank's own model, over rank 0's
    const ModelBytes own = get_model(my_state, m.params, state, path);
    ByteReader own_optimizer = get_section(my_state, "this rank's optimizer state");
    set_model(m.params, state, own);
    load_optimizer_state(*m.optimizer,
                         own_optimizer.get_bytes(own_optimizer.remaining(), "optimizer state"));
  }
  my_state.expect_end("exchange state");
  return user_state;
}

}  // namespace gradwire
