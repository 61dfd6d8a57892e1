// Drop-in libmlx5.so.1: failing stubs for the mlx5dv_* entry points that
// Debian's perftest imports (it is linked BIND_NOW, so every import must
// resolve at load time even though it only calls them for mlx5 devices with
// --aes_xts or -c DC). The vrdma device is never an mlx5 device, so each call
// fails with EOPNOTSUPP. The symbol versions come from libmlx5.map.
//
// The real header is included for its types only (it also makes the compiler
// check that these definitions match the real prototypes); nothing here links
// against libibverbs or the real libmlx5.

#include <errno.h>

#include <infiniband/mlx5dv.h>

#define VRDMA_EXPORT __attribute__((visibility("default")))

extern "C" {

// MLX5_1.3
VRDMA_EXPORT struct ibv_qp *mlx5dv_create_qp(struct ibv_context * /*context*/,
                                             struct ibv_qp_init_attr_ex * /*qp_attr*/,
                                             struct mlx5dv_qp_init_attr * /*mlx5_qp_attr*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

// MLX5_1.7
VRDMA_EXPORT struct ibv_context *mlx5dv_open_device(struct ibv_device * /*device*/,
                                                    struct mlx5dv_context_attr * /*attr*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

VRDMA_EXPORT int mlx5dv_devx_general_cmd(struct ibv_context * /*context*/, const void * /*in*/,
                                         size_t /*inlen*/, void * /*out*/, size_t /*outlen*/) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

// MLX5_1.10
VRDMA_EXPORT struct mlx5dv_mkey *mlx5dv_create_mkey(
    struct mlx5dv_mkey_init_attr * /*mkey_init_attr*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

VRDMA_EXPORT int mlx5dv_destroy_mkey(struct mlx5dv_mkey * /*mkey*/) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

VRDMA_EXPORT struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex * /*qp*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

// MLX5_1.21
VRDMA_EXPORT int mlx5dv_crypto_login(struct ibv_context * /*context*/,
                                     struct mlx5dv_crypto_login_attr * /*login_attr*/) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

VRDMA_EXPORT struct mlx5dv_dek *mlx5dv_dek_create(struct ibv_context * /*context*/,
                                                  struct mlx5dv_dek_init_attr * /*init_attr*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

VRDMA_EXPORT int mlx5dv_dek_destroy(struct mlx5dv_dek * /*dek*/) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

}  // extern "C"
