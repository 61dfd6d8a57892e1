// Connections: rdma_connect, rdma_accept, rdma_reject, rdma_disconnect, rdma_establish, and
// the QP transitions rdma_cm does for the application (rdma_init_qp_attr).
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "internal.h"

namespace vrdma::cm {

namespace {

proto::CmParams params_of(const rdma_conn_param* p) {
  proto::CmParams r{};
  if (!p) {
    r.responder_resources = kMaxRdAtomic;
    r.initiator_depth = kMaxRdAtomic;
    r.retry_count = 7;
    r.rnr_retry_count = 7;
    return r;
  }
  r.responder_resources = clamp_rd(p->responder_resources);
  r.initiator_depth = clamp_rd(p->initiator_depth);
  r.retry_count = p->retry_count > 7 ? 7 : p->retry_count;
  r.rnr_retry_count = p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count;
  return r;
}

}  // namespace

int init_qp_attr(Id* id, ibv_qp_attr* attr, int* mask) {
  rdma_cm_id* cid = &id->id;
  bool ud = cid->qp_type == IBV_QPT_UD;
  ibv_qp_state want = attr->qp_state;
  memset(attr, 0, sizeof(*attr));
  attr->qp_state = want;
  switch (want) {
    case IBV_QPS_INIT:
      attr->port_num = 1;
      attr->pkey_index = 0;
      *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (ud) {
        attr->qkey = kUdQkey;
        *mask |= IBV_QP_QKEY;
      } else {
        attr->qp_access_flags =
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        *mask |= IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTR:
      if (ud) {
        *mask = IBV_QP_STATE;
        return 0;
      }
      if (!id->remote_qpn) return EINVAL;
      attr->path_mtu = IBV_MTU_4096;
      attr->dest_qp_num = id->remote_qpn;
      attr->rq_psn = 0;
      fill_ah(attr->ah_attr, cid->route.addr.dst_sin.sin_addr.s_addr);
      *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (cid->qp_type == IBV_QPT_RC) {
        // Reads the peer may have outstanding against us.
        attr->max_dest_rd_atomic = clamp_rd(id->mine.responder_resources);
        if (!attr->max_dest_rd_atomic) attr->max_dest_rd_atomic = 1;
        attr->min_rnr_timer = 12;
        *mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
      return 0;
    case IBV_QPS_RTS:
      attr->sq_psn = 0;
      *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (cid->qp_type == IBV_QPT_RC) {
        // The acceptor's retry counts come from the connector's request.
        const proto::CmParams& p = id->passive ? id->peer : id->mine;
        attr->timeout = id->ack_timeout >= 0 ? static_cast<uint8_t>(id->ack_timeout) : 14;
        attr->retry_cnt = p.retry_count;
        attr->rnr_retry = id->passive ? id->mine.rnr_retry_count : p.rnr_retry_count;
        attr->max_rd_atomic = clamp_rd(id->mine.initiator_depth);
        if (!attr->max_rd_atomic) attr->max_rd_atomic = 1;
        *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      }
      return 0;
    default:
      return EINVAL;
  }
}

int qp_to_rts(Id* id) {
  ibv_qp* qp = id->id.qp;
  if (!qp || qp->qp_type == IBV_QPT_UD) return 0;
  ibv_qp_attr a;
  int mask = 0;
  if (qp->state == IBV_QPS_RESET) {
    a.qp_state = IBV_QPS_INIT;
    if (int e = init_qp_attr(id, &a, &mask)) return e;
    if (int e = ibv_modify_qp(qp, &a, mask)) return e;
  }
  if (qp->state == IBV_QPS_INIT) {
    a.qp_state = IBV_QPS_RTR;
    if (int e = init_qp_attr(id, &a, &mask)) return e;
    if (int e = ibv_modify_qp(qp, &a, mask)) return e;
  }
  if (qp->state == IBV_QPS_RTR) {
    a.qp_state = IBV_QPS_RTS;
    if (int e = init_qp_attr(id, &a, &mask)) return e;
    if (int e = ibv_modify_qp(qp, &a, mask)) return e;
  }
  return qp->state == IBV_QPS_RTS ? 0 : EINVAL;
}

void send_disconnect(Id* id) {
  uint32_t conn;
  bool passive;
  {
    std::lock_guard lock(table_mu());
    conn = id->conn_id;
    passive = id->passive;
    bool live = id->state == State::kConnecting || id->state == State::kResponded ||
                id->state == State::kRequested || id->state == State::kAccepting ||
                id->state == State::kConnected;
    if (!conn || !live) return;
    id->state = State::kDisconnected;
  }
  proto::CmConnReq req{conn, passive ? 1u : 0u};
  call(proto::Op::kCmDisconnect, req);
}

}  // namespace vrdma::cm

using namespace vrdma::cm;
using vrdma::proto::Op;

extern "C" {

VRDMA_EXPORT int rdma_init_qp_attr(struct rdma_cm_id* cid, struct ibv_qp_attr* qp_attr,
                                   int* qp_attr_mask) {
  if (!cid || !qp_attr || !qp_attr_mask) return fail(EINVAL);
  if (int e = init_qp_attr(impl(cid), qp_attr, qp_attr_mask)) return fail(e);
  return 0;
}

VRDMA_EXPORT int rdma_connect(struct rdma_cm_id* cid, struct rdma_conn_param* param) {
  if (!cid) return fail(EINVAL);
  Id* id = impl(cid);
  if (id->state != State::kRouteResolved) return fail(EINVAL);
  if (param && param->private_data_len > vrdma::proto::kCmPrivateData) return fail(EINVAL);
  if (!cid->qp && !param) return fail(EINVAL);
  vrdma::proto::CmConnectReq req{};
  req.dst_ipv4 = cid->route.addr.dst_sin.sin_addr.s_addr;
  req.dst_port = ntohs(cid->route.addr.dst_sin.sin_port);
  req.src_port = ntohs(cid->route.addr.src_sin.sin_port);
  req.local_qpn = cid->qp ? cid->qp->qp_num : param->qp_num;
  req.qp_type = cid->qp ? cid->qp->qp_type : cid->qp_type;
  req.qkey = kUdQkey;
  req.params = params_of(param);
  if (param && param->private_data_len) {
    if (!param->private_data) return fail(EINVAL);
    req.private_len = param->private_data_len;
    memcpy(req.private_data, param->private_data, param->private_data_len);
  }
  req.cookie = id->cookie;
  id->mine = req.params;
  {
    std::lock_guard lock(table_mu());
    id->state = State::kConnecting;
  }
  vrdma::proto::CmConnectRep rep{};
  int err = call(Op::kCmConnect, req, &rep, sizeof(rep));
  {
    std::lock_guard lock(table_mu());
    if (err == 0) {
      id->conn_id = rep.conn_id;
    } else if (err == ECONNREFUSED || err == EHOSTUNREACH) {
      // As on a fabric: the connect itself succeeds, its event says what happened.
      id->state = State::kRejected;
      Event* e = err == ECONNREFUSED
                     ? new_event(id, RDMA_CM_EVENT_REJECTED, kRejInvalidServiceId)
                     : new_event(id, RDMA_CM_EVENT_UNREACHABLE, -EHOSTUNREACH);
      queue_event(id, e);
    } else {
      id->state = State::kRouteResolved;
      return fail(err);
    }
  }
  if (id->sync) return wait_event(id, RDMA_CM_EVENT_ESTABLISHED);
  return 0;
}

VRDMA_EXPORT int rdma_establish(struct rdma_cm_id* cid) {
  if (!cid) return fail(EINVAL);
  Id* id = impl(cid);
  if (id->state != State::kResponded) return fail(EINVAL);
  vrdma::proto::CmConnReq rtu{id->conn_id, 0};
  if (int err = call(Op::kCmRtu, rtu)) return fail(err);
  std::lock_guard lock(table_mu());
  if (id->state == State::kResponded) id->state = State::kConnected;
  return 0;
}

VRDMA_EXPORT int rdma_accept(struct rdma_cm_id* cid, struct rdma_conn_param* param) {
  if (!cid) return fail(EINVAL);
  Id* id = impl(cid);
  if (!id->passive || id->state != State::kRequested) return fail(EINVAL);
  if (param && param->private_data_len > vrdma::proto::kCmPrivateData) return fail(EINVAL);
  if (!cid->qp && !param) return fail(EINVAL);
  id->mine = params_of(param);
  if (!param) {
    // Without parameters the acceptor answers with what the connector asked for.
    id->mine.responder_resources = clamp_rd(id->peer.initiator_depth);
    id->mine.initiator_depth = clamp_rd(id->peer.responder_resources);
  }
  if (int e = qp_to_rts(id)) return fail(e);
  vrdma::proto::CmAcceptReq req{};
  req.conn_id = id->conn_id;
  req.local_qpn = cid->qp ? cid->qp->qp_num : param->qp_num;
  req.qkey = kUdQkey;
  req.params = id->mine;
  if (param && param->private_data_len) {
    if (!param->private_data) return fail(EINVAL);
    req.private_len = param->private_data_len;
    memcpy(req.private_data, param->private_data, param->private_data_len);
  }
  bool ud = cid->qp_type == IBV_QPT_UD;
  {
    std::lock_guard lock(table_mu());
    id->state = ud ? State::kConnected : State::kAccepting;
  }
  if (int err = call(Op::kCmAccept, req)) {
    std::lock_guard lock(table_mu());
    id->state = State::kDisconnected;
    return fail(err == ENOENT ? ECONNRESET : err);
  }
  if (ud) {
    std::lock_guard lock(table_mu());
    id->conn_id = 0;
    return 0;
  }
  if (id->sync) return wait_event(id, RDMA_CM_EVENT_ESTABLISHED);
  return 0;
}

VRDMA_EXPORT int rdma_reject(struct rdma_cm_id* cid, const void* private_data,
                             uint8_t private_data_len) {
  if (!cid) return fail(EINVAL);
  Id* id = impl(cid);
  if (!id->passive || id->state != State::kRequested) return fail(EINVAL);
  if (private_data_len > vrdma::proto::kCmPrivateData) return fail(EINVAL);
  vrdma::proto::CmRejectReq req{};
  req.conn_id = id->conn_id;
  if (private_data_len) {
    if (!private_data) return fail(EINVAL);
    req.private_len = private_data_len;
    memcpy(req.private_data, private_data, private_data_len);
  }
  {
    std::lock_guard lock(table_mu());
    id->state = State::kRejected;
  }
  if (int err = call(Op::kCmReject, req)) return fail(err == ENOENT ? ECONNRESET : err);
  return 0;
}

VRDMA_EXPORT int rdma_disconnect(struct rdma_cm_id* cid) {
  if (!cid) return fail(EINVAL);
  Id* id = impl(cid);
  State s;
  {
    std::lock_guard lock(table_mu());
    s = id->state;
  }
  if (s != State::kConnected && s != State::kAccepting && s != State::kResponded &&
      s != State::kConnecting && s != State::kDisconnected)
    return fail(EINVAL);
  // The QP goes to the error state (its posted work flushes) even when the peer left first.
  if (cid->qp) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(cid->qp, &a, IBV_QP_STATE);
  }
  if (s == State::kDisconnected) return 0;  // the DISCONNECTED event is already there
  send_disconnect(id);
  std::lock_guard lock(table_mu());
  queue_event(id, new_event(id, RDMA_CM_EVENT_DISCONNECTED));
  return 0;
}

VRDMA_EXPORT int rdma_notify(struct rdma_cm_id* cid, enum ibv_event_type /*event*/) {
  return cid ? 0 : fail(EINVAL);
}

}  // extern "C"
