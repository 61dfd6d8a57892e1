// xrc_qp_maker: the other processes of the cross-process ibv_open_qp tests.
// xrc_qp_maker FILE: the maker of a shared XRC_RECV QP. Opens the XRC domain of FILE (O_CREAT),
// makes an XRC_RECV QP in it, moves it to INIT with remote write access, prints "qpn <hex>" and
// waits for a line on stdin; then exits without destroying anything (as a process that dies), or
// with "destroy" destroys the QP and closes the domain first (and prints "destroyed").
// xrc_qp_maker --send RECV_QPN SRQN COUNT: an XRC_SEND QP connected to XRC_RECV QP RECV_QPN;
// prints "qpn <hex>", waits for a line on stdin, then sends COUNT messages of 512 bytes (byte j
// of message i is (i * 7 + j) & 0xff) into SRQ SRQN and prints "ok COUNT" or the failure; then
// waits for a line: "die" exits at once (as a process that dies), anything else cleans up first.
// xrc_qp_maker --forge FILE QPN: a hostile process with a domain of its own (FILE) that tries to
// open XRC_RECV QP QPN and numbers near it through that domain and through one of its own
// (fd -1); prints "refused N" with the number of attempts refused with EINVAL, or what it got.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <initializer_list>

namespace {

int modify(ibv_qp* q, ibv_qp_attr& a, int mask) {
  int e = ibv_modify_qp(q, &a, mask);
  if (e) fprintf(stderr, "modify to %d: %s\n", a.qp_state, strerror(e));
  return e;
}

int send_mode(uint32_t recv_qpn, uint32_t srqn, int count) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = list && n > 0 ? ibv_open_device(list[0]) : nullptr;
  ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
  ibv_cq* cq = ctx ? ibv_create_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
  static uint8_t buf[512];
  ibv_mr* mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : nullptr;
  if (!mr || !cq) return fprintf(stderr, "no device, PD, CQ or MR\n"), 1;
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_XRC_SEND;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD;
  qa.pd = pd;
  qa.send_cq = cq;
  qa.cap.max_send_wr = 16;
  qa.cap.max_send_sge = 1;
  ibv_qp* q = ibv_create_qp_ex(ctx, &qa);
  if (!q) return fprintf(stderr, "create_qp_ex: %s\n", strerror(errno)), 1;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  if (modify(q, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return 1;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = recv_qpn;
  a.ah_attr.port_num = 1;
  if (modify(q, a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN))
    return 1;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 10;
  a.retry_cnt = 3;
  a.rnr_retry = 3;
  if (modify(q, a,
             IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                 IBV_QP_MAX_QP_RD_ATOMIC))
    return 1;
  printf("qpn %x\n", q->qp_num);
  fflush(stdout);
  char line[64];
  if (!fgets(line, sizeof(line), stdin)) return 1;
  for (int i = 0; i < count; ++i) {
    for (size_t j = 0; j < sizeof(buf); ++j) buf[j] = static_cast<uint8_t>(i * 7 + j);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf), sizeof(buf), mr->lkey};
    ibv_send_wr w{};
    w.wr_id = i;
    w.sg_list = &sge;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    w.qp_type.xrc.remote_srqn = srqn;
    ibv_send_wr* bad = nullptr;
    if (int e = ibv_post_send(q, &w, &bad)) return printf("post %s\n", strerror(e)), 1;
    ibv_wc wc{};
    int got = 0;
    for (int tries = 0; tries < 200000 && got == 0; ++tries) {
      got = ibv_poll_cq(cq, 1, &wc);
      if (got == 0) usleep(50);
    }
    if (got != 1 || wc.status != IBV_WC_SUCCESS)
      return printf("fail %d %s\n", i, got == 1 ? ibv_wc_status_str(wc.status) : "timeout"), 1;
  }
  printf("ok %d\n", count);
  fflush(stdout);
  if (!fgets(line, sizeof(line), stdin)) return 0;  // held until told
  if (!strncmp(line, "die", 3)) _exit(0);           // as a process that dies: nothing closed
  int e = ibv_destroy_qp(q) | ibv_dereg_mr(mr) | ibv_destroy_cq(cq) | ibv_dealloc_pd(pd) |
          ibv_close_device(ctx);
  ibv_free_device_list(list);
  return e ? 1 : 0;
}

int forge_mode(const char* file, uint32_t qpn) {
  int fd = open(file, O_RDONLY);
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = list && n > 0 ? ibv_open_device(list[0]) : nullptr;
  if (fd < 0 || !ctx) return fprintf(stderr, "no file or device\n"), 1;
  ibv_xrcd* domains[2] = {};
  for (int i = 0; i < 2; ++i) {
    ibv_xrcd_init_attr xa{};
    xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    xa.fd = i == 0 ? fd : -1;
    xa.oflags = O_CREAT;
    domains[i] = ibv_open_xrcd(ctx, &xa);
    if (!domains[i]) return fprintf(stderr, "open_xrcd: %s\n", strerror(errno)), 1;
  }
  int refused = 0;
  for (ibv_xrcd* x : domains)
    for (uint32_t num : {qpn, qpn ^ 1u, qpn + 1u, qpn - 1u}) {
      ibv_qp_open_attr a{};
      a.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
      a.qp_num = num;
      a.xrcd = x;
      a.qp_type = IBV_QPT_XRC_RECV;
      errno = 0;
      ibv_qp* q = ibv_open_qp(ctx, &a);
      if (q) return printf("opened %x\n", num), 1;
      if (errno == EINVAL) ++refused;
    }
  printf("refused %d\n", refused);
  fflush(stdout);
  for (ibv_xrcd* x : domains) ibv_close_xrcd(x);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && !strcmp(argv[1], "--forge"))
    return forge_mode(argv[2], strtoul(argv[3], nullptr, 16));
  if (argc == 5 && !strcmp(argv[1], "--send"))
    return send_mode(strtoul(argv[2], nullptr, 16), strtoul(argv[3], nullptr, 16), atoi(argv[4]));
  if (argc != 2 || !strcmp(argv[1], "--help")) {
    fprintf(stderr,
            "usage: xrc_qp_maker FILE  (then a line on stdin: exit, or destroy)\n"
            "       xrc_qp_maker --send RECV_QPN SRQN COUNT  (hex numbers; a line on stdin: go)\n"
            "       xrc_qp_maker --forge FILE QPN  (hex number)\n");
    return 2;
  }
  int fd = open(argv[1], O_RDONLY);
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = list && n > 0 ? ibv_open_device(list[0]) : nullptr;
  if (fd < 0 || !ctx) return fprintf(stderr, "no file or device\n"), 1;
  ibv_xrcd_init_attr xa{};
  xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  xa.fd = fd;
  xa.oflags = O_CREAT;
  ibv_xrcd* x = ibv_open_xrcd(ctx, &xa);
  if (!x) return fprintf(stderr, "open_xrcd: %s\n", strerror(errno)), 1;
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_XRC_RECV;
  qa.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  qa.xrcd = x;
  ibv_qp* q = ibv_create_qp_ex(ctx, &qa);
  if (!q) return fprintf(stderr, "create_qp_ex: %s\n", strerror(errno)), 1;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (int e = ibv_modify_qp(q, &a,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return fprintf(stderr, "modify: %s\n", strerror(e)), 1;
  printf("qpn %x\n", q->qp_num);
  fflush(stdout);
  char line[64] = {};
  if (!fgets(line, sizeof(line), stdin)) return 0;
  if (!strncmp(line, "destroy", 7)) {
    if (ibv_destroy_qp(q)) return 1;
    if (ibv_close_xrcd(x)) return 1;
    printf("destroyed\n");
    fflush(stdout);
  }
  _exit(0);  // as a process that dies: nothing else is closed
}
