#include "daemon/metrics/snapshot.h"

#include <algorithm>
#include <set>
#include <vector>

namespace vrdma::daemon::metrics {

namespace {

template <typename F>
void each(CounterSet& a, const CounterSet& b, F f) {
  for (uint32_t i = 0; i < kOpClasses; ++i) {
    f(a.tx_requests[i], b.tx_requests[i]);
    f(a.tx_bytes[i], b.tx_bytes[i]);
    f(a.rx_requests[i], b.rx_requests[i]);
  }
  for (uint32_t i = 0; i < kWcStatuses; ++i) f(a.send_completions[i], b.send_completions[i]);
  f(a.rx_bytes, b.rx_bytes);
  f(a.recv_ok, b.recv_ok);
  f(a.recv_len_err, b.recv_len_err);
  f(a.recv_prot_err, b.recv_prot_err);
  f(a.dropped, b.dropped);
  f(a.rnr_retries, b.rnr_retries);
  f(a.transport_retries, b.transport_retries);
}

}  // namespace

void CounterSet::add(const CounterSet& o) {
  each(*this, o, [](uint64_t& a, uint64_t b) { a += b; });
}

bool CounterSet::went_back(const CounterSet& earlier) const {
  bool back = false;
  CounterSet self = *this;
  each(self, earlier, [&](uint64_t& a, uint64_t b) { back |= a < b; });
  return back;
}

CounterLedger::Record& CounterLedger::record(const ContainerSample& c) {
  Record& r = records_[c.key()];
  if (r.name.empty() && r.ip.empty()) {
    r.name = c.name;
    r.ip = c.ip;
  }
  if (!c.tenant.empty()) r.tenant = c.tenant;
  return r;
}

void CounterLedger::retire(const ContainerSample& c, uint32_t client, uint32_t qpn,
                           const CounterSet& final_counters) {
  record(c).retired.add(final_counters);
  seen_.erase({client, qpn});
}

std::map<std::string, CounterSet> CounterLedger::totals(Snapshot& s) {
  ++scrape_;
  std::map<std::string, CounterSet> out;
  std::set<std::pair<uint32_t, uint32_t>> now;
  std::set<std::string> present;
  for (const auto& c : s.containers) {
    const std::string key = c.key();
    present.insert(key);
    Record& r = record(c);
    r.gone_since = 0;
    CounterSet& t = out[key];
    for (const auto& q : c.qps) {
      auto id = std::make_pair(q.client, q.qpn);
      now.insert(id);
      auto it = seen_.find(id);
      if (it != seen_.end() &&
          (it->second.container != key || q.counters.went_back(it->second.last))) {
        records_[it->second.container].retired.add(it->second.last);  // a new QP, old number
        seen_.erase(it);
      }
      seen_[id] = Seen{key, q.counters};
      t.add(q.counters);
    }
  }
  for (auto it = seen_.begin(); it != seen_.end();) {
    if (now.count(it->first)) {
      ++it;
      continue;
    }
    records_[it->second.container].retired.add(it->second.last);
    it = seen_.erase(it);
  }
  // Containers without processes: their totals stay, as long as not too many others went since.
  std::vector<std::pair<uint64_t, std::string>> gone;
  for (auto& [key, r] : records_)
    if (!present.count(key)) {
      if (!r.gone_since) r.gone_since = scrape_;
      gone.emplace_back(r.gone_since, key);
    }
  if (gone.size() > kMaxGone) {
    std::sort(gone.begin(), gone.end());
    for (size_t i = 0; i < gone.size() - kMaxGone; ++i) records_.erase(gone[i].second);
  }
  for (auto& [key, r] : records_) {
    if (!present.count(key)) {
      ContainerSample c;
      c.name = r.name;
      c.ip = r.ip;
      c.tenant = r.tenant;
      s.containers.push_back(std::move(c));
    }
    out[key].add(r.retired);
  }
  return out;
}

const char* wc_status_name(uint32_t status) {
  static const char* const kNames[kWcStatuses] = {"IBV_WC_SUCCESS",
                                                  "IBV_WC_LOC_LEN_ERR",
                                                  "IBV_WC_LOC_QP_OP_ERR",
                                                  "IBV_WC_LOC_EEC_OP_ERR",
                                                  "IBV_WC_LOC_PROT_ERR",
                                                  "IBV_WC_WR_FLUSH_ERR",
                                                  "IBV_WC_MW_BIND_ERR",
                                                  "IBV_WC_BAD_RESP_ERR",
                                                  "IBV_WC_LOC_ACCESS_ERR",
                                                  "IBV_WC_REM_INV_REQ_ERR",
                                                  "IBV_WC_REM_ACCESS_ERR",
                                                  "IBV_WC_REM_OP_ERR",
                                                  "IBV_WC_RETRY_EXC_ERR",
                                                  "IBV_WC_RNR_RETRY_EXC_ERR",
                                                  "IBV_WC_LOC_RDD_VIOL_ERR",
                                                  "IBV_WC_REM_INV_RD_REQ_ERR",
                                                  "IBV_WC_REM_ABORT_ERR",
                                                  "IBV_WC_INV_EECN_ERR",
                                                  "IBV_WC_INV_EEC_STATE_ERR",
                                                  "IBV_WC_FATAL_ERR",
                                                  "IBV_WC_RESP_TIMEOUT_ERR",
                                                  "IBV_WC_GENERAL_ERR",
                                                  "IBV_WC_TM_ERR",
                                                  "IBV_WC_TM_RNDV_INCOMPLETE"};
  return status < kWcStatuses ? kNames[status] : "IBV_WC_GENERAL_ERR";
}

const char* qp_state_label(uint32_t state) {
  static const char* const kNames[kQpStates] = {"RESET", "INIT", "RTR", "RTS",
                                                "SQD",   "SQE",  "ERR", "UNKNOWN"};
  return state < kQpStates ? kNames[state] : "UNKNOWN";
}

}  // namespace vrdma::daemon::metrics
