"""Attacks on the cluster directory: the etcd of a three-host sandbox (TLS with client
certificates, auth with a role per host). The attacker is etcd_raw (tests/tools), a bare etcd
client run on the underlay network with whatever credentials the attack has: none, another
CA's, or host 1's own certificate and key (a host whose credentials were stolen). While each
attack runs, victim pairs between host 0 and host 2 run vrdma_stress (every opcode, checked).

Each attack must fail: etcd refuses it, or every vrdmad that reads the entry ignores it (and
logs why) and none crashes; the victims finish with 0 errors, 0 corrupt, 0 lost; and after
the attacks that try to take the victim's address, a new connection to it from host 2 and
from host 1 still reaches host 0. tearDownModule prints the table and fails on any success or
disturbance. A last test shows a container's entry withdrawn when its programs end.

VRDMA_ETCD_RAW names etcd_raw (set by CTest); VRDMA_STRESS vrdma_stress."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.attacks import Report, Victims
from vrdma_py.sandbox import NETNS_PREFIX, RUN_DIR, VRDMA, Sandbox, container_ip

SB = Sandbox(hosts=3, containers=2, extra_args=["--tenant", "victims=10.77.0.0/16"])
REPORT = Report("directory attacks")
PAIRS = [("h0c0", "h2c0"), ("h2c1", "h0c1")]  # (server, client), all between hosts 0 and 2
VICTIM = "h0c0"
ETCD = "10.76.0.254:2379"
ATTACKER_NETNS = NETNS_PREFIX + "h1"  # host 1, on the underlay network like any host
HUGE = 1 << 20
NOTE_TIMEOUT_S = 10


def find_etcd_raw():
    path = os.environ.get("VRDMA_ETCD_RAW")
    if not path:  # next to the build tree of $VRDMA_BIN (<build>/src/ctl/vrdma)
        build = os.path.join(os.path.dirname(os.path.realpath(VRDMA)), "..", "..")
        path = os.path.join(build, "tests", "tools", "etcd_raw")
    if not os.access(path, os.X_OK):
        raise AssertionError(f"etcd_raw not found at {path}; set VRDMA_ETCD_RAW")
    return os.path.realpath(path)


ETCD_RAW = find_etcd_raw()
TMP = tempfile.mkdtemp(prefix="vrdma-attacks-directory-")


def setUpModule():
    SB.up()
    # A certificate that names host 0 but comes from a CA of the attacker's own.
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=vrdma-host-0",
                    "-keyout", os.path.join(TMP, "rogue.key"), "-out",
                    os.path.join(TMP, "rogue.pem")], check=True, capture_output=True, timeout=30)


def tearDownModule():
    try:
        print(REPORT.table(), file=sys.stderr)
        for attack, succeeded, disturbed, detail in REPORT.failures():
            print(f"\n{attack}: {'SUCCEEDED' if succeeded else ''} "
                  f"{'victims disturbed' if disturbed else ''}\n{detail}", file=sys.stderr)
    finally:
        SB.down()
        shutil.rmtree(TMP, ignore_errors=True)
    if REPORT.failures():
        raise AssertionError(f"{len(REPORT.failures())} directory attack(s) succeeded or "
                             "disturbed the victims (table above)")


def pki(name, ext="pem"):
    return os.path.join(SB.state()["pki"], f"{name}.{ext}")


def raw(who, *command, netns=ATTACKER_NETNS, timeout=30):
    """etcd_raw as `who`: "host-1" (its certificate), "rogue" (another CA's), None (no
    certificate), "plaintext" (no TLS). Returns (rc, out, err)."""
    args = ["ip", "netns", "exec", netns, ETCD_RAW, "--endpoint", ETCD]
    if who == "plaintext":
        args.append("--plaintext")
    else:
        args += ["--ca", pki("ca")]
    if who == "rogue":
        args += ["--cert", os.path.join(TMP, "rogue.pem"), "--key", os.path.join(TMP, "rogue.key")]
    elif who not in (None, "plaintext"):
        args += ["--cert", pki(who), "--key", pki(who, "key")]
    p = subprocess.run(args + list(command), capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def log_path(host):
    return os.path.join(RUN_DIR, host, "vrdmad.log")


def log_size(host):
    return os.path.getsize(log_path(host))


def wait_note(host, since, pattern, timeout=NOTE_TIMEOUT_S):
    """Whether `pattern` appears in the host's vrdmad log after byte `since`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open(log_path(host), errors="replace") as f:
            f.seek(since)
            if re.search(pattern, f.read()):
                return True
        time.sleep(0.1)
    return False


def daemons_alive():
    """Every vrdmad of the sandbox still runs and answers with its directory available."""
    for h in SB.state()["hosts"]:
        try:
            os.kill(h["pid"], 0)
        except ProcessLookupError:
            return False, f"vrdmad of {h['name']} (pid {h['pid']}) is gone"
        d = SB.status(h["name"])["daemon"]["directory"]
        if not d.get("available"):
            return False, f"{h['name']}'s directory is not available: {d}"
    return True, ""


def reaches(client, server=VICTIM, port=7190):
    """A new rdma_cm connection from `client` to `server`'s address works (it can only if the
    client's vrdmad sends it to the server's host)."""
    ip = container_ip(server)
    srv = SB.start(server, "rping", "-s", "-a", ip, "-p", str(port), "-C", "2")
    try:
        for _ in range(50):
            rc, out, err = SB.run(client, "rping", "-c", "-a", ip, "-p", str(port), "-C", "2",
                                  timeout=20)
            if rc == 0:
                return True, ""
            time.sleep(0.2)
        return False, f"rping {client} -> {server} failed: {out}{err}"
    finally:
        srv.kill()
        srv.wait(10)


def keys(prefix="/vrdma/"):
    return SB.etcd_get(prefix)


class Attacks(unittest.TestCase):
    maxDiff = None

    def record(self, name, succeeded, victims, detail=""):
        alive, why = daemons_alive()
        if not alive:
            succeeded, detail = True, f"{detail}\n{why}".strip()
        ok = REPORT.record(name, succeeded, victims, detail)
        self.assertTrue(ok, f"{name}: {detail}\n" + "\n".join(victims.disturbed if victims else []))

    # ---- (a) no credentials of the cluster ----
    def test_a1_no_certificate(self):
        with Victims(SB, PAIRS) as v:
            r = raw(None, "get", "/vrdma/")
            w = raw(None, "put", f"/vrdma/hosts/0/containers/{container_ip(VICTIM)}", "{}")
        self.record("etcd without a client certificate: read, write", r[0] == 0 or w[0] == 0, v,
                    r[2] + w[2])

    def test_a2_certificate_of_another_ca(self):
        with Victims(SB, PAIRS) as v:
            r = raw("rogue", "get", "/vrdma/")
            w = raw("rogue", "put", "/vrdma/hosts/0/info", '{"router":"10.76.0.2:7471","cidrs":[]}')
        self.record("etcd with another CA's certificate named vrdma-host-0", r[0] == 0 or w[0] == 0,
                    v, r[2] + w[2])

    def test_a3_plaintext(self):
        with Victims(SB, PAIRS) as v:
            r = raw("plaintext", "get", "/vrdma/")
            w = raw("plaintext", "put", "/vrdma/hosts/0/info", "{}")
        self.record("etcd in plaintext", r[0] == 0 or w[0] == 0, v, r[2] + w[2])

    def test_a4_json_gateway(self):
        """etcd's HTTP gateway never takes a certificate's name as the user: with host 1's
        certificate it answers neither a read nor a write."""
        script = (
            "import base64,json,ssl,sys,urllib.request\n"
            "ctx=ssl.create_default_context(cafile=sys.argv[1])\n"
            "ctx.load_cert_chain(sys.argv[2], sys.argv[3])\n"
            "b=lambda s: base64.b64encode(s.encode()).decode()\n"
            "ok=0\n"
            "for path, body in (('/v3/kv/range', {'key': b('/vrdma/')}),\n"
            "                   ('/v3/kv/put',\n"
            "                    {'key': b('/vrdma/hosts/0/info'), 'value': b('{}')})):\n"
            "    try:\n"
            "        r=urllib.request.urlopen(urllib.request.Request('https://" + ETCD + "'+path,"
            " json.dumps(body).encode()), context=ctx, timeout=5)\n"
            "        print(path, r.status, r.read()[:200]); ok+=1\n"
            "    except Exception as e:\n"
            "        print(path, 'refused:', e)\n"
            "sys.exit(0 if ok else 1)\n")
        with Victims(SB, PAIRS) as v:
            p = subprocess.run(["ip", "netns", "exec", ATTACKER_NETNS, sys.executable, "-c", script,
                                pki("ca"), pki("host-1"), pki("host-1", "key")],
                               capture_output=True, text=True, timeout=30)
        self.record("etcd's HTTP gateway with host 1's certificate", p.returncode == 0, v,
                    p.stdout + p.stderr)

    # ---- (b) host 1's credentials against host 0's keys ----
    def test_b1_redirect_of_old(self):
        """The redirect the old layout allowed: a container entry for the victim's address
        naming host 1, and a forged host entry."""
        ip = container_ip(VICTIM)
        with Victims(SB, PAIRS) as v:
            c = raw("host-1", "put", f"/vrdma/containers/{ip}", '{"host":1,"name":"x"}')
            h = raw("host-1", "put", "/vrdma/hosts/0", '{"router":"10.76.0.2:7471","cidrs":[]}')
            now = keys()
        taken = [k for k in (f"/vrdma/containers/{ip}", "/vrdma/hosts/0") if k in now]
        self.record("host 1's certificate: /vrdma/containers/<victim> + forged /vrdma/hosts/0",
                    c[0] == 0 or h[0] == 0 or bool(taken), v, c[2] + h[2] + str(taken))

    def test_b2_write_host0_keys(self):
        ip = container_ip(VICTIM)
        before = keys("/vrdma/hosts/0/")
        with Victims(SB, PAIRS) as v:
            c = raw("host-1", "put", f"/vrdma/hosts/0/containers/{ip}", '{"name":"x"}')
            i = raw("host-1", "put", "/vrdma/hosts/0/info",
                    '{"router":"10.76.0.2:7471","cidrs":["10.77.0.0/24"]}')
            after = keys("/vrdma/hosts/0/")
        self.record("host 1's certificate: write host 0's container and info entries",
                    c[0] == 0 or i[0] == 0 or after.get("/vrdma/hosts/0/info") !=
                    before.get("/vrdma/hosts/0/info"), v, c[2] + i[2])

    def test_b3_delete_and_revoke_host0(self):
        rc, out, err = raw("host-1", "get", "/vrdma/hosts/0/info")  # every host may read
        self.assertEqual(rc, 0, err)
        lease = str(json.loads(out)["/vrdma/hosts/0/info"]["lease"])
        with Victims(SB, PAIRS) as v:
            d = raw("host-1", "del", "/vrdma/hosts/0/info")
            r = raw("host-1", "revoke", lease)
            time.sleep(0.5)
            still = "/vrdma/hosts/0/info" in keys("/vrdma/hosts/0/")
        self.record("host 1's certificate: delete host 0's entry, revoke host 0's lease",
                    d[0] == 0 or r[0] == 0 or not still, v, d[2] + r[2])

    # ---- (c) malformed values under host 1's own prefix ----
    def malformed(self, name, key, value, pattern):
        """Host 1's certificate writes `value` at `key`; hosts 0 and 2 must log `pattern`."""
        marks = {h: log_size(h) for h in ("h0", "h2")}
        with Victims(SB, PAIRS) as v:
            w = raw("host-1", "put", key, value)
            noted = {h: wait_note(h, marks[h], pattern) for h in marks}
        raw("host-1", "del", key)
        missing = [h for h, ok in noted.items() if not ok]
        self.assertEqual(w[0], 0, f"host 1 may write under its own prefix: {w[2]}")
        self.record(name, bool(missing), v,
                    f"no note matching {pattern!r} in the log of {missing}" if missing else "")

    def test_c1_the_value_that_killed_every_vrdmad(self):
        self.malformed('host 1 writes {"host":1,"name":5}', "/vrdma/hosts/1/containers/10.77.1.20",
                       '{"host":1,"name":5}',
                       r"ignoring /vrdma/hosts/1/containers/10\.77\.1\.20: "
                       r"\"name\" is not a string")

    def test_c2_not_json(self):
        self.malformed("host 1 writes a value that is not JSON",
                       "/vrdma/hosts/1/containers/10.77.1.21", "not json{{",
                       r"ignoring /vrdma/hosts/1/containers/10\.77\.1\.21: value is not JSON")

    def test_c3_huge(self):
        path = os.path.join(TMP, "huge.json")
        with open(path, "w") as f:
            f.write('{"name":"' + "x" * HUGE + '"}')
        self.malformed("host 1 writes a 1 MiB value", "/vrdma/hosts/1/containers/10.77.1.22",
                       "@" + path,
                       r"ignoring /vrdma/hosts/1/containers/10\.77\.1\.22: value of \d+ bytes")

    def test_c4_wrong_types(self):
        self.malformed("host 1 writes a container entry of the wrong types",
                       "/vrdma/hosts/1/containers/10.77.1.23", '{"name":["x"],"host":"0"}',
                       r"ignoring /vrdma/hosts/1/containers/10\.77\.1\.23: \"name\" is not")

    def test_c5_host_entry_of_wrong_types(self):
        """Its own host entry of the wrong types: the others stop using host 1 (only the
        attacker loses) until the entry is put back."""
        rc, out, err = raw("host-1", "get", "/vrdma/hosts/1/info")
        self.assertEqual(rc, 0, err)
        original = json.loads(out)["/vrdma/hosts/1/info"]
        marks = {h: log_size(h) for h in ("h0", "h2")}
        try:
            with Victims(SB, PAIRS) as v:
                w = raw("host-1", "put", "/vrdma/hosts/1/info", '{"router":7}',
                        str(original["lease"]))
                noted = {h: wait_note(h, marks[h], r"ignoring /vrdma/hosts/1/info: ")
                         for h in marks}
        finally:
            raw("host-1", "put", "/vrdma/hosts/1/info", original["value"], str(original["lease"]))
        missing = [h for h, ok in noted.items() if not ok]
        self.assertEqual(w[0], 0, w[2])
        self.record("host 1 writes its host entry with the wrong types", bool(missing), v,
                    f"no note in {missing}" if missing else "")

    # ---- (d) claims on what another host holds ----
    def claim(self, name, key, value, pattern):
        marks = {h: log_size(h) for h in ("h0", "h2")}
        with Victims(SB, PAIRS) as v:
            w = raw("host-1", "put", key, value)
            noted = {h: wait_note(h, marks[h], pattern) for h in marks}
            # New connections to the victim's address, from a host that read the claim and
            # from the attacker's own host: both must reach host 0.
            r2 = reaches("h2c0")
            r1 = reaches("h1c1")
        missing = [h for h, ok in noted.items() if not ok]
        self.assertEqual(w[0], 0, w[2])
        succeeded = bool(missing) or not r2[0] or not r1[0]
        self.record(name, succeeded, v, f"notes missing in {missing}; {r2[1]} {r1[1]}".strip())

    def test_d1_claim_the_victims_address(self):
        ip = container_ip(VICTIM)
        try:
            self.claim("host 1 publishes the victim's address as its container",
                       f"/vrdma/hosts/1/containers/{ip}", '{"name":"h0c0"}',
                       rf"host 1 claims container address {re.escape(ip)} outside its networks")
        finally:
            raw("host-1", "del", f"/vrdma/hosts/1/containers/{ip}")

    def test_d2_claim_a_network_covering_the_victim(self):
        """A longer prefix than host 0's network, for the victim's address alone (under a
        longest-prefix rule it would win)."""
        ip = container_ip(VICTIM)
        key = f"/vrdma/hosts/1/networks/{ip}/32"
        try:
            self.claim("host 1 claims a /32 network holding the victim's address", key, "{}",
                       rf"host 1 claims network {re.escape(ip)}/32, which overlaps 10\.77\.0\.0/24")
        finally:
            raw("host-1", "del", key)

    def test_d2b_claim_the_victims_network(self):
        key = "/vrdma/hosts/1/networks/10.77.0.0/24"
        try:
            self.claim("host 1 claims host 0's whole network", key, "{}",
                       r"host 1 claims network 10\.77\.0\.0/24, which overlaps 10\.77\.0\.0/24")
        finally:
            raw("host-1", "del", key)

    def test_d3_claim_an_address_of_nobody(self):
        try:
            self.claim("host 1 publishes an address outside its networks",
                       "/vrdma/hosts/1/containers/10.99.0.5", '{"name":"x"}',
                       r"host 1 claims container address 10\.99\.0\.5 outside its networks")
        finally:
            raw("host-1", "del", "/vrdma/hosts/1/containers/10.99.0.5")


class ContainerEntries(unittest.TestCase):
    """Not an attack: a container's entry exists while a program of it uses vrdma, and is
    withdrawn when the last one ends."""

    def test_entry_withdrawn_when_the_container_goes_away(self):
        ip = container_ip("h1c1")
        key = f"/vrdma/hosts/1/containers/{ip}"
        srv = SB.start("h1c1", "rping", "-s", "-a", ip, "-p", "7191")
        try:
            end = time.monotonic() + 10
            while key not in keys("/vrdma/hosts/1/") and time.monotonic() < end:
                time.sleep(0.1)
            self.assertIn(key, keys("/vrdma/hosts/1/"), "published while rping runs")
            # Its name, and the tenant vrdmad admitted it to (read by other hosts only with
            # tenants from the platform).
            self.assertEqual(keys("/vrdma/hosts/1/")[key], {"name": "h1c1", "tenant": "victims"})
        finally:
            srv.kill()
            srv.wait(10)
        # No program left, but the container is still there (its namespace is pinned): still
        # published, as an idle pod's address stays reachable.
        time.sleep(2.5)
        self.assertIn(key, keys("/vrdma/hosts/1/"), "kept while the container exists")
        # The container goes: its namespace pin is removed (the last test of this module: no
        # other test uses h1c1 after it).
        netns = next(c["netns"] for c in SB.state()["containers"] if c["name"] == "h1c1")
        subprocess.run(["ip", "netns", "delete", netns], check=True, timeout=20)
        end = time.monotonic() + 10
        while key in keys("/vrdma/hosts/1/") and time.monotonic() < end:
            time.sleep(0.1)
        self.assertNotIn(key, keys("/vrdma/hosts/1/"), "withdrawn once the container went away")
        self.assertIn("/vrdma/hosts/1/info", keys("/vrdma/hosts/1/"))


if __name__ == "__main__":
    unittest.main()
