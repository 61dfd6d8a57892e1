"""A multicast group member over pyverbs' rdma_cm API, for test_multicast.py: joins GROUP from
ADDRESS, receives COUNT datagrams (printing "got N"), leaves the group ("left"), and then waits
for one more datagram, which must never come ("late"). Run with the system's python3 inside a
sandbox container: python3 mcast_member.py ADDRESS GROUP COUNT"""

import sys

import pyverbs.cm_enums as ce
from pyverbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel
from pyverbs.qp import QPCap, QPInitAttr
import pyverbs.enums as e

GRH = 40
SIZE = 100


def expect(channel, kind):
    ev = CMEvent(channel)
    got = ev.event_type
    ev.ack_cm_event()
    if got != kind:
        sys.exit(f"expected rdma_cm event {kind}, got {got}")


def main():
    address, group, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    channel = CMEventChannel()
    cmid = CMID(creator=channel, port_space=ce.RDMA_PS_UDP)
    cmid.bind_addr(AddrInfo(src=address, port_space=ce.RDMA_PS_UDP, flags=ce.RAI_PASSIVE))
    cmid.resolve_addr(AddrInfo(src=address, dst=group))
    expect(channel, ce.RDMA_CM_EVENT_ADDR_RESOLVED)
    cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_UD, cap=QPCap(max_recv_wr=count + 1)))
    mr = cmid.reg_msgs(SIZE + GRH)
    for _ in range(count + 1):
        cmid.post_recv(mr)
    cmid.join_multicast(addr=AddrInfo(src=group))
    expect(channel, ce.RDMA_CM_EVENT_MULTICAST_JOIN)
    print("joined", flush=True)
    for i in range(count):
        cmid.get_recv_comp()
        print(f"got {i + 1}", flush=True)
    cmid.leave_multicast(AddrInfo(src=group))
    print("left", flush=True)
    cmid.get_recv_comp()
    print("late", flush=True)


if __name__ == "__main__":
    main()
