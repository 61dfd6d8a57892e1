#include "daemon/directory/etcd_client.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>

#include "daemon/directory/base64.h"

namespace vrdma::daemon {

namespace {

using nlohmann::json;

// The gateway writes int64 fields as strings; accept numbers too.
int64_t as_int64(const json& j) {
  if (j.is_number_integer()) return j.get<int64_t>();
  if (!j.is_string()) return 0;
  const auto& s = j.get_ref<const std::string&>();
  int64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

int64_t int64_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() ? 0 : as_int64(*it);
}

std::string bytes_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || !it->is_string()) return {};
  return base64_decode(it->get<std::string>()).value_or(std::string());
}

// The text of an error object of the gateway ({"error": "...", "message": "...", "code": n}
// or, inside a stream, {"error": {"message": ...}}).
std::string error_text(const json& j) {
  const json& e = j.contains("error") && j["error"].is_object() ? j["error"] : j;
  for (const char* name : {"message", "error"})
    if (e.contains(name) && e[name].is_string()) return e[name].get<std::string>();
  return "unexpected reply " + j.dump();
}

bool parse_json(const std::string& text, json* out, std::string* error) {
  *out = json::parse(text, nullptr, false);
  if (!out->is_discarded() && out->is_object()) return true;
  *error = "reply is not a JSON object: " + text.substr(0, 200);
  return false;
}

std::string io_error_text(int rc, int timeout_ms) {
  if (rc == -ETIMEDOUT) return "no answer within " + std::to_string(timeout_ms) + " ms";
  if (rc == -EPROTO) return "not an HTTP reply";
  return std::strerror(-rc);
}

json put_request(const std::string& key, const std::string& value, int64_t lease) {
  json r = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease) r["lease"] = std::to_string(lease);
  return r;
}

}  // namespace

std::string etcd_prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) return std::string(1, '\0');  // every key
  end.back() = static_cast<char>(end.back() + 1);
  return end;
}

EtcdClient::EtcdClient(std::vector<HttpEndpoint> endpoints, int timeout_ms)
    : endpoints_(std::move(endpoints)), timeout_ms_(timeout_ms) {}

std::string EtcdClient::endpoints_text() const {
  std::string text;
  for (const auto& e : endpoints_) text += (text.empty() ? "http://" : ",http://") + e.text();
  return text;
}

bool EtcdClient::call(const char* path, const std::string& request, std::string* reply,
                      std::string* error) {
  HttpResponse resp;
  if (int rc = http_post(endpoint(), path, request, timeout_ms_, &resp); rc < 0) {
    *error = io_error_text(rc, timeout_ms_);
    return false;
  }
  if (resp.status != 200) {
    json j = json::parse(resp.body, nullptr, false);
    *error = "HTTP " + std::to_string(resp.status) +
             (j.is_object() ? ": " + error_text(j) : std::string());
    return false;
  }
  *reply = std::move(resp.body);
  return true;
}

bool EtcdClient::grant(int ttl_s, int64_t* lease, int* granted_ttl_s, std::string* error) {
  std::string text;
  json reply;
  if (!call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}}.dump(), &text, error) ||
      !parse_json(text, &reply, error))
    return false;
  *lease = int64_field(reply, "ID");
  *granted_ttl_s = static_cast<int>(int64_field(reply, "TTL"));
  if (*lease && *granted_ttl_s > 0) return true;
  *error = "lease grant: " + error_text(reply);
  return false;
}

bool EtcdClient::keepalive(int64_t lease, int* ttl_s, std::string* error) {
  std::string text;
  json reply;
  if (!call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump(), &text, error) ||
      !parse_json(text, &reply, error))
    return false;
  // A stream of one message: {"result": {...}} or {"error": {...}}.
  if (!reply.contains("result") || !reply["result"].is_object()) {
    *error = "lease keepalive: " + error_text(reply);
    return false;
  }
  *ttl_s = static_cast<int>(int64_field(reply["result"], "TTL"));
  return true;
}

bool EtcdClient::revoke(int64_t lease, std::string* error) {
  std::string text;
  return call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump(), &text, error);
}

bool EtcdClient::put(const std::string& key, const std::string& value, int64_t lease,
                     std::string* error) {
  std::string text;
  return call("/v3/kv/put", put_request(key, value, lease).dump(), &text, error);
}

bool EtcdClient::remove(const std::string& key, std::string* error) {
  std::string text;
  return call("/v3/kv/deleterange", json{{"key", base64_encode(key)}}.dump(), &text, error);
}

bool EtcdClient::txn(const std::vector<EtcdOp>& ops, std::string* error) {
  json success = json::array();
  for (const auto& op : ops) {
    if (op.deleted)
      success.push_back({{"request_delete_range", {{"key", base64_encode(op.key)}}}});
    else
      success.push_back({{"request_put", put_request(op.key, op.value, op.lease)}});
  }
  std::string text;
  json reply;
  if (!call("/v3/kv/txn", json{{"success", success}}.dump(), &text, error) ||
      !parse_json(text, &reply, error))
    return false;
  if (reply.value("succeeded", false)) return true;
  *error = "transaction: " + error_text(reply);
  return false;
}

bool EtcdClient::range_prefix(const std::string& prefix, std::vector<EtcdKv>* kvs,
                              int64_t* revision, std::string* error) {
  json request = {{"key", base64_encode(prefix)},
                  {"range_end", base64_encode(etcd_prefix_end(prefix))}};
  std::string text;
  json reply;
  if (!call("/v3/kv/range", request.dump(), &text, error) || !parse_json(text, &reply, error))
    return false;
  if (!reply.contains("header")) {
    *error = "range: " + error_text(reply);
    return false;
  }
  *revision = int64_field(reply["header"], "revision");
  kvs->clear();
  if (auto it = reply.find("kvs"); it != reply.end() && it->is_array()) {
    for (const auto& kv : *it)
      kvs->push_back({bytes_field(kv, "key"), bytes_field(kv, "value"), int64_field(kv, "lease")});
  }
  return true;
}

bool EtcdClient::watch_open(const std::string& prefix, int64_t start_revision, std::string* error) {
  json create = {{"key", base64_encode(prefix)},
                 {"range_end", base64_encode(etcd_prefix_end(prefix))},
                 {"start_revision", std::to_string(start_revision)}};
  int rc =
      watch_.open(endpoint(), "/v3/watch", json{{"create_request", create}}.dump(), timeout_ms_);
  if (rc == 0) return true;
  *error = rc == -EPROTO && watch_.status() ? "watch: HTTP " + std::to_string(watch_.status())
                                            : "watch: " + io_error_text(rc, timeout_ms_);
  return false;
}

bool EtcdClient::watch_read(std::vector<EtcdEvent>* events, std::string* error) {
  int rc = watch_.receive();
  while (auto line = watch_.next_line()) {
    if (line->empty()) continue;
    json msg = json::parse(*line, nullptr, false);
    if (msg.is_discarded() || !msg.is_object()) {
      *error = "watch: bad message " + line->substr(0, 200);
      watch_.close();
      return false;
    }
    if (!msg.contains("result") || !msg["result"].is_object()) {
      *error = "watch: " + error_text(msg);
      watch_.close();
      return false;
    }
    const json& result = msg["result"];
    if (result.value("canceled", false)) {
      *error = "watch canceled";
      if (auto reason = result.value("cancel_reason", std::string()); !reason.empty())
        *error += ": " + reason;
      if (int64_t compacted = int64_field(result, "compact_revision"))
        *error += " (compacted up to revision " + std::to_string(compacted) + ")";
      watch_.close();
      return false;
    }
    auto it = result.find("events");
    if (it == result.end() || !it->is_array()) continue;
    for (const auto& ev : *it) {
      if (!ev.contains("kv") || !ev["kv"].is_object()) continue;
      EtcdEvent e;
      e.deleted = ev.value("type", std::string()) == "DELETE";
      e.key = bytes_field(ev["kv"], "key");
      e.value = bytes_field(ev["kv"], "value");
      events->push_back(std::move(e));
    }
  }
  if (rc == 0) return true;
  *error =
      rc == -ECONNRESET ? "watch: etcd closed the connection" : "watch: " + io_error_text(rc, 0);
  watch_.close();
  return false;
}

}  // namespace vrdma::daemon
