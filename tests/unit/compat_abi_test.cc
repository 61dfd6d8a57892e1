// The parts of libibverbs' ABI that vrdma answers with failures: the IBVERBS_1.0
// compatibility versions and the IBVERBS_PRIVATE_34 provider interface. Each symbol is
// looked up with its version, as a program linked against rdma-core would bind it.
#include <dlfcn.h>
#include <errno.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

namespace {

template <typename F>
F* versioned(const char* name, const char* version) {
  return reinterpret_cast<F*>(dlvsym(RTLD_DEFAULT, name, version));
}

TEST(Ibverbs, IsVrdmasLibrary) {
  // A call into the library also keeps it linked (--as-needed), so RTLD_DEFAULT finds it.
  EXPECT_NE(ibv_wc_status_str(IBV_WC_SUCCESS), nullptr);
  EXPECT_NE(versioned<void>("vrdma_cm_call", "VRDMA_PRIVATE_1"), nullptr);
}

TEST(Ibverbs10, DeviceListIsEmptyWithEnosys) {
  using GetList = void**(int*);
  auto* old_list = versioned<GetList>("ibv_get_device_list", "IBVERBS_1.0");
  auto* new_list = versioned<GetList>("ibv_get_device_list", "IBVERBS_1.1");
  ASSERT_NE(old_list, nullptr);
  ASSERT_NE(new_list, nullptr);
  EXPECT_NE(reinterpret_cast<void*>(old_list), reinterpret_cast<void*>(new_list));
  int num = 7;
  errno = 0;
  EXPECT_EQ(old_list(&num), nullptr);
  EXPECT_EQ(errno, ENOSYS);
  EXPECT_EQ(num, 0);
}

TEST(Ibverbs10, CallsFailInTheirOwnConvention) {
  auto* open = versioned<void*(void*)>("ibv_open_device", "IBVERBS_1.0");
  auto* close = versioned<int(void*)>("ibv_close_device", "IBVERBS_1.0");
  auto* query_gid = versioned<int(void*, uint8_t, int, ibv_gid*)>("ibv_query_gid", "IBVERBS_1.0");
  auto* ack = versioned<void(void*, unsigned)>("ibv_ack_cq_events", "IBVERBS_1.0");
  ASSERT_TRUE(open && close && query_gid && ack);
  errno = 0;
  EXPECT_EQ(open(nullptr), nullptr);
  EXPECT_EQ(errno, ENOSYS);
  EXPECT_EQ(close(nullptr), ENOSYS);
  errno = 0;
  EXPECT_EQ(query_gid(nullptr, 1, 0, nullptr), -1);
  EXPECT_EQ(errno, ENOSYS);
  ack(nullptr, 1);
}

TEST(Ibverbs11, RegisterDriverIsACompatibilityVersion) {
  using Register = void(const char*, void*);
  auto* reg = versioned<Register>("ibv_register_driver", "IBVERBS_1.1");
  ASSERT_NE(reg, nullptr);
  reg("mlx5", nullptr);  // registers nothing
}

TEST(ProviderInterface, CommandsFailWithEopnotsupp) {
  auto* alloc_pd = versioned<int(ibv_context*, ibv_pd*, void*, size_t, void*, size_t)>(
      "ibv_cmd_alloc_pd", "IBVERBS_PRIVATE_34");
  auto* poll = versioned<int(ibv_cq*, int, ibv_wc*)>("ibv_cmd_poll_cq", "IBVERBS_PRIVATE_34");
  auto* post_send = versioned<int(ibv_qp*, ibv_send_wr*, ibv_send_wr**)>("ibv_cmd_post_send",
                                                                         "IBVERBS_PRIVATE_34");
  auto* open =
      versioned<ibv_context*(ibv_device*, void*)>("verbs_open_device", "IBVERBS_PRIVATE_34");
  auto* num_attrs =
      versioned<unsigned(unsigned, void*)>("__ioctl_final_num_attrs", "IBVERBS_PRIVATE_34");
  auto* reg = versioned<void(const void*)>("verbs_register_driver_34", "IBVERBS_PRIVATE_34");
  ASSERT_TRUE(alloc_pd && poll && post_send && open && num_attrs && reg);

  EXPECT_EQ(alloc_pd(nullptr, nullptr, nullptr, 0, nullptr, 0), EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(poll(nullptr, 1, nullptr), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post_send(nullptr, &wr, &bad), EOPNOTSUPP);
  EXPECT_EQ(bad, &wr);
  errno = 0;
  EXPECT_EQ(open(nullptr, nullptr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(num_attrs(5, nullptr), 5u);
  reg(nullptr);
}

TEST(ProviderInterface, DisassociateFlagIsData) {
  auto* flag = versioned<bool>("verbs_allow_disassociate_destroy", "IBVERBS_PRIVATE_34");
  ASSERT_NE(flag, nullptr);
  EXPECT_FALSE(*flag);
}

}  // namespace
