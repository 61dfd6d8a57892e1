"""Python gRPC modules compiled from one of the project's protos, for the stand-ins the tests
write (a kubelet, a container runtime)."""

import importlib
import os
import shutil
import subprocess
import sys


def generate_stubs(proto, out):
    """Compiles `proto` into `out` with protoc and grpc_python_plugin and imports the result:
    (messages module, services module)."""
    os.makedirs(out, exist_ok=True)
    plugin = shutil.which("grpc_python_plugin")
    subprocess.run(["protoc", "-I", os.path.dirname(proto), f"--python_out={out}",
                    f"--grpc_out={out}", f"--plugin=protoc-gen-grpc={plugin}", proto], check=True)
    if out not in sys.path:
        sys.path.insert(0, out)
    name = os.path.splitext(os.path.basename(proto))[0]
    return importlib.import_module(f"{name}_pb2"), importlib.import_module(f"{name}_pb2_grpc")
