#include "platform/device_view.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace vrdma::platform {

namespace {

std::string hex4(const uint8_t* b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%02x%02x", b[0], b[1]);
  return buf;
}

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err));
}

}  // namespace

std::string sysfs_guid(uint64_t guid_net_order) {
  uint8_t b[8];
  std::memcpy(b, &guid_net_order, 8);
  return hex4(b) + ":" + hex4(b + 2) + ":" + hex4(b + 4) + ":" + hex4(b + 6);
}

std::string sysfs_gid(uint32_t ipv4_net_order) {
  uint8_t b[16] = {};
  b[10] = b[11] = 0xff;
  std::memcpy(b + 12, &ipv4_net_order, 4);
  std::string out;
  for (int i = 0; i < 16; i += 2) out += (i ? ":" : "") + hex4(b + i);
  return out;
}

std::vector<ViewEntry> device_view(const DeviceIdentity& id) {
  using K = ViewEntry::Kind;
  const std::string dev = "infiniband/" + id.device_name;
  const std::string uverbs = "uverbs" + std::to_string(id.uverbs_index);
  const std::string port = dev + "/ports/1";
  const std::string guid = sysfs_guid(id.node_guid) + "\n";
  const std::string rate = std::to_string(kActiveWidthX * kActiveSpeedGbps) + " Gb/sec (" +
                           std::to_string(kActiveWidthX) + "X EDR)\n";
  std::vector<ViewEntry> v = {
      {K::kDir, "infiniband", ""},
      {K::kDir, dev, ""},
      {K::kFile, dev + "/node_type", "1: CA\n"},
      {K::kFile, dev + "/node_guid", guid},
      {K::kFile, dev + "/sys_image_guid", guid},
      {K::kFile, dev + "/fw_ver", std::string(kFwVer) + "\n"},
      {K::kFile, dev + "/hca_type", std::string(kHcaType) + "\n"},
      {K::kDir, dev + "/device", ""},
      {K::kFile, dev + "/device/numa_node", "-1\n"},  // a software device: no NUMA affinity
      {K::kDir, dev + "/device/net", ""},
      {K::kDir, dev + "/device/infiniband_verbs", ""},
      // dev/device/infiniband_verbs -> ../../../../infiniband_verbs/uverbs<N>
      {K::kSymlink, dev + "/device/infiniband_verbs/" + uverbs,
       "../../../../infiniband_verbs/" + uverbs},
      {K::kDir, dev + "/ports", ""},
      {K::kDir, port, ""},
      {K::kFile, port + "/state", std::to_string(kPortState) + ": ACTIVE\n"},
      {K::kFile, port + "/phys_state", std::to_string(kPortPhysState) + ": LinkUp\n"},
      {K::kFile, port + "/link_layer", "Ethernet\n"},
      {K::kFile, port + "/rate", rate},
      {K::kFile, port + "/lid", "0x0\n"},
      {K::kFile, port + "/sm_lid", "0x0\n"},
      {K::kFile, port + "/sm_sl", "0\n"},
      {K::kFile, port + "/lid_mask_count", "0\n"},
      {K::kFile, port + "/cap_mask", "0x00000000\n"},
      {K::kDir, port + "/gids", ""},
      {K::kFile, port + "/gids/0", sysfs_gid(id.ipv4) + "\n"},
      {K::kDir, port + "/gid_attrs", ""},
      {K::kDir, port + "/gid_attrs/types", ""},
      {K::kFile, port + "/gid_attrs/types/0", "RoCE v2\n"},
      {K::kDir, port + "/gid_attrs/ndevs", ""},
      {K::kDir, port + "/pkeys", ""},
      {K::kFile, port + "/pkeys/0", "0xffff\n"},
      {K::kDir, "infiniband_verbs", ""},
      {K::kFile, "infiniband_verbs/abi_version", std::to_string(kUverbsAbiVersion) + "\n"},
      {K::kDir, "infiniband_verbs/" + uverbs, ""},
      {K::kFile, "infiniband_verbs/" + uverbs + "/ibdev", id.device_name + "\n"},
      {K::kFile, "infiniband_verbs/" + uverbs + "/abi_version",
       std::to_string(kDriverAbiVersion) + "\n"},
      {K::kFile, "infiniband_verbs/" + uverbs + "/dev",
       std::to_string(id.node_major) + ":" + std::to_string(id.node_minor) + "\n"},
  };
  if (!id.ifname.empty()) {
    // <dev>/device/net/<if> -> /sys/class/net/<if>, the container's own interface.
    v.push_back({K::kSymlink, dev + "/device/net/" + id.ifname, "../../../../net/" + id.ifname});
    v.push_back({K::kFile, port + "/gid_attrs/ndevs/0", id.ifname + "\n"});
  }
  return v;
}

void write_view(const std::string& dir, const std::vector<ViewEntry>& entries) {
  for (const auto& e : entries) {
    const std::string path = dir + "/" + e.path;
    switch (e.kind) {
      case ViewEntry::Kind::kDir:
        if (::mkdir(path.c_str(), 0755) < 0 && errno != EEXIST) fail("mkdir " + path, errno);
        break;
      case ViewEntry::Kind::kFile: {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out << e.content;
        out.close();
        if (!out) throw std::runtime_error("cannot write " + path);
        ::chmod(path.c_str(), 0444);
        break;
      }
      case ViewEntry::Kind::kSymlink:
        if (::symlink(e.content.c_str(), path.c_str()) < 0) fail("symlink " + path, errno);
        break;
    }
  }
}

std::string interface_of(uint32_t ipv4_net_order) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) < 0) return {};
  std::string name;
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET) continue;
    if (reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr)->sin_addr.s_addr == ipv4_net_order) {
      name = ifa->ifa_name;
      break;
    }
  }
  ::freeifaddrs(list);
  return name;
}

DeviceIdentity identity_from_hello(const proto::HelloRep& hello, int uverbs_index, dev_t node) {
  DeviceIdentity id;
  id.device_name = hello.device_name;
  id.uverbs_index = uverbs_index;
  id.node_guid = hello.node_guid;
  id.ipv4 = hello.ipv4;
  id.ifname = interface_of(id.ipv4);
  id.node_major = major(node);
  id.node_minor = minor(node);
  return id;
}

}  // namespace vrdma::platform
