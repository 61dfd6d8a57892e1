"""The device as programs find it in a sandbox container: /dev/infiniband/uverbs0 and the
sysfs view under /sys/class/infiniband*, with the values ibv_devinfo -v reports there; and
nothing of it in the host's own /dev, /sys or mount table."""

import json
import os
import re
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import NETNS_PREFIX, RUN_DIR, Sandbox, container_ip, vrdma

SB = Sandbox(hosts=1, containers=2)
MOUNTS_BEFORE = None

# Reads every file of the view and probes the device node from inside a container.
PROBE = r"""
import json, os, stat
out = {"files": {}, "links": {}}
for top in ("/sys/class/infiniband", "/sys/class/infiniband_verbs"):
    for d, dirs, files in os.walk(top):
        for f in files:
            p = os.path.join(d, f)
            with open(p) as fh:
                out["files"][p] = fh.read()
        for x in dirs:
            p = os.path.join(d, x)
            if os.path.islink(p):
                out["links"][p] = os.readlink(p)
                dirs.remove(x)
node = "/dev/infiniband/uverbs0"
st = os.stat(node)
out["node"] = {"chr": stat.S_ISCHR(st.st_mode), "major": os.major(st.st_rdev),
               "minor": os.minor(st.st_rdev)}
fd = os.open(node, os.O_RDWR)
out["node"]["write"] = os.write(fd, b"x")
out["node"]["read"] = len(os.read(fd, 16))
os.close(fd)
out["net"] = sorted(os.listdir("/sys/class/net"))
print(json.dumps(out))
"""


def mount_points():
    """The host's mount points, leaving out other test beds' network namespaces."""
    points = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            if point.startswith("/run/netns/") and not point.startswith(
                    "/run/netns/" + NETNS_PREFIX):
                continue
            points.add(point)
    return points


def setUpModule():
    global MOUNTS_BEFORE
    vrdma("sandbox", "down", check=False)
    MOUNTS_BEFORE = mount_points()
    SB.up()


def tearDownModule():
    SB.down()


def devinfo(name):
    rc, out, err = SB.run(name, "ibv_devinfo", "-v", timeout=20)
    if rc != 0:
        raise AssertionError(f"ibv_devinfo in {name} failed:\n{out}\n{err}")
    fields = {}
    for line in out.splitlines():
        m = re.match(r"\s*([a-z_]+):\s+(.*)", line)
        if m and m.group(1) not in fields:
            fields[m.group(1)] = m.group(2).strip()
    m = re.search(r"GID\[\s*0\]:\s+(\S+), (RoCE v2|RoCE v1|IB)", out)
    fields["gid0"], fields["gid0_type"] = m.group(1), m.group(2)
    return fields


def probe(name):
    rc, out, err = SB.run(name, "python3", "-c", PROBE, lib=False, timeout=20)
    if rc != 0:
        raise AssertionError(f"probe in {name} failed:\n{out}\n{err}")
    return json.loads(out)


def gid_from_sysfs(text):
    """0000:0000:0000:0000:0000:ffff:0a4d:000a -> ::ffff:10.77.0.10"""
    groups = [int(g, 16) for g in text.strip().split(":")]
    assert groups[:5] == [0] * 5 and groups[5] == 0xFFFF, text
    return "::ffff:%d.%d.%d.%d" % (groups[6] >> 8, groups[6] & 255, groups[7] >> 8,
                                   groups[7] & 255)


class DeviceView(unittest.TestCase):
    def check_container(self, name):
        info = devinfo(name)
        view = probe(name)
        files = view["files"]
        dev = "/sys/class/infiniband/" + info["hca_id"]
        port = dev + "/ports/1"

        def f(path):
            self.assertIn(path, files, f"{name}: {path} missing; have {sorted(files)}")
            return files[path].rstrip("\n")

        self.assertEqual(f(dev + "/fw_ver"), info["fw_ver"])
        self.assertEqual(f(dev + "/node_guid"), info["node_guid"])
        self.assertEqual(f(dev + "/sys_image_guid"), info["sys_image_guid"])
        self.assertEqual(f(dev + "/node_type"), "1: CA")
        # state: PORT_ACTIVE (4) / 4: ACTIVE
        num, word = re.fullmatch(r"PORT_(\w+) \((\d+)\)", info["state"]).group(2, 1)
        self.assertEqual(f(port + "/state"), f"{num}: {word}")
        num = re.search(r"\((\d+)\)", info["phys_state"]).group(1)
        self.assertEqual(f(port + "/phys_state"), f"{num}: LinkUp")
        self.assertEqual(info["phys_state"], "LINK_UP (5)")
        self.assertEqual(f(port + "/link_layer"), info["link_layer"])
        self.assertEqual(int(f(port + "/lid"), 16), int(info["port_lid"]))
        self.assertEqual(int(f(port + "/sm_lid"), 16), int(info["sm_lid"]))
        self.assertEqual(int(f(port + "/lid_mask_count")), int(info["port_lmc"], 16))
        self.assertEqual(int(f(port + "/sm_sl")), int(info["sm_sl"]))
        self.assertEqual(int(f(port + "/cap_mask"), 16), int(info["port_cap_flags"], 16))
        # rate = lanes x lane speed: "4X (2)" and "25.0 Gbps (32)" -> "100 Gb/sec (4X EDR)"
        lanes = int(re.match(r"(\d+)X", info["active_width"]).group(1))
        speed = float(re.match(r"([\d.]+) Gbps", info["active_speed"]).group(1))
        self.assertEqual(f(port + "/rate"), f"{int(lanes * speed)} Gb/sec ({lanes}X EDR)")
        self.assertEqual(gid_from_sysfs(f(port + "/gids/0")), info["gid0"])
        self.assertEqual(info["gid0"], "::ffff:" + container_ip(name))
        self.assertEqual(f(port + "/gid_attrs/types/0"), info["gid0_type"])
        self.assertEqual(int(f(port + "/pkeys/0"), 16), 0xFFFF)
        # The interface that holds the container's address, where rdma-core's tests and UCX
        # look for it.
        rc, out, err = SB.run(name, "ip", "-j", "-4", "addr", "show", lib=False, timeout=10)
        self.assertEqual(rc, 0, err)
        ifname = [i["ifname"] for i in json.loads(out)
                  if any(a["local"] == container_ip(name) for a in i["addr_info"])][0]
        self.assertEqual(f(port + "/gid_attrs/ndevs/0"), ifname)
        self.assertEqual(view["links"][dev + "/device/net/" + ifname], "../../../../net/" + ifname)
        rc, out, err = SB.run(name, "ls", dev + "/device/net/", lib=False, timeout=10)
        self.assertEqual(out.split(), [ifname])
        rc, out, err = SB.run(name, "cat", f"{dev}/device/net/{ifname}/address", lib=False,
                              timeout=10)
        self.assertEqual(rc, 0, err)
        # infiniband_verbs: the uverbs device of this ibdev, and the node's numbers.
        self.assertEqual(f("/sys/class/infiniband_verbs/uverbs0/ibdev"), info["hca_id"])
        self.assertEqual(f("/sys/class/infiniband_verbs/abi_version"), "6")
        node = view["node"]
        self.assertTrue(node["chr"], "/dev/infiniband/uverbs0 is not a character device")
        self.assertEqual(f("/sys/class/infiniband_verbs/uverbs0/dev"),
                         f"{node['major']}:{node['minor']}")
        self.assertEqual((node["write"], node["read"]), (1, 0))  # opened R/W; does nothing
        # The container's own /sys/class/net next to the view.
        self.assertEqual(view["net"], sorted(["lo", ifname]))
        return info

    def test_each_container_sees_its_own_device(self):
        a = self.check_container("h0c0")
        b = self.check_container("h0c1")
        self.assertNotEqual(a["node_guid"], b["node_guid"])

    def test_device_node_matches_the_container_edits(self):
        host = SB.state()["hosts"][0]
        edits = json.loads(vrdma("edits", "--socket", host["socket"]).stdout)
        view = probe("h0c0")
        dev = edits["devices"][0]
        self.assertEqual(dev["container_path"], "/dev/infiniband/uverbs0")
        st = os.stat(dev["host_path"])
        self.assertEqual((view["node"]["major"], view["node"]["minor"]),
                         (os.major(st.st_rdev), os.minor(st.st_rdev)))
        rc, out, err = SB.run("h0c0", "env", timeout=10)
        env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        for var in edits["env"]:
            if var["name"] == "LD_LIBRARY_PATH":
                self.assertEqual(env["LD_LIBRARY_PATH"].split(":")[0], var["value"])
            else:
                self.assertEqual(env[var["name"]], var["value"])

    def test_host_namespace_shows_no_device(self):
        rc, out, err = SB.run("h0", "sh", "-c",
                              "ls /sys/class/infiniband /dev/infiniband 2>&1; true", timeout=10)
        self.assertIn("No such file", out)
        self.assertFalse(os.path.exists("/dev/infiniband"))
        self.assertFalse(os.path.exists("/sys/class/infiniband"))
        self.assertFalse(os.path.exists("/sys/class/infiniband_verbs"))

    def test_host_mounts_gain_only_the_namespace_pins(self):
        added = mount_points() - MOUNTS_BEFORE
        removed = MOUNTS_BEFORE - mount_points()
        self.assertEqual(removed, set())
        pins = os.path.join(RUN_DIR, "mnt")
        for point in added:
            self.assertTrue(point.startswith("/run/netns/" + NETNS_PREFIX) or point == pins or
                            point.startswith(pins + "/"), f"unexpected host mount {point}")
        self.assertIn(os.path.join(pins, "h0c0"), added)

    def test_zz_down_restores_the_host_mounts(self):
        SB.down()
        try:
            self.assertEqual(mount_points(), MOUNTS_BEFORE)
            self.assertFalse(os.path.exists(os.path.join(RUN_DIR, "mnt")))
        finally:
            SB.up()


if __name__ == "__main__":
    unittest.main()
