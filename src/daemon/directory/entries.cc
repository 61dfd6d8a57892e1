#include "daemon/directory/entries.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "common/address.h"

namespace vrdma::daemon {

namespace {

using nlohmann::json;

constexpr std::string_view kInfo = "info";
constexpr std::string_view kNetworks = "networks/";
constexpr std::string_view kContainers = "containers/";
constexpr std::string_view kListeners = "listeners/";

// A decimal uint32 written canonically (no sign, no leading zero, no spaces).
std::optional<uint32_t> parse_canonical_u32(std::string_view text) {
  if (text.empty() || text.size() > 10 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

// A dotted quad written canonically; host byte order.
std::optional<uint32_t> parse_canonical_ipv4(std::string_view text) {
  if (text.empty() || text.size() > 15) return std::nullopt;
  uint32_t net;
  std::string s(text);
  if (!parse_ipv4(s, &net) || ipv4_text(net) != s) return std::nullopt;
  return ntohl(net);
}

// The JSON object in `value`, or a discarded value (never an exception).
json parse_object(std::string_view value, std::string* why) {
  if (value.size() > kMaxValueBytes) {
    *why = "value of " + std::to_string(value.size()) + " bytes (at most " +
           std::to_string(kMaxValueBytes) + ")";
    return json(json::value_t::discarded);
  }
  json j = json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    *why = "value is not JSON";
  } else if (!j.is_object()) {
    *why = "value is not a JSON object";
    j = json(json::value_t::discarded);
  }
  return j;
}

bool unicast(uint32_t ipv4_host) {
  uint32_t first = ipv4_host >> 24;
  return ipv4_host != 0 && ipv4_host != 0xffffffffu && (first < 224 || first > 239);
}

}  // namespace

std::string host_prefix(uint32_t id) {
  return std::string(kHostsRoot) + std::to_string(id) + "/";
}
std::string host_info_key(uint32_t id) {
  return host_prefix(id) + std::string(kInfo);
}
std::string network_key(uint32_t id, const Ipv4Cidr& cidr) {
  return host_prefix(id) + std::string(kNetworks) + cidr_text(cidr);
}
std::string container_key(uint32_t id, uint32_t ipv4_net) {
  return host_prefix(id) + std::string(kContainers) + ipv4_text(ipv4_net);
}
std::string listener_key(uint32_t id, uint32_t ipv4_net, uint16_t port) {
  return host_prefix(id) + std::string(kListeners) + ip_port_text(ipv4_net, port);
}

std::string host_info_value(const HostEntry& h) {
  return json{{"router", h.router}}.dump();
}
std::string network_value() {
  return "{}";
}
std::string container_value(const ContainerInfo& info) {
  // Names come from this host's own namespaces; replace what JSON cannot hold as text.
  json j{{"name", info.name}};
  if (!info.tenant.empty()) j["tenant"] = info.tenant;
  if (!info.groups.empty()) {
    json groups = json::array();
    for (uint32_t g : info.groups) groups.push_back(ipv4_text(g));
    j["groups"] = std::move(groups);
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}
std::string listener_value() {
  return "{}";
}

std::optional<EntryKey> parse_entry_key(std::string_view key, std::string* why) {
  if (!key.starts_with(kHostsRoot)) {
    *why = "not a key of the layout /vrdma/hosts/<id>/...";
    return std::nullopt;
  }
  key.remove_prefix(kHostsRoot.size());
  size_t slash = key.find('/');
  if (slash == std::string_view::npos) {
    *why = "no entry after the host id";
    return std::nullopt;
  }
  auto host = parse_canonical_u32(key.substr(0, slash));
  if (!host) {
    *why = "bad host id";
    return std::nullopt;
  }
  std::string_view rest = key.substr(slash + 1);
  EntryKey k;
  k.host = *host;
  if (rest == kInfo) {
    k.kind = EntryKind::kHostInfo;
    return k;
  }
  if (rest.starts_with(kNetworks)) {
    std::string_view text = rest.substr(kNetworks.size());
    Ipv4Cidr net;
    if (text.size() > 18 || text.find('/') == std::string_view::npos ||
        !parse_cidr(text, &net, nullptr) || cidr_text(net) != text) {
      *why = "bad network (expected a canonical A.B.C.D/LEN)";
      return std::nullopt;
    }
    if (net.prefix_len() < kMinPrefixLen) {
      *why = "network broader than /" + std::to_string(kMinPrefixLen);
      return std::nullopt;
    }
    k.kind = EntryKind::kNetwork;
    k.cidr = net;
    return k;
  }
  if (rest.starts_with(kContainers)) {
    auto ip = parse_canonical_ipv4(rest.substr(kContainers.size()));
    if (!ip || !unicast(*ip)) {
      *why = "bad container address";
      return std::nullopt;
    }
    k.kind = EntryKind::kContainer;
    k.ipv4 = *ip;
    return k;
  }
  if (rest.starts_with(kListeners)) {
    std::string_view ip_port = rest.substr(kListeners.size());
    size_t colon = ip_port.rfind(':');
    auto ip = colon == std::string_view::npos ? std::nullopt
                                              : parse_canonical_ipv4(ip_port.substr(0, colon));
    auto port = colon == std::string_view::npos ? std::nullopt
                                                : parse_canonical_u32(ip_port.substr(colon + 1));
    if (!ip || !port || *port == 0 || *port > 65535) {
      *why = "bad listener address";
      return std::nullopt;
    }
    k.kind = EntryKind::kListener;
    k.ipv4 = *ip;
    k.port = static_cast<uint16_t>(*port);
    return k;
  }
  *why = "unknown entry";
  return std::nullopt;
}

std::optional<HostEntry> parse_host_info(uint32_t id, std::string_view value, std::string* why) {
  json j = parse_object(value, why);
  if (j.is_discarded()) return std::nullopt;
  HostEntry h;
  h.host_id = id;
  auto router = j.find("router");
  if (router == j.end() || !router->is_string()) {
    *why = "\"router\" is missing or not a string";
    return std::nullopt;
  }
  h.router = router->get_ref<const std::string&>();
  if (!h.router.empty()) {
    uint32_t addr;
    uint16_t port;
    if (h.router.size() > 21 || !parse_ipv4_port(h.router, &addr, &port) || !unicast(ntohl(addr))) {
      *why = "\"router\" is not a unicast IPV4:PORT";
      return std::nullopt;
    }
  }
  return h;
}

namespace {

// A text field of a container's value: absent is "", else a string of printable ASCII without
// spaces, at most kMaxNameBytes. False and *why if not.
bool text_field(const json& j, const char* field, std::string* out, std::string* why) {
  auto it = j.find(field);
  if (it == j.end()) return true;
  const std::string quoted = std::string("\"") + field + "\"";
  if (!it->is_string()) {
    *why = quoted + " is not a string";
    return false;
  }
  const auto& text = it->get_ref<const std::string&>();
  if (text.size() > kMaxNameBytes) {
    *why = quoted + " is longer than " + std::to_string(kMaxNameBytes) + " bytes";
    return false;
  }
  for (char ch : text) {
    if (ch < 0x21 || ch > 0x7e) {
      *why = quoted + " holds a character that is not printable ASCII";
      return false;
    }
  }
  *out = text;
  return true;
}

}  // namespace

std::optional<ContainerInfo> parse_container_value(std::string_view value, std::string* why) {
  json j = parse_object(value, why);
  if (j.is_discarded()) return std::nullopt;
  ContainerInfo info;
  if (!text_field(j, "name", &info.name, why) || !text_field(j, "tenant", &info.tenant, why))
    return std::nullopt;
  if (auto g = j.find("groups"); g != j.end()) {
    if (!g->is_array() || g->size() > kMaxGroupsPerContainer) {
      *why = "\"groups\" is not an array of at most " + std::to_string(kMaxGroupsPerContainer) +
             " addresses";
      return std::nullopt;
    }
    for (const auto& e : *g) {
      uint32_t ip = 0;
      if (!e.is_string() || !parse_ipv4(e.get<std::string>(), &ip) ||
          (ntohl(ip) & 0xf0000000u) != 0xe0000000u) {
        *why = "\"groups\" holds something that is not an IPv4 multicast address";
        return std::nullopt;
      }
      info.groups.push_back(ip);
    }
    std::sort(info.groups.begin(), info.groups.end());
    info.groups.erase(std::unique(info.groups.begin(), info.groups.end()), info.groups.end());
  }
  return info;
}

bool parse_network_value(std::string_view value, std::string* why) {
  return !parse_object(value, why).is_discarded();
}

bool parse_listener_value(std::string_view value, std::string* why) {
  return !parse_object(value, why).is_discarded();
}

std::string printable(std::string_view bytes, size_t max) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char ch : bytes) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(ch);
    if (u >= 0x20 && u < 0x7f && u != '\\') {
      out += ch;
    } else {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

}  // namespace vrdma::daemon
