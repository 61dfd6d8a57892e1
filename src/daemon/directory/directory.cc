// make_directory and the parsing the directory's configuration needs.
#include "daemon/directory/directory.h"

#include <arpa/inet.h>

#include <bit>
#include <charconv>
#include <set>

#include "common/address.h"
#include "daemon/directory/directory_backends.h"
#include "pki/pki.h"

namespace vrdma::daemon {

namespace {

constexpr std::string_view kEtcdScheme = "etcd://";
constexpr int kMinLeaseS = 2;  // etcd grants at least about this much anyway
constexpr int kMaxLeaseS = 3600;

// "a,b,c" -> {"a", "b", "c"}; empty items are kept.
std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> items;
  for (;;) {
    size_t comma = text.find(',');
    items.push_back(text.substr(0, comma));
    if (comma == std::string_view::npos) return items;
    text.remove_prefix(comma + 1);
  }
}

bool parse_u32(std::string_view text, uint32_t* out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return !text.empty() && ec == std::errc() && p == text.data() + text.size();
}

// "etcd://host:port[,host:port...]"; host is an IPv4 literal or "localhost".
bool parse_etcd_endpoints(std::string_view spec, std::vector<etcd::Endpoint>* out,
                          std::string* error) {
  std::string_view list = spec.substr(kEtcdScheme.size());
  while (!list.empty() && list.back() == '/') list.remove_suffix(1);
  if (list.empty()) {
    *error = "no endpoint in '" + std::string(spec) + "' (etcd://HOST:PORT[,HOST:PORT...])";
    return false;
  }
  for (std::string_view part : split_commas(list)) {
    std::string item(part);
    if (item.rfind("localhost:", 0) == 0) item = "127.0.0.1" + item.substr(9);
    uint32_t addr;
    uint16_t port;
    if (!parse_ipv4_port(item, &addr, &port)) {
      *error = "bad etcd endpoint '" + item + "' in '" + std::string(spec) +
               "': expected IPV4:PORT (an IPv4 address or localhost, and a port)";
      return false;
    }
    out->push_back(etcd::Endpoint{item.substr(0, item.rfind(':')), port});
  }
  return true;
}

// The TLS material of an etcd directory: all three files, readable, and a certificate made out
// to this host (etcd would refuse its writes otherwise, and that is better said at start).
bool load_etcd_credentials(const DirectoryConfig& cfg, etcd::Credentials* out, std::string* error) {
  if (cfg.tls_ca.empty() || cfg.tls_cert.empty() || cfg.tls_key.empty()) {
    *error =
        "an etcd directory needs TLS: --tls-ca, --tls-cert and --tls-key (the cluster CA, and "
        "this host's certificate and key)";
    return false;
  }
  if (!etcd::load_credentials(cfg.tls_ca, cfg.tls_cert, cfg.tls_key, out, error)) return false;
  std::string why;
  auto cn = pki::common_name(out->cert_pem, &why);
  if (!cn) {
    *error = cfg.tls_cert + ": " + why;
    return false;
  }
  std::string want = pki::host_common_name(cfg.host_id);
  if (*cn != want) {
    *error = "the certificate " + cfg.tls_cert + " is made out to '" + *cn + "', not to '" + want +
             "' (host " + std::to_string(cfg.host_id) + ")";
    return false;
  }
  return true;
}

}  // namespace

std::optional<HostEntry> parse_peer(std::string_view text, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<HostEntry> {
    *error = why + " in '" + std::string(text) + "' (expected ID=A.B.C.D:PORT=CIDR[,CIDR...])";
    return std::nullopt;
  };
  size_t eq1 = text.find('=');
  size_t eq2 = eq1 == std::string_view::npos ? eq1 : text.find('=', eq1 + 1);
  if (eq2 == std::string_view::npos) return fail("missing '='");
  HostEntry peer;
  if (!parse_u32(text.substr(0, eq1), &peer.host_id)) return fail("bad host id");
  peer.router = std::string(text.substr(eq1 + 1, eq2 - eq1 - 1));
  uint32_t addr;
  uint16_t port;
  if (!parse_ipv4_port(peer.router, &addr, &port)) return fail("bad router address");
  std::string_view cidrs = text.substr(eq2 + 1);
  if (cidrs.empty()) return fail("no container network");
  for (std::string_view cidr : split_commas(cidrs)) {
    Ipv4Cidr net;
    if (cidr.empty() || !parse_cidr(cidr, &net, nullptr))
      return fail("bad container network '" + std::string(cidr) + "'");
    peer.cidrs.push_back(net);
  }
  return peer;
}

const HostEntry* host_by_cidr(const HostEntry& self, const std::map<uint32_t, HostEntry>& others,
                              uint32_t ipv4_host) {
  const HostEntry* best = nullptr;
  int best_len = -1;
  auto consider = [&](const HostEntry& h) {
    for (const auto& c : h.cidrs) {
      int len = c.prefix_len();
      if (c.contains(ipv4_host) && len > best_len) {
        best = &h;
        best_len = len;
      }
    }
  };
  consider(self);
  for (const auto& [id, h] : others)
    if (id != self.host_id) consider(h);
  return best;
}

const HostEntry* host_by_router_ip(const HostEntry& self,
                                   const std::map<uint32_t, HostEntry>& others, uint32_t ipv4_net) {
  auto matches = [&](const HostEntry& h) {
    uint32_t ip;
    uint16_t port;
    return parse_ipv4_port(h.router, &ip, &port) && ip == ipv4_net;
  };
  if (matches(self)) return &self;
  for (const auto& [id, h] : others)
    if (id != self.host_id && matches(h)) return &h;
  return nullptr;
}

std::unique_ptr<Directory> make_directory(const DirectoryConfig& cfg, std::string* error) {
  if (cfg.spec == "embedded") {
    std::vector<HostEntry> peers;
    std::set<uint32_t> ids{cfg.host_id};
    for (const auto& text : cfg.static_peers) {
      auto peer = parse_peer(text, error);
      if (!peer) return nullptr;
      if (!ids.insert(peer->host_id).second) {
        *error = "peer '" + text + "': host id " + std::to_string(peer->host_id) +
                 (peer->host_id == cfg.host_id ? " is this host's own" : " given twice");
        return nullptr;
      }
      peers.push_back(std::move(*peer));
    }
    return make_embedded_directory(std::move(peers));
  }
  if (cfg.spec.rfind(kEtcdScheme, 0) == 0) {
    if (!cfg.static_peers.empty()) {
      *error = "static peers are for the embedded directory only (etcd knows the hosts)";
      return nullptr;
    }
    if (cfg.lease_s < kMinLeaseS || cfg.lease_s > kMaxLeaseS) {
      *error = "directory lease must be " + std::to_string(kMinLeaseS) + ".." +
               std::to_string(kMaxLeaseS) + " seconds, not " + std::to_string(cfg.lease_s);
      return nullptr;
    }
    std::vector<etcd::Endpoint> endpoints;
    if (!parse_etcd_endpoints(cfg.spec, &endpoints, error)) return nullptr;
    etcd::Credentials credentials;
    if (!load_etcd_credentials(cfg, &credentials, error)) return nullptr;
    return make_etcd_directory(std::move(endpoints), std::move(credentials), cfg.lease_s);
  }
  *error = "directory must be \"embedded\" or \"etcd://HOST:PORT[,HOST:PORT...]\", not '" +
           cfg.spec + "'";
  return nullptr;
}

}  // namespace vrdma::daemon
