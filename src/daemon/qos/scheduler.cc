#include "daemon/qos/scheduler.h"

#include <algorithm>

namespace vrdma::qos {

const char* class_name(int cls) {
  switch (cls) {
    case kLatency:
      return "latency";
    case kBulk:
      return "bulk";
  }
  return "?";
}

uint32_t Scheduler::add_tenant(const Rule& rule, int64_t now, std::shared_ptr<Limits> limits) {
  uint32_t id;
  if (!free_tenants_.empty()) {
    id = free_tenants_.back();
    free_tenants_.pop_back();
    tenants_[id] = Tenant{};
  } else {
    tenants_.emplace_back();
    id = static_cast<uint32_t>(tenants_.size() - 1);
  }
  tenants_[id].limits = limits ? std::move(limits) : std::make_shared<Limits>();
  set_tenant_rule(id, rule, now);
  for (int c = 0; c < kClasses; ++c) tenants_[id].vtime[c] = served_[c];
  return id;
}

uint32_t Scheduler::add_container(uint32_t tenant, const Rule& rule, int64_t now,
                                  std::shared_ptr<Limits> limits) {
  uint32_t id;
  if (!free_containers_.empty()) {
    id = free_containers_.back();
    free_containers_.pop_back();
    containers_[id] = Container{};
    for (int c = 0; c < kClasses; ++c) flows_[flow(id, c)] = Flow{};
  } else {
    containers_.emplace_back();
    id = static_cast<uint32_t>(containers_.size() - 1);
    for (int c = 0; c < kClasses; ++c) flows_.emplace_back();
  }
  containers_[id].tenant = tenant;
  ++tenants_[tenant].containers;
  containers_[id].limits = limits ? std::move(limits) : std::make_shared<Limits>();
  set_container_rule(id, rule, now);
  for (int c = 0; c < kClasses; ++c) containers_[id].vtime[c] = tenants_[tenant].served[c];
  // Room for every flow in the lists of backlogged flows: backlog() never allocates.
  for (auto& a : active_) a.reserve(flows_.size());
  return id;
}

void Scheduler::remove_container(uint32_t container) {
  Container& c = containers_[container];
  if (!c.live) return;
  for (int cls = 0; cls < kClasses; ++cls) idle(flow(container, cls));
  c.live = false;
  c.limits.reset();  // shared ones (LimitTable) go when no thread holds them
  --tenants_[c.tenant].containers;
  free_containers_.push_back(container);
}

void Scheduler::remove_tenant(uint32_t tenant) {
  Tenant& t = tenants_[tenant];
  if (!t.live || t.containers) return;
  t.live = false;
  t.limits.reset();
  free_tenants_.push_back(tenant);
}

void Scheduler::set_tenant_rule(uint32_t tenant, const Rule& rule, int64_t now) {
  // A rate set again unchanged leaves its bucket as it is (TokenBucket::set_rate).
  Tenant& t = tenants_[tenant];
  t.limits->set(rule.bytes_per_s, rule.msgs_per_s, now);
  t.rule = rule;
}

void Scheduler::set_container_rule(uint32_t container, const Rule& rule, int64_t now) {
  Container& c = containers_[container];
  c.limits->set(rule.bytes_per_s, rule.msgs_per_s, now);
  c.rule = rule;
}

void Scheduler::backlog(uint32_t flow) {
  Flow& f = flows_[flow];
  if (f.backlogged) return;
  f.backlogged = true;
  const int cls = class_of(flow);
  Container& c = containers_[container_of(flow)];
  Tenant& t = tenants_[c.tenant];
  // Back from idle: no earlier than whoever was served last.
  if (t.active[cls]++ == 0) t.vtime[cls] = std::max(t.vtime[cls], served_[cls]);
  c.vtime[cls] = std::max(c.vtime[cls], t.served[cls]);
  active_[cls].push_back(flow);
}

void Scheduler::idle(uint32_t flow) {
  Flow& f = flows_[flow];
  if (!f.backlogged) return;
  f.backlogged = false;
  f.held = false;
  const int cls = class_of(flow);
  --tenants_[containers_[container_of(flow)].tenant].active[cls];
  auto& a = active_[cls];
  auto it = std::find(a.begin(), a.end(), flow);
  if (it != a.end()) {
    *it = a.back();
    a.pop_back();
  }
}

int64_t Scheduler::pick(int64_t now) {
  for (int cls = 0; cls < kClasses; ++cls) {
    int64_t best = -1;
    double best_t = 0, best_c = 0;
    for (uint32_t flow : active_[cls]) {
      Flow& f = flows_[flow];
      Container& c = containers_[container_of(flow)];
      Tenant& t = tenants_[c.tenant];
      if (!c.limits->open(now) || !t.limits->open(now)) {
        if (!f.held) ++f.counters.holds;
        f.held = true;
        continue;
      }
      f.held = false;
      const double tv = t.vtime[cls], cv = c.vtime[cls];
      if (best < 0 || tv < best_t || (tv == best_t && cv < best_c)) {
        best = flow;
        best_t = tv;
        best_c = cv;
      }
    }
    if (best >= 0) return best;
  }
  return -1;
}

void Scheduler::charge(uint32_t flow, uint64_t bytes, uint32_t msgs, int64_t delay_ns) {
  const int cls = class_of(flow);
  Container& c = containers_[container_of(flow)];
  Tenant& t = tenants_[c.tenant];
  // Start times: what a tenant or container coming back from idle starts from.
  served_[cls] = t.vtime[cls];
  t.served[cls] = c.vtime[cls];
  // Every message costs at least one byte of share, so that empty ones are shared too.
  const double cost = static_cast<double>(std::max<uint64_t>(bytes, msgs));
  t.vtime[cls] += cost / weight_of(t.rule);
  c.vtime[cls] += cost / weight_of(c.rule);
  t.limits->bytes.take(bytes);
  t.limits->msgs.take(msgs);
  c.limits->bytes.take(bytes);
  c.limits->msgs.take(msgs);
  FlowCounters& k = flows_[flow].counters;
  k.bytes += bytes;
  k.msgs += msgs;
  if (delay_ns > 0 && msgs) {
    k.delay_ns_sum += static_cast<uint64_t>(delay_ns);
    k.delay_ns_max = std::max<uint64_t>(k.delay_ns_max, static_cast<uint64_t>(delay_ns) / msgs);
  }
}

int64_t Scheduler::next_ready(int64_t now) const {
  int64_t next = -1;
  for (const auto& a : active_)
    for (uint32_t flow : a) {
      const Container& c = containers_[container_of(flow)];
      const Tenant& t = tenants_[c.tenant];
      int64_t at = std::max({c.limits->bytes.opens_at(now), c.limits->msgs.opens_at(now),
                             t.limits->bytes.opens_at(now), t.limits->msgs.opens_at(now)});
      if (next < 0 || at < next) next = at;
    }
  return next;
}

}  // namespace vrdma::qos
