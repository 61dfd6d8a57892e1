// Unit tests of who gets a device and in which tenant (identity/admission.h), of the
// per-container quota ledger (core/quotas.h) and of what status shows of them.
#include <arpa/inet.h>
#include <errno.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "daemon/core/quotas.h"
#include "daemon/core/status.h"
#include "daemon/identity/admission.h"
#include "daemon/identity/tenant_policy.h"

namespace vrdma::daemon {
namespace {

Identity container(const char* ip) {
  Identity id;
  id.netns = NetnsId{1, 2};
  id.named = true;
  id.container = "c";
  id.ipv4 = inet_addr(ip);
  return id;
}

TEST(DaemonAdmission, ContainersAreTheirOwnTenantWithoutRules) {
  DevicePolicy none;
  Admission a = admit(container("10.0.0.5"), none);
  EXPECT_EQ(a.refusal, 0);
  EXPECT_EQ(a.tenant, "@10.0.0.5");
  EXPECT_NE(admit(container("10.0.0.6"), none).tenant, a.tenant);

  std::string err;
  std::vector<TenantRule> rules{*parse_tenant_rule("red=10.0.0.0/24", &err)};
  DevicePolicy with_rule{&rules, false, "/run/netns"};
  EXPECT_EQ(admit(container("10.0.0.5"), with_rule).tenant, "red");
  EXPECT_EQ(admit(container("10.0.0.6"), with_rule).tenant, "red");
  EXPECT_EQ(admit(container("10.0.1.6"), with_rule).tenant, "@10.0.1.6");
}

TEST(DaemonAdmission, HostProcessesNeedARuleOrPermission) {
  Identity host = container("192.0.2.1");
  host.host = true;
  host.container = "host";
  Admission a = admit(host, DevicePolicy{});
  EXPECT_EQ(a.refusal, EACCES);
  EXPECT_EQ(a.tenant, "");
  EXPECT_NE(a.why.find("--allow-host-clients"), std::string::npos) << a.why;

  Admission allowed = admit(host, DevicePolicy{nullptr, true, ""});
  EXPECT_EQ(allowed.refusal, 0);
  EXPECT_EQ(allowed.tenant, "@host");

  std::string err;
  std::vector<TenantRule> rules{*parse_tenant_rule("ops=192.0.2.0/24", &err)};
  Admission ruled = admit(host, DevicePolicy{&rules, false, ""});
  EXPECT_EQ(ruled.refusal, 0);
  EXPECT_EQ(ruled.tenant, "ops");
}

TEST(DaemonAdmission, AnonymousAndDuplicateNamespacesGetNoDevice) {
  std::string err;
  std::vector<TenantRule> rules{*parse_tenant_rule("all=0.0.0.0/0", &err)};
  DevicePolicy policy{&rules, true, "/run/netns"};

  Identity unpinned = container("10.0.0.5");
  unpinned.named = false;
  unpinned.anonymous = true;
  Admission a = admit(unpinned, policy);
  EXPECT_EQ(a.refusal, EACCES);
  EXPECT_EQ(a.tenant, "") << "a rule covering its address does not matter";
  EXPECT_NE(a.why.find("/run/netns"), std::string::npos) << a.why;

  Identity userns = unpinned;
  userns.foreign_userns = true;
  Admission u = admit(userns, policy);
  EXPECT_EQ(u.refusal, EACCES);
  EXPECT_NE(u.why.find("user namespace"), std::string::npos) << u.why;

  Identity dup = container("10.0.0.5");
  dup.duplicate = true;
  Admission d = admit(dup, policy);
  EXPECT_EQ(d.refusal, EADDRINUSE);
  EXPECT_EQ(d.tenant, "");
  EXPECT_NE(d.why.find("10.0.0.5"), std::string::npos) << d.why;
}

TEST(DaemonQuotas, CountedPerContainerRefusedOverTheLimit) {
  QuotaLimits limits;
  limits[Resource::kConnections] = 2;
  limits[Resource::kQps] = 3;
  limits[Resource::kRegisteredBytes] = 1000;
  ContainerQuotas q(limits);
  const NetnsId a{1, 1}, b{1, 2};
  EXPECT_EQ(q.charge(a, "a", Resource::kConnections), 0);
  EXPECT_EQ(q.charge(a, "a", Resource::kConnections), 0);
  EXPECT_EQ(q.charge(a, "a", Resource::kConnections), EMFILE);
  EXPECT_EQ(q.charge(b, "b", Resource::kConnections), 0) << "another container";
  EXPECT_EQ(q.charge(a, "a", Resource::kQps, 3), 0);
  EXPECT_EQ(q.charge(a, "a", Resource::kQps), EDQUOT);
  EXPECT_EQ(q.charge(a, "a", Resource::kRegisteredBytes, 999), 0);
  EXPECT_EQ(q.charge(a, "a", Resource::kRegisteredBytes, 2), EDQUOT);
  EXPECT_EQ(q.charge(a, "a", Resource::kRegisteredBytes, ~0ull), EDQUOT) << "no overflow";
  EXPECT_EQ(q.charge(a, "a", Resource::kRegisteredBytes, 1), 0);
  ASSERT_NE(q.usage(a), nullptr);
  EXPECT_EQ((*q.usage(a))[Resource::kQps], 3u);
  EXPECT_EQ((*q.usage(a))[Resource::kConnections], 2u);

  // Published once; dropped with the last connection, and the container is forgotten.
  EXPECT_EQ(q.charge_published(a), 0);
  EXPECT_EQ(q.charge_published(a), 0);
  EXPECT_EQ((*q.usage(a))[Resource::kDirectoryEntries], 1u);
  q.release(a, Resource::kQps, 3);
  q.release(a, Resource::kRegisteredBytes, 1000);
  q.release(a, Resource::kConnections);
  EXPECT_NE(q.usage(a), nullptr);
  q.release(a, Resource::kConnections);
  EXPECT_EQ(q.usage(a), nullptr);
  EXPECT_NE(q.usage(b), nullptr);

  Identity anon1, anon2;
  anon1.anonymous = anon2.anonymous = true;
  anon1.netns = {5, 5};
  anon2.netns = {5, 6};
  EXPECT_EQ(ContainerQuotas::key_of(anon1), ContainerQuotas::key_of(anon2))
      << "anonymous namespaces share one set of totals";
  EXPECT_EQ(ContainerQuotas::key_of(container("10.0.0.1")), (NetnsId{1, 2}));
}

TEST(DaemonQuotas, ErrnosAndNames) {
  EXPECT_EQ(resource_errno(Resource::kConnections), EMFILE);
  EXPECT_EQ(resource_errno(Resource::kFds), EMFILE);
  EXPECT_EQ(resource_errno(Resource::kCmListeners), EMFILE);
  EXPECT_EQ(resource_errno(Resource::kCmConnections), EMFILE);
  EXPECT_EQ(resource_errno(Resource::kQps), EDQUOT);
  EXPECT_EQ(resource_errno(Resource::kMrs), EDQUOT);
  EXPECT_EQ(resource_errno(Resource::kRegisteredBytes), EDQUOT);
  EXPECT_EQ(resource_errno(Resource::kDirectoryEntries), EDQUOT);
  EXPECT_STREQ(resource_name(Resource::kRegisteredBytes), "registered_bytes");
}

TEST(DaemonStatus, KeysOfOtherContainersAndQuotaUse) {
  StatusInput in;
  StatusClient mine, other;
  mine.id = 1;
  mine.mrs.push_back({0x1234, 4096, 7, true});
  other.id = 2;
  other.mrs.push_back({0x5678, 8192, 7, false});
  in.clients = {mine, other};
  StatusContainer c;
  c.name = "h0c0";
  c.used[static_cast<size_t>(Resource::kQps)] = 3;
  c.limit[static_cast<size_t>(Resource::kQps)] = 64;
  in.containers.push_back(c);
  auto j = nlohmann::json::parse(render_status(in, 60000));
  EXPECT_EQ(j["clients"][0]["mrs"][0]["key"], "0x00001234");
  EXPECT_FALSE(j["clients"][1]["mrs"][0].contains("key"));
  EXPECT_EQ(j["clients"][1]["mrs"][0]["length"], 8192);
  EXPECT_EQ(j["containers"][0]["container"], "h0c0");
  EXPECT_EQ(j["containers"][0]["quota"]["qps"], nlohmann::json::array({3, 64}));
  EXPECT_EQ(j["containers"][0]["quota"].size(), kResourceCount);
}

TEST(TenantPolicy, ParsesFromArrowTo) {
  std::string error;
  auto a = parse_tenant_allow("red->blue", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->from, "red");
  EXPECT_EQ(a->to, "blue");
  for (const char* bad :
       {"red", "red->", "->blue", "red->red", "r@d->blue", "red=>blue", "red->blue->green", ""}) {
    error.clear();
    EXPECT_FALSE(parse_tenant_allow(bad, &error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
}

TEST(TenantPolicy, OneWayToInitiateEitherWayToPair) {
  TenantPolicy p(std::vector<TenantAllow>{{"red", "blue"}});
  EXPECT_TRUE(p.may_initiate("red", "red"));  // the same tenant, as without rules
  EXPECT_TRUE(p.may_initiate("red", "blue"));
  EXPECT_FALSE(p.may_initiate("blue", "red"));
  EXPECT_FALSE(p.may_initiate("green", "blue"));
  EXPECT_FALSE(p.may_initiate("", "blue"));
  EXPECT_TRUE(p.may_pair("red", "blue"));
  EXPECT_TRUE(p.may_pair("blue", "red"));
  EXPECT_FALSE(p.may_pair("red", "red"));  // the same tenant is not mediated
  EXPECT_FALSE(p.may_pair("red", "green"));
  EXPECT_FALSE(p.may_pair("", "blue"));
  TenantPolicy none;
  EXPECT_TRUE(none.empty());
  EXPECT_FALSE(none.may_pair("red", "blue"));
  EXPECT_FALSE(none.may_initiate("red", "blue"));
}

}  // namespace
}  // namespace vrdma::daemon
