#include "ctl/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "ctl/error.h"

namespace vrdma::ctl {

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return std::nullopt;
    throw Error(errno_text("cannot read " + path, errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file_atomic(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(errno_text("cannot write " + tmp, errno));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(errno_text("cannot write " + tmp, err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) < 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(errno_text("cannot rename " + tmp + " to " + path, err));
  }
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw Error("cannot create directory " + path + ": " + ec.message());
}

std::string tail_lines(const std::string& path, int lines) {
  std::ifstream in(path);
  std::vector<std::string> ring;
  std::string line;
  while (std::getline(in, line)) {
    ring.push_back(line);
    if (ring.size() > static_cast<size_t>(lines)) ring.erase(ring.begin());
  }
  std::string out;
  for (const auto& l : ring) out += l + "\n";
  return out;
}

}  // namespace vrdma::ctl
