// Graph rewrites that run once per compile, after a first constant-folding sweep: every value's
// shape is concrete in Value::dims and every value known at compile time carries Value::constant
// (its producer node removed). A pass returns true when it changed the graph; compile then
// starts again on the rewritten graph. Each pass has its own test (tests/unit/passes_test.cpp).
#pragma once
#include "graph/graph.h"

namespace jiffy {

// Runs all optimization passes in order; true if any changed the graph.
bool run_graph_passes(Graph& g);

}  // namespace jiffy
