"""A router of its own for the attack suite: speaks the frames of src/transport/wire.h
with `struct` (host byte order, x86-64), over plain TCP or mutual TLS (the `ssl` module), from
inside a namespace of the sandbox (netns()). It does what a hostile host (or anything on the
underlay) could: any Hello, any Connect, requests with any field, rdma_cm messages for any
connection."""

import contextlib
import ctypes
import os
import select
import socket
import ssl
import struct
import time

CLONE_NEWNET = 0x40000000

# wire.h
MAGIC = 0x52445256
VERSION = 5
HELLO, PING, PONG, CONNECT, CONNECT_REP, REQUEST, RESPONSE, CM, PEER_GONE = range(1, 10)
CLOSE = 13  # on a direct connection: a QP of one end goes, on purpose (qpn, role)
HEADER = struct.Struct("<B3xI")
BODIES = {
    HELLO: struct.Struct("<IIIIQ"),
    PING: struct.Struct("<Q"),
    PONG: struct.Struct("<Q"),
    CONNECT: struct.Struct("<QIIIIII"),
    CONNECT_REP: struct.Struct("<QiI"),
    REQUEST: struct.Struct("<IIQIIIIQQQQIIIBBBBII"),
    RESPONSE: struct.Struct("<IIQQQ"),
    PEER_GONE: struct.Struct("<II"),
    CM: struct.Struct("<HHI256s"),
    CLOSE: struct.Struct("<II"),
}
assert [BODIES[t].size for t in (HELLO, CONNECT, CONNECT_REP, REQUEST, RESPONSE, CM)] == \
    [24, 32, 16, 88, 32, 264]

# verbs.h
RC, UC, UD = 2, 3, 4
XRC_SEND, XRC_RECV = 9, 10
WRITE, WRITE_IMM, SEND, SEND_IMM, READ, CAS, FAA = range(7)
SUCCESS, REM_INV_REQ_ERR, REM_ACCESS_ERR, RETRY_EXC_ERR, RNR_RETRY_EXC_ERR = 0, 9, 10, 12, 13
# protocol.h: rdma_cm messages between hosts
CM_CONNECT, CM_RTU, CM_DISCONNECT, CM_REPLY, CM_REJECTED = 14, 17, 18, 102, 103


def ip32(text):
    """An IPv4 address as the uint32 whose bytes are in network order (as vrdmad stores it)."""
    return int.from_bytes(socket.inet_aton(text), "little")


@contextlib.contextmanager
def netns(name):
    """Runs the block's thread in network namespace /run/netns/NAME (sockets made there stay
    there)."""
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
        yield
    finally:
        libc.setns(home, CLONE_NEWNET)
        os.close(home)
        os.close(target)


def tcp_connect(src_ip, dst, timeout=3.0):
    """A TCP connection from src_ip (None: any) to (ip, port). Raises OSError."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if src_ip:
        s.bind((src_ip, 0))
    try:
        s.connect(dst)
    except OSError:
        s.close()
        raise
    return s


def closed_within(sock, seconds):
    """True when the other side closes (EOF or reset) within `seconds`, without our sending a
    byte; False if it is still open then."""
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        r, _, _ = select.select([sock], [], [], left)
        if not r:
            return False
        try:
            data = sock.recv(4096)
        except (ConnectionResetError, ssl.SSLError, OSError):
            return True
        if not data:
            return True


def tls_context(ca=None, cert=None, key=None, verify=True):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if verify:
        ctx.load_verify_locations(ca)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


class Peer:
    """One link to a router: frames out, frames in."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.next_req = 1

    @classmethod
    def open(cls, src_ip, dst, ctx=None, server_ip=None, timeout=3.0):
        s = tcp_connect(src_ip, dst, timeout)
        if ctx is not None:
            try:
                s = ctx.wrap_socket(s, server_hostname=server_ip or dst[0])
            except (ssl.SSLError, OSError):
                s.close()
                raise
        return cls(s)

    def close(self):
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, ftype, *fields, payload=b"", announce=None):
        body = BODIES[ftype].pack(*fields)
        n = len(payload) if announce is None else announce
        self.sock.sendall(HEADER.pack(ftype, n) + body + payload)

    def send_raw(self, data):
        self.sock.sendall(data)

    def recv(self, timeout=2.0):
        """The next frame as (type, fields tuple, payload), None after `timeout` without one;
        raises EOFError when the router closed the link."""
        end = time.monotonic() + timeout
        while True:
            frame = self._parse()
            if frame:
                return frame
            left = end - time.monotonic()
            if left <= 0:
                return None
            if not (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
                r, _, _ = select.select([self.sock], [], [], left)
                if not r:
                    return None
            try:
                data = self.sock.recv(1 << 16)
            except ssl.SSLWantReadError:
                continue
            except (ConnectionResetError, ssl.SSLError, OSError) as e:
                raise EOFError(str(e)) from e
            if not data:
                raise EOFError("closed by the router")
            self.buf += data

    def _parse(self):
        if len(self.buf) < HEADER.size:
            return None
        ftype, payload = HEADER.unpack_from(self.buf)
        body = BODIES[ftype]
        need = HEADER.size + body.size + payload
        if len(self.buf) < need:
            return None
        fields = body.unpack_from(self.buf, HEADER.size)
        data = self.buf[HEADER.size + body.size:need]
        self.buf = self.buf[need:]
        return ftype, fields, data

    def wait_for(self, ftype, timeout=3.0, match=None):
        """The next frame of `ftype` (matching `match(fields)`), answering pings; None if none
        came in time. Raises EOFError when the link closes."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            f = self.recv(left)
            if f is None:
                return None
            if f[0] == PING:
                self.send(PONG, *f[1])
                continue
            if f[0] == ftype and (match is None or match(f[1])):
                return f

    # -- what a router says
    def hello(self, host_id, boot=0x1234):
        self.send(HELLO, MAGIC, VERSION, host_id, 0, boot)

    def alive(self, timeout=2.0):
        """Whether the router answers a Ping on this link (it is open and authenticated)."""
        try:
            self.send(PING, 77)
            return self.wait_for(PONG, timeout) is not None
        except (EOFError, OSError):
            return False

    def connect_qp(self, src_ip, dst_ip, src_qpn, dst_qpn, qp_type=RC, timeout=3.0):
        """Sends Connect; returns the ConnectRep status (None: no answer)."""
        req = self.next_req
        self.next_req += 1
        self.send(CONNECT, req, ip32(src_ip), ip32(dst_ip), src_qpn, dst_qpn, qp_type, 0)
        f = self.wait_for(CONNECT_REP, timeout, match=lambda x: x[0] == req)
        return None if f is None else f[1][1]

    def request(self, src_qpn, dst_qpn, seq, opcode, qp_type=RC, length=0, payload=b"",
                rkey=0, addr=0, src_ip="0.0.0.0", dst_ip="0.0.0.0", qkey=0, timeout=14,
                retry_cnt=0, rnr_retry=0, announce=None, xrc_srqn=0):
        self.send(REQUEST, src_qpn, dst_qpn, seq, opcode, qp_type, 0, rkey, addr, 0, 0, length,
                  qkey, ip32(src_ip), ip32(dst_ip), 0, rnr_retry, timeout, retry_cnt, xrc_srqn,
                  0, payload=payload, announce=announce)

    def response(self, src_qpn, seq, timeout=3.0):
        """The Response to request `seq` of source QP src_qpn: (status, byte_len), None if none
        came."""
        f = self.wait_for(RESPONSE, timeout, match=lambda x: x[0] == src_qpn and x[2] == seq)
        return None if f is None else (f[1][1], f[1][3])

    def cm(self, op, sender_conn, receiver_conn, body=b""):
        data = struct.pack("<II", sender_conn, receiver_conn) + body
        self.send(CM, op, 0, len(data), data.ljust(256, b"\0"))


def cm_connect_body(dst_ip, dst_port, src_ip, qpn=0x4242, qp_type=RC):
    """What a host's daemon sends for a connection request (cm_remote.cc's RemoteConnect: the
    client's CmConnectReq, then its address)."""
    req = struct.pack("<IHHIII4sB3x56s4xQ", ip32(dst_ip), dst_port, 40000, qpn, qp_type, 0,
                      b"\x01\x01\x07\x07", 0, b"", 0)
    assert len(req) == 96
    return req + struct.pack("<I4x", ip32(src_ip))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
