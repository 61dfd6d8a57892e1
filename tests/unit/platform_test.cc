// The container edits, the device view's files, the CDI spec and the device plugin's answers:
// the pure parts of the platform integration.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include "ctl/cdi_spec.h"
#include "k8s/allocation.h"
#include "platform/container_edits.h"
#include "platform/device_view.h"

using namespace vrdma;

namespace {

platform::ContainerEdits sample_edits() {
  platform::EditsConfig c;
  c.lib_dir = "/opt/vrdma/lib/";
  c.socket_dir = "/run/vrdma";
  return platform::container_edits(c);
}

std::map<std::string, platform::ViewEntry> by_path(const std::vector<platform::ViewEntry>& v) {
  std::map<std::string, platform::ViewEntry> m;
  for (const auto& e : v) m.emplace(e.path, e);
  return m;
}

}  // namespace

TEST(ContainerEdits, MountsDirectoriesReadOnlyAndSetsEnvironment) {
  auto e = sample_edits();
  ASSERT_EQ(e.mounts.size(), 2u);
  EXPECT_EQ(e.mounts[0], (platform::Mount{"/opt/vrdma/lib", "/opt/vrdma/lib", true, false}));
  EXPECT_EQ(e.mounts[1], (platform::Mount{"/run/vrdma", "/run/vrdma", true, true}));
  ASSERT_EQ(e.devices.size(), 1u);
  EXPECT_EQ(e.devices[0], (platform::DeviceNode{"/dev/infiniband/uverbs0", "/dev/null", "rw"}));
  EXPECT_EQ(e.env[0], (platform::EnvVar{"LD_LIBRARY_PATH", "/opt/vrdma/lib"}));
  EXPECT_EQ(e.env[1], (platform::EnvVar{"VRDMA_SOCKET", "/run/vrdma/vrdmad.sock"}));
  EXPECT_EQ(
      platform::engine_run_args(e),
      (std::vector<std::string>{
          "--volume=/opt/vrdma/lib:/opt/vrdma/lib:ro", "--volume=/run/vrdma:/run/vrdma:ro",
          "--device=/dev/null:/dev/infiniband/uverbs0:rw", "--env=LD_LIBRARY_PATH=/opt/vrdma/lib",
          "--env=VRDMA_SOCKET=/run/vrdma/vrdmad.sock"}));
}

TEST(ContainerEdits, ContainerPathsCanDiffer) {
  platform::EditsConfig c;
  c.lib_dir = "/host/lib";
  c.socket_dir = "/host/run";
  c.container_lib_dir = "/usr/lib/vrdma";
  c.container_socket_dir = "/run/vrdma";
  auto e = platform::container_edits(c);
  EXPECT_EQ(e.mounts[0].host_path, "/host/lib");
  EXPECT_EQ(e.mounts[0].container_path, "/usr/lib/vrdma");
  EXPECT_EQ(e.env[1].value, "/run/vrdma/vrdmad.sock");
}

TEST(DeviceView, SysfsFormats) {
  uint8_t guid[8] = {0x02, 0x76, 0x72, 0x64, 10, 77, 0, 10};
  uint64_t g;
  memcpy(&g, guid, 8);
  EXPECT_EQ(platform::sysfs_guid(g), "0276:7264:0a4d:000a");
  EXPECT_EQ(platform::sysfs_gid(inet_addr("10.77.0.10")),
            "0000:0000:0000:0000:0000:ffff:0a4d:000a");
}

TEST(DeviceView, FilesHoldTheDevicesValues) {
  platform::DeviceIdentity id;
  id.ipv4 = inet_addr("192.168.7.9");
  id.ifname = "net1";
  id.uverbs_index = 2;
  auto v = by_path(platform::device_view(id));
  EXPECT_EQ(v.at("infiniband/vrdma0/ports/1/gids/0").content,
            "0000:0000:0000:0000:0000:ffff:c0a8:0709\n");
  EXPECT_EQ(v.at("infiniband/vrdma0/ports/1/gid_attrs/types/0").content, "RoCE v2\n");
  EXPECT_EQ(v.at("infiniband/vrdma0/ports/1/gid_attrs/ndevs/0").content, "net1\n");
  EXPECT_EQ(v.at("infiniband/vrdma0/ports/1/rate").content, "100 Gb/sec (4X EDR)\n");
  EXPECT_EQ(v.at("infiniband/vrdma0/ports/1/state").content, "4: ACTIVE\n");
  EXPECT_EQ(v.at("infiniband/vrdma0/device/net/net1").kind, platform::ViewEntry::Kind::kSymlink);
  EXPECT_EQ(v.at("infiniband/vrdma0/device/net/net1").content, "../../../../net/net1");
  EXPECT_EQ(v.at("infiniband_verbs/uverbs2/ibdev").content, "vrdma0\n");
  EXPECT_EQ(v.at("infiniband_verbs/uverbs2/dev").content, "1:3\n");
  EXPECT_EQ(v.at("infiniband/vrdma0/device/infiniband_verbs/uverbs2").content,
            "../../../../infiniband_verbs/uverbs2");
  // Parents come before children.
  std::set<std::string> seen;
  for (const auto& e : platform::device_view(id)) {
    auto slash = e.path.rfind('/');
    if (slash != std::string::npos) {
      EXPECT_TRUE(seen.count(e.path.substr(0, slash))) << e.path;
    }
    seen.insert(e.path);
  }
}

TEST(DeviceView, NoInterfaceNoNetEntries) {
  auto v = by_path(platform::device_view({}));
  EXPECT_FALSE(v.count("infiniband/vrdma0/ports/1/gid_attrs/ndevs/0"));
  EXPECT_TRUE(v.count("infiniband/vrdma0/device/net"));
}

TEST(CdiSpec, VersionsDecideFields) {
  ctl::CdiOptions o;
  o.hook_path = "/usr/local/bin/vrdma";
  o.socket = "/run/vrdma/vrdmad.sock";
  auto spec = ctl::cdi_spec(sample_edits(), o);
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");
  EXPECT_EQ(spec["kind"], "vrdma.io/hca");
  const auto& ce = spec["devices"][0]["containerEdits"];
  EXPECT_EQ(ce["deviceNodes"][0]["hostPath"], "/dev/null");
  EXPECT_EQ(ce["mounts"][0]["type"], "bind");
  EXPECT_EQ(ce["mounts"][0]["options"], nlohmann::json({"ro", "nosuid", "nodev", "bind"}));
  EXPECT_EQ(ce["mounts"][1]["options"],
            nlohmann::json({"ro", "nosuid", "nodev", "noexec", "bind"}));
  EXPECT_EQ(ce["hooks"][0]["hookName"], "createContainer");
  EXPECT_EQ(ctl::cdi_device_names(spec), std::vector<std::string>{"vrdma.io/hca=vrdma0"});
  o.version = "0.3.0";
  spec = ctl::cdi_spec(sample_edits(), o);
  EXPECT_FALSE(spec["devices"][0]["containerEdits"]["deviceNodes"][0].contains("hostPath"));
  EXPECT_FALSE(spec["devices"][0]["containerEdits"]["mounts"][0].contains("type"));
  o.version = "0.4.5";
  EXPECT_THROW(ctl::cdi_spec(sample_edits(), o), std::runtime_error);
  EXPECT_THROW(ctl::cdi_device_names(nlohmann::json::object()), std::runtime_error);
}

TEST(CdiSpec, PodmanVersions) {
  EXPECT_EQ(ctl::podman_max_cdi_version("podman version 4.3.1\n"), "0.5.0");
  EXPECT_EQ(ctl::podman_max_cdi_version("podman version 5.2.0\n"), "");
  EXPECT_EQ(ctl::podman_max_cdi_version("garbage"), "");
  EXPECT_LT(ctl::compare_versions("0.5.0", "0.10.0"), 0);
}

TEST(Allocation, ResourceNames) {
  EXPECT_TRUE(k8s::valid_resource_name("vrdma.io/hca"));
  EXPECT_TRUE(k8s::valid_resource_name("example.com/rdma_shared.a"));
  for (const char* bad : {"hca", "/hca", "vrdma.io/", "Vrdma.io/hca", "kubernetes.io/hca",
                          "x.kubernetes.io/hca", "vrdma.io/h/ca", "vrdma.io/-hca"})
    EXPECT_FALSE(k8s::valid_resource_name(bad)) << bad;
}

TEST(Allocation, PreferredAllocation) {
  auto ids = k8s::device_ids("vrdma0", 6);
  EXPECT_EQ(ids.front(), "vrdma0-0");
  EXPECT_EQ(ids.back(), "vrdma0-5");
  EXPECT_EQ(k8s::preferred_allocation(ids, {"vrdma0-5", "vrdma0-2", "vrdma0-3"}, {"vrdma0-5"}, 2),
            (std::vector<std::string>{"vrdma0-5", "vrdma0-2"}));
  EXPECT_EQ(k8s::preferred_allocation(ids, {"vrdma0-1"}, {}, 3),
            (std::vector<std::string>{"vrdma0-1"}));
  EXPECT_TRUE(k8s::preferred_allocation(ids, {"vrdma0-1"}, {}, 0).empty());
}

TEST(Allocation, AnswerIsTheEditsOrTheCdiName) {
  auto edits = sample_edits();
  auto r = k8s::container_response(edits, {});
  ASSERT_EQ(r.mounts_size(), 2);
  EXPECT_EQ(r.mounts(0).host_path(), "/opt/vrdma/lib");
  EXPECT_TRUE(r.mounts(1).read_only());
  ASSERT_EQ(r.devices_size(), 1);
  EXPECT_EQ(r.devices(0).permissions(), "rw");
  EXPECT_EQ(r.envs().at("VRDMA_SOCKET"), "/run/vrdma/vrdmad.sock");
  EXPECT_EQ(k8s::engine_run_args(r), platform::engine_run_args(edits));
  k8s::AllocationConfig cdi;
  cdi.cdi_devices = true;
  r = k8s::container_response(edits, cdi);
  EXPECT_EQ(r.mounts_size() + r.devices_size() + static_cast<int>(r.envs().size()), 0);
  ASSERT_EQ(r.cdi_devices_size(), 1);
  EXPECT_EQ(r.cdi_devices(0).name(), "vrdma.io/hca=vrdma0");
}
