#include "daemon/identity/platform_tenants.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/unique_fd.h"
#include "daemon/identity/tenants.h"

namespace vrdma::daemon {

namespace {

constexpr size_t kMaxFileBytes = 4 << 20;

std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

// Owned by root or by us, writable by nobody else.
bool trusted_owner(const struct stat& st) {
  return (st.st_uid == 0 || st.st_uid == ::geteuid()) && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

std::string directory_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

bool parse_platform_tenants(std::string_view text, std::vector<PlatformEntry>* out,
                            std::string* error) {
  out->clear();
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    auto fields = fields_of(line);
    if (fields.empty()) continue;
    auto fail = [&](const std::string& why) {
      *error = "line " + std::to_string(line_no) + ": " + why;
      out->clear();
      return false;
    };
    if (fields.size() != 2) return fail("expected TENANT NETNS_PATH");
    if (!valid_tenant_name(fields[0]))
      return fail("tenant name may hold only letters, digits and - _ . : ('" +
                  std::string(fields[0]) + "')");
    if (fields[1].front() != '/') return fail("the namespace's path must be absolute");
    out->push_back(PlatformEntry{std::string(fields[0]), std::string(fields[1])});
  }
  return true;
}

bool read_platform_tenants(const std::string& path, std::vector<PlatformEntry>* out,
                           std::string* error) {
  out->clear();
  const std::string dir = directory_of(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) < 0) {
    *error = dir + ": " + strerror(errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode) || !trusted_owner(st)) {
    *error = dir + " is not a directory that only root (or vrdmad's user) may write";
    return false;
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    *error = path + ": " + strerror(errno);
    return false;
  }
  if (::fstat(fd.get(), &st) < 0) {
    *error = path + ": " + strerror(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode) || !trusted_owner(st)) {
    *error = path + " is not a regular file that only root (or vrdmad's user) may write";
    return false;
  }
  if (static_cast<size_t>(st.st_size) > kMaxFileBytes) {
    *error = path + " is larger than " + std::to_string(kMaxFileBytes) + " bytes";
    return false;
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = path + ": " + strerror(errno);
      return false;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  std::string why;
  if (!parse_platform_tenants(text, out, &why)) {
    *error = path + ": " + why;
    return false;
  }
  return true;
}

std::string platform_tenant_of(const std::vector<PlatformEntry>& entries, const NetnsId& ns) {
  for (const auto& e : entries) {
    struct stat st {};
    if (::stat(e.netns_path.c_str(), &st) < 0) continue;  // a sandbox that is gone
    if (static_cast<uint64_t>(st.st_dev) == ns.dev && static_cast<uint64_t>(st.st_ino) == ns.ino)
      return e.tenant;
  }
  return {};
}

}  // namespace vrdma::daemon
