// libFuzzer entry for the etcd directory's entry checks and the view that weighs them
// (src/daemon/directory/entries.cc, directory_view.cc): a sequence of puts and deletes, with
// keys and values either raw bytes or shaped like the layout so that every check is reached.
// Nothing may throw or crash, and what the view then answers must follow its rules.
#include <arpa/inet.h>
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/address.h"
#include "daemon/directory/directory_view.h"
#include "daemon/directory/entries.h"

using namespace vrdma;
using namespace vrdma::daemon;

namespace {

constexpr uint32_t kHosts = 5;  // ids 0..4; host 0 is "this host"

// An address near the sandbox's networks (10.77.<0..7>.<any>), so that claims collide.
uint32_t near_address(FuzzedDataProvider& in) {
  return (10u << 24) | (77u << 16) | (in.ConsumeIntegralInRange<uint32_t>(0, 7) << 8) |
         in.ConsumeIntegral<uint8_t>();
}

std::string shaped_cidr(FuzzedDataProvider& in) {
  if (in.ConsumeBool()) return in.ConsumeRandomLengthString(24);
  Ipv4Cidr c;
  int len = in.ConsumeIntegralInRange(0, 32);
  c.mask = len == 0 ? 0 : ~uint32_t{0} << (32 - len);
  c.network = near_address(in) & c.mask;
  return cidr_text(c);
}

std::string shaped_value(FuzzedDataProvider& in, EntryKind kind) {
  switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0:
      return in.ConsumeRandomLengthString(kMaxValueBytes + 64);
    case 1:
      if (kind == EntryKind::kHostInfo)
        return "{\"router\":\"" +
               (in.ConsumeBool() ? ip_port_text(htonl(near_address(in)), 7471)
                                 : in.ConsumeRandomLengthString(24)) +
               "\"}";
      if (kind == EntryKind::kNetwork || kind == EntryKind::kListener) return "{}";
      return "{\"name\":\"" + in.ConsumeRandomLengthString(300) + "\"}";
    default:
      return in.ConsumeRandomLengthString(64);  // short: often a JSON scalar or garbage
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  HostEntry self;
  self.host_id = 0;
  self.router = "10.76.0.1:7471";
  self.cidrs = {Ipv4Cidr{(10u << 24) | (77u << 16), 0xffffff00u}};
  DirectoryView view(self);

  for (int op = 0; op < 64 && in.remaining_bytes() > 0; ++op) {
    DirectoryUpdate u;
    u.deleted = in.ConsumeIntegralInRange(0, 7) == 0;
    u.create_revision = in.ConsumeIntegralInRange<int64_t>(1, 1000);
    uint32_t host = in.ConsumeIntegralInRange<uint32_t>(0, kHosts - 1);
    EntryKind kind = EntryKind::kContainer;
    switch (in.ConsumeIntegralInRange(0, 5)) {
      case 0:
        u.key = host_info_key(host);
        kind = EntryKind::kHostInfo;
        break;
      case 5:
        u.key = host_prefix(host) + "networks/" + shaped_cidr(in);
        kind = EntryKind::kNetwork;
        break;
      case 1:
        u.key = container_key(host, htonl(near_address(in)));
        break;
      case 2:
        u.key = listener_key(host, htonl(near_address(in)), in.ConsumeIntegral<uint16_t>() | 1);
        kind = EntryKind::kListener;
        break;
      case 3:
        u.key = host_prefix(host) + in.ConsumeRandomLengthString(40);
        break;
      default:
        u.key = in.ConsumeRandomLengthString(80);
    }
    if (!u.deleted) u.value = shaped_value(in, kind);

    // The pure checks on their own.
    std::string why;
    (void)parse_entry_key(u.key, &why);
    (void)parse_host_info(host, u.value, &why);
    (void)parse_container_value(u.value, &why);
    (void)parse_network_value(u.value, &why);
    (void)parse_listener_value(u.value, &why);
    (void)printable(u.key);

    (void)view.apply(u);
    if (in.ConsumeIntegralInRange(0, 3) == 0) (void)view.settle();
  }
  (void)view.settle();

  // The rules hold for whatever came in.
  for (uint32_t a = 0; a < kHosts; ++a) {
    auto ha = view.host_by_id(a);
    if (!ha) continue;
    if (ha->host_id != a) __builtin_trap();
    for (const auto& c : ha->cidrs)
      if (c.prefix_len() < kMinPrefixLen && a != self.host_id) __builtin_trap();
    // Networks of different hosts never overlap.
    for (uint32_t b = a + 1; b < kHosts; ++b) {
      auto hb = view.host_by_id(b);
      if (!hb) continue;
      for (const auto& x : ha->cidrs)
        for (const auto& y : hb->cidrs)
          if (x.contains(y.network) || y.contains(x.network)) __builtin_trap();
    }
  }
  // Every answer names a known host whose accepted networks hold the address.
  for (uint32_t third = 0; third < 8; ++third) {
    for (uint32_t last : {1u, 10u, 128u, 200u}) {
      uint32_t ip = (10u << 24) | (77u << 16) | (third << 8) | last;
      auto h = view.host_of(ip);
      if (!h) continue;
      auto known = view.host_by_id(h->host_id);
      if (!known) __builtin_trap();
      bool inside = false;
      for (const auto& c : known->cidrs) inside = inside || c.contains(ip);
      if (!inside) __builtin_trap();
    }
  }
  return 0;
}
