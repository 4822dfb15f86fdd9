#include "gradwire/comm/inproc_transport.h"

#include <condition_variable>
#include <deque>

#include "gradwire/core/error.h"

namespace gradwire::comm {

struct InprocNetwork::Mailbox {
  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<Received> queue;
};

class InprocEndpoint : public Transport {
 public:
  InprocEndpoint(std::shared_ptr<InprocNetwork> network, std::string name,
                 std::shared_ptr<InprocNetwork::Mailbox> mailbox)
      : network_(std::move(network)), name_(std::move(name)), mailbox_(std::move(mailbox)) {}
  ~InprocEndpoint() override { network_->leave(name_); }

  InprocEndpoint(const InprocEndpoint&) = delete;
  InprocEndpoint& operator=(const InprocEndpoint&) = delete;

  const std::string& name() const override { return name_; }

  bool send(const std::string& peer, std::span<const uint8_t> bytes) override {
    return network_->deliver(name_, peer, bytes);
  }

  std::optional<Received> receive(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + std::max(timeout, timeout.zero());
    std::unique_lock lock(mailbox_->mutex);
    if (!mailbox_->arrived.wait_until(lock, deadline, [&] { return !mailbox_->queue.empty(); })) {
      return std::nullopt;
    }
    Received message = std::move(mailbox_->queue.front());
    mailbox_->queue.pop_front();
    return message;
  }

 private:
  std::shared_ptr<InprocNetwork> network_;
  std::string name_;
  std::shared_ptr<InprocNetwork::Mailbox> mailbox_;
};

std::unique_ptr<Transport> InprocNetwork::endpoint(const std::string& name) {
  std::shared_ptr<InprocNetwork> self = weak_from_this().lock();
  if (!self) {
    throw ConfigError(
        "an InprocNetwork must be owned by a std::shared_ptr; create it with "
        "InprocNetwork::create()");
  }
  if (name.empty()) throw ConfigError("an inproc endpoint needs a non-empty name");
  auto mailbox = std::make_shared<Mailbox>();
  {
    std::lock_guard lock(mutex_);
    if (!mailboxes_.emplace(name, mailbox).second) {
      throw ConfigError("inproc endpoint name '" + name +
                        "' is already taken; give every endpoint a distinct name");
    }
  }
  return std::make_unique<InprocEndpoint>(std::move(self), name, std::move(mailbox));
}

bool InprocNetwork::deliver(const std::string& from, const std::string& to,
                            std::span<const uint8_t> bytes) {
  // The network lock is held while the message is queued, so once leave() returned no
  // send to that name can succeed. Lock order is always network, then mailbox. The bytes
  // are copied before taking the lock.
  Received message{from, Bytes(bytes.begin(), bytes.end())};
  std::lock_guard lock(mutex_);
  auto it = mailboxes_.find(to);
  if (it == mailboxes_.end()) return false;
  Mailbox& mailbox = *it->second;
  {
    std::lock_guard mailbox_lock(mailbox.mutex);
    mailbox.queue.push_back(std::move(message));
  }
  mailbox.arrived.notify_one();
  return true;
}

void InprocNetwork::leave(const std::string& name) {
  std::lock_guard lock(mutex_);
  mailboxes_.erase(name);
}

}  // namespace gradwire::comm
