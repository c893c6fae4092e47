// conv ops. See docs/adding-an-op.md.
#include "ops/util.h"

namespace jiffy {

void register_conv_ops(OpRegistry& r) {}

}  // namespace jiffy
