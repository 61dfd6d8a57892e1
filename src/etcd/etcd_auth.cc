#include "etcd/etcd_auth.h"

namespace vrdma::etcd {

std::string host_user(uint32_t id) {
  return "vrdma-host-" + std::to_string(id);
}

std::string host_write_prefix(uint32_t id) {
  return std::string(kDirectoryPrefix) + "hosts/" + std::to_string(id) + "/";
}

bool add_host(Client& root, uint32_t id, std::string* error) {
  const std::string name = host_user(id);
  auto step = [&](bool ok, const char* what) {
    if (!ok) *error = std::string(what) + " " + name + ": " + *error;
    return ok;
  };
  return step(root.user_add(name, error), "adding user") &&
         step(root.role_add(name, error), "adding role") &&
         step(root.role_grant_prefix(name, PermType::kRead, kDirectoryPrefix, error),
              "granting read access to role") &&
         step(root.role_grant_prefix(name, PermType::kReadWrite, host_write_prefix(id), error),
              "granting its own prefix to role") &&
         step(root.user_grant_role(name, name, error), "granting its role to user");
}

bool setup_auth(Client& root, const std::vector<uint32_t>& host_ids, bool enable,
                std::string* error) {
  auto step = [&](bool ok, const char* what) {
    if (!ok) *error = std::string(what) + ": " + *error;
    return ok;
  };
  if (!step(root.user_add(kRootUser, error), "adding the root user") ||
      !step(root.user_grant_role(kRootUser, "root", error), "granting the root role"))
    return false;
  for (uint32_t id : host_ids)
    if (!add_host(root, id, error)) return false;
  return !enable || step(root.auth_enable(error), "enabling auth");
}

}  // namespace vrdma::etcd
