// Which flow sends next on the router's links: strict priority between traffic classes, then
// weighted fair sharing between tenants, then between the containers of a tenant, within the
// rate limits of both. Pure code with time passed in (ns); nothing here allocates or locks on
// the data path (backlog, pick, charge): the tables grow on the control path only.
//
// A flow is one container's traffic of one class. Fair sharing is start-time fair queuing at
// two levels: every tenant and every container has a virtual time per class that grows by
// bytes / weight as it is served; the backlogged tenant with the smallest virtual time is
// served first, and in it the container with the smallest. Over a busy stretch tenants (and a
// tenant's containers) get bytes in the ratio of their weights, whatever their message sizes.
// A tenant or container that comes back from idle starts at the virtual time of whoever was
// served last, not where it stopped: idle time earns no credit.
//
// Rate limits are token buckets (token_bucket.h) in bytes/s and messages/s, per container and
// per tenant, shared by the classes: a flow whose container's or tenant's bucket is empty is
// held (skipped) until it refills, which next_ready() tells. The buckets may also be shared
// with the schedulers of other router threads (limits.h: given to add_tenant/add_container).
//
// Tenants and containers that are gone are removed (control path, when none of their flows is
// backlogged); their ids are given again to the next ones added, so the tables stay as large
// as the most there were at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "daemon/qos/limits.h"

namespace vrdma::qos {

inline constexpr int kClasses = 2;
enum Class : uint8_t {
  kLatency = 0,  // strict priority: served before any bulk flow
  kBulk = 1,
};
const char* class_name(int cls);

// Weight (relative share) and limits (0: none) of a tenant or a container.
struct Rule {
  uint32_t weight = 1;
  uint64_t bytes_per_s = 0;
  uint64_t msgs_per_s = 0;
  bool operator==(const Rule&) const = default;
};

struct FlowCounters {
  uint64_t bytes = 0, msgs = 0;
  uint64_t delay_ns_sum = 0;  // queueing delay summed over messages
  uint64_t delay_ns_max = 0;
  uint64_t holds = 0;  // times it had work but was held by a rate limit
};

class Scheduler {
 public:
  // Control path.
  // `limits`: buckets shared with other schedulers (LimitTable), or null for its own.
  uint32_t add_tenant(const Rule& rule, int64_t now, std::shared_ptr<Limits> limits = nullptr);
  uint32_t add_container(uint32_t tenant, const Rule& rule, int64_t now,
                         std::shared_ptr<Limits> limits = nullptr);
  // Frees an idle container's id (its flows' counters go with it) / a tenant's that has no
  // containers left.
  void remove_container(uint32_t container);
  void remove_tenant(uint32_t tenant);
  void set_tenant_rule(uint32_t tenant, const Rule& rule, int64_t now);
  void set_container_rule(uint32_t container, const Rule& rule, int64_t now);
  // Ids in use are below these; live() tells which are.
  size_t tenants() const { return tenants_.size(); }
  size_t containers() const { return containers_.size(); }
  bool live(uint32_t container) const { return containers_[container].live; }
  uint32_t containers_of(uint32_t tenant) const { return tenants_[tenant].containers; }
  const Rule& tenant_rule(uint32_t t) const { return tenants_[t].rule; }
  const Rule& container_rule(uint32_t c) const { return containers_[c].rule; }
  uint32_t tenant_of(uint32_t container) const { return containers_[container].tenant; }

  static uint32_t flow(uint32_t container, int cls) { return container * kClasses + cls; }
  static uint32_t container_of(uint32_t flow) { return flow / kClasses; }
  static int class_of(uint32_t flow) { return static_cast<int>(flow % kClasses); }

  // Data path. The flow has work to send (again); a no-op if it is already backlogged.
  void backlog(uint32_t flow);
  // The flow has nothing more it can send now.
  void idle(uint32_t flow);
  bool backlogged(uint32_t flow) const { return flows_[flow].backlogged; }
  // The flow to serve next at `now`, or -1 when no backlogged flow may send.
  int64_t pick(int64_t now);
  // The flow sent `bytes` in `msgs` messages, which waited `delay_ns` in all.
  void charge(uint32_t flow, uint64_t bytes, uint32_t msgs, int64_t delay_ns);
  // The earliest time a backlogged flow held by a limit may send, or -1 (none is held).
  int64_t next_ready(int64_t now) const;

  const FlowCounters& counters(uint32_t flow) const { return flows_[flow].counters; }

 private:
  struct Tenant {
    Rule rule;
    std::shared_ptr<Limits> limits;
    double vtime[kClasses] = {};     // its virtual time among tenants
    double served[kClasses] = {};    // the virtual time of its container served last
    uint32_t active[kClasses] = {};  // its backlogged containers per class
    uint32_t containers = 0;         // live containers
    bool live = true;
  };
  struct Container {
    Rule rule;
    std::shared_ptr<Limits> limits;
    uint32_t tenant = 0;
    double vtime[kClasses] = {};
    bool live = true;
  };
  struct Flow {
    bool backlogged = false;
    bool held = false;
    FlowCounters counters;
  };

  static double weight_of(const Rule& r) { return r.weight ? r.weight : 1; }

  std::vector<Tenant> tenants_;
  std::vector<Container> containers_;
  std::vector<Flow> flows_;
  std::vector<uint32_t> free_tenants_, free_containers_;
  std::vector<uint32_t> active_[kClasses];  // backlogged flows (capacity: every flow)
  double served_[kClasses] = {};            // virtual time of the tenant served last
};

}  // namespace vrdma::qos
