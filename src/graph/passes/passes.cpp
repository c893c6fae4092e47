#include "graph/passes/passes.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "graph/passes/pass_util.h"

namespace jiffy {

bool run_graph_passes(Graph& g) {
    if (passes::probing()) return false;  // a kernel probe's one-node graph
    const char* env = std::getenv("JIFFY_PASSES");
    if (env && (std::strcmp(env, "0") == 0 || std::strcmp(env, "off") == 0)) return false;
    const bool stats = env && std::strcmp(env, "stats") == 0;
    struct Pass {
        const char* name;
        int (*fn)(Graph&);
        int removed;
    };
    // Order matters: cleanups first, then BN and bias folds, which expose the patterns the
    // epilogue fusions need (Conv -> [BN] -> [+bias] -> [+residual] -> activation).
    Pass list[] = {{"remove_identity", passes::remove_identity, 0},
                   {"merge_transposes", passes::merge_transposes, 0},
                   {"merge_reshapes", passes::merge_reshapes, 0},
                   {"fold_pad_conv", passes::fold_pad_conv, 0},
                   {"fold_batchnorm", passes::fold_batchnorm, 0},
                   {"fold_scale_mul", passes::fold_scale_mul, 0},
                   {"fold_bias_add", passes::fold_bias_add, 0},
                   {"fuse_hardswish", passes::fuse_hardswish, 0},
                   {"fuse_layernorm", passes::fuse_layernorm, 0},
                   {"fuse_gelu", passes::fuse_gelu, 0},
                   {"fuse_residual", passes::fuse_residual, 0},
                   {"fuse_activation", passes::fuse_activation, 0},
                   {"fold_matmul_transpose", passes::fold_matmul_transpose, 0},
                   {"fuse_softmax_scale", passes::fuse_softmax_scale, 0},
                   {"fuse_add_layernorm", passes::fuse_add_layernorm, 0}};
    bool changed = false;
    for (int round = 0; round < 8; ++round) {
        bool any = false;
        for (Pass& p : list) {
            int n = p.fn(g);
            p.removed += n;
            if (n > 0) any = true;
        }
        if (!any) break;
        changed = true;
    }
    // Once the epilogues are fused: the conv chains to channels-last, then the Transpose pairs
    // that leaves (a restore to NCHW followed by the model's own Transpose to NHWC) cancelled.
    const int nhwc = passes::layout_nhwc(g);
    const int nhwc_merged = nhwc > 0 ? passes::merge_transposes(g) : 0;
    const int means = nhwc > 0 ? passes::mean_nhwc(g) : 0;
    // Then squeeze-and-excite's channel scale moves into the 1x1 after it, and an expand 1x1 and
    // its depthwise over a tensor past L2 run band by band (one node).
    const int scaled = nhwc > 0 ? passes::fuse_channel_scale(g) : 0;
    const int banded = nhwc > 0 ? passes::fuse_conv_band(g) : 0;
    if (nhwc > 0) changed = true;
    // Once the others reach their fixed point: they match the original elementwise nodes.
    const int chained = passes::fuse_elementwise(g);
    if (chained > 0) changed = true;
    if (stats) {
        std::fprintf(stderr, "graph passes (%s, %zu nodes left):", g.name.c_str(), g.nodes.size());
        for (const Pass& p : list) std::fprintf(stderr, " %s=%d", p.name, p.removed);
        std::fprintf(stderr, " layout_nhwc=%d(convs) merge_transposes=%d mean_nhwc=%d fuse_channel_scale=%d fuse_conv_band=%d fuse_elementwise=%d",
                     nhwc, nhwc_merged, means, scaled, banded, chained);
        std::fprintf(stderr, "\n");
    }
    return changed;
}

}  // namespace jiffy
