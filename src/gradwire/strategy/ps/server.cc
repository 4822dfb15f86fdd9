#include "gradwire/strategy/ps/server.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "gradwire/core/atomic_file.h"
#include "gradwire/core/error.h"
#include "gradwire/core/number_text.h"
#include "gradwire/strategy/ps/job.h"
#include "gradwire/strategy/ps/protocol.h"
#include "gradwire/strategy/ps/server_checkpoint.h"
#include "gradwire/strategy/ps/server_slice.h"
#include "gradwire/strategy/ps/staleness.h"
#include "gradwire/strategy/ps/updater.h"

namespace gradwire::strategy::ps {
namespace {

using Clock = std::chrono::steady_clock;

// The job cannot go on (its checkpoint directory is unusable, its checkpoint belongs to
// another model, BSP lost a worker): the server tells every worker and stops.
class JobFailure : public Error {
 public:
  using Error::Error;
};

// What a worker waits for from this server, if anything.
enum class Pending {
  kNothing,  // the worker is computing: the server waits on it
  kInitial,  // said hello; gets whole weights once the model is initialized
  kWeights,  // pushed; gets weights when the consistency model allows
  kFinal,    // said goodbye; the chief's answer waits until every worker finished
};

struct WorkerState {
  bool joined = false;
  bool done = false;  // said goodbye
  bool lost = false;
  Pending pending = Pending::kNothing;
  bool pushed_this_clock = false;  // BSP
  std::string peer;
  uint64_t clock = 0;  // pushes applied
  WorkerStats stats;
  std::string checksum;
  Clock::time_point last_heard;
  // Per slice: the weights this worker holds, kept only when read (keep_backups).
  std::vector<std::vector<float>> backup;

  bool live() const { return !done && !lost; }
};

}  // namespace

struct ParameterServer::Impl {
  comm::Transport& transport;
  ServerOptions options;
  ServerCounters counters;

  bool configured = false;
  bool initialized = false;
  std::string config_text;
  JobConfig config;
  std::vector<ServerSlice> slices;
  std::unique_ptr<Updater> updater;
  // w_bak(m) costs 4 N_s W bytes; it is kept only where something reads it: the
  // delay-compensating updaters and delta pulls.
  bool keep_backups = false;
  std::vector<WorkerState> workers;
  uint64_t version = 0;
  uint64_t last_checkpoint_version = 0;
  WorkerStats resumed;  // counters carried over from a checkpoint
  StalenessHistogram staleness;
  Clock::time_point configured_at;

  Impl(comm::Transport& t, ServerOptions o) : transport(t), options(std::move(o)) {
    if (!options.log) {
      const int index = options.index;
      options.log = [index](const std::string& line) {
        std::fprintf(stderr, "gradwire server %d: %s\n", index, line.c_str());
        std::fflush(stderr);
      };
    }
  }

  MessageHeader header() const {
    MessageHeader h;
    h.token = options.token;
    h.sender = static_cast<uint32_t>(options.index);
    return h;
  }

  void send(const WorkerState& worker, const Bytes& bytes) {
    if (!transport.send(worker.peer, bytes)) {
      options.log("could not reach " + printable_identity(worker.peer) +
                  " (gone?); message dropped");
    }
  }

  void send_error(const std::string& peer, const std::string& text) {
    transport.send(peer, encode_error(header(), text));
  }

  std::vector<SliceDescription> descriptions() const {
    std::vector<SliceDescription> out;
    for (const auto& s : slices) out.push_back(s.description);
    return out;
  }

  std::string checkpoint_path() const {
    return config.checkpoint_dir + "/server-" + std::to_string(options.index) + ".ckpt";
  }

  // --- configuration ------------------------------------------------------------------

  void configure(const HelloMessage& hello) {
    JobConfig c = JobConfig::from_text(hello.config);
    if (options.index >= c.num_servers) {
      throw ConfigError("server " + std::to_string(options.index) + " is not among the job's " +
                        std::to_string(c.num_servers) + " servers");
    }
    std::vector<ServerSlice> new_slices = make_server_slices(hello.slices, c.pull.codec);
    std::vector<size_t> sizes;
    for (const auto& s : new_slices) sizes.push_back(s.weights.size());
    UpdaterOptions updater_options = UpdaterOptions::parse(c.updater);
    updater_options.lr = c.lr;
    updater_options.momentum = c.momentum;
    updater_options.weight_decay = c.weight_decay;
    auto new_updater = std::make_unique<Updater>(updater_options, sizes, c.num_workers);
    if (!c.checkpoint_dir.empty()) {
      try {
        make_directories(c.checkpoint_dir);
      } catch (const Error& e) {
        throw JobFailure("server " + std::to_string(options.index) +
                         " cannot keep checkpoints: " + e.what());
      }
    }

    config = c;
    config_text = hello.config;
    slices = std::move(new_slices);
    updater = std::move(new_updater);
    keep_backups = c.pull.delta || reads_backup(updater_options.kind);
    workers.assign(c.num_workers, WorkerState{});
    configured_at = Clock::now();
    for (auto& w : workers) {
      w.last_heard = configured_at;
      w.backup.resize(slices.size());  // updates read backup[i]; filled only if keep_backups
    }
    configured = true;
    if (!config.checkpoint_dir.empty()) {
      try {
        restore();
      } catch (const Error& e) {
        throw JobFailure("server " + std::to_string(options.index) + " cannot resume: " + e.what() +
                         " (remove it, or use another --checkpoint-dir)");
      }
    }
  }

  // --- replies -------------------------------------------------------------------------

  Progress progress() const {
    Progress p;
    p.samples = resumed.samples;
    p.loss_sum = resumed.loss_sum;
    p.bytes_sent = resumed.bytes_sent;
    p.bytes_dense = resumed.bytes_dense;
    p.bytes_received = resumed.bytes_received;
    for (const auto& w : workers) {
      p.samples += w.stats.samples;
      p.loss_sum += w.stats.loss_sum;
      p.bytes_sent += w.stats.bytes_sent;
      p.bytes_dense += w.stats.bytes_dense;
      p.bytes_received += w.stats.bytes_received;
      p.live_workers += w.live() ? 1 : 0;
    }
    p.done = config.sample_budget > 0 && p.samples >= config.sample_budget;
    return p;
  }

  // Weights for worker `w`: whole (first contact), or through the pull codec, as they are
  // or as their delta against what it holds.
  WeightsMessage weights_for(WorkerState& w, bool whole) {
    WeightsMessage m;
    m.version = version;
    m.progress = progress();
    m.delta = !whole && config.pull.delta;
    const PullForm form = whole     ? PullForm::kWhole
                          : m.delta ? PullForm::kDelta
                                    : PullForm::kWeights;
    m.weights = encode_pull(slices, form, keep_backups ? &w.backup : nullptr);
    return m;
  }

  // The worker computes from here on: its silence counts from now.
  void reply_weights(WorkerState& w, bool whole) {
    w.pending = Pending::kNothing;
    w.last_heard = Clock::now();
    send(w, encode(header(), weights_for(w, whole)));
  }

  void reply_final(int index, WorkerState& w) {
    w.pending = Pending::kNothing;
    FinalMessage m;
    if (index == 0) {
      m.weights = weights_for(w, /*whole=*/true);
      m.staleness_histogram = staleness.counts();
      for (const auto& other : workers) m.checksums.push_back(other.lost ? "" : other.checksum);
    } else {
      m.weights.version = version;
      m.weights.progress = progress();
    }
    send(w, encode(header(), m));
  }

  uint64_t min_live_clock() const {
    uint64_t m = UINT64_MAX;
    for (const auto& w : workers) {
      if (w.live() && w.joined) m = std::min(m, w.clock);
      if (w.live() && !w.joined) m = 0;
    }
    return m;
  }

  bool all_finished() const {
    return std::all_of(workers.begin(), workers.end(),
                       [](const WorkerState& w) { return !w.live(); });
  }

  // Sends every held reply whose condition now holds.
  void release() {
    for (size_t i = 0; i < workers.size(); ++i) {
      auto& w = workers[i];
      if (w.lost) continue;
      switch (w.pending) {
        case Pending::kNothing:
          break;
        case Pending::kInitial:
          if (initialized) reply_weights(w, /*whole=*/true);
          break;
        case Pending::kWeights:
          switch (config.consistency.mode) {
            case Consistency::Mode::kBsp:
              if (!w.pushed_this_clock) reply_weights(w, false);  // the clock was applied
              break;
            case Consistency::Mode::kSsp:
              if (min_live_clock() + config.consistency.bound >= w.clock) reply_weights(w, false);
              break;
            case Consistency::Mode::kAsp:
              reply_weights(w, false);
              break;
          }
          break;
        case Pending::kFinal:
          if (i != 0 || all_finished()) reply_final(static_cast<int>(i), w);
          break;
      }
    }
  }

  // --- updates -------------------------------------------------------------------------

  void after_update() {
    ++version;
    counters.version = version;
    if (config.checkpoint_every > 0 &&
        version - last_checkpoint_version >= config.checkpoint_every) {
      checkpoint();
    }
  }

  void apply_bsp_if_complete() {
    bool any = false;
    for (const auto& w : workers) {
      if (!w.live()) continue;
      if (!w.joined || !w.pushed_this_clock) return;
      any = true;
    }
    if (!any) return;
    int count = 0;
    int reference = -1;
    for (size_t i = 0; i < workers.size(); ++i) {
      if (workers[i].pushed_this_clock) {
        ++count;
        if (reference < 0) reference = static_cast<int>(i);
      }
    }
    std::vector<SliceUpdate> updates;
    const float scale = 1.0f / static_cast<float>(count);
    for (size_t i = 0; i < slices.size(); ++i) {
      auto& s = slices[i];
      for (auto& v : s.sum) v *= scale;
      updates.push_back({i, s.weights, s.sum, workers[reference].backup[i]});
    }
    updater->apply(reference, 0, updates);
    for (auto& s : slices) std::fill(s.sum.begin(), s.sum.end(), 0.0f);
    for (auto& w : workers) {
      if (w.pushed_this_clock) {
        w.pushed_this_clock = false;
        ++w.clock;
      }
    }
    after_update();
  }

  void on_push(int index, WorkerState& w, const PushMessage& push) {
    if (!initialized || w.done)
      throw PayloadError("push before the model was initialized, or after goodbye");
    if (w.pending != Pending::kNothing) {
      throw PayloadError("push while the server still owes this worker an answer");
    }
    if (push.clock != w.clock) {
      throw PayloadError("push for clock " + std::to_string(push.clock) + " while at clock " +
                         std::to_string(w.clock));
    }
    if (!(push.lr > 0) || !std::isfinite(push.lr)) {
      throw PayloadError("push with learning rate " + std::to_string(push.lr));
    }
    if (push.base_version > version) {
      throw PayloadError("push computed on version " + std::to_string(push.base_version) +
                         ", newer than the server's " + std::to_string(version));
    }
    if (push.gradients.size() != slices.size()) {
      throw PayloadError("push with " + std::to_string(push.gradients.size()) + " slices for " +
                         std::to_string(slices.size()));
    }
    // Decode everything before touching the model: a bad payload changes nothing.
    std::vector<std::vector<float>> gradients(slices.size());
    for (size_t i = 0; i < slices.size(); ++i) {
      if (push.gradients[i].id != slices[i].description.id) {
        throw PayloadError("push slice " + std::to_string(push.gradients[i].id) + " where " +
                           std::to_string(slices[i].description.id) + " was expected");
      }
      gradients[i].assign(slices[i].weights.size(), 0.0f);
      slices[i].decoder->decode_add(push.gradients[i].payload, gradients[i]);
    }
    const uint64_t tau = version - push.base_version;
    staleness.add(tau);
    w.stats = push.stats;
    ++counters.pushes;
    updater->set_lr(push.lr);  // BSP: every push of a clock carries the same schedule
    if (config.consistency.mode == Consistency::Mode::kBsp) {
      for (size_t i = 0; i < slices.size(); ++i) {
        auto& sum = slices[i].sum;
        if (sum.size() != gradients[i].size()) sum.assign(gradients[i].size(), 0.0f);
        for (size_t j = 0; j < sum.size(); ++j) sum[j] += gradients[i][j];
      }
      w.pushed_this_clock = true;
      w.pending = Pending::kWeights;
      apply_bsp_if_complete();
    } else {
      std::vector<SliceUpdate> updates;
      for (size_t i = 0; i < slices.size(); ++i) {
        updates.push_back({i, slices[i].weights, gradients[i], w.backup[i]});
      }
      updater->apply(index, tau, updates);
      ++w.clock;
      w.pending = Pending::kWeights;
      after_update();
    }
  }

  void on_hello(int index, const std::string& peer, const HelloMessage& hello) {
    if (!configured) configure(hello);
    if (const std::string diff = hello_difference(config_text, descriptions(), hello);
        !diff.empty()) {
      send_error(peer, "server " + std::to_string(options.index) + ": worker " +
                           std::to_string(index) + " sent " + diff +
                           "; every worker must run the same configuration");
      options.log("refused worker " + std::to_string(index) + ": " + diff);
      return;
    }
    if (index >= static_cast<int>(workers.size())) {
      throw PayloadError("hello from worker " + std::to_string(index) + "; the job has " +
                         std::to_string(workers.size()));
    }
    WorkerState& w = workers[index];
    if (w.joined) throw PayloadError("second hello from worker " + std::to_string(index));
    w.joined = true;
    w.peer = peer;
    w.last_heard = Clock::now();
    w.pending = Pending::kInitial;
    if (!initialized && hello.has_initial) {
      for (size_t i = 0; i < slices.size(); ++i) slices[i].weights = hello.initial[i];
      initialized = true;
    }
  }

  void on_bye(WorkerState& w, const ByeMessage& bye) {
    if (w.done || w.pending != Pending::kNothing) {
      throw PayloadError("goodbye while the server owes this worker an answer, or after goodbye");
    }
    w.stats = bye.stats;
    w.checksum = bye.checksum;
    w.done = true;
    w.pending = bye.wants_final ? Pending::kFinal : Pending::kNothing;
    if (config.consistency.mode == Consistency::Mode::kBsp) apply_bsp_if_complete();
  }

  // --- the loop ------------------------------------------------------------------------

  void handle(const comm::Received& message) {
    ByteReader reader(message.bytes);
    const MessageHeader h = MessageHeader::read(reader);
    if (h.token != options.token) {
      ++counters.rejected_token;
      options.log("rejected a " + std::string(message_type_name(h.type)) + " message from " +
                  printable_identity(message.peer) + ": wrong job token");
      return;
    }
    if (configured && h.sender >= workers.size()) {
      throw PayloadError("sender " + std::to_string(h.sender) + " is not a worker of this job");
    }
    const int index = static_cast<int>(h.sender);
    if (h.type == MessageType::kHello) {
      on_hello(index, message.peer, parse_hello(reader));
      release();
      return;
    }
    if (!configured)
      throw PayloadError(std::string(message_type_name(h.type)) + " before any hello");
    WorkerState& w = workers[index];
    if (!w.joined || w.peer != message.peer) {
      throw PayloadError("worker " + std::to_string(index) + " has not said hello from " +
                         printable_identity(message.peer));
    }
    if (w.lost) throw PayloadError("worker " + std::to_string(index) + " was declared lost");
    w.last_heard = Clock::now();
    switch (h.type) {
      case MessageType::kPush:
        on_push(index, w, parse_push(reader));
        break;
      case MessageType::kBye:
        on_bye(w, parse_bye(reader));
        break;
      default:
        throw PayloadError(std::string("workers do not send ") + message_type_name(h.type));
    }
    release();
  }

  // A live worker the server is waiting on (no reply held for it) that has been silent
  // for worker_timeout_s is lost.
  void check_lost_workers() {
    if (!configured) return;
    const auto now = Clock::now();
    const auto timeout = std::chrono::duration<double>(config.worker_timeout_s);
    for (size_t i = 0; i < workers.size(); ++i) {
      auto& w = workers[i];
      if (!w.live() || w.pending != Pending::kNothing || now - w.last_heard < timeout) continue;
      const std::string what = "worker " + std::to_string(i) +
                               (w.joined ? " sent nothing" : " did not join") + " for " +
                               format_tenths(config.worker_timeout_s) + " s";
      if (config.consistency.mode == Consistency::Mode::kBsp && !config.continue_on_worker_loss) {
        const std::string text = what +
                                 ": presumed lost; BSP needs every worker (with "
                                 "--on-worker-loss continue the job goes on without it)";
        throw JobFailure("server " + std::to_string(options.index) + ": " + text);
      }
      w.lost = true;
      w.pending = Pending::kNothing;
      ++counters.lost_workers;
      options.log(what + ": presumed lost; going on with the others");
      if (config.consistency.mode == Consistency::Mode::kBsp) apply_bsp_if_complete();
      release();
    }
  }

  void fail(const std::string& text, const std::string& peer) {
    options.log(text);
    if (!peer.empty()) send_error(peer, text);
    for (auto& w : workers) {
      if (w.joined && w.live() && w.peer != peer) send_error(w.peer, text);
    }
  }

  void run() {
    const auto started = Clock::now();
    while (!(configured && all_finished())) {
      if (!configured && Clock::now() - started > options.first_hello_timeout) {
        throw TimeoutError("server " + std::to_string(options.index) +
                           ": no worker said hello within " +
                           format_tenths(options.first_hello_timeout.count() / 1000.0) + " s");
      }
      auto message = transport.receive(options.poll);
      if (message) {
        try {
          handle(*message);
        } catch (const JobFailure& e) {
          fail(e.what(), message->peer);
          throw;
        } catch (const ConfigError& e) {
          ++counters.malformed;
          options.log("refused a message from " + printable_identity(message->peer) + ": " +
                      e.what());
          send_error(message->peer, "server " + std::to_string(options.index) + ": " + e.what());
        } catch (const Error& e) {
          ++counters.malformed;
          options.log("dropped a message from " + printable_identity(message->peer) + ": " +
                      e.what());
        }
      }
      try {
        check_lost_workers();
      } catch (const JobFailure& e) {
        fail(e.what(), "");
        throw;
      }
    }
    if (config.checkpoint_every > 0 && version != last_checkpoint_version) checkpoint();
  }

  // --- checkpoints ---------------------------------------------------------------------

  void checkpoint() {
    ServerCheckpoint c;
    c.version = version;
    const Progress p = progress();
    c.progress = {p.samples, p.loss_sum, p.bytes_sent, p.bytes_dense, p.bytes_received};
    for (const auto& s : slices) {
      c.slices.push_back({s.description.info.name, s.description.codec, s.weights});
    }
    updater->save(c.updater_state);
    c.staleness_counts = staleness.counts();
    try {
      write_file_atomically(checkpoint_path(), encode_server_checkpoint(c));
      ++counters.checkpoints;
    } catch (const Error& e) {
      ++counters.checkpoint_failures;
      options.log(std::string("checkpoint failed, the previous one stays: ") + e.what());
    }
    last_checkpoint_version = version;
  }

  // Nothing changes unless the whole checkpoint is this job's.
  void restore() {
    const auto file = read_file_if_exists(checkpoint_path());
    if (!file) return;
    ServerCheckpoint c;
    try {
      c = decode_server_checkpoint(*file);
    } catch (const PayloadError& e) {
      throw PayloadError(checkpoint_path() + ": " + e.what());
    }
    check_checkpoint_fits(c, descriptions(), checkpoint_path());
    updater->load(c.updater_state);
    for (size_t i = 0; i < slices.size(); ++i) slices[i].weights = std::move(c.slices[i].weights);
    version = last_checkpoint_version = c.version;
    counters.version = c.version;
    resumed = c.progress;
    staleness = StalenessHistogram(c.staleness_counts);
    initialized = true;
    counters.resumed = true;
    options.log("resumed from " + checkpoint_path() + " at version " + std::to_string(c.version) +
                ", " + std::to_string(c.progress.samples) + " samples");
  }
};

ParameterServer::ParameterServer(comm::Transport& transport, ServerOptions options)
    : impl_(std::make_unique<Impl>(transport, std::move(options))) {}

ParameterServer::~ParameterServer() = default;

void ParameterServer::run() { impl_->run(); }

ServerCounters ParameterServer::counters() const { return impl_->counters; }

}  // namespace gradwire::strategy::ps
