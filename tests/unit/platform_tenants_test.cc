// Tenants from the platform: the tenant file vrdmad reads (daemon/identity/platform_tenants.h)
// and what the device plugin writes into it from the container runtime's answers
// (k8s/pod_tenants.h).
#include "daemon/identity/platform_tenants.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/identity/admission.h"
#include "k8s/pod_tenants.h"

namespace vrdma {
namespace {

using daemon::NetnsId;
using daemon::PlatformEntry;

NetnsId own_netns() {
  struct stat st {};
  EXPECT_EQ(::stat("/proc/self/ns/net", &st), 0);
  return NetnsId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/vrdma-pt-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0644) {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p;
  }

 private:
  std::string path_;
};

TEST(PlatformTenantsFile, ParsesLinesCommentsAndBlanks) {
  std::vector<PlatformEntry> e;
  std::string error;
  ASSERT_TRUE(daemon::parse_platform_tenants(
      "# header\n\nteam-a /run/netns/cni-1  # team-a/pod sb1\n\tblue\t/run/netns/cni-2\n", &e,
      &error))
      << error;
  EXPECT_EQ(e, (std::vector<PlatformEntry>{{"team-a", "/run/netns/cni-1"},
                                           {"blue", "/run/netns/cni-2"}}));
  EXPECT_TRUE(daemon::parse_platform_tenants("", &e, &error));
  EXPECT_TRUE(e.empty());
}

TEST(PlatformTenantsFile, RefusesBadLines) {
  std::vector<PlatformEntry> e;
  for (const char* text : {"team-a\n", "team-a relative/path\n", "a b c\n", "@ip /run/netns/x\n",
                           "ok /x\nbad/name /y\n"}) {
    std::string error;
    EXPECT_FALSE(daemon::parse_platform_tenants(text, &e, &error)) << text;
    EXPECT_NE(error.find("line "), std::string::npos) << error;
    EXPECT_TRUE(e.empty());
  }
}

TEST(PlatformTenantsFile, NamesTheTenantOfANamespaceByItsPath) {
  const std::vector<PlatformEntry> entries = {
      {"gone", "/nonexistent/netns"}, {"other", "/proc/1/ns/mnt"}, {"mine", "/proc/self/ns/net"}};
  EXPECT_EQ(daemon::platform_tenant_of(entries, own_netns()), "mine");
  EXPECT_EQ(daemon::platform_tenant_of(entries, NetnsId{1, 2}), "");
}

TEST(PlatformTenantsFile, ReadOnlyWhenOnlyItsOwnerMayWrite) {
  TempDir dir;
  std::vector<PlatformEntry> e;
  std::string error;
  std::string good = dir.write("tenants", "t /proc/self/ns/net\n", 0644);
  ASSERT_TRUE(daemon::read_platform_tenants(good, &e, &error)) << error;
  EXPECT_EQ(e.size(), 1u);

  for (mode_t mode : {0664, 0646}) {
    std::string p = dir.write("writable", "t /proc/self/ns/net\n", mode);
    EXPECT_FALSE(daemon::read_platform_tenants(p, &e, &error));
    EXPECT_NE(error.find("only root"), std::string::npos) << error;
    EXPECT_TRUE(e.empty());
  }
  std::string link = dir.path() + "/link";
  ASSERT_EQ(::symlink(good.c_str(), link.c_str()), 0);
  EXPECT_FALSE(daemon::read_platform_tenants(link, &e, &error));
  EXPECT_FALSE(daemon::read_platform_tenants(dir.path() + "/missing", &e, &error));
  std::string bad = dir.write("bad", "t relative\n");
  EXPECT_FALSE(daemon::read_platform_tenants(bad, &e, &error));
  EXPECT_NE(error.find("line 1"), std::string::npos) << error;

  // A directory others may write: anyone could put a file of their own in its place.
  ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);
  EXPECT_FALSE(daemon::read_platform_tenants(good, &e, &error));
  EXPECT_NE(error.find("is not a directory that only root"), std::string::npos) << error;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);

  if (::geteuid() == 0) {
    // Owned by another user than root and vrdmad's.
    ASSERT_EQ(::chown(good.c_str(), 65534, 65534), 0);
    EXPECT_FALSE(daemon::read_platform_tenants(good, &e, &error));
  }
}

TEST(PlatformTenantsAdmission, PlatformTenantBeforeRulesAndOwnTenant) {
  daemon::Identity id;
  id.ipv4 = htonl(0x0a000005);
  id.named = true;
  std::vector<daemon::TenantRule> rules;
  std::string error;
  rules.push_back(*daemon::parse_tenant_rule("red=10.0.0.0/8", &error));
  daemon::DevicePolicy policy{&rules, false, "/run/netns"};
  EXPECT_EQ(daemon::admit(id, policy, "team-a").tenant, "team-a");
  EXPECT_EQ(daemon::admit(id, policy).tenant, "red");
  daemon::DevicePolicy none{nullptr, false, "/run/netns"};
  EXPECT_EQ(daemon::admit(id, none).tenant, "@10.0.0.5");
  // The platform names no tenant for the host, nor one that lets an anonymous namespace in.
  daemon::Identity anon = id;
  anon.anonymous = true;
  EXPECT_EQ(daemon::admit(anon, policy, "team-a").tenant, "");
  daemon::Identity host = id;
  host.host = true;
  EXPECT_EQ(daemon::admit(host, none, "team-a").refusal, EACCES);
}

TEST(PodTenants, NamespaceMap) {
  k8s::NamespaceTenants t;
  std::string error;
  EXPECT_TRUE(t.add("team-b=blue", &error)) << error;
  EXPECT_EQ(t.tenant_of("team-b"), "blue");
  EXPECT_EQ(t.tenant_of("team-a"), "team-a");
  for (const char* bad : {"team-b", "=blue", "team-b=", "a=b c", "a=@x"})
    EXPECT_FALSE(t.add(bad, &error)) << bad;
}

TEST(PodTenants, NetnsPathFromVerboseInfo) {
  const std::string spec = R"({"pid":7,"runtimeSpec":{"linux":{"namespaces":[{"type":"pid"},)"
                           R"({"type":"network","path":"/var/run/netns/cni-1234"}]}}})";
  EXPECT_EQ(k8s::netns_path_from_info({{"info", spec}}), "/var/run/netns/cni-1234");
  EXPECT_EQ(k8s::netns_path_from_info({}), "");
  EXPECT_EQ(k8s::netns_path_from_info({{"info", "not json"}}), "");
  EXPECT_EQ(k8s::netns_path_from_info(
                {{"info", R"({"runtimeSpec":{"linux":{"namespaces":[{"type":"network"}]}}})"}}),
            "");  // host network: no path
}

TEST(PodTenants, FileTextReadsBackAsTheDaemonParsesIt) {
  k8s::NamespaceTenants t;
  std::string error;
  ASSERT_TRUE(t.add("team-b=blue", &error));
  std::vector<k8s::PodSandboxView> sandboxes = {
      {"sb2", "team-b", "web", "/run/netns/cni-2"},
      {"sb1", "team-a", "db", "/run/netns/cni-1"},
      {"sb3", "team-a", "hostnet", ""},            // no namespace of its own: left out
      {"sb4", "team-a", "odd", "/run/netns/a b"},  // would not parse: left out
      {"sb5", "Bad/Namespace", "x", "/run/netns/cni-5"}};
  std::string text = k8s::tenant_file_text(sandboxes, t, "unix:///run/cri.sock");
  std::vector<PlatformEntry> e;
  ASSERT_TRUE(daemon::parse_platform_tenants(text, &e, &error)) << error << "\n" << text;
  EXPECT_EQ(e, (std::vector<PlatformEntry>{{"team-a", "/run/netns/cni-1"},
                                           {"blue", "/run/netns/cni-2"}}));
  EXPECT_NE(text.find("# team-b/web sb2"), std::string::npos) << text;
}

TEST(PodTenants, ReplaceFileIsAtomicAndReadable) {
  TempDir dir;
  std::string path = dir.path() + "/sub/tenants";
  std::string error;
  ASSERT_TRUE(k8s::replace_file(path, "a /x\n", &error)) << error;
  ASSERT_TRUE(k8s::replace_file(path, "b /y\n", &error)) << error;
  std::vector<PlatformEntry> e;
  ASSERT_TRUE(daemon::read_platform_tenants(path, &e, &error)) << error;
  EXPECT_EQ(e, (std::vector<PlatformEntry>{{"b", "/y"}}));
  size_t files = 0;
  for ([[maybe_unused]] const auto& f : std::filesystem::directory_iterator(dir.path() + "/sub"))
    ++files;
  EXPECT_EQ(files, 1u);  // no leftover temporary file
}

}  // namespace
}  // namespace vrdma
