// Small file helpers for the CLI's state under the run directory.
#pragma once

#include <optional>
#include <string>

namespace vrdma::ctl {

// The whole file, or nullopt if it does not exist. Other errors throw Error.
std::optional<std::string> read_file(const std::string& path);

// Writes through a temporary file and rename, so readers never see half a file.
void write_file_atomic(const std::string& path, const std::string& content);

// Creates path and its parents (mode 0755). Throws Error on failure.
void make_dirs(const std::string& path);

// The last `lines` lines of a file ("" if unreadable).
std::string tail_lines(const std::string& path, int lines);

}  // namespace vrdma::ctl
