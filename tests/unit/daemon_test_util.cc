#include "daemon_test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <fcntl.h>

#include "shm/rings.h"

#include <chrono>
#include <filesystem>

#include "common/log.h"

namespace vrdma::daemon::testing {

DaemonFixture::DaemonFixture(std::function<void(DaemonConfig&)> tweak) {
  char tmpl[] = "/tmp/vrdmad-test-XXXXXX";
  char* d = ::mkdtemp(tmpl);
  if (!d) throw std::runtime_error("mkdtemp failed");
  dir_ = d;
  socket_ = dir_ + "/vrdmad.sock";
  DaemonConfig cfg;
  cfg.socket_path = socket_;
  cfg.host_id = 7;
  cfg.allow_host_clients = true;  // every client of these tests is a process of the host
  if (tweak) tweak(cfg);
  if (const char* lvl = ::getenv("VRDMAD_TEST_LOG")) {
    if (auto l = parse_log_level(lvl)) set_log_level(*l);
  } else {
    set_log_level(LogLevel::kError);
  }
  daemon_ = std::make_unique<Daemon>(cfg);
  if (int err = daemon_->start())
    throw std::runtime_error(std::string("daemon start: ") + strerror(err));
  thread_ = std::thread([this] { daemon_->run(); });
}

void DaemonFixture::stop() {
  if (thread_.joinable()) {
    daemon_->stop();
    thread_.join();
  }
}

DaemonFixture::~DaemonFixture() {
  stop();
  daemon_.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

Conn Conn::open(const std::string& path) {
  int fd = unix_connect(path);
  EXPECT_GE(fd, 0) << "connect " << path << ": " << strerror(-fd);
  return Conn(fd);
}

Conn& Conn::operator=(Conn&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
    seq_ = o.seq_;
    async_ = std::move(o.async_);
  }
  return *this;
}

void Conn::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool Conn::recv(Packet& p, int timeout_ms, int* err) {
  pollfd pfd{fd_, POLLIN, 0};
  int n;
  do {
    n = ::poll(&pfd, 1, timeout_ms);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    if (err) *err = n == 0 ? -ETIMEDOUT : -errno;
    return false;
  }
  int rc = recv_packet(fd_, p, MSG_DONTWAIT);
  if (rc < 0) {
    if (err) *err = rc;
    return false;
  }
  return true;
}

bool Conn::call(proto::Op op, const void* payload, size_t len, Packet& reply,
                std::span<const int> fds) {
  uint32_t seq = seq_++;
  if (send_packet(fd_, op, seq, 0, payload, len, fds) != 0) return false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  for (;;) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) return false;
    if (!recv(reply, left)) return false;
    if (reply.header.seq == seq && reply.header.op == static_cast<uint16_t>(op)) return true;
    if (reply.header.seq == 0) {
      auto copy = std::make_unique<Packet>();
      copy->header = reply.header;
      std::memcpy(copy->payload, reply.payload, reply.header.len);
      copy->nfds = 0;
      reply.close_fds();
      async_.push_back(std::move(copy));
      continue;
    }
    reply.close_fds();
    ADD_FAILURE() << "unexpected packet op " << reply.header.op << " seq " << reply.header.seq;
    return false;
  }
}

bool Conn::take_async(Packet& p, int timeout_ms) {
  if (!async_.empty()) {
    p.header = async_.front()->header;
    std::memcpy(p.payload, async_.front()->payload, p.header.len);
    p.nfds = 0;
    async_.pop_front();
    return true;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0 || !recv(p, left)) return false;
    if (p.header.seq == 0) return true;
    p.close_fds();
  }
}

bool Conn::closed_by_daemon(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto p = std::make_unique<Packet>();
  for (;;) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) return false;
    int err = 0;
    if (recv(*p, left, &err)) {
      p->close_fds();
      continue;
    }
    return err == -ECONNRESET || err == -EPIPE;
  }
}

proto::HelloRep Conn::hello(proto::ClientKind kind) {
  proto::HelloReq req{proto::kVersion, static_cast<uint32_t>(kind)};
  auto p = std::make_unique<Packet>();
  proto::HelloRep rep{};
  bool ok = call(proto::Op::kHello, req, *p);
  EXPECT_TRUE(ok) << "no Hello reply";
  if (!ok) return rep;
  EXPECT_EQ(p->header.status, 0);
  if (const auto* r = p->as<proto::HelloRep>()) {
    rep = *r;
    client_id_ = r->client_id;
  } else
    ADD_FAILURE() << "Hello reply has " << p->header.len << " bytes";
  return rep;
}

std::string Conn::status() {
  auto p = std::make_unique<Packet>();
  if (!call(proto::Op::kStatus, nullptr, 0, *p) || p->header.status != 0) return {};
  return std::string(reinterpret_cast<const char*>(p->payload), p->header.len);
}

TestArena::TestArena(uint64_t size, uint32_t magic, bool sealed) : size_(size) {
  fd_ = ::memfd_create("vrdma-test-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(size)) < 0) throw std::runtime_error("memfd");
  if (sealed && ::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
    throw std::runtime_error("seal");
  base_ = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (base_ == MAP_FAILED) throw std::runtime_error("mmap");
  auto* h = header();
  h->magic = magic;
  h->version = shm::kArenaVersion;
  h->size = size;
  h->mr_slots = shm::kMrSlots;
  h->mr_table_offset = 1 << 20;
}

TestArena::~TestArena() {
  if (base_ && base_ != MAP_FAILED) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

TestObject::TestObject(uint32_t owner, bool sealed) {
  size_ = 8192;
  fd_ = ::memfd_create("vrdma-test-qp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(size_)) < 0) throw std::runtime_error("memfd");
  if (sealed && ::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
    throw std::runtime_error("seal");
  base_ = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (base_ == MAP_FAILED) throw std::runtime_error("mmap");
  auto* o = object();
  o->hdr.magic = shm::kObjectMagic;
  o->hdr.version = shm::kArenaVersion;
  o->hdr.kind = static_cast<uint32_t>(shm::ObjectKind::kQp);
  o->hdr.owner_client = owner;
  o->hdr.size = size_;
  o->hdr.ring_offset = sizeof(shm::QpObject);
  o->hdr.rq_offset = 1024;
  auto* ring = reinterpret_cast<shm::RecvRing*>(static_cast<char*>(base_) + o->hdr.ring_offset);
  shm::ring_init(ring, 4);
  auto* rq = reinterpret_cast<shm::RecvQueue*>(static_cast<char*>(base_) + o->hdr.rq_offset);
  shm::rq_init(rq, 4, 1);
}

TestObject::~TestObject() {
  if (base_ && base_ != MAP_FAILED) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

int put_fd(Conn& c, uint32_t fd_id, proto::FdKind kind, int fd, uint64_t size, uint32_t flags) {
  proto::PutFdReq req{fd_id, static_cast<uint32_t>(kind), size, flags, 0};
  auto p = std::make_unique<Packet>();
  if (!c.call(proto::Op::kPutFd, req, *p, std::span<const int>(&fd, 1))) return -1;
  return p->header.status;
}

int put_arena(Conn& c, TestArena& a) {
  return put_fd(c, shm::kArenaFdId, proto::FdKind::kArena, a.fd(), a.size());
}

int alloc_qpn(Conn& c, uint32_t type, uint32_t offset, uint32_t* qpn,
              std::vector<std::unique_ptr<TestObject>>* objects, uint32_t* object_fd_id,
              uint32_t pd) {
  auto obj = std::make_unique<TestObject>(c.client_id());
  uint32_t id = c.next_fd_id();
  if (int e = put_fd(c, id, proto::FdKind::kQpObject, obj->fd(), 8192)) return e;
  if (object_fd_id) *object_fd_id = id;
  if (objects) objects->push_back(std::move(obj));
  proto::AllocQpnReq req{type, offset, id, 0, 0, pd};
  auto p = std::make_unique<Packet>();
  if (!c.call(proto::Op::kAllocQpn, req, *p)) return -1;
  if (p->header.status == 0) {
    const auto* rep = p->as<proto::AllocQpnRep>();
    if (!rep) return -2;
    *qpn = rep->qpn;
  }
  return p->header.status;
}

int connect_qp(Conn& c, uint32_t local, uint32_t dest, const uint8_t* gid16,
               proto::ConnectQpRep* rep_out) {
  proto::ConnectQpReq req{};
  req.local_qpn = local;
  req.dest_qpn = dest;
  if (gid16) std::memcpy(req.dest_gid, gid16, 16);
  auto p = std::make_unique<Packet>();
  if (!c.call(proto::Op::kConnectQp, req, *p)) return -1;
  if (p->header.status == 0) {
    const auto* rep = p->as<proto::ConnectQpRep>();
    if (!rep) return -2;
    if (rep_out) *rep_out = *rep;
  }
  return p->header.status;
}

int get_fd(Conn& c, uint32_t owner, uint32_t fd_id, int* fd_out, uint32_t via_qpn) {
  proto::GetFdReq req{owner, fd_id, via_qpn, 0};
  auto p = std::make_unique<Packet>();
  *fd_out = -1;
  if (!c.call(proto::Op::kGetFd, req, *p)) return -1;
  if (p->header.status == 0) {
    if (p->nfds != 1) {
      p->close_fds();
      return -2;
    }
    *fd_out = p->fds[0];
  } else if (p->nfds) {
    p->close_fds();
    return -3;
  }
  return p->header.status;
}

int alloc_key(Conn& c, uint32_t index, uint32_t* key, uint32_t access, uint32_t pd) {
  proto::AllocKeyReq req{index, access, 4096, pd, 0};
  auto p = std::make_unique<Packet>();
  if (!c.call(proto::Op::kAllocKey, req, *p)) return -1;
  if (p->header.status == 0) {
    const auto* rep = p->as<proto::AllocKeyRep>();
    if (!rep) return -2;
    *key = rep->key;
  }
  return p->header.status;
}

uint32_t expected_ipv4() {
  ifaddrs* list = nullptr;
  uint32_t ip = htonl(INADDR_LOOPBACK);
  if (::getifaddrs(&list) != 0) return ip;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
        !(i->ifa_flags & IFF_LOOPBACK)) {
      ip = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      break;
    }
  }
  ::freeifaddrs(list);
  return ip;
}

}  // namespace vrdma::daemon::testing
