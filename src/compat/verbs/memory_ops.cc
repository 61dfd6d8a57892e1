// The extended context's memory operations: device memory, parent and thread domains, ODP
// advice.
#include "compat/verbs/handles.h"

namespace vrdma::compat {

void install_memory_ops(verbs_context&) {}

}  // namespace vrdma::compat
