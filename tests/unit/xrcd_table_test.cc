// vrdmad's XRC domains: named by an inode within a tenant, opened and closed per client as
// ibv_open_xrcd and ibv_close_xrcd (O_CREAT, O_EXCL), gone with their last open or client.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <unistd.h>

#include "daemon/registry/xrcd_table.h"

namespace vrdma::daemon {
namespace {

class XrcdTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FILE* f = ::tmpfile();
    ASSERT_NE(f, nullptr);
    fd_ = ::dup(::fileno(f));
    ::fclose(f);
    FILE* g = ::tmpfile();
    ASSERT_NE(g, nullptr);
    other_ = ::dup(::fileno(g));
    ::fclose(g);
  }
  void TearDown() override {
    ::close(fd_);
    ::close(other_);
  }
  static UniqueFd dup_of(int fd) { return UniqueFd(::dup(fd)); }

  XrcdTable t_;
  int fd_ = -1, other_ = -1;
};

TEST_F(XrcdTableTest, OneInodeOneDomainWithinATenant) {
  uint32_t a = 0, b = 0, c = 0, d = 0;
  EXPECT_EQ(t_.open(1, "t1", dup_of(fd_), 0, a), EINVAL);  // none yet, no O_CREAT
  ASSERT_EQ(t_.open(1, "t1", dup_of(fd_), O_CREAT, a), 0);
  EXPECT_NE(a, 0u);
  ASSERT_EQ(t_.open(2, "t1", dup_of(fd_), 0, b), 0);  // another client of the tenant
  EXPECT_EQ(a, b);
  EXPECT_EQ(t_.open(2, "t1", dup_of(fd_), O_CREAT | O_EXCL, c), EINVAL);
  ASSERT_EQ(t_.open(3, "t2", dup_of(fd_), O_CREAT, c), 0);  // another tenant: its own domain
  EXPECT_NE(c, a);
  ASSERT_EQ(t_.open(1, "t1", dup_of(other_), O_CREAT, d), 0);  // another file
  EXPECT_NE(d, a);
  EXPECT_EQ(t_.size(), 3u);
  EXPECT_TRUE(t_.holds(1, a));
  EXPECT_TRUE(t_.holds(2, a));
  EXPECT_FALSE(t_.holds(3, a));
  EXPECT_EQ(t_.open(1, "t1", UniqueFd(), O_CREAT, d), EBADF);
}

TEST_F(XrcdTableTest, TheDomainGoesWithItsLastOpen) {
  uint32_t a = 0, b = 0;
  ASSERT_EQ(t_.open(1, "t", dup_of(fd_), O_CREAT, a), 0);
  ASSERT_EQ(t_.open(1, "t", dup_of(fd_), 0, b), 0);
  ASSERT_EQ(t_.open(2, "t", dup_of(fd_), 0, b), 0);
  EXPECT_EQ(t_.close(3, a), ENOENT);  // not its own
  EXPECT_EQ(t_.close(1, a), 0);
  EXPECT_TRUE(t_.holds(1, a));  // opened twice
  EXPECT_EQ(t_.close(1, a), 0);
  EXPECT_FALSE(t_.holds(1, a));
  EXPECT_EQ(t_.close(1, a), ENOENT);
  EXPECT_EQ(t_.size(), 1u);
  t_.client_gone(2);
  EXPECT_EQ(t_.size(), 0u);
  // Gone: the file has no domain any more, and a new one gets a new number.
  EXPECT_EQ(t_.open(1, "t", dup_of(fd_), 0, b), EINVAL);
  ASSERT_EQ(t_.open(1, "t", dup_of(fd_), O_CREAT, b), 0);
  EXPECT_NE(b, a);
}

}  // namespace
}  // namespace vrdma::daemon
