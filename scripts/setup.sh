#!/usr/bin/env bash
# Installs what vrdma needs on Debian 12, builds the product (not the tests:
# scripts/test.sh builds those), installs `vrdma` and `vrdmad` on PATH (the
# drop-in libraries under /usr/local/lib/vrdma, the manual pages, the docs), and
# with --demo runs the demo. Run as root. Docs: docs/getting-started.md
#
#   scripts/setup.sh            install dependencies, build, install
#   scripts/setup.sh --demo     ... then run `vrdma demo`
#   scripts/setup.sh --deps     install dependencies only (the tests' too)
set -euo pipefail
cd "$(dirname "$0")/.."

demo=0 deps_only=0
for arg in "$@"; do
  case "$arg" in
    --demo) demo=1 ;;
    --deps) deps_only=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (it installs packages and creates network namespaces)" >&2
  exit 1
fi

packages=(
  # build; the manual pages (help2man) and man itself
  build-essential cmake pkg-config libgtest-dev help2man man-db
  libibverbs-dev librdmacm-dev libcli11-dev nlohmann-json3-dev
  # TLS between routers and the sandbox's PKI (OpenSSL)
  libssl-dev openssl
  # vrdmad's configuration file (YAML)
  libyaml-cpp-dev
  # the Debian package (cpack: dpkg-shlibdeps, file) and its test (systemd-analyze verify,
  # setpriv, strace for the service's system calls)
  dpkg-dev file systemd util-linux
  # the Kubernetes device plugin (gRPC, protobuf) and its stand-in kubelet in the tests
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  python3-grpcio python3-protobuf python3-yaml
  clang libclang-rt-14-dev
  # Debian's own rdma-core libraries: the drop-in libraries are compared with them
  # (abi_exports) and the direct-verbs headers give the provider prototypes
  libibverbs1 librdmacm1 ibverbs-providers libibumad3 libibumad-dev
  # the unmodified programs vrdma runs, and the baselines it is measured against
  ibverbs-utils rdmacm-utils perftest ucx-utils iperf3 sockperf
  # programs that link the RDMA libraries, loaded by e2e_library_load
  libfabric1 libfabric-bin openmpi-bin libopenmpi-dev python3-pyverbs
  # MPICH (on UCX), run with its defaults by e2e_mpich (Open MPI stays the default mpicc)
  mpich libmpich-dev
  # test bed and tests
  iproute2 iputils-ping procps strace python3
  # the cluster directory of a multi-host sandbox (etcd over TLS with the sandbox's own PKI:
  # OpenSSL makes the certificates); plots of the evaluation suite
  etcd-server openssl libssl-dev python3-matplotlib
  # real OCI containers in the tests: rootful podman with crun, netavark bridges (iptables)
  podman crun conmon netavark iptables
  # the metrics tests: a real Prometheus server (and promtool); vrdma top under tmux
  prometheus tmux
)
# kubectl parses the deployment files in the tests; any kubectl will do (Debian's is in
# kubernetes-client, which cannot share /usr/bin/kubectl with another package).
command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
[ "$deps_only" = 1 ] && exit 0

# The product only: the tests are scripts/test.sh's to build (in the same directory).
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVRDMA_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)"
cmake --install build >/dev/null
ldconfig
# The CDI spec, for engines that take --device vrdma.io/hca=vrdma0 (podman >= 4.1 and others).
vrdma cdi generate --output /etc/cdi/vrdma.json
echo "setup.sh: installed $(command -v vrdma) and $(command -v vrdmad); libraries in /usr/local/lib/vrdma"

if [ "$demo" = 1 ]; then
  exec vrdma demo
fi
