#!/usr/bin/env python3
"""A hostile client of vrdmad's control socket, for the attack tests: it speaks the control
protocol (src/common/protocol.h) directly, without the vrdma libraries, and does what a
well-behaved library never would (a thousand connections, resources until refused, QPN
probes). Run inside a sandbox container (vrdma sandbox exec NAME --no-lib -- python3
raw_control.py COMMAND ...); the socket is $VRDMA_SOCKET. Each command prints one JSON object.

    connections N [--hold S]            N connections, a verbs Hello on each
    alloc WHAT N [--conns C] [--length L]
                                        WHAT = qps | mrs | fds | cm_listeners: N requests spread
                                        over C connections of this container
    probe [--own K] QPN...              K QPs of its own, then ConnectQp to each QPN
    hello                               one verbs Hello: status and what the reply says
    status                              a status-only client's view (the daemon's JSON)
    grant IP PORT --owner ID            a QP of its own connected, as a legitimate peer, to a
                                        vrdma_bad_rkey server (its QPN, rkey and address swapped
                                        over TCP; the server's RTR names it); then asks for the
                                        server's MR (GetMr with its rkey) and for each of its fd
                                        ids (GetFd) over that QP: what vrdmad answers to each
    direct IP QPN [--rkeys N]           a QP of its own connected (ConnectQp) to QP QPN of the
                                        container at IP on another host; on the direct
                                        connection vrdmad hands over, a hostile peer: WRITEs and
                                        READs with N guessed rkeys, then an oversized request,
                                        then garbage; what came back to each
    garbage SECONDS                     malformed messages for SECONDS (bad magic, unknown
                                        operations, lengths that lie, short and oversized
                                        packets), connecting again whenever vrdmad closes
    reuse                               connect from a child that then exits; print its pid,
                                        wait for a line on stdin, then send Hello on that
                                        connection (the pid-reuse attack)
"""

import argparse
import errno
import fcntl
import json
import mmap
import os
import resource
import socket
import struct
import sys
import time

MAGIC = 0x31445256
HEADER = struct.Struct("<IHHIiI")
PROTOCOL_VERSION = 2  # common/protocol.h: proto::kVersion
OP = {"hello": 1, "putfd": 2, "get_fd": 3, "alloc_qpn": 4, "connect_qp": 6, "alloc_key": 7,
      "status": 9, "cm_listen": 11, "get_mr": 20}
KIND_VERBS, KIND_CLI = 1, 2
FD_ARENA, FD_EVENT, FD_QP_OBJECT = 1, 3, 4
QP_RC = 2
# src/shm/layout.h: ArenaHeader, ObjectHeader (64 bytes), QpObject (192 bytes).
ARENA_MAGIC, OBJECT_MAGIC, LAYOUT_VERSION, ARENA_SIZE = 0x414D4456, 0x4F4D4456, 4, 256 << 20
OBJECT_SIZE = 8192
QP_SLOT = 448  # sizeof(QpShared)
QP_BASE = 1 << 20
FIRST_FD_ID = 2  # 0 is the arena, 1 the key table
PUTFD = struct.Struct("<IIQII")  # PutFdReq


def sealed_memfd(name, size):
    """A memfd of `size` bytes sealed against shrinking and growing, as vrdmad requires."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    return fd


def seal(fd):
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)


def socket_path():
    return os.environ.get("VRDMA_SOCKET", "/run/vrdma/vrdmad.sock")


class Conn:
    def __init__(self, sock=None):
        if sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sock.settimeout(10)
            sock.connect(socket_path())
        self.sock = sock
        self.seq = 0
        self.arena = None
        self.client_id = 0
        self.qp_object = 0  # the fd id of the one QP object this connection's QPs share
        self.next_fd_id = FIRST_FD_ID

    def call(self, op, payload=b"", fds=(), keep=None):
        """Sends a request; returns (status, reply payload), or (None, b"") when the daemon
        closed the connection. Descriptors the reply carries are closed, or appended to `keep`."""
        self.seq += 1
        msg = HEADER.pack(MAGIC, op, 0, self.seq, 0, len(payload)) + payload
        try:
            if fds:
                socket.send_fds(self.sock, [msg], list(fds))
            else:
                self.sock.send(msg)
            while True:
                data, got, _, _ = socket.recv_fds(self.sock, 70000, 4)
                for fd in got:
                    if keep is not None:
                        keep.append(fd)
                    else:
                        os.close(fd)
                if not data:
                    return None, b""
                _, rop, _, seq, status, length = HEADER.unpack(data[:HEADER.size])
                if seq == self.seq and rop == op:
                    return status, data[HEADER.size:HEADER.size + length]
        except (ConnectionResetError, BrokenPipeError, socket.timeout):
            return None, b""

    def hello(self, kind=KIND_VERBS):
        status, rep = self.call(OP["hello"], struct.pack("<II", PROTOCOL_VERSION, kind))
        info = {}
        if status == 0 and len(rep) >= 128:
            version, cid, ip, host = struct.unpack("<IIII", rep[:16])
            self.client_id = cid
            info = {"client_id": cid, "ip": socket.inet_ntoa(struct.pack("<I", ip)),
                    "container": rep[64:128].split(b"\0")[0].decode(errors="replace")}
        return status, info

    def fd_id(self):
        self.next_fd_id += 1
        return self.next_fd_id - 1

    def put_arena(self):
        fd = sealed_memfd("raw-arena", ARENA_SIZE)
        m = mmap.mmap(fd, 4096)
        # magic, version, size, mr_table_offset, mr_slots, owner_client
        m[0:28] = struct.pack("<IIQIII", ARENA_MAGIC, LAYOUT_VERSION, ARENA_SIZE, 1 << 20, 4096,
                              self.client_id)
        seal(fd)
        self.arena = (fd, m)
        status, _ = self.call(OP["putfd"], PUTFD.pack(0, FD_ARENA, ARENA_SIZE, 0, 0), [fd])
        return status

    def put_qp_object(self):
        """A QP object (header only: rings at valid offsets, never used) for this connection's
        QPs; its fd id, or 0 when refused."""
        fd = sealed_memfd("raw-qp", OBJECT_SIZE)
        with mmap.mmap(fd, OBJECT_SIZE) as m:
            # magic, version, kind (QP), owner, size, rq_offset, srq_fd_id, ring_offset, notify
            m[0:40] = struct.pack("<IIIIQIIII", OBJECT_MAGIC, LAYOUT_VERSION, 1, self.client_id,
                                  OBJECT_SIZE, 1024, 0, 192, 0)
        seal(fd)
        fd_id = self.fd_id()
        status, _ = self.call(OP["putfd"], PUTFD.pack(fd_id, FD_QP_OBJECT, OBJECT_SIZE, 0, 0),
                              [fd])
        os.close(fd)
        return fd_id if status == 0 else 0

    def alloc_qpn(self, slot):
        if not self.qp_object:
            self.qp_object = self.put_qp_object()
        # qp_type, arena_offset, object, srq, notify, pd
        status, rep = self.call(OP["alloc_qpn"], struct.pack("<IIIIII", QP_RC,
                                QP_BASE + slot * QP_SLOT, self.qp_object, 0, 0, 1))
        return status, (struct.unpack("<I", rep[:4])[0] if status == 0 and len(rep) >= 4 else 0)

    def connect_qp(self, local, dest, gid=bytes(16), keep=None):
        status, _ = self.call(OP["connect_qp"], struct.pack("<II", local, dest) + gid +
                              struct.pack("<II", 0, 0), keep=keep)
        return status

    def alloc_key(self, index, length):
        # index (slot 0 is unused), access, length, pd
        status, _ = self.call(OP["alloc_key"], struct.pack("<IIQII", index % 4095 + 1, 7, length,
                                                           1, 0))
        return status

    def put_eventfd(self, fd_id):
        efd = os.eventfd(0, os.EFD_CLOEXEC)
        try:
            status, _ = self.call(OP["putfd"], PUTFD.pack(fd_id, FD_EVENT, 0, 0, 0), [efd])
        finally:
            os.close(efd)
        return status

    def cm_listen(self, port):
        status, _ = self.call(OP["cm_listen"], struct.pack("<IHHQ", 0, port, 0, port))
        return status

    def status(self):
        status, rep = self.call(OP["status"])
        return json.loads(rep) if status == 0 else None

    def close(self):
        self.sock.close()


def errno_name(status):
    if status is None:
        return "closed"
    return "ok" if status == 0 else errno.errorcode.get(status, str(status))


def tally(statuses):
    out = {}
    for s in statuses:
        out[errno_name(s)] = out.get(errno_name(s), 0) + 1
    return out


def cmd_connections(args):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    conns, statuses = [], []
    for _ in range(args.n):
        try:
            c = Conn()
        except OSError as e:
            statuses.append(e.errno)
            continue
        status, _ = c.hello()
        statuses.append(status)
        conns.append(c)
    time.sleep(args.hold)
    for c in conns:
        c.close()
    return {"attempts": args.n, "results": tally(statuses)}


def cmd_alloc(args):
    conns = []
    for _ in range(args.conns):
        c = Conn()
        status, _ = c.hello()
        if status != 0:
            return {"error": f"hello: {errno_name(status)}"}
        if c.put_arena() != 0:
            return {"error": "arena refused"}
        conns.append(c)
    statuses = []
    for i in range(args.n):
        c = conns[i % len(conns)]
        slot = i // len(conns)
        if args.what == "qps":
            statuses.append(c.alloc_qpn(slot)[0])
        elif args.what == "mrs":
            statuses.append(c.alloc_key(slot, args.length))
        elif args.what == "fds":
            statuses.append(c.put_eventfd(c.fd_id()))
        elif args.what == "cm_listeners":
            statuses.append(c.cm_listen(20000 + i))
    first_refusal = next((i for i, s in enumerate(statuses) if s != 0), None)
    return {"attempts": args.n, "conns": args.conns, "results": tally(statuses),
            "granted_before_first_refusal": first_refusal if first_refusal is not None else args.n}


def cmd_probe(args):
    c = Conn()
    status, _ = c.hello()
    if status != 0 or c.put_arena() != 0:
        return {"error": f"hello: {errno_name(status)}"}
    own = []
    for i in range(args.own):
        s, qpn = c.alloc_qpn(i)
        if s == 0:
            own.append(qpn)
    answers = {str(q): errno_name(c.connect_qp(own[0], q)) for q in args.qpns}
    return {"own": own, "answers": answers}


def ipv4_gid(ip):
    """The GID of an IPv4 address: ::ffff:a.b.c.d."""
    return bytes(10) + b"\xff\xff" + socket.inet_aton(ip)


def cmd_grant(args):
    c = Conn()
    status, info = c.hello()
    if status != 0 or c.put_arena() != 0:
        return {"error": f"hello: {errno_name(status)}"}
    s, qpn = c.alloc_qpn(0)
    if s != 0:
        return {"error": f"alloc_qpn: {errno_name(s)}"}
    # vrdma_bad_rkey's hello: qpn, rkey, addr, gid; then one byte each way (both ready).
    hello = struct.Struct("<IIQ16s")
    tcp = socket.create_connection((args.ip, args.port), timeout=10)
    tcp.sendall(hello.pack(qpn, 0, 0, ipv4_gid(info["ip"])))
    data = b""
    while len(data) < hello.size:
        chunk = tcp.recv(hello.size - len(data))
        if not chunk:
            return {"error": "the server went away"}
        data += chunk
    peer_qpn, rkey, addr, gid = hello.unpack(data)
    tcp.sendall(b"\1")
    tcp.recv(1)
    out = {"qpn": qpn, "peer_qpn": peer_qpn,
           "connect": errno_name(c.connect_qp(qpn, peer_qpn, gid))}
    # IBV_ACCESS_REMOTE_WRITE: what an RDMA WRITE to it would need.
    st, _ = c.call(OP["get_mr"], struct.pack("<IIIIQQ", args.owner, qpn, rkey, 2, 0, 0))
    out["get_mr"] = errno_name(st)
    out["get_fd"] = {str(i): errno_name(c.call(OP["get_fd"], struct.pack(
        "<IIII", args.owner, i, qpn, 0))[0]) for i in range(0, 8)}
    tcp.sendall(b"\1")  # done: the server exits
    tcp.close()
    return out


def cmd_hello(args):
    try:
        c = Conn()
    except OSError as e:
        return {"status": errno_name(e.errno), "connect_error": True}
    status, info = c.hello()
    return {"status": errno_name(status), **info}


def cmd_status(args):
    c = Conn()
    status, _ = c.hello(KIND_CLI)
    if status != 0:
        return {"error": f"hello: {errno_name(status)}"}
    return {"status": c.status()}


def cmd_reuse(args):
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        parent.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(socket_path())
        socket.send_fds(child, [b"x"], [s.fileno()])
        os._exit(0)
    child.close()
    _, fds, _, _ = socket.recv_fds(parent, 16, 1)
    os.waitpid(pid, 0)  # the client is gone; its pid is free
    sock = socket.socket(fileno=fds[0])
    sock.settimeout(10)
    print(json.dumps({"client_pid": pid}), flush=True)
    sys.stdin.readline()
    c = Conn(sock)
    status, info = c.hello()
    return {"status": errno_name(status), **info}


def cmd_direct(args):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import random

    import router_wire as rw  # the frames of the transport layer (src/transport/wire.h)
    out = {}

    def connection(slot):
        """A direct connection of a QP of our own (a new client's) to the target: (its QPN,
        socket) or None."""
        c = Conn()
        st, _ = c.hello()
        if st != 0 or c.put_arena() != 0:
            out.setdefault("connects", []).append(f"hello: {errno_name(st)}")
            return None
        out.setdefault("clients", []).append(c)
        st, own = c.alloc_qpn(slot)
        fds = []
        if st == 0:
            st = c.connect_qp(own, args.qpn, ipv4_gid(args.ip), keep=fds)
        out.setdefault("connects", []).append(errno_name(st))
        if st != 0 or not fds:
            return None
        sock = socket.socket(fileno=fds[0])
        sock.settimeout(5)
        return own, sock

    # 1. WRITEs and READs with guessed rkeys and addresses: the answers, until it closes.
    answers = {}
    got = connection(0)
    if got:
        own, sock = got
        peer = rw.Peer(sock)
        try:
            for seq in range(2 * args.rkeys):
                op = rw.WRITE if seq % 2 == 0 else rw.READ
                peer.request(own, args.qpn, seq, op, length=64,
                             payload=b"X" * 64 if op == rw.WRITE else b"",
                             rkey=random.getrandbits(32), addr=random.getrandbits(47))
                r = peer.response(own, seq, timeout=0.5)
                key = "none" if r is None else str(r[0])
                answers[key] = answers.get(key, 0) + 1
                if answers.get("none", 0) >= 3:
                    break  # it answers no more: refused
        except (OSError, EOFError):
            answers["closed"] = answers.get("closed", 0) + 1
        sock.close()
    out["answers"] = answers
    # 2. A request announcing 1 GiB of payload, then other bytes: nothing is allocated for it,
    # and the connection ends.
    got = connection(1)
    if got:
        own, sock = got
        try:
            rw.Peer(sock).request(own, args.qpn, 0, rw.WRITE, length=1 << 30, rkey=1,
                                  announce=1 << 30)
            sock.sendall(os.urandom(4096))
            out["oversized_closed"] = rw.closed_within(sock, 5.0)
        except OSError:
            out["oversized_closed"] = True
        sock.close()
    # 3. Garbage from the first byte.
    got = connection(2)
    if got:
        own, sock = got
        try:
            sock.sendall(b"\xff" * 64 + os.urandom(4096))
            out["garbage_closed"] = rw.closed_within(sock, 5.0)
        except OSError:
            out["garbage_closed"] = True
        sock.close()
    out.pop("clients", None)
    return out


def cmd_garbage(args):
    kinds = [
        lambda seq: struct.pack("<IHHIiI", 0xDEADBEEF, 1, 0, seq, 0, 0),  # bad magic
        lambda seq: HEADER.pack(MAGIC, 999, 0, seq, 0, 0),  # unknown operation
        lambda seq: HEADER.pack(MAGIC, OP["connect_qp"], 0, seq, 0, 4096) + b"x" * 8,  # lies
        lambda seq: b"\x01\x02\x03",  # shorter than a header
        lambda seq: HEADER.pack(MAGIC, OP["alloc_key"], 0, seq, 0, 60000) + os.urandom(60000),
        lambda seq: HEADER.pack(MAGIC, OP["hello"], 0, seq, 0, 8) + struct.pack("<II", 77, 9),
    ]
    end = time.monotonic() + args.seconds
    sent = reconnects = seq = 0
    conn = None
    while time.monotonic() < end:
        if conn is None:
            try:
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                conn.settimeout(1)
                conn.connect(socket_path())
                reconnects += 1
            except OSError:
                conn = None
                time.sleep(0.01)
                continue
        seq += 1
        try:
            conn.send(kinds[seq % len(kinds)](seq))
            sent += 1
        except OSError:
            conn.close()
            conn = None
    if conn:
        conn.close()
    return {"sent": sent, "connections": reconnects}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("connections")
    p.add_argument("n", type=int)
    p.add_argument("--hold", type=float, default=0.0)
    p = sub.add_parser("alloc")
    p.add_argument("what", choices=["qps", "mrs", "fds", "cm_listeners"])
    p.add_argument("n", type=int)
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--length", type=int, default=4096)
    p = sub.add_parser("grant")
    p.add_argument("ip")
    p.add_argument("port", type=int)
    p.add_argument("--owner", type=int, required=True)
    p = sub.add_parser("probe")
    p.add_argument("--own", type=int, default=1)
    p.add_argument("qpns", type=lambda x: int(x, 0), nargs="*")
    sub.add_parser("hello")
    sub.add_parser("status")
    sub.add_parser("reuse")
    p = sub.add_parser("direct")
    p.add_argument("ip")
    p.add_argument("qpn", type=lambda x: int(x, 0))
    p.add_argument("--rkeys", type=int, default=50)
    p = sub.add_parser("garbage")
    p.add_argument("seconds", type=float)
    args = ap.parse_args()
    out = {"connections": cmd_connections, "alloc": cmd_alloc, "probe": cmd_probe,
           "grant": cmd_grant, "hello": cmd_hello, "status": cmd_status, "reuse": cmd_reuse,
           "garbage": cmd_garbage, "direct": cmd_direct}[args.cmd](args)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
