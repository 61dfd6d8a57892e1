// One etcd watch stream (the client's private part). gRPC's synchronous stream blocks in
// Read(), so a reader thread owns the stream: it sends the create request, waits for etcd's
// confirmation, and queues every event, signalling an eventfd that the owner polls. close()
// cancels the stream and joins the thread; nothing blocks past the open timeout.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "etcd/etcd_api.grpc.pb.h"
#include "etcd/etcd_client.h"

namespace vrdma::etcd {

class Watch {
 public:
  ~Watch() { close(); }

  // Starts the stream and waits up to timeout_ms for etcd to confirm the watch.
  bool open(etcdserverpb::Watch::Stub* stub, const std::string& prefix, int64_t start_revision,
            int timeout_ms, std::string* error);
  int fd() const { return signal_.get(); }
  bool is_open() const { return thread_.joinable(); }
  // Takes what arrived. false when the stream ended (*error why; *compacted if etcd canceled
  // it because the start revision was compacted).
  bool read(std::vector<Event>* events, std::string* error, bool* compacted);
  // Ends the stream (if still open) and joins the reader. Safe to call twice.
  void close();
  // From any thread: ends the stream; the owner sees it end at its next read().
  void cancel();

 private:
  void run(etcdserverpb::Watch::Stub* stub, etcdserverpb::WatchRequest create);
  void notify();

  std::thread thread_;
  UniqueFd signal_;  // eventfd: events arrived, or the stream ended or was confirmed

  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<grpc::ClientContext> ctx_;  // the stream's; TryCancel() from any thread
  bool created_ = false;
  bool ended_ = false;
  bool compacted_ = false;
  std::string end_reason_;
  std::vector<Event> pending_;
};

}  // namespace vrdma::etcd
