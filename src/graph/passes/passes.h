// Graph rewrites that run once per compile, after a first constant-folding sweep: every value's
// shape is concrete in Value::dims and every value known at compile time carries Value::constant
// (its producer node removed). A pass returns true when it changed the graph; compile then
// starts again on the rewritten graph. Each pass has its own test (tests/unit/passes_test.cpp).
//
// Rules every pass keeps: graph outputs keep their value ids and names; a value that is a graph
// output, is read by more than one input slot, or is captured by a subgraph (an implicit input)
// is never fused away. Env JIFFY_PASSES=0 turns the passes off (A/B timing); JIFFY_PASSES=stats
// prints how many nodes each pass removed to stderr.
#pragma once
#include "graph/graph.h"

namespace jiffy {

// Runs all optimization passes in order, until none applies; true if any changed the graph.
bool run_graph_passes(Graph& g);

namespace passes {
// Each returns the number of nodes it removed (0: graph unchanged).
int remove_identity(Graph& g);      // Identity / inference Dropout
int fold_pad_conv(Graph& g);        // zero Pad of the spatial dims -> the Conv's pads
int fold_batchnorm(Graph& g);       // BatchNormalization into Conv / ConvTranspose weights
int fold_scale_mul(Graph& g);       // Mul by a constant per-channel vector into Conv weights
int fold_bias_add(Graph& g);        // Add of a constant per-channel vector into Conv/Gemm/MatMul bias
int fuse_hardswish(Graph& g);       // x*HardSigmoid(x), x*Clip(x+3,0,6)/6 -> HardSwish
int fuse_residual(Graph& g);        // Conv / MatMul / Gemm + Add(other) -> _fused_residual
int fuse_activation(Graph& g);      // Conv/Gemm/MatMul + activation -> _fused_act
int merge_transposes(Graph& g);     // Transpose o Transpose -> one (or none)
int merge_reshapes(Graph& g);       // Reshape/Flatten/Squeeze/Unsqueeze chains -> one Reshape
int mean_nhwc(Graph& g);           // NHWC -> NCHW Transpose -> global mean: one jiffy::GlobalAveragePoolNhwc
int layout_nhwc(Graph& g);         // 1x1 + depthwise conv chains -> channels-last jiffy::ConvNhwc
int fuse_channel_scale(Graph& g);  // Mul(X, per-channel S) -> ConvNhwc 1x1: _x_scale, S as input 4
int fuse_conv_band(Graph& g);      // ConvNhwc 1x1 -> ConvNhwc depthwise -> one jiffy::ConvNhwcBand
int fuse_elementwise(Graph& g);     // unfolded BNs and elementwise chains -> jiffy::ElementwiseChain (runs last)

int fold_matmul_transpose(Graph& g);  // Transposes around a float MatMul -> strided MatMul
int fuse_softmax_scale(Graph& g);   // Softmax(x * s) -> Softmax with _fused_scale
int fuse_layernorm(Graph& g);       // ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div[*g][+b] -> LayerNormalization
int fuse_gelu(Graph& g);            // x * 0.5 * (1 + Erf(x / sqrt 2)) -> Gelu
int fuse_add_layernorm(Graph& g);   // LayerNormalization(x + r) -> LayerNormalization with r fused
}  // namespace passes

}  // namespace jiffy
