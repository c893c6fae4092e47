// linalg ops. See docs/adding-an-op.md.
#include "ops/util.h"

namespace jiffy {

void register_linalg_ops(OpRegistry& r) {}

}  // namespace jiffy
