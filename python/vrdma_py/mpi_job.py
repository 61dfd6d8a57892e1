"""Running Open MPI (Debian's openmpi-bin 4.1) jobs of two ranks, one per sandbox container.

mpirun runs in the network namespace of the first container's host (so neither rank's address
is its own) and starts its daemons through mpi_launch_agent, which runs them with `vrdma sandbox
exec` inside the containers; hosts are named by address, which spares name lookups. Ranks are
not bound to cores: every container sees the same cores, and two ranks bound to "core 0" of
their own node would share one."""

import os
import shutil
import subprocess
import tempfile

from .ucx_run import ucx_env

HERE = os.path.dirname(os.path.abspath(__file__))
AGENT = os.path.join(HERE, "mpi_launch_agent")
MPI_CHECK = os.environ.get("VRDMA_MPI_CHECK") or shutil.which("mpi_check")
MPICH_CHECK = os.environ.get("VRDMA_MPICH_CHECK")
# What mpi_check prints when every part of its default run passed.
CHECK_PARTS = ["ok point-to-point 4194304 bytes", "ok non-blocking exchange", "ok allreduce",
               "ok bcast", "ok alltoall", "ok MPI_Put/MPI_Get with fences",
               "ok MPI_Put/MPI_Get under MPI_Win_lock", "mpi_check: all checks passed"]


def _launch_host(state, containers):
    """The sandbox's containers by name, and the host of the first: where the launcher runs."""
    by_name = {c["name"]: c for c in state["containers"]}
    hosts = {h["name"]: h for h in state["hosts"]}
    return by_name, hosts[by_name[containers[0]]["host"]]


def _run_launcher(cmd, what, timeout, env=None):
    """Runs an MPI launcher in a session of its own; (rc, output). Killed, with everything it
    started, past `timeout`."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, _ = p.communicate()
        raise AssertionError(f"{what} did not finish within {timeout}s:\n{out}")
    return p.returncode, out


def mpirun(sb, state, containers, program, *, tls="rc_verbs,ud_verbs,self", pml="ucx",
           timeout=300, extra_env=None):
    """Runs `program` (a list) as 2 ranks, rank i in containers[i]; returns (rc, output).
    pml "ucx" runs UCX with the transports `tls` (None: UCX's defaults; ucx_run.ucx_env); pml
    "ob1" uses Open MPI's TCP BTL on the containers' interfaces (for comparison)."""
    by_name, host = _launch_host(state, containers)
    launcher = host["netns"]
    host_list = ",".join(f"{by_name[c]['ip']}:1" for c in containers)
    cmd = ["nsenter", f"--net=/run/netns/{launcher}", "mpirun", "--allow-run-as-root",
           "--bind-to", "none", "-np", str(len(containers)), "--host", host_list,
           "--mca", "plm_rsh_agent", AGENT, "--mca", "routed", "direct"]
    # Session directories of this job only, one per container (mpi_launch_agent): the
    # containers share /tmp and the host name, and daemons creating the same session directory
    # at once fail at start ("File exists").
    session = tempfile.mkdtemp(prefix="vrdma-mpi-")
    env = dict(os.environ)
    env["VRDMA_MPI_SESSION"] = session
    env["PMIX_MCA_gds"] = "hash"  # PMIx's shared-memory store needs a shared /dev/shm
    if pml == "ucx":
        cmd += ["--mca", "pml", "ucx", "--mca", "osc", "ucx", "--mca", "btl", "self"]
        for k, v in ucx_env(tls).items():
            cmd += ["-x", f"{k}={v}"]
    else:
        cmd += ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "osc", "pt2pt",
                "--mca", "btl_tcp_if_include", "eth0"]
    for k, v in (extra_env or {}).items():
        cmd += ["-x", f"{k}={v}"]
    cmd += program
    try:
        return _run_launcher(cmd, "mpirun", timeout, env)
    finally:
        shutil.rmtree(session, ignore_errors=True)


def mpiexec_mpich(sb, state, containers, program, *, timeout=300, extra_env=None):
    """Runs `program` (a list, built with MPICH) as 2 ranks under MPICH's mpiexec (Hydra), rank
    i in containers[i], with UCX's defaults; returns (rc, output). Hydra's proxies start through
    mpi_launch_agent and call back to mpiexec at the launching host's bridge address."""
    by_name, host = _launch_host(state, containers)
    cmd = ["nsenter", f"--net=/run/netns/{host['netns']}", "mpiexec.mpich",
           "-localhost", host["ip"], "-launcher", "rsh", "-launcher-exec", AGENT,
           "-hosts", ",".join(by_name[c]["ip"] for c in containers), "-n",
           str(len(containers)), "-ppn", "1", "-env", "UCX_LOG_LEVEL", "info"]
    for k, v in (extra_env or {}).items():
        cmd += ["-env", k, v]
    cmd += program
    return _run_launcher(cmd, "mpiexec", timeout)
