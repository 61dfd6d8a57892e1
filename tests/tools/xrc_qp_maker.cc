// xrc_qp_maker FILE: the maker of a shared XRC_RECV QP, for the cross-process ibv_open_qp tests.
// Opens the XRC domain of FILE (O_CREAT), makes an XRC_RECV QP in it, moves it to INIT with
// remote write access, prints "qpn <hex>" and waits for a line on stdin; then exits without
// destroying anything (as a process that dies), or with "destroy" destroys the QP first.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 2 || !strcmp(argv[1], "--help")) {
    fprintf(stderr, "usage: xrc_qp_maker FILE  (then a line on stdin: exit, or destroy)\n");
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
  if (int e = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                      IBV_QP_ACCESS_FLAGS))
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
