// shm::Peer on its own, with a fake owner: what a peer keeps of registrations that come and go.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "shm/layout.h"
#include "shm/peer.h"

namespace {

using namespace vrdma::shm;

constexpr uint64_t kMrBytes = 1 << 20;

int sealed_memfd(const char* name, uint64_t size) {
  int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) < 0) return -1;
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) return -1;
  return fd;
}

// An owner that registers one MR in slot 1 again and again, each time in a new memfd (as a
// program that deregisters and registers a buffer does) with a new key and generation.
class Owner : public FdSource {
 public:
  Owner() {
    keys_fd_ = sealed_memfd("test-keys", sizeof(KeyTable) + kPage);
    keys_ = static_cast<KeyTable*>(
        ::mmap(nullptr, sizeof(KeyTable), PROT_READ | PROT_WRITE, MAP_SHARED, keys_fd_, 0));
    keys_->magic = kKeyTableMagic;
    keys_->slots = kMrSlots;
  }
  ~Owner() override {
    ::munmap(keys_, sizeof(KeyTable));
    ::close(keys_fd_);
    if (mr_fd_ >= 0) ::close(mr_fd_);
  }

  // A new registration: returns its key.
  uint32_t reregister() {
    if (mr_fd_ >= 0) ::close(mr_fd_);
    mr_fd_ = sealed_memfd("test-mr", kMrBytes);
    ++gen_;
    keys_->gen[1].store(gen_);
    key_ = 0x1000 + gen_;
    return key_;
  }

  int fetch_fd(uint32_t, uint32_t fd_id, uint32_t, int& fd) override {
    if (fd_id != kKeyTableFdId) return ENOENT;
    fd = ::dup(keys_fd_);
    return 0;
  }
  int grant_mr(uint32_t, uint32_t, uint32_t key, uint32_t, MrGrant& g) override {
    if (key != key_) return ENOENT;
    g.slot = 1;
    g.gen = gen_;
    g.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE;
    g.nseg = 1;
    g.writable = true;
    g.iova = 0x10000;
    g.length = kMrBytes;
    g.map_length = kMrBytes;
    g.seg[0] = {2, 0, kMrBytes};
    g.fds[0] = ::dup(mr_fd_);
    return 0;
  }

 private:
  int keys_fd_ = -1, mr_fd_ = -1;
  KeyTable* keys_ = nullptr;
  uint32_t gen_ = 0, key_ = 0;
};

// Mappings of memfds named "test-mr" in this process (/proc/self/maps names them).
int mr_mappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);)
    if (line.find("/memfd:test-mr") != std::string::npos) ++n;
  return n;
}

uint64_t vm_size_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7));
  return 0;
}

TEST(Peer, ARegistrationThatIsGoneIsLetGoAndReclaimed) {
  Owner owner;
  auto peer = std::make_shared<Peer>(owner, 7);
  const uint32_t access = IBV_ACCESS_REMOTE_WRITE;
  for (int i = 0; i < 50; ++i) {
    uint32_t key = owner.reregister();
    uint8_t* p = peer->translate(0, 0, key, 0x10000, 64, access);
    ASSERT_NE(p, nullptr) << i;
    std::memset(p, i, 64);
    // The key of the registration before is refused from now on.
    if (i > 0) {
      EXPECT_EQ(peer->translate(0, 0, key - 1, 0x10000, 64, access), nullptr);
    }
    // Only the live registration's memfd is mapped: the ones before were let go.
    EXPECT_EQ(mr_mappings(), 1) << i;
  }
  const uint64_t before = vm_size_kib();
  peer->reclaim();
  EXPECT_GE(before - vm_size_kib(), 49 * kMrBytes / 1024) << "reclaim() unmaps the 49 emptied areas";
  uint8_t* p = peer->translate(0, 0, 0x1000 + 50, 0x10000, 64, access);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p[0], 49);
  peer.reset();
  EXPECT_EQ(mr_mappings(), 0);
}

}  // namespace
