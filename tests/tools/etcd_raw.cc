// etcd_raw: a bare etcd client for the directory attack tests. It speaks etcd's gRPC API with
// whatever credentials it is given (a host's certificate, a certificate of another CA, none,
// or no TLS at all) and does exactly one thing, so a test can show what etcd allows each.
//
//   etcd_raw --endpoint IP:PORT [--ca FILE] [--cert FILE --key FILE] [--plaintext] COMMAND
//     get PREFIX              prints {"key": {"value": "...", "lease": N, "create": N}, ...}
//     put KEY VALUE [LEASE]   VALUE "@FILE" takes the file's bytes
//     del KEY
//     revoke LEASE
// Exit status: 0 done, 1 refused or failed (the reason on stderr), 2 usage.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "etcd/etcd_client.h"

namespace {

int usage(const char* why) {
  std::fprintf(stderr,
               "etcd_raw: %s\n"
               "usage: etcd_raw --endpoint IP:PORT [--ca FILE] [--cert FILE --key FILE] "
               "[--plaintext] get PREFIX | put KEY VALUE|@FILE [LEASE] | del KEY | revoke LEASE\n",
               why);
  return 2;
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace vrdma;
  std::string endpoint, ca, cert, key;
  bool plaintext = false;
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    if (a == "--endpoint") {
      if (!value(&endpoint)) return usage("--endpoint needs a value");
    } else if (a == "--ca") {
      if (!value(&ca)) return usage("--ca needs a value");
    } else if (a == "--cert") {
      if (!value(&cert)) return usage("--cert needs a value");
    } else if (a == "--key") {
      if (!value(&key)) return usage("--key needs a value");
    } else if (a == "--plaintext") {
      plaintext = true;
    } else if (a == "-h" || a == "--help") {
      usage("an etcd client for tests");
      return 0;
    } else {
      rest.push_back(a);
    }
  }
  size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || rest.empty()) return usage("missing endpoint or command");
  etcd::Endpoint ep{endpoint.substr(0, colon),
                    static_cast<uint16_t>(std::atoi(endpoint.c_str() + colon + 1))};

  etcd::Credentials creds;
  creds.tls = !plaintext;
  std::string error;
  if (!ca.empty() && !read_file(ca, &creds.ca_pem)) return usage("cannot read --ca");
  if (!cert.empty() && (!read_file(cert, &creds.cert_pem) || !read_file(key, &creds.key_pem)))
    return usage("cannot read --cert or --key");
  etcd::Client client({ep}, creds, 3000);

  const std::string& cmd = rest[0];
  bool ok = false;
  if (cmd == "get" && rest.size() == 2) {
    std::vector<etcd::Kv> kvs;
    int64_t rev;
    ok = client.range_prefix(rest[1], &kvs, &rev, &error);
    if (ok) {
      nlohmann::json j = nlohmann::json::object();
      for (const auto& kv : kvs)
        j[kv.key] = {{"value", kv.value}, {"lease", kv.lease}, {"create", kv.create_revision}};
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
  } else if (cmd == "put" && (rest.size() == 3 || rest.size() == 4)) {
    std::string value = rest[2];
    if (value.starts_with("@") && !read_file(value.substr(1), &value))
      return usage("cannot read the value's file");
    int64_t lease = rest.size() == 4 ? std::strtoll(rest[3].c_str(), nullptr, 0) : 0;
    ok = client.put(rest[1], value, lease, &error);
  } else if (cmd == "del" && rest.size() == 2) {
    ok = client.remove(rest[1], &error);
  } else if (cmd == "revoke" && rest.size() == 2) {
    ok = client.revoke(std::strtoll(rest[1].c_str(), nullptr, 0), &error);
  } else {
    return usage("unknown command or wrong arguments");
  }
  if (ok) return 0;
  std::fprintf(stderr, "etcd_raw: %s: %s\n", cmd.c_str(), error.c_str());
  return 1;
}
