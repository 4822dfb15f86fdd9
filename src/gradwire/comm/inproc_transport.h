// InprocNetwork: Transport endpoints that are threads of one process, for fast tests of
// the parameter server without sockets.
//
// Each endpoint owns a mailbox (a queue guarded by a mutex and a condition variable);
// send() appends to the receiver's mailbox and never blocks on the receiver. When an
// endpoint is destroyed it leaves the network: later sends to it return false and its name
// may be taken again. The network must be owned by a std::shared_ptr (InprocNetwork::create)
// and lives as long as any of its endpoints.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "gradwire/comm/transport.h"

namespace gradwire::comm {

class InprocNetwork : public std::enable_shared_from_this<InprocNetwork> {
 public:
  static std::shared_ptr<InprocNetwork> create() { return std::make_shared<InprocNetwork>(); }

  // A new endpoint called `name`. Throws ConfigError when the name is empty or taken by a
  // live endpoint, or when this network is not owned by a std::shared_ptr.
  std::unique_ptr<Transport> endpoint(const std::string& name);

 private:
  friend class InprocEndpoint;
  struct Mailbox;

  bool deliver(const std::string& from, const std::string& to, std::span<const uint8_t> bytes);
  void leave(const std::string& name);

  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Mailbox>> mailboxes_;
};

}  // namespace gradwire::comm
