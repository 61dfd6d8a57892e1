"""Attacks on one host's vrdmad by what runs on that host: a container that forges its identity
(a namespace of its own with a self-chosen address, a second namespace with a victim's
address, a pid reused between connect and accept), a process of the host, a container that
floods vrdmad with connections or takes resources beyond its quotas, one that probes for
live QPNs, and one that reads other containers' memory keys from status. A victim pair runs
vrdma_stress (every opcode, every byte checked) during each attack; each attack must fail, and
the victims must finish with 0 errors, 0 corrupted, 0 lost.

The sandbox has two hosts (the directory, etcd, shows what vrdmad publishes); everything
happens on h0. Tenants are given explicitly: the victims h0c0 and h0c1 and the attacker h0c2
share tenant "shared"; the attacker h0c3 is a tenant of its own. vrdmad runs with small quotas,
and as on kernels before 6.5 (--no-peer-pidfd: the pid is checked by the connection its process
holds), so the forced fallback is what the pid-reuse attack meets.
"""

import json
import os
import re
import signal
import subprocess
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.attacks import Report, Victims
from vrdma_py.sandbox import (NETNS_PREFIX, VRDMA, Sandbox, container_ip, host_file, vrdma)

QUOTAS = {"connections": 32, "qps": 64, "mrs": 64, "registered-bytes": 64 << 20, "fds": 64,
          "cm-listeners": 8, "cm-connections": 8, "directory-entries": 16}
SB = Sandbox(hosts=2, containers=4, extra_args=[
    "--tenant", "shared=10.77.0.10/31", "--tenant", "shared=10.77.0.12/32",
    *[f"--daemon-arg=--max-{k}-per-container={v}" for k, v in QUOTAS.items()],
    "--daemon-arg=--no-peer-pidfd"])
REPORT = Report("vrdmad attacks (one host)")
RAW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raw_control.py")
VICTIMS = [("h0c0", "h0c1")]
UNUSED_IP = "10.77.0.99"  # no container has it


def setUpModule():
    SB.up()


def tearDownModule():
    try:
        print(REPORT.table(), flush=True)
    finally:
        SB.down()
    bad = REPORT.failures()
    if bad:
        raise AssertionError("attacks that succeeded or disturbed the victims:\n" +
                             "\n".join(f"{r[0]}: {r[3]}" for r in bad))


def raw(container, *args, timeout=120, lib=False):
    """Runs raw_control.py in a container; returns its JSON answer."""
    rc, out, err = SB.run(container, "python3", RAW, *map(str, args), lib=lib, timeout=timeout)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if rc != 0 or not lines:
        raise AssertionError(f"raw_control {' '.join(map(str, args))} in {container} failed "
                             f"({rc}):\n{out}\n{err}")
    return json.loads(lines[-1])


def daemon_log(host="h0"):
    with open(host_file(host, "vrdmad.log"), errors="replace") as f:
        return f.read()


def wait_for(pred, timeout, step=0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def quota_use(status, container):
    for c in status.get("containers", []):
        if c["container"] == container:
            return c["quota"]
    return None


class DaemonAttacks(unittest.TestCase):
    def record(self, name, succeeded, victims, detail=""):
        ok = REPORT.record(name, succeeded, victims, detail)
        self.assertFalse(succeeded, f"{name}: the attack succeeded: {detail}")
        self.assertTrue(ok, f"{name}: victims disturbed:\n" + "\n".join(victims.disturbed))

    def test_01_user_namespace_with_a_self_chosen_address(self):
        # Root in container h0c2 makes a user and network namespace of its own and gives it the
        # victim's address, then an unused one, and asks for a device.
        victim_ip = container_ip("h0c0")
        results = {}
        with Victims(SB, VICTIMS) as victims:
            entries = wait_for(lambda: SB.etcd_get("/vrdma/hosts/0/containers/").get(
                f"/vrdma/hosts/0/containers/{victim_ip}"), 20)
            self.assertTrue(entries, "the victim's entry was never published")
            for ip in (victim_ip, UNUSED_IP):
                script = (f"ip link add d0 type veth peer name d1 && "
                          f"ip addr add {ip}/24 dev d0 && ip link set d1 up && "
                          f"ip link set d0 up && ip link set lo up && "
                          f"python3 {RAW} hello && ibv_devinfo")
                rc, out, err = SB.run("h0c2", "unshare", "-Urn", "sh", "-c", script, timeout=60)
                results[ip] = (rc, out, err)
            # An unprivileged user cannot even connect: the socket is not world-writable.
            rc_u, out_u, err_u = SB.run(
                "h0c2", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "python3",
                "-c", "import os, socket; socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)"
                ".connect(os.environ['VRDMA_SOCKET'])", lib=False, timeout=60)
        got_device = [ip for ip, (rc, out, err) in results.items()
                      if '"status": "ok"' in out or "hca_id" in out]
        time.sleep(1.0)  # anything published would be in etcd by now
        keys = SB.etcd_get("/vrdma/hosts/0/containers/")
        published = f"/vrdma/hosts/0/containers/{UNUSED_IP}" in keys
        victim_entry = keys.get(f"/vrdma/hosts/0/containers/{victim_ip}")
        refused_logged = len(re.findall(r"no device: its network namespace belongs to a user "
                                        r"namespace other than vrdmad's", daemon_log()))
        unprivileged_connected = rc_u == 0 or "Permission denied" not in err_u
        detail = (f"device for {got_device}, {UNUSED_IP} published: {published}, victim entry "
                  f"{victim_entry} (was {entries}), refusals logged {refused_logged}, "
                  f"unprivileged connected: {unprivileged_connected}")
        self.record("unshare -Urn with a self-chosen address", bool(got_device) or published or
                    victim_entry != entries or unprivileged_connected, victims, detail)
        self.assertGreaterEqual(refused_logged, 2, daemon_log()[-3000:])
        for ip, (rc, out, err) in results.items():
            self.assertIn('"status": "EACCES"', out, err)
            self.assertIn("gives this process no device", err)

    def test_02_host_process_gets_no_device(self):
        with Victims(SB, VICTIMS) as victims:
            rc, out, err = SB.run("h0", "ibv_devinfo", timeout=60)
            hello = raw("h0", "hello")
        detail = f"ibv_devinfo rc {rc}: {out}{err}; raw hello {hello}"
        self.record("a host process asks for a device", rc == 0 or hello["status"] == "ok",
                    victims, detail)
        self.assertIn("gives this process no device", err)
        self.assertIn("gets a device only with vrdmad --allow-host-clients", daemon_log())

    def test_03_thousand_connections(self):
        with Victims(SB, VICTIMS) as victims:
            flood = SB.start("h0c2", "python3", RAW, "connections", "1000", "--hold", "3",
                             lib=False)
            time.sleep(1.5)
            # Meanwhile another container still gets its device.
            rc, out, err = SB.run("h0c3", "ibv_devinfo", timeout=60)
            frc = flood.wait(120)
        answer = json.loads([l for l in flood.out.splitlines() if l.startswith("{")][-1])
        ok = answer["results"].get("ok", 0)
        detail = f"flood: {answer}; other container's ibv_devinfo rc {rc}"
        self.record("1000 connections from one container", ok > QUOTAS["connections"] or
                    rc != 0, victims, detail)
        self.assertEqual(frc, 0, flood.err)
        self.assertEqual(ok, QUOTAS["connections"], detail)
        self.assertEqual(sum(answer["results"].values()), 1000)
        self.assertEqual(set(answer["results"]) - {"ok", "EMFILE", "closed"}, set(), detail)
        self.assertIn("over its quota of connections", daemon_log())

    def test_03b_malformed_messages_flood_no_log(self):
        # Every log line a client can provoke is rate-limited (each statement a burst per 10 s,
        # then a count of what it held back): 11 s of malformed messages write a few hundred
        # lines at most, where they used to write one per message; the window after the first
        # says how many it held back.
        before = daemon_log()
        with Victims(SB, VICTIMS) as victims:
            answer = raw("h0c2", "garbage", 11, timeout=60)
        time.sleep(0.5)
        new = daemon_log()[len(before):]
        lines = new.count("\n")
        detail = f"{answer['sent']} malformed messages on {answer['connections']} connections: " \
                 f"vrdmad wrote {lines} log lines"
        print(detail)
        self.assertGreater(answer["sent"], 1000, detail)
        self.record("malformed messages flooding vrdmad's log", lines > 400, victims, detail)
        self.assertIn("more like this held back", new, "the flood never reached the limit: "
                      "vrdmad logs nothing of it, and this test shows nothing")

    def test_04_resources_beyond_quota(self):
        runs = {}
        with Victims(SB, VICTIMS) as victims:
            runs["qps"] = raw("h0c2", "alloc", "qps", 200, "--conns", 4)
            runs["mrs"] = raw("h0c2", "alloc", "mrs", 200, "--conns", 4)
            runs["registered_bytes"] = raw("h0c2", "alloc", "mrs", 10, "--length", 16 << 20)
            runs["fds"] = raw("h0c2", "alloc", "fds", 200, "--conns", 4)
            runs["cm_listeners"] = raw("h0c2", "alloc", "cm_listeners", 20)
        expect = {"qps": (64, "EDQUOT"), "mrs": (64, "EDQUOT"), "registered_bytes": (4, "EDQUOT"),
                  "fds": (64 - 4, "EMFILE"),  # the 4 arenas are descriptors too
                  "cm_listeners": (8, "EMFILE")}
        beyond = {k: r for k, r in runs.items() if r["granted_before_first_refusal"] > expect[k][0]
                  or r["results"].get("ok", 0) > expect[k][0]}
        self.record("QPs, MRs, bytes, fds, listeners beyond quota (4 connections)", bool(beyond),
                    victims, json.dumps(runs))
        for k, (granted, err) in expect.items():
            self.assertEqual(runs[k]["results"].get("ok"), granted, f"{k}: {runs[k]}")
            self.assertEqual(runs[k]["results"].get(err), runs[k]["attempts"] - granted,
                             f"{k}: {runs[k]}")
        # The attacker's processes are gone: nothing of theirs is still counted.
        self.assertTrue(wait_for(lambda: quota_use(SB.status(), "h0c2") is None, 10),
                        quota_use(SB.status(), "h0c2"))

    def test_05_qpn_probing(self):
        with Victims(SB, VICTIMS) as victims:
            st = SB.status()
            live = sorted(q["qpn"] for c in st["clients"] for q in c.get("qps", []))
            victim_qpns = [q["qpn"] for c in st["clients"] if c["container"] in ("h0c0", "h0c1")
                           for q in c.get("qps", [])]
            self.assertTrue(victim_qpns, st)
            free = [q for q in (0x123457, 0x654321, 0x0abcde, 0xfedcb0) if q not in live]
            # h0c3 is another tenant: probing real QPNs and free ones must answer alike.
            probe = raw("h0c3", "probe", "--own", 32, *[hex(q) for q in victim_qpns + free])
        answers = set(probe["answers"].values())
        own = probe["own"]
        close_pairs = sum(1 for a, b in zip(own, own[1:]) if abs(a - b) < 64)
        detail = f"answers {probe['answers']}, own QPNs {[hex(q) for q in own]}"
        self.record("QPN probing (oracle and sequence)", answers != {"ENOENT"} or close_pairs > 0,
                    victims, detail)
        self.assertEqual(len(own), 32)

    def test_06_second_namespace_with_the_victims_address(self):
        victim_ip = container_ip("h0c0")
        ns = f"{NETNS_PREFIX}dup"
        entry = wait_for(lambda: SB.etcd_get("/vrdma/hosts/0/containers/").get(
            f"/vrdma/hosts/0/containers/{victim_ip}"), 20)
        self.assertTrue(entry, "the victim's entry was never published")
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        try:
            for cmd in (["ip", "netns", "add", ns],
                        ["ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name",
                         "d1"],
                        ["ip", "-n", ns, "link", "set", "d1", "up"],
                        ["ip", "-n", ns, "addr", "add", f"{victim_ip}/24", "dev", "d0"],
                        ["ip", "-n", ns, "link", "set", "d0", "up"]):
                subprocess.run(cmd, check=True, capture_output=True, timeout=30)
            env = dict(os.environ, VRDMA_SOCKET=host_file("h0", "vrdmad.sock"),
                       LD_LIBRARY_PATH=os.environ.get("VRDMA_LIBDIR", "/usr/local/lib/vrdma"))
            with Victims(SB, VICTIMS) as victims:
                hello = subprocess.run(["ip", "netns", "exec", ns, "python3", RAW, "hello"],
                                       capture_output=True, text=True, timeout=60, env=env)
                dev = subprocess.run(["ip", "netns", "exec", ns, "ibv_devinfo"],
                                     capture_output=True, text=True, timeout=60, env=env)
        finally:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        time.sleep(1.0)
        after = SB.etcd_get("/vrdma/hosts/0/containers/").get(f"/vrdma/hosts/0/containers/{victim_ip}")
        detail = f"hello {hello.stdout}{hello.stderr}; ibv_devinfo {dev.returncode}; etcd " \
                 f"{entry} -> {after}"
        self.record("a second namespace with the victim's address",
                    '"status": "ok"' in hello.stdout or dev.returncode == 0 or after != entry,
                    victims, detail)
        self.assertIn('"status": "EADDRINUSE"', hello.stdout, detail)
        self.assertIn(f"address {victim_ip} is already claimed by another live network namespace",
                      daemon_log())

    def test_07_status_shows_no_victim_rkeys(self):
        with Victims(SB, VICTIMS) as victims:
            time.sleep(1.0)
            full = SB.status()  # root on the host: every key
            keys = [m["key"] for c in full["clients"] if c["container"] in ("h0c0", "h0c1")
                    for m in c.get("mrs", []) if "key" in m]
            rc, out, err = SB.run("h0c2", VRDMA, "status", "--json", timeout=60)
            text_rc, text, _ = SB.run("h0c2", VRDMA, "status", timeout=60)
            raw_view = json.dumps(raw("h0c2", "status"))
        seen = json.loads(out) if rc == 0 else {}
        victims_listed = [c for c in seen.get("clients", []) if c["container"] in ("h0c0", "h0c1")]
        leaked = [k for k in keys if k in out or k in text or k in raw_view]
        detail = f"victim keys {keys}; listed victim clients {len(victims_listed)}; leaked {leaked}"
        self.record("victim rkeys in status from the same tenant", bool(leaked), victims, detail)
        self.assertTrue(keys, full)
        self.assertTrue(victims_listed, "same tenant: the victims are listed (without keys)")
        for c in victims_listed:
            for m in c.get("mrs", []):
                self.assertNotIn("key", m)
                self.assertIn("length", m)

    def test_08_pid_reused_between_connect_and_accept(self):
        daemon = SB.daemon_pid("h0")
        victim_ns = os.stat(f"/run/netns/{NETNS_PREFIX}h0c0").st_ino
        with Victims(SB, VICTIMS) as victims:
            outcome, detail = self.reuse_attack(daemon, victim_ns)
        self.record("pid reused between connect and accept (no SO_PEERPIDFD)",
                    outcome == "ok", victims, detail)
        self.assertIn(outcome, ("EACCES", "closed"), detail)
        self.assertRegex(daemon_log(), r"does not hold the other end of this connection|"
                                       r"the connection's peer is not in its network namespace")

    def reuse_attack(self, daemon, victim_ns):
        """The attacker in h0c2 connects from a child that exits before vrdmad (stopped for the
        moment) accepts; a process in the victim's container gets the child's pid. Returns
        the attacker's Hello status and a description."""
        for attempt in range(5):
            os.kill(daemon, signal.SIGSTOP)
            holder = reuser = None
            try:
                holder = subprocess.Popen(
                    [VRDMA, "sandbox", "exec", "--no-lib", "h0c2", "--", "python3", RAW, "reuse"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True, start_new_session=True)
                line = holder.stdout.readline()
                if not line.startswith("{"):
                    raise AssertionError(f"reuse helper: {line}{holder.stderr.read()}")
                pid = json.loads(line)["client_pid"]
                for _ in range(200):
                    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                        f.write(str(pid - 1))
                    p = subprocess.Popen([VRDMA, "sandbox", "exec", "--no-lib", "h0c0", "--",
                                          "sleep", "30"], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
                    if p.pid == pid:
                        reuser = p
                        break
                    p.kill()
                    p.wait()
                if not reuser:
                    holder.kill()
                    holder.communicate(timeout=30)
                    continue  # someone else took the pid: try again
                if not wait_for(lambda: os.stat(f"/proc/{pid}/ns/net").st_ino == victim_ns, 10):
                    raise AssertionError("the process with the reused pid never entered h0c0")
            finally:
                os.kill(daemon, signal.SIGCONT)
            try:
                out, err = holder.communicate("go\n", timeout=60)
            finally:
                reuser.kill()
                reuser.wait()
            answer = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
            return answer["status"], f"pid {pid} reused in h0c0; attacker's Hello: {answer}"
        raise AssertionError("could not arrange the reuse of a pid in 5 attempts (busy machine)")


if __name__ == "__main__":
    unittest.main()
