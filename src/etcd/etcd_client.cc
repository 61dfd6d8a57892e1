#include "etcd/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "etcd/etcd_api.grpc.pb.h"
#include "etcd/etcd_watch.h"

namespace vrdma::etcd {

namespace {

// A range page holds at most this many keys: etcd bounds a value to --max-request-bytes (1.5 MiB
// by default), so a page stays under the receive limit below whatever the values are.
constexpr int64_t kRangePage = 32;
constexpr int kMaxReceiveBytes = 64 << 20;
// Reconnect soon after etcd comes back (gRPC's default backoff grows to two minutes).
constexpr int kReconnectMinMs = 200;
constexpr int kReconnectMaxMs = 1000;

bool read_pem(const std::string& path, const char* what, std::string* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = std::string("cannot read the ") + what + " " + path;
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  if (out->find("-----BEGIN ") == std::string::npos) {
    *error = std::string("the ") + what + " " + path + " holds no PEM data";
    return false;
  }
  return true;
}

std::string status_text(const grpc::Status& s) {
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return "no answer in time";
  if (s.error_code() == grpc::StatusCode::CANCELLED) return "interrupted";
  std::string text = s.error_message();
  return text.empty() ? "gRPC status " + std::to_string(static_cast<int>(s.error_code())) : text;
}

}  // namespace

bool load_credentials(const std::string& ca_file, const std::string& cert_file,
                      const std::string& key_file, Credentials* out, std::string* error) {
  out->tls = true;
  return read_pem(ca_file, "CA certificate", &out->ca_pem, error) &&
         read_pem(cert_file, "certificate", &out->cert_pem, error) &&
         read_pem(key_file, "private key", &out->key_pem, error);
}

std::string prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) return std::string(1, '\0');  // every key
  end.back() = static_cast<char>(end.back() + 1);
  return end;
}

struct Client::Stubs {
  explicit Stubs(const std::shared_ptr<grpc::Channel>& ch)
      : kv(etcdserverpb::KV::NewStub(ch)),
        watch(etcdserverpb::Watch::NewStub(ch)),
        lease(etcdserverpb::Lease::NewStub(ch)),
        auth(etcdserverpb::Auth::NewStub(ch)) {}
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<etcdserverpb::Auth::Stub> auth;
};

Client::Client(std::vector<Endpoint> endpoints, Credentials credentials, int timeout_ms)
    : endpoints_(std::move(endpoints)),
      credentials_(std::move(credentials)),
      timeout_ms_(timeout_ms),
      watch_(std::make_unique<Watch>()) {
  connect();
}

Client::~Client() {
  watch_close();
}

void Client::connect() {
  watch_close();
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (credentials_.tls) {
    grpc::SslCredentialsOptions opts;
    opts.pem_root_certs = credentials_.ca_pem;
    opts.pem_cert_chain = credentials_.cert_pem;
    opts.pem_private_key = credentials_.key_pem;
    creds = grpc::SslCredentials(opts);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectMinMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kReconnectMinMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kReconnectMaxMs);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  // A channel of its own: clients with different certificates never share a connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  channel_ = grpc::CreateCustomChannel(endpoint().text(), creds, args);
  stubs_ = std::make_unique<Stubs>(channel_);
}

void Client::next_endpoint() {
  current_ = (current_ + 1) % endpoints_.size();
  connect();
}

std::string Client::endpoints_text() const {
  std::string text;
  const char* scheme = credentials_.tls ? "https://" : "http://";
  for (const auto& e : endpoints_) text += (text.empty() ? "" : ",") + (scheme + e.text());
  return text;
}

void Client::begin_call(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms_));
  std::lock_guard lock(call_mu_);
  call_ = ctx;
  if (interrupted_) ctx->TryCancel();
}

void Client::end_call() {
  std::lock_guard lock(call_mu_);
  call_ = nullptr;
}

void Client::interrupt() {
  {
    std::lock_guard lock(call_mu_);
    interrupted_ = true;
    if (call_) call_->TryCancel();
  }
  watch_->cancel();
}

template <class Stub, class Req, class Rep, class Method>
bool Client::unary(Stub* stub, Method method, const Req& req, Rep* rep, std::string* error) {
  grpc::ClientContext ctx;
  begin_call(&ctx);
  grpc::Status status = (stub->*method)(&ctx, req, rep);
  end_call();
  if (status.ok()) return true;
  *error = status_text(status);
  return false;
}

bool Client::grant(int ttl_s, int64_t* lease, int* granted_ttl_s, std::string* error) {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(ttl_s);
  etcdserverpb::LeaseGrantResponse rep;
  if (!unary(stubs_->lease.get(), &etcdserverpb::Lease::Stub::LeaseGrant, req, &rep, error))
    return false;
  if (rep.id() && rep.ttl() > 0 && rep.error().empty()) {
    *lease = rep.id();
    *granted_ttl_s = static_cast<int>(rep.ttl());
    return true;
  }
  *error = "lease grant: " + (rep.error().empty() ? std::string("no lease granted") : rep.error());
  return false;
}

bool Client::keepalive(int64_t lease, int* ttl_s, std::string* error) {
  grpc::ClientContext ctx;
  begin_call(&ctx);
  auto stream = stubs_->lease->LeaseKeepAlive(&ctx);
  etcdserverpb::LeaseKeepAliveRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse rep;
  bool got = stream->Write(req) && stream->WritesDone() && stream->Read(&rep);
  if (got) ctx.TryCancel();  // one answer is all this call wants
  grpc::Status status = stream->Finish();
  end_call();
  if (!got) {
    *error = "lease keepalive: " + (status.ok() ? "no answer" : status_text(status));
    return false;
  }
  *ttl_s = static_cast<int>(rep.ttl());
  return true;
}

bool Client::revoke(int64_t lease, std::string* error) {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseRevokeResponse rep;
  return unary(stubs_->lease.get(), &etcdserverpb::Lease::Stub::LeaseRevoke, req, &rep, error);
}

bool Client::put(const std::string& key, const std::string& value, int64_t lease,
                 std::string* error) {
  etcdserverpb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  etcdserverpb::PutResponse rep;
  return unary(stubs_->kv.get(), &etcdserverpb::KV::Stub::Put, req, &rep, error);
}

bool Client::remove(const std::string& key, std::string* error) {
  etcdserverpb::DeleteRangeRequest req;
  req.set_key(key);
  etcdserverpb::DeleteRangeResponse rep;
  return unary(stubs_->kv.get(), &etcdserverpb::KV::Stub::DeleteRange, req, &rep, error);
}

bool Client::txn(const std::vector<Op>& ops, std::string* error) {
  etcdserverpb::TxnRequest req;
  for (const auto& op : ops) {
    auto* r = req.add_success();
    if (op.deleted) {
      r->mutable_request_delete_range()->set_key(op.key);
    } else {
      auto* p = r->mutable_request_put();
      p->set_key(op.key);
      p->set_value(op.value);
      p->set_lease(op.lease);
    }
  }
  etcdserverpb::TxnResponse rep;
  if (!unary(stubs_->kv.get(), &etcdserverpb::KV::Stub::Txn, req, &rep, error)) return false;
  if (rep.succeeded()) return true;
  *error = "transaction not applied";
  return false;
}

bool Client::range_prefix(const std::string& prefix, std::vector<Kv>* kvs, int64_t* revision,
                          std::string* error) {
  kvs->clear();
  *revision = 0;
  std::string from = prefix;
  const std::string end = prefix_end(prefix);
  for (;;) {
    etcdserverpb::RangeRequest req;
    req.set_key(from);
    req.set_range_end(end);
    req.set_limit(kRangePage);
    req.set_revision(*revision);  // 0 at first: the newest, then that one
    etcdserverpb::RangeResponse rep;
    if (!unary(stubs_->kv.get(), &etcdserverpb::KV::Stub::Range, req, &rep, error)) return false;
    if (*revision == 0) *revision = rep.header().revision();
    for (const auto& kv : rep.kvs())
      kvs->push_back({kv.key(), kv.value(), kv.lease(), kv.create_revision(), kv.mod_revision()});
    if (!rep.more() || rep.kvs().empty()) return true;
    from = rep.kvs(rep.kvs_size() - 1).key() + std::string(1, '\0');
  }
}

bool Client::user_add(const std::string& name, std::string* error) {
  etcdserverpb::AuthUserAddRequest req;
  req.set_name(name);
  req.mutable_options()->set_no_password(true);
  etcdserverpb::AuthUserAddResponse rep;
  return unary(stubs_->auth.get(), &etcdserverpb::Auth::Stub::UserAdd, req, &rep, error);
}

bool Client::role_add(const std::string& name, std::string* error) {
  etcdserverpb::AuthRoleAddRequest req;
  req.set_name(name);
  etcdserverpb::AuthRoleAddResponse rep;
  return unary(stubs_->auth.get(), &etcdserverpb::Auth::Stub::RoleAdd, req, &rep, error);
}

bool Client::role_grant_prefix(const std::string& role, PermType type, const std::string& prefix,
                               std::string* error) {
  etcdserverpb::AuthRoleGrantPermissionRequest req;
  req.set_name(role);
  auto* perm = req.mutable_perm();
  perm->set_permtype(static_cast<etcdserverpb::Permission::Type>(type));
  perm->set_key(prefix);
  perm->set_range_end(prefix_end(prefix));
  etcdserverpb::AuthRoleGrantPermissionResponse rep;
  return unary(stubs_->auth.get(), &etcdserverpb::Auth::Stub::RoleGrantPermission, req, &rep,
               error);
}

bool Client::user_grant_role(const std::string& user, const std::string& role, std::string* error) {
  etcdserverpb::AuthUserGrantRoleRequest req;
  req.set_user(user);
  req.set_role(role);
  etcdserverpb::AuthUserGrantRoleResponse rep;
  return unary(stubs_->auth.get(), &etcdserverpb::Auth::Stub::UserGrantRole, req, &rep, error);
}

bool Client::auth_enable(std::string* error) {
  etcdserverpb::AuthEnableRequest req;
  etcdserverpb::AuthEnableResponse rep;
  return unary(stubs_->auth.get(), &etcdserverpb::Auth::Stub::AuthEnable, req, &rep, error);
}

bool Client::watch_open(const std::string& prefix, int64_t start_revision, std::string* error) {
  compacted_ = false;
  if (interrupted_) {
    *error = "interrupted";
    return false;
  }
  return watch_->open(stubs_->watch.get(), prefix, start_revision, timeout_ms_, error);
}

int Client::watch_fd() const {
  return watch_->fd();
}

bool Client::watching() const {
  return watch_->is_open();
}

bool Client::watch_read(std::vector<Event>* events, std::string* error) {
  if (watch_->read(events, error, &compacted_)) return true;
  watch_->close();
  return false;
}

void Client::watch_close() {
  if (watch_) watch_->close();
}

}  // namespace vrdma::etcd
