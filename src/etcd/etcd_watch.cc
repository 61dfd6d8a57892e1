#include "etcd/etcd_watch.h"

#include <grpcpp/grpcpp.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace vrdma::etcd {

bool Watch::open(etcdserverpb::Watch::Stub* stub, const std::string& prefix, int64_t start_revision,
                 int timeout_ms, std::string* error) {
  close();
  signal_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!signal_) {
    *error = std::string("watch: eventfd: ") + std::strerror(errno);
    return false;
  }
  {
    std::lock_guard lock(mu_);
    ctx_ = std::make_unique<grpc::ClientContext>();
    created_ = ended_ = compacted_ = false;
    end_reason_.clear();
    pending_.clear();
  }
  etcdserverpb::WatchRequest create;
  auto* c = create.mutable_create_request();
  c->set_key(prefix);
  c->set_range_end(prefix_end(prefix));
  c->set_start_revision(start_revision);
  thread_ = std::thread([this, stub, create = std::move(create)] { run(stub, create); });

  std::unique_lock lock(mu_);
  bool answered =
      cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return created_ || ended_; });
  if (created_ && !ended_) return true;
  *error = "watch: " +
           (answered ? end_reason_ : "not confirmed within " + std::to_string(timeout_ms) + " ms");
  lock.unlock();
  close();
  return false;
}

void Watch::run(etcdserverpb::Watch::Stub* stub, etcdserverpb::WatchRequest create) {
  grpc::ClientContext* ctx;
  {
    std::lock_guard lock(mu_);
    ctx = ctx_.get();
  }
  auto stream = stub->Watch(ctx);
  std::string reason;
  bool compacted = false;
  if (stream->Write(create)) {
    etcdserverpb::WatchResponse resp;
    while (stream->Read(&resp)) {
      std::vector<Event> events;
      for (const auto& e : resp.events()) {
        Event ev;
        ev.deleted = e.type() == etcdserverpb::Event::DELETE;
        ev.kv.key = e.kv().key();
        ev.kv.value = e.kv().value();
        ev.kv.lease = e.kv().lease();
        ev.kv.create_revision = e.kv().create_revision();
        ev.kv.mod_revision = e.kv().mod_revision();
        events.push_back(std::move(ev));
      }
      bool canceled = resp.canceled();
      {
        std::lock_guard lock(mu_);
        if (resp.created()) created_ = true;
        for (auto& ev : events) pending_.push_back(std::move(ev));
      }
      if (canceled) {
        reason = "canceled by etcd";
        if (!resp.cancel_reason().empty()) reason += ": " + resp.cancel_reason();
        if (resp.compact_revision() > 0) {
          compacted = true;
          reason += " (compacted up to revision " + std::to_string(resp.compact_revision()) + ")";
        }
        ctx->TryCancel();
        while (stream->Read(&resp)) {
        }
        break;
      }
      cv_.notify_all();
      notify();
    }
  }
  grpc::Status status = stream->Finish();
  if (reason.empty()) {
    reason = status.ok()                                          ? "etcd ended the stream"
             : status.error_code() == grpc::StatusCode::CANCELLED ? "closed"
                                                                  : status.error_message();
  }
  {
    std::lock_guard lock(mu_);
    ended_ = true;
    compacted_ = compacted;
    end_reason_ = reason;
  }
  cv_.notify_all();
  notify();
}

void Watch::notify() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(signal_.get(), &one, sizeof(one));
}

bool Watch::read(std::vector<Event>* events, std::string* error, bool* compacted) {
  uint64_t count;
  [[maybe_unused]] ssize_t n = ::read(signal_.get(), &count, sizeof(count));
  std::lock_guard lock(mu_);
  for (auto& e : pending_) events->push_back(std::move(e));
  pending_.clear();
  if (!ended_) return true;
  *error = "watch: " + end_reason_;
  *compacted = compacted_;
  return false;
}

void Watch::cancel() {
  std::lock_guard lock(mu_);
  if (ctx_) ctx_->TryCancel();
}

void Watch::close() {
  if (thread_.joinable()) {
    cancel();
    thread_.join();
  }
  std::lock_guard lock(mu_);
  ctx_.reset();
  pending_.clear();
}

}  // namespace vrdma::etcd
