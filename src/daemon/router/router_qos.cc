// Quality of service on the requester side: which local QP sends its next request on the
// links, in the order the QoS scheduler (daemon/qos) gives: the latency class first, then
// tenants and their containers by weight, within their rate limits.
//
// Each pass, every routed QP on the work list (router_worklist.cc) is pumped once for its state
// changes and flushes; the QPs with requests to send join their flow (their container's traffic of
// their class), and flows are then served one request at a time, the QPs of a flow in turn. A QP
// leaves the pass when its queue is empty, its link has no room (or has link_window_bytes
// unwritten: the rest waits in the QPs' queues, where the scheduler can still choose), or it sent
// wqes_per_pump requests. Nothing here allocates: flows' lists run through the QPs, and the
// scheduler's tables grow when a QP is attached.
#include <algorithm>

#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {

// A container no tenant rule covers is a tenant of its own, named "@<its address>".
bool own_tenant(const std::string& tenant) {
  return tenant.empty() || tenant[0] == '@';
}

}  // namespace

uint32_t Router::qos_container(uint32_t ipv4, const std::string& tenant) {
  auto it = qos_containers_.find({ipv4, tenant});
  if (it != qos_containers_.end()) return it->second;
  const int64_t now = now_;
  const qos::Rule rule = cfg_.qos.container(ipv4);
  uint32_t tenant_id;
  if (own_tenant(tenant)) {
    // A tenant of its own ("@<address>", no tenant rule covers it): its container competes
    // with tenants directly, with its own weight.
    tenant_id = qos_.add_tenant(qos::Rule{rule.weight, 0, 0}, now);
  } else {
    auto t = qos_tenants_.find(tenant);
    if (t == qos_tenants_.end())
      t = qos_tenants_
              .emplace(tenant, qos_.add_tenant(cfg_.qos.tenant(tenant), now, limits_->tenant(tenant)))
              .first;
    tenant_id = t->second;
  }
  // Its limits are shared with the other router threads' schedulers: one budget over all links.
  const uint32_t id = qos_.add_container(tenant_id, rule, now, limits_->container(ipv4, tenant));
  qos_containers_[{ipv4, tenant}] = id;
  const size_t n = qos_.containers();
  qos_container_info_.resize(n);
  qos_container_info_[id] = QosContainer{ipv4, tenant, 0, now};
  qos_queues_.resize(n * qos::kClasses);
  return id;
}

void Router::qos_attach(Outbound& o) {
  o.qos_container = qos_container(o.ipv4, o.tenant);
}

void Router::qos_hold(uint32_t container) {
  if (container < qos_container_info_.size()) ++qos_container_info_[container].qps;
}

void Router::qos_release(uint32_t container) {
  if (container >= qos_container_info_.size()) return;
  QosContainer& c = qos_container_info_[container];
  if (c.qps && --c.qps == 0) c.idle_ns = now_;
}

void Router::qos_prune(int64_t now) {
  for (uint32_t c = 0; c < qos_.containers(); ++c) {
    QosContainer& info = qos_container_info_[c];
    if (!qos_.live(c) || info.qps || now - info.idle_ns < lim_.qos_linger_ns) continue;
    const std::string tenant = std::move(info.tenant);
    qos_containers_.erase({info.ipv4, tenant});
    const uint32_t t = qos_.tenant_of(c);
    qos_.remove_container(c);
    info.tenant.clear();
    if (qos_.containers_of(t)) continue;
    qos_.remove_tenant(t);
    if (!own_tenant(tenant)) qos_tenants_.erase(tenant);
  }
}

void Router::set_qos(const qos::NamedRule& rule) {
  cfg_.qos.put(rule);
  if (rule.kind == qos::NamedRule::Kind::kContainer) {
    // Every container at that address (one, unless the address passed to another tenant
    // while the last one's state lingers).
    for (auto it = qos_containers_.lower_bound({rule.ipv4, std::string()});
         it != qos_containers_.end() && it->first.first == rule.ipv4; ++it) {
      qos_.set_container_rule(it->second, rule.rule, now_);
      if (own_tenant(it->first.second))
        qos_.set_tenant_rule(qos_.tenant_of(it->second), qos::Rule{rule.rule.weight, 0, 0}, now_);
    }
  } else {
    auto it = qos_tenants_.find(rule.tenant);
    if (it != qos_tenants_.end()) qos_.set_tenant_rule(it->second, rule.rule, now_);
  }
}

std::vector<Router::QosFlowInfo> Router::qos_flows() const {
  std::vector<QosFlowInfo> out;
  for (uint32_t c = 0; c < qos_.containers(); ++c)
    for (int cls = 0; cls < qos::kClasses && qos_.live(c); ++cls) {
      const qos::FlowCounters& k = qos_.counters(qos::Scheduler::flow(c, cls));
      if (!k.msgs && !k.holds && cls != qos::kBulk) continue;
      const uint32_t t = qos_.tenant_of(c);
      out.push_back(QosFlowInfo{qos_container_info_[c].ipv4, qos_container_info_[c].tenant, cls,
                                qos_.container_rule(c), qos_.tenant_rule(t), k});
    }
  return out;
}

bool Router::pump_all(int64_t now) {
  bool work = false;
  // Every QP: state changes and flushes; those with requests to send join their flow.
  for (Outbound* op = work_head_; op; op = op->work_next) {
    Outbound& o = *op;
    ++qp_visits_;
    work |= requester_.pump(o, now, 0);
    o.qos_next = nullptr;
    o.qos_pass_sent = 0;
    o.qos_held = false;
    if (o.failed || o.qp->gone.load(std::memory_order_relaxed) ||
        o.qp->state.load(std::memory_order_relaxed) == IBV_QPS_RESET)
      continue;
    const uint64_t t = o.sq->tail.load(std::memory_order_acquire);
    if (t <= o.sent || t - o.done > uint64_t(o.sq_mask) + 1) continue;  // nothing (sane) to send
    // When these entries were first seen: their queueing delay starts there.
    const uint64_t last_end =
        o.stamp_count ? o.stamp_end[(o.stamp_first + o.stamp_count - 1) % Outbound::kStamps]
                      : o.sent;
    if (t > last_end) {
      if (o.stamp_count == Outbound::kStamps) {
        o.stamp_end[(o.stamp_first + o.stamp_count - 1) % Outbound::kStamps] = t;
      } else {
        const int i = (o.stamp_first + o.stamp_count++) % Outbound::kStamps;
        o.stamp_end[i] = t;
        o.stamp_ns[i] = now;
      }
    }
    // Its class as it connected (its lane's): a QP's frames are all of one link.
    const uint32_t flow = qos::Scheduler::flow(o.qos_container, o.cls);
    QosQueue& q = qos_queues_[flow];
    if (q.tail)
      q.tail->qos_next = &o;
    else
      q.head = &o;
    q.tail = &o;
    qos_.backlog(flow);
  }
  // Serve the flows one request at a time in the scheduler's order. The first QP turned away
  // with requests to send (its link full) starts the next pass: QPs late on the list are not
  // the ones a full link always turns away.
  Outbound* turned_away = nullptr;
  for (int64_t f; (f = qos_.pick(now)) >= 0;) {
    const auto flow = static_cast<uint32_t>(f);
    QosQueue& q = qos_queues_[flow];
    Outbound& o = *q.head;
    q.head = o.qos_next;
    if (!q.head) q.tail = nullptr;
    o.qos_next = nullptr;
    const uint64_t pos = o.sent, bytes = o.sent_bytes;
    work |= requester_.pump(o, now, 1);
    if (o.sent == pos && !turned_away && !o.failed &&
        o.sent < o.sq->tail.load(std::memory_order_relaxed))
      turned_away = &o;
    if (o.sent != pos) {
      // Its delay: since the pass that first saw the entry.
      while (o.stamp_count && o.stamp_end[o.stamp_first] <= pos) {
        o.stamp_first = (o.stamp_first + 1) % Outbound::kStamps;
        --o.stamp_count;
      }
      const int64_t seen = o.stamp_count ? o.stamp_ns[o.stamp_first] : now;
      qos_.charge(flow, o.sent_bytes - bytes, 1, now - seen);
      ++o.qos_pass_sent;
      const uint64_t t = o.sq->tail.load(std::memory_order_acquire);
      if (!o.failed && o.sent < t && o.qos_pass_sent < lim_.wqes_per_pump) {
        // More to send: behind the flow's other QPs.
        if (q.tail)
          q.tail->qos_next = &o;
        else
          q.head = &o;
        q.tail = &o;
      }
    }
    if (!q.head) qos_.idle(flow);
  }
  if (turned_away) work_rotate(*turned_away);
  // Flows held by their limits: the scheduler says when they may go on; they join again at
  // the next pass.
  qos_ready_ns_ = qos_.next_ready(now);
  for (uint32_t flow = 0; flow < qos_queues_.size(); ++flow) {
    QosQueue& q = qos_queues_[flow];
    for (Outbound* o = q.head; o;) {
      o->qos_held = true;
      Outbound* next = o->qos_next;
      o->qos_next = nullptr;
      o = next;
    }
    q.head = q.tail = nullptr;
    qos_.idle(flow);
  }
  return work;
}

}  // namespace vrdma::daemon
