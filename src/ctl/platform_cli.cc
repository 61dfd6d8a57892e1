#include "ctl/platform_cli.h"

#include "ctl/cdi_cmd.h"
#include "ctl/cdi_spec.h"
#include "ctl/device_plugin_cmd.h"

#ifndef VRDMA_LIBDIR
#error "VRDMA_LIBDIR must be defined by the build (directory of the drop-in libraries)"
#endif

namespace vrdma::ctl {

struct PlatformCommands::State {
  CLI::App* edits = nullptr;
  EditsOptions edits_opts;
  bool edits_engine_args = false;
  CLI::App* cdi_gen = nullptr;
  CdiGenerateOptions cdi_opts;
  CLI::App* cdi_list = nullptr;
  std::string cdi_list_path = kCdiDefaultOutput;
  CLI::App* cdi_hook = nullptr;
  std::string hook_socket;
  CLI::App* device_plugin = nullptr;
};

PlatformCommands::PlatformCommands(CLI::App& app) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.edits = app.add_subcommand(
      "edits", "Print what a container needs to use vrdma (mounts, device node, environment)");
  s.edits->add_option(
      "--lib-dir", s.edits_opts.lib_dir,
      "Host directory of the drop-in libraries (default: $VRDMA_LIBDIR, else lib/vrdma of this "
      "vrdma's install prefix, else " VRDMA_LIBDIR ")");
  s.edits->add_option(
      "--socket", s.edits_opts.socket,
      "vrdmad's socket on the host (default: $VRDMA_SOCKET, else /run/vrdma/vrdmad.sock)");
  s.edits->add_flag("--engine-args", s.edits_engine_args,
                    "Print podman/docker run arguments (--volume, --device, --env), one a line");
  s.edits->footer(
      "The same edits make the sandbox's containers, the CDI spec (vrdma cdi generate) and the\n"
      "device plugin's Allocate answers. The device view under /sys/class/infiniband depends on\n"
      "the container's address and is built when the container exists (sandbox, CDI hook).\n"
      "Docs: docs/containers.md#the-device-in-a-container");

  CLI::App* cdi = app.add_subcommand(
      "cdi", "Container Device Interface: a spec for engines that take --device " +
                 std::string(kCdiKind) + "=vrdma0");
  cdi->require_subcommand(1);
  cdi->footer("Docs: docs/containers.md#containers-of-an-engine-cdi-and-podman");
  s.cdi_opts.output = kCdiDefaultOutput;
  s.cdi_gen = cdi->add_subcommand("generate", "Write the CDI spec of vrdma's device");
  s.cdi_gen->add_option("--output,-o", s.cdi_opts.output, "Spec file, or - for stdout")
      ->capture_default_str();
  s.cdi_gen
      ->add_option("--cdi-version", s.cdi_opts.version,
                   "auto (0.5.0: the newest Debian 12's podman accepts) or a CDI version")
      ->capture_default_str();
  s.cdi_gen->add_option("--lib-dir", s.cdi_opts.edits.lib_dir, "As for vrdma edits");
  s.cdi_gen->add_option("--socket", s.cdi_opts.edits.socket, "As for vrdma edits");
  s.cdi_gen->add_flag("--no-hook", s.cdi_opts.no_hook,
                      "Leave out the createContainer hook that builds the device view");
  s.cdi_gen->footer("Use: podman run --device " + std::string(kCdiKind) +
                    "=vrdma0 IMAGE ib_write_bw ...\n"
                    "The hook runs this vrdma as `vrdma cdi hook` when a container is created.\n"
                    "Docs: docs/containers.md#containers-of-an-engine-cdi-and-podman");
  s.cdi_list = cdi->add_subcommand("list", "Show the device names of a CDI spec");
  s.cdi_list->add_option("path", s.cdi_list_path, "Spec file or directory (every *.json in it)")
      ->capture_default_str();
  s.cdi_list->footer("Docs: docs/containers.md#containers-of-an-engine-cdi-and-podman");
  s.cdi_hook = cdi->add_subcommand(
      "hook", "OCI hook (run by the container runtime): build a container's device view");
  s.cdi_hook->add_option("--socket", s.hook_socket, "vrdmad's socket on the host");
  s.cdi_hook->footer(
      "Reads the container's state (OCI runtime spec) on stdin, asks vrdmad from the container's\n"
      "network namespace which device it gets, and shows it under /sys/class/infiniband and\n"
      "/sys/class/infiniband_verbs in the container's mount namespace. Needs root.\n"
      "Docs: docs/containers.md#the-device-in-a-container");

  s.device_plugin = app.add_subcommand(
      "device-plugin",
      "Run the Kubernetes device plugin (vrdma device-plugin --help for its options)");
  s.device_plugin->prefix_command();  // every argument goes to vrdma-device-plugin,
  s.device_plugin->set_help_flag();   // --help included
}

PlatformCommands::~PlatformCommands() = default;

bool PlatformCommands::parsed() const {
  const State& s = *s_;
  return s.edits->parsed() || s.cdi_gen->parsed() || s.cdi_list->parsed() || s.cdi_hook->parsed() ||
         s.device_plugin->parsed();
}

int PlatformCommands::run() const {
  const State& s = *s_;
  if (s.device_plugin->parsed()) return run_device_plugin(s.device_plugin->remaining());
  if (s.edits->parsed()) return edits_command(s.edits_opts, s.edits_engine_args);
  if (s.cdi_gen->parsed()) return cdi_generate(s.cdi_opts);
  if (s.cdi_list->parsed()) return cdi_list(s.cdi_list_path);
  return cdi_hook(s.hook_socket);
}

}  // namespace vrdma::ctl
