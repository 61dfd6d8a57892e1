// The router's links apart from the router: frame checks, the frame parser, and two Links over
// a socket pair with mutual TLS (certificates made by the openssl command in a temporary
// directory): what is carried arrives intact, and what is not a host of the cluster's CA, or
// not the host the other side meant to reach, is refused in the handshake.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "transport/frame_check.h"
#include "transport/frame_parser.h"
#include "daemon/router/link.h"
#include "daemon/router/tls.h"

namespace vrdma::daemon {
namespace {

namespace fs = std::filesystem;

// What the router's epoll tells a link before a pass reads it (Link::rx_ready): whether its
// socket has bytes. A poll() stands in for it here.
void look(Link& l) {
  pollfd p{l.fd(), POLLIN, 0};
  if (::poll(&p, 1, 0) == 1) l.rx_ready = true;
}

// Link::receive as the router calls it.
bool receive(Link& l, LinkHandler& h, size_t budget, const char** why) {
  look(l);
  return l.receive(h, budget, why);
}

uint32_t ip(const char* text) {
  uint32_t v = 0;
  EXPECT_EQ(inet_pton(AF_INET, text, &v), 1);
  return v;
}

// ---- frame checks and the parser -------------------------------------------------------

wire::Request write_request(uint64_t len) {
  wire::Request r{};
  r.opcode = IBV_WR_RDMA_WRITE;
  r.qp_type = IBV_QPT_RC;
  r.length = len;
  return r;
}

TEST(RouterFrames, HeaderChecks) {
  const char* why = nullptr;
  wire::Header h{};
  h.type = 200;
  EXPECT_FALSE(wire::check_header(h, &why));
  h.type = static_cast<uint8_t>(wire::Type::kHello);
  h.payload = 10;
  EXPECT_FALSE(wire::check_header(h, &why));  // a Hello has no payload
  h.type = static_cast<uint8_t>(wire::Type::kRequest);
  h.payload = wire::kMaxPayload + 1;
  EXPECT_FALSE(wire::check_header(h, &why));
  h.payload = wire::kMaxPayload;
  EXPECT_TRUE(wire::check_header(h, &why));
}

TEST(RouterFrames, BodyChecks) {
  const char* why = nullptr;
  auto ok = [&](const wire::Request& r, uint32_t payload) {
    return wire::check_frame(wire::Type::kRequest, reinterpret_cast<const uint8_t*>(&r), payload,
                             &why);
  };
  EXPECT_TRUE(ok(write_request(4096), 4096));
  EXPECT_FALSE(ok(write_request(4096), 100));  // payload not the length it announces
  wire::Request read = write_request(4096);
  read.opcode = IBV_WR_RDMA_READ;
  EXPECT_TRUE(ok(read, 0));
  EXPECT_FALSE(ok(read, 4096));  // a READ carries nothing
  read.qp_type = IBV_QPT_UC;
  EXPECT_FALSE(ok(read, 0));  // no READ on UC
  wire::Request atomic = write_request(16);
  atomic.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  EXPECT_FALSE(ok(atomic, 0));  // atomics are 8 bytes
  wire::Request bad = write_request(0);
  bad.opcode = 77;
  EXPECT_FALSE(ok(bad, 0));
  wire::Hello hello{0x1234, wire::kVersion, 1, 0, 0};
  EXPECT_FALSE(wire::check_frame(wire::Type::kHello, reinterpret_cast<const uint8_t*>(&hello), 0,
                                 &why));
  wire::Cm cm{};
  cm.len = sizeof(cm.body) + 1;
  EXPECT_FALSE(
      wire::check_frame(wire::Type::kCm, reinterpret_cast<const uint8_t*>(&cm), 0, &why));
}

// Frames as a sender puts them on the wire.
void append_frame(std::vector<uint8_t>& out, wire::Type type, const void* body, size_t len,
                  const std::vector<uint8_t>& payload = {}) {
  wire::Header h{};
  h.type = static_cast<uint8_t>(type);
  h.payload = static_cast<uint32_t>(payload.size());
  auto* p = reinterpret_cast<const uint8_t*>(&h);
  out.insert(out.end(), p, p + sizeof(h));
  p = static_cast<const uint8_t*>(body);
  out.insert(out.end(), p, p + len);
  out.insert(out.end(), payload.begin(), payload.end());
}

struct Recorder : FrameSink {
  std::vector<wire::Type> types;
  std::vector<uint8_t> placed, sunk;
  int payloads = 0;
  bool use_sink = false;
  bool on_frame(wire::Type type, const uint8_t*, uint32_t payload, PayloadDest& dest,
                const char**) override {
    types.push_back(type);
    if (payload && use_sink) {
      dest.kind = PayloadDest::Kind::kSink;
    } else if (payload) {
      placed.assign(payload, 0);
      dest.kind = PayloadDest::Kind::kPlace;
      dest.segs[0] = shm::Seg{placed.data(), payload / 2};
      dest.segs[1] = shm::Seg{placed.data() + payload / 2, payload - payload / 2};
      dest.nsegs = 2;
    }
    return true;
  }
  void on_payload_data(const uint8_t* d, size_t n) override { sunk.insert(sunk.end(), d, d + n); }
  void on_payload() override { ++payloads; }
};

TEST(RouterFrames, ParserTakesAStreamCutAnywhere) {
  std::vector<uint8_t> payload(3000);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> stream;
  wire::Ping ping{42};
  append_frame(stream, wire::Type::kPing, &ping, sizeof(ping));
  wire::Request r = write_request(payload.size());
  append_frame(stream, wire::Type::kRequest, &r, sizeof(r), payload);
  append_frame(stream, wire::Type::kPong, &ping, sizeof(ping));
  for (bool sink : {false, true}) {
    FrameParser p;
    Recorder rec;
    rec.use_sink = sink;
    const char* why = nullptr;
    for (uint8_t b : stream) ASSERT_TRUE(p.feed(&b, 1, rec, &why)) << why;  // byte by byte
    EXPECT_EQ(rec.types, (std::vector<wire::Type>{wire::Type::kPing, wire::Type::kRequest,
                                                  wire::Type::kPong}));
    EXPECT_EQ(rec.payloads, 1);
    EXPECT_EQ(sink ? rec.sunk : rec.placed, payload);
    EXPECT_TRUE(p.idle());
  }
}

TEST(RouterFrames, ParserRefusesAMalformedFrameBeforeItsPayload) {
  std::vector<uint8_t> stream;
  wire::Request r = write_request(1 << 30);  // announces 1 GiB...
  std::vector<uint8_t> some(100);
  append_frame(stream, wire::Type::kRequest, &r, sizeof(r), some);  // ...carries 100 bytes
  // The header says 100 bytes of payload, the body 1 GiB: refused at the body, nothing kept.
  FrameParser p;
  Recorder rec;
  const char* why = nullptr;
  EXPECT_FALSE(p.feed(stream.data(), stream.size(), rec, &why));
  EXPECT_NE(why, nullptr);
  EXPECT_TRUE(rec.types.empty());
}

// ---- TLS -------------------------------------------------------------------------------

// A CA, hosts 1 and 2 of it (router addresses 10.76.0.2 and .3), and host 1 of another CA.
class Pki {
 public:
  Pki() {
    char tmpl[] = "/tmp/vrdma-pki-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ok_ = ca("ca") && ca("other-ca") && host("ca", "host-1", "vrdma-host-1", "10.76.0.2") &&
          host("ca", "host-2", "vrdma-host-2", "10.76.0.3") &&
          host("other-ca", "rogue-1", "vrdma-host-1", "10.76.0.2") &&
          host("ca", "nameless", "somebody", "10.76.0.2");
  }
  ~Pki() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  bool ok() const { return ok_; }
  TlsFiles files(const std::string& stem, const std::string& ca = "ca") const {
    return {path(ca + ".pem"), path(stem + ".pem"), path(stem + ".key")};
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  bool run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }
  bool ca(const std::string& stem) {
    return run("openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
               "-keyout " + path(stem + ".key") + " -out " + path(stem + ".pem") +
               " -subj /CN=" + stem + " -days 2 -addext basicConstraints=critical,CA:TRUE "
               "-addext keyUsage=critical,keyCertSign");
  }
  bool host(const std::string& ca, const std::string& stem, const std::string& cn,
            const std::string& addr) {
    return run("openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
               "-keyout " + path(stem + ".key") + " -out " + path(stem + ".pem") + " -subj /CN=" +
               cn + " -days 2 -CA " + path(ca + ".pem") + " -CAkey " + path(ca + ".key") +
               " -addext subjectAltName=IP:" + addr);
  }
  std::string dir_;
  bool ok_ = false;
};

struct Collect : LinkHandler {
  std::vector<uint8_t> data;
  int frames = 0;
  bool on_frame(transport::Link&, wire::Type, const uint8_t*, uint32_t payload, PayloadDest& dest,
                const char**) override {
    ++frames;
    if (payload) {
      size_t at = data.size();
      data.resize(at + payload);
      dest.kind = PayloadDest::Kind::kPlace;
      dest.segs[0] = shm::Seg{data.data() + at, payload};
      dest.nsegs = 1;
    }
    return true;
  }
  void on_payload_data(transport::Link&, const uint8_t*, size_t) override {}
  void on_payload(transport::Link&) override {}
};

// An inbound link reads nothing but its Hello until that authenticated it: what follows stays
// unread (in the socket, or in the TLS layer), for the router thread its lane belongs to, and
// arrives intact once the link is authenticated (router_pool.h).
void expect_hello_first(Link& out, Link& in) {
  wire::Hello hello{wire::kMagic, wire::kVersion, 1, 2, 7};
  ASSERT_TRUE(out.send(wire::Type::kHello, &hello, sizeof(hello)));
  std::vector<uint8_t> sent(3 * 20000);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<uint8_t>(i * 13 + 5);
  for (int f = 0; f < 3; ++f) {
    wire::Request r = write_request(20000);
    shm::Seg seg{sent.data() + f * 20000, 20000};
    ASSERT_TRUE(out.send(wire::Type::kRequest, &r, sizeof(r), &seg, 1, 20000));
  }
  for (int i = 0; i < 1000 && out.tx_pending(); ++i) ASSERT_TRUE(out.flush(i + 1));
  ASSERT_FALSE(out.tx_pending());
  Collect got;
  const char* why = nullptr;
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(receive(in, got, 1 << 20, &why)) << why;
  EXPECT_EQ(got.frames, 1) << "only the Hello";
  EXPECT_EQ(in.bytes_in, sizeof(wire::Header) + sizeof(wire::Hello));
  in.authenticated = true;
  in.renumber(9);  // as another thread's Router takes it
  EXPECT_EQ(in.id(), 9u);
  for (int i = 0; i < 1000 && got.data.size() < sent.size(); ++i)
    ASSERT_TRUE(receive(in, got, 1 << 20, &why)) << why;
  EXPECT_EQ(got.frames, 4);
  EXPECT_TRUE(got.data == sent);
}

// Runs both handshakes until each side finished or failed: 1 both open, else -1 (whys set).
int shake(Link& a, Link& b, std::string* wa, std::string* wb) {
  int ra = 0, rb = 0;
  for (int i = 0; i < 1000 && (ra == 0 || rb == 0); ++i) {
    look(a);
    look(b);
    if (ra == 0) ra = a.handshake(wa);
    if (rb == 0) rb = b.handshake(wb);
  }
  return ra == 1 && rb == 1 ? 1 : -1;
}

class RouterTls : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "no openssl command";
    ASSERT_TRUE(pki_.ok());
  }
  // Host `client` connects to host `server`'s router, expecting it at `expect`.
  void pair(const TlsFiles& client, const TlsFiles& server, const char* expect) {
    std::string err;
    cctx_ = TlsContext::load(client, &err);
    ASSERT_TRUE(cctx_) << err;
    sctx_ = TlsContext::load(server, &err);
    ASSERT_TRUE(sctx_) << err;
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    out_ = std::make_unique<Link>(1, UniqueFd(sv[0]), true);
    in_ = std::make_unique<Link>(2, UniqueFd(sv[1]), false);
    in_->authenticated = true;  // as if its Hello had passed: frames flow
    out_->use_tls(cctx_->new_session(sv[0], true, ip(expect), &err));
    in_->use_tls(sctx_->new_session(sv[1], false, 0, &err));
    out_->tcp_connected();
  }
  Pki pki_;
  std::unique_ptr<TlsContext> cctx_, sctx_;
  std::unique_ptr<Link> out_, in_;
};

TEST_F(RouterTls, MutualHandshakeCarriesFramesIntact) {
  pair(pki_.files("host-1"), pki_.files("host-2"), "10.76.0.3");
  std::string wo, wi;
  ASSERT_EQ(shake(*out_, *in_, &wo, &wi), 1) << wo << " / " << wi;
  uint32_t id = 0;
  ASSERT_TRUE(tls_peer_host_id(out_->ssl(), &id));
  EXPECT_EQ(id, 2u);
  ASSERT_TRUE(tls_peer_host_id(in_->ssl(), &id));
  EXPECT_EQ(id, 1u);
  EXPECT_TRUE(tls_peer_has_ip(in_->ssl(), ip("10.76.0.2")));
  EXPECT_FALSE(tls_peer_has_ip(in_->ssl(), ip("10.76.0.3")));
  // Frames with payloads large enough to go through the staging buffer in pieces and to be
  // read straight into their destination.
  // What the frames carry, in one buffer that outlives the sends (a payload is referenced
  // until it is written).
  std::vector<uint8_t> sent;
  for (int f = 0; f < 6; ++f)
    for (size_t i = 0; i < (f % 2 ? 300'000u : 1000u); ++i)
      sent.push_back(static_cast<uint8_t>(i * 31 + f));
  size_t at = 0;
  for (int f = 0; f < 6; ++f) {
    size_t len = f % 2 ? 300'000 : 1000;
    wire::Request r = write_request(len);
    shm::Seg seg{sent.data() + at, len};
    ASSERT_TRUE(out_->send(wire::Type::kRequest, &r, sizeof(r), &seg, 1, len));
    at += len;
  }
  Collect got;
  for (int i = 0; i < 10000 && (out_->tx_pending() || got.data.size() < sent.size()); ++i) {
    ASSERT_TRUE(out_->flush(i));
    const char* why = nullptr;
    ASSERT_TRUE(receive(*in_, got, 1 << 20, &why)) << why;
  }
  EXPECT_EQ(got.frames, 6);
  EXPECT_EQ(got.data, sent);
  EXPECT_FALSE(out_->ktls_send());  // a socket pair has no kernel TLS
}

// Frames queued in one pass leave in one write to the socket (the records of one SSL_write
// of the staged frames), and the receiver takes them in one large read.
TEST_F(RouterTls, ManyFramesGoOutInOneWrite) {
  pair(pki_.files("host-1"), pki_.files("host-2"), "10.76.0.3");
  std::string wo, wi;
  ASSERT_EQ(shake(*out_, *in_, &wo, &wi), 1) << wo << " / " << wi;
  const int kFrames = 300;
  const size_t kLen = 64;
  auto sent = std::vector<uint8_t>(kFrames * kLen);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<uint8_t>(i * 7 + i / 251);
  for (int f = 0; f < kFrames; ++f) {
    wire::Request r = write_request(kLen);
    shm::Seg seg{sent.data() + f * kLen, kLen};
    ASSERT_TRUE(out_->send(wire::Type::kRequest, &r, sizeof(r), &seg, 1, kLen));
  }
  const uint64_t writes = out_->socket_writes;
  ASSERT_TRUE(out_->flush(1));
  EXPECT_FALSE(out_->tx_pending());
  EXPECT_EQ(out_->socket_writes - writes, 1u) << "one write for the whole batch";
  Collect got;
  const uint64_t reads = in_->socket_reads;
  const char* why = nullptr;
  ASSERT_TRUE(receive(*in_, got, 1 << 20, &why)) << why;
  EXPECT_EQ(got.frames, kFrames);
  EXPECT_EQ(got.data, sent);
  EXPECT_EQ(in_->socket_reads - reads, 1u) << "one read for the whole batch";
}

// A socket that takes part of a batch: the rest goes out later, in order, nothing twice.
TEST_F(RouterTls, APartialWriteContinuesInOrder) {
  pair(pki_.files("host-1"), pki_.files("host-2"), "10.76.0.3");
  std::string wo, wi;
  ASSERT_EQ(shake(*out_, *in_, &wo, &wi), 1) << wo << " / " << wi;
  int small = 16 * 1024;
  ASSERT_EQ(::setsockopt(out_->fd(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
  // Frames of every size: small ones staged together, large ones encrypted in place.
  std::vector<size_t> lens;
  size_t total = 0;
  for (int f = 0; f < 200; ++f) {
    lens.push_back(f % 5 == 0 ? 70'000 + f : 100 + (f * 37) % 3000);
    total += lens.back();
  }
  std::vector<uint8_t> sent(total);
  for (size_t i = 0; i < total; ++i) sent[i] = static_cast<uint8_t>(i * 13 + i / 509);
  size_t at = 0;
  for (size_t len : lens) {
    wire::Request r = write_request(len);
    shm::Seg seg{sent.data() + at, len};
    ASSERT_TRUE(out_->send(wire::Type::kRequest, &r, sizeof(r), &seg, 1, len));
    at += len;
  }
  ASSERT_TRUE(out_->flush(1));
  EXPECT_TRUE(out_->tx_pending()) << "the socket took only part of it";
  Collect got;
  for (int i = 0; i < 100000 && (out_->tx_pending() || got.data.size() < total); ++i) {
    ASSERT_TRUE(out_->flush(i + 2));
    const char* why = nullptr;
    ASSERT_TRUE(receive(*in_, got, 1 << 20, &why)) << why;
  }
  EXPECT_EQ(got.frames, 200);
  ASSERT_EQ(got.data.size(), total);
  EXPECT_TRUE(got.data == sent);
}

// Two plaintext links over a socket pair: `out_` connected, `in_` as if its Hello had passed.
class RouterLinkPlain : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    out_ = std::make_unique<Link>(1, UniqueFd(sv[0]), true);
    in_ = std::make_unique<Link>(2, UniqueFd(sv[1]), false);
    in_->authenticated = true;
    out_->tcp_connected();
  }
  std::unique_ptr<Link> out_, in_;
};

TEST_F(RouterLinkPlain, NothingButTheHelloIsReadBeforeAuthentication) {
  in_->authenticated = false;
  expect_hello_first(*out_, *in_);
}

TEST_F(RouterTls, NothingButTheHelloIsReadBeforeAuthentication) {
  pair(pki_.files("host-1"), pki_.files("host-2"), "10.76.0.3");
  in_->authenticated = false;
  std::string wo, wi;
  ASSERT_EQ(shake(*out_, *in_, &wo, &wi), 1) << wo << " / " << wi;
  expect_hello_first(*out_, *in_);
}

// The same without TLS: one sendmsg gathers every frame's header and payload.
TEST_F(RouterLinkPlain, ManyFramesGoOutInOneWriteAndAPartialOneContinues) {
  Link &out = *out_, &in = *in_;
  const size_t kLen = 64;
  std::vector<uint8_t> sent(300 * kLen);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<uint8_t>(i * 3 + 1);
  for (int f = 0; f < 300; ++f) {
    wire::Request r = write_request(kLen);
    shm::Seg seg{sent.data() + f * kLen, kLen};
    ASSERT_TRUE(out.send(wire::Type::kRequest, &r, sizeof(r), &seg, 1, kLen));
  }
  ASSERT_TRUE(out.flush(1));
  EXPECT_FALSE(out.tx_pending());
  EXPECT_EQ(out.socket_writes, 1u);
  Collect got;
  const char* why = nullptr;
  ASSERT_TRUE(receive(in, got, 1 << 20, &why)) << why;
  EXPECT_EQ(got.frames, 300);
  EXPECT_EQ(got.data, sent);
  // A batch larger than the socket takes: partial writes, then the rest in order.
  int small = 8 * 1024;
  ASSERT_EQ(::setsockopt(out.fd(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
  std::vector<uint8_t> big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 11 + i / 4093);
  for (size_t off = 0; off < big.size(); off += 96 * 1024 + 5) {
    size_t len = std::min<size_t>(96 * 1024 + 5, big.size() - off);
    wire::Request r = write_request(len);
    shm::Seg seg{big.data() + off, len};
    ASSERT_TRUE(out.send(wire::Type::kRequest, &r, sizeof(r), &seg, 1, len));
  }
  ASSERT_TRUE(out.flush(2));
  EXPECT_TRUE(out.tx_pending());
  Collect rest;
  for (int i = 0; i < 100000 && (out.tx_pending() || rest.data.size() < big.size()); ++i) {
    ASSERT_TRUE(out.flush(i + 3));
    ASSERT_TRUE(receive(in, rest, 1 << 20, &why)) << why;
  }
  ASSERT_EQ(rest.data.size(), big.size());
  EXPECT_TRUE(rest.data == big);
}

// A link whose socket was found empty is not read again, not even by a system call that
// would find it empty, until the router's epoll says bytes came (Link::rx_ready).
void read_only_when_ready(Link& out, Link& in) {
  const size_t kLen = 100;
  std::vector<uint8_t> data(kLen, 7);
  auto send_one = [&] {
    wire::Request r = write_request(kLen);
    shm::Seg seg{data.data(), kLen};
    ASSERT_TRUE(out.send(wire::Type::kRequest, &r, sizeof(r), &seg, 1, kLen));
    for (int i = 0; i < 100 && out.tx_pending(); ++i) ASSERT_TRUE(out.flush(i));
    ASSERT_FALSE(out.tx_pending());
  };
  Collect got;
  const char* why = nullptr;
  send_one();
  ASSERT_TRUE(receive(in, got, 1 << 20, &why)) << why;
  ASSERT_EQ(got.frames, 1);
  EXPECT_FALSE(in.rx_ready) << "a short read found the socket empty";
  const uint64_t reads = in.socket_reads;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(in.receive(got, 1 << 20, &why)) << why;
  EXPECT_EQ(in.socket_reads, reads);
  // A frame comes: unread until its socket is seen readable, then read.
  send_one();
  ASSERT_TRUE(in.receive(got, 1 << 20, &why)) << why;
  EXPECT_EQ(got.frames, 1);
  ASSERT_TRUE(receive(in, got, 1 << 20, &why)) << why;
  EXPECT_EQ(got.frames, 2);
  EXPECT_EQ(in.socket_reads, reads + 1);
}

TEST_F(RouterLinkPlain, AnEmptySocketIsReadAgainOnlyOnceItHasBytes) {
  read_only_when_ready(*out_, *in_);
}

TEST_F(RouterTls, AnEmptySocketIsReadAgainOnlyOnceItHasBytes) {
  pair(pki_.files("host-1"), pki_.files("host-2"), "10.76.0.3");
  std::string wo, wi;
  ASSERT_EQ(shake(*out_, *in_, &wo, &wi), 1) << wo << " / " << wi;
  read_only_when_ready(*out_, *in_);
}

// Two ends joined in memory (the router's link to itself): frames of every size arrive intact
// and in order, both ways, large payloads placed straight from the sender's memory; no system
// call on either socket; the sender's ring retires what was taken; a flush is what says there
// is more to read; and when one end goes, the other reads its socket and finds the stream ended.
TEST_F(RouterLinkPlain, JoinedEndsCarryFramesWithoutTheSocket) {
  Link &out = *out_, &in = *in_;
  Link::join(out, in);
  ASSERT_TRUE(out.joined() && in.joined());
  std::vector<uint8_t> sent;
  std::vector<size_t> sizes = {1, 64, 4096, 16 * 1024, 64 * 1024 + 3, 1 << 20, 17, 200000};
  size_t total = 0;
  for (size_t n : sizes) total += n;
  sent.resize(total);
  for (size_t i = 0; i < total; ++i) sent[i] = static_cast<uint8_t>(i * 7 + i / 1021);
  size_t off = 0;
  for (size_t n : sizes) {
    wire::Request r = write_request(n);
    // In two pieces, as a request of two SGEs (one byte in one).
    const size_t first = n > 1 ? n / 2 : n;
    shm::Seg segs[2] = {{sent.data() + off, first}, {sent.data() + off + first, n - first}};
    ASSERT_TRUE(out.send(wire::Type::kRequest, &r, sizeof(r), segs, n > 1 ? 2 : 1, n,
                         /*copy=*/n <= 64));
    off += n;
  }
  Collect got;
  const char* why = nullptr;
  in.rx_ready = false;  // as after its last read: only the flush says frames wait
  ASSERT_TRUE(in.receive(got, 1 << 20, &why)) << why;
  EXPECT_EQ(got.frames, 0);
  ASSERT_TRUE(out.flush(1));
  EXPECT_TRUE(in.rx_ready);
  EXPECT_TRUE(out.tx_pending()) << "nothing leaves before the other end reads it";
  for (int i = 0; i < 100 && got.data.size() < total; ++i)
    ASSERT_TRUE(in.receive(got, 1 << 20, &why)) << why;
  EXPECT_EQ(got.frames, static_cast<int>(sizes.size()));
  ASSERT_EQ(got.data.size(), total);
  EXPECT_TRUE(got.data == sent);
  EXPECT_FALSE(out.tx_pending()) << "the taken frames retired";
  EXPECT_FALSE(in.rx_ready);
  EXPECT_EQ(out.bytes_out, out.bytes_queued);
  EXPECT_EQ(in.bytes_in, out.bytes_out);
  // The other way.
  std::vector<uint8_t> back(30000, 0x5a);
  wire::Request r = write_request(back.size());
  shm::Seg seg{back.data(), back.size()};
  ASSERT_TRUE(in.send(wire::Type::kRequest, &r, sizeof(r), &seg, 1, back.size()));
  ASSERT_TRUE(in.flush(2));
  Collect got_back;
  ASSERT_TRUE(out.receive(got_back, 1 << 20, &why)) << why;
  EXPECT_TRUE(got_back.data == back);
  EXPECT_EQ(out.socket_reads + out.socket_writes + in.socket_reads + in.socket_writes, 0u);
  // Nothing went through the sockets.
  char c;
  EXPECT_EQ(::recv(in.fd(), &c, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
  // One end goes: the other finds the end of the stream on its socket.
  out_.reset();
  EXPECT_FALSE(in.joined());
  EXPECT_TRUE(in.rx_ready);
  EXPECT_FALSE(in.receive(got, 1 << 20, &why));
  EXPECT_STREQ(why, "closed by the peer");
}

TEST_F(RouterTls, CertificateOfAnotherCaIsRefused) {
  // (The rogue trusts its own CA only, so it is the one that stops the handshake here; the
  // attack suite has a client that trusts anything.)
  pair(pki_.files("rogue-1", "other-ca"), pki_.files("host-2"), "10.76.0.3");
  std::string wo, wi;
  EXPECT_EQ(shake(*out_, *in_, &wo, &wi), -1);
  EXPECT_FALSE(in_->open());
  EXPECT_NE((wo + wi).find("unknown ca"), std::string::npos) << wo << " / " << wi;
}

TEST_F(RouterTls, ServerMustBeTheAddressMeant) {
  // Host 1 means to reach 10.76.0.9; host 2's certificate names 10.76.0.3.
  pair(pki_.files("host-1"), pki_.files("host-2"), "10.76.0.9");
  std::string wo, wi;
  EXPECT_EQ(shake(*out_, *in_, &wo, &wi), -1);
  EXPECT_NE(wo.find("certificate"), std::string::npos) << wo;
}

TEST_F(RouterTls, ContextRefusesBadFiles) {
  std::string err;
  EXPECT_FALSE(TlsContext::load({pki_.path("ca.pem"), pki_.path("missing.pem"),
                                 pki_.path("host-1.key")},
                                &err));
  EXPECT_NE(err.find("missing.pem"), std::string::npos) << err;
  // A key that is not the certificate's.
  EXPECT_FALSE(TlsContext::load({pki_.path("ca.pem"), pki_.path("host-1.pem"),
                                 pki_.path("host-2.key")},
                                &err));
  // Not named for a host.
  EXPECT_FALSE(TlsContext::load(pki_.files("nameless"), &err));
  EXPECT_NE(err.find("vrdma-host-"), std::string::npos) << err;
  // Not signed by the CA given.
  EXPECT_FALSE(TlsContext::load(pki_.files("rogue-1"), &err));
  EXPECT_NE(err.find("not signed"), std::string::npos) << err;
  auto ctx = TlsContext::load(pki_.files("host-2"), &err);
  ASSERT_TRUE(ctx) << err;
  uint32_t id = 0;
  EXPECT_TRUE(ctx->own_host_id(&id));
  EXPECT_EQ(id, 2u);
}

TEST(RouterTlsNames, HostCn) {
  uint32_t id = 0;
  EXPECT_TRUE(parse_host_cn("vrdma-host-0", &id));
  EXPECT_EQ(id, 0u);
  EXPECT_TRUE(parse_host_cn("vrdma-host-4294967295", &id));
  EXPECT_EQ(id, 4294967295u);
  for (const char* bad : {"vrdma-host-", "vrdma-host-01", "vrdma-host-+1", "vrdma-host-1x",
                          "vrdma-host-4294967296", "host-1", "vrdma-host--1"})
    EXPECT_FALSE(parse_host_cn(bad, &id)) << bad;
}

}  // namespace
}  // namespace vrdma::daemon
