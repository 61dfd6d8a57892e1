// vrdma cdi generate | list | hook, and vrdma edits.
#pragma once

#include <string>

namespace vrdma::ctl {

struct EditsOptions {
  std::string lib_dir;  // host directory of the drop-in libraries (default: installed)
  std::string socket;   // vrdmad's socket on the host (default: $VRDMA_SOCKET or /run/vrdma/...)
};

struct CdiGenerateOptions {
  EditsOptions edits;
  std::string output;            // file, or "-" for stdout
  std::string version = "auto";  // or a CDI version
  bool no_hook = false;          // leave out the device view hook
};

// `vrdma edits`: the container edits as JSON, or as podman/docker run arguments.
int edits_command(const EditsOptions& options, bool engine_args);

int cdi_generate(const CdiGenerateOptions& options);
// `vrdma cdi list`: the device names of the spec file(s).
int cdi_list(const std::string& path);
// `vrdma cdi hook`: the OCI createContainer hook that builds the container's device view; reads
// the container's state (JSON) on stdin.
int cdi_hook(const std::string& socket);

}  // namespace vrdma::ctl
