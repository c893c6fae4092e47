// Helpers shared by the graph passes (src/graph/passes/*.cpp): use counts, constant access,
// attribute access, node removal, and the kernel-support probe for fused epilogues.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace jiffy::passes {

// Who reads each value. A value listed as a graph output, or read as an implicit input (a
// subgraph capture, matched by name), must keep its id and name: it is never fused away.
struct Uses {
    std::vector<int> count;      // node input slots reading the value (explicit and implicit)
    std::vector<int> user;       // the reading node when count == 1, else -1
    std::vector<char> pinned;    // graph output or subgraph capture
};
Uses compute_uses(const Graph& g);

// v is read by exactly one input slot of node `node` and is not pinned.
bool only_feeds(const Uses& u, int v, int node);
// The producer of v when only_feeds(u, v, user), else -1.
int sole_producer(const Graph& g, const Uses& u, int v, int user);
// |a - b| within 1e-6 relative (absolute below 1): matching exporters' rounded constants.
bool near_value(double a, double b);

bool is_op(const Node& n, const char* op);  // ai.onnx op (empty domain)
bool is_f32(const Graph& g, int v);
const Tensor* const_of(const Graph& g, int v);  // nullptr unless v >= 0 is a constant
// Single float value of a constant with one element, or false.
bool scalar_of(const Graph& g, int v, double* out);

// a and b have the same known dims.
bool same_dims(const Graph& g, int a, int b);
// v >= 0 is float32 with every dim known: true, with them in *d.
bool f32_dims(const Graph& g, int v, std::vector<int64_t>* d);
// A jiffy::ConvNhwc node (made by layout_nhwc) with one output.
bool is_nhwc_conv(const Node& n);
// A conv node's constant float32 4-D weight's dims (input 1), or empty.
Shape weight_dims(const Graph& g, const Node& n);

// If constant c, broadcast against a value of dims `out`, only varies along `axis` and never
// enlarges the result: true, with v[out[axis]] its per-position values (float32 only).
bool channel_vector(const Tensor& c, const std::vector<Dim>& out, size_t axis, std::vector<float>* v);

// Clip's bounds (attributes min/max, overridden by inputs 1/2), -FLT_MAX/FLT_MAX when absent.
// False when an input bound is not a constant scalar.
bool clip_bounds(const Graph& g, const Node& n, float* lo, float* hi);

// A Transpose's permutation for an input of `rank` axes (reversed when `perm` is absent); false
// unless `perm` is a permutation of 0 .. rank - 1.
bool perm_of(const Node& t, size_t rank, std::vector<int64_t>* p);

// An inference BatchNormalization as y = x * s + t per channel (axis 1) of its float32 input, s =
// scale / sqrt(var + eps), t = B - mean * s; false where bn is not one that can be (training mode,
// a statistics output read, opset < 9 non-spatial, parameters not constant or not one per
// channel, var + eps <= 0).
bool batchnorm_affine(const Graph& g, const Uses& u, const Node& bn, std::vector<double>* s, std::vector<double>* t);

// A Pad node's per-dim (begin, end) amounts over `rank` dims when they are known at compile time
// (attributes before opset 11; constant pads and optional axes inputs since); false otherwise.
bool pad_amounts(const Graph& g, const Node& p, size_t rank, std::vector<int64_t>* before,
                 std::vector<int64_t>* after);
// A Pad node's fill value when known at compile time (0 when absent); false otherwise.
bool pad_value(const Graph& g, const Node& p, double* v);

// Adds a constant value named after `base` (made unique) and returns its id.
int add_const(Graph& g, const std::string& base, Tensor t);

float attr_f(const Node& n, const char* name, float def);
int64_t attr_i(const Node& n, const char* name, int64_t def);
std::string attr_s(const Node& n, const char* name, const std::string& def);
// Ints attribute `name` absent, or all its values equal to `want` (strides 1, pads 0, ...).
bool ints_all(const Node& n, const char* name, int64_t want);
void set_f(Node& n, const char* name, float v);
void set_i(Node& n, const char* name, int64_t v);
void set_s(Node& n, const char* name, const std::string& v);
void set_ints(Node& n, const char* name, std::vector<int64_t> v);

// Explicit inputs only (omitted trailing optional ones count as present slots with id -1).
inline int num_explicit(const Node& n) { return n.num_explicit_inputs; }

// Makes node `keep` produce value `out` in place of its current output 0 (used when the nodes
// after it are folded into it); the old output value is left orphaned.
void retarget_output(Graph& g, int keep, int out);

// Replaces every explicit read of `from` by `to`. False (nothing changed) when `from` is pinned.
bool replace_uses(Graph& g, const Uses& u, int from, int to);

// Applies `rewrite` at each node until none applies. rewrite(g, uses, node, dead) returns the
// number of nodes it marked dead (0: did nothing); dead nodes are dropped and the scan restarts.
// Returns the total number of nodes removed.
using Rewrite = std::function<int(Graph&, const Uses&, int, std::vector<char>&)>;
int rewrite_all(Graph& g, const Rewrite& rewrite);

// ---- kernel support for fused epilogues (src/graph/passes/kernel_probe.cpp) ----
struct FusionKind {
    std::string op;          // Conv, ConvTranspose, Gemm, MatMul
    std::string act;         // "" or Relu, LeakyRelu, Clip, HardSigmoid, HardSwish, Sigmoid, Tanh
    bool residual = false;   // _fused_residual with a last input (Conv, Gemm: 4th)
    bool bias = false;       // MatMul: _fused_bias with a 3rd input
    bool const_weight = true;  // input 1 is a constant
    bool clamp = false;      // Conv with act: _fused_lo / _fused_hi after the activation
    bool affine = false;     // Conv with act: _fused_scale / _fused_shift after it (and the clamp)
};
// True when the op's kernel honours the fused attributes, checked once per kind by compiling
// and running a few small single-node graphs with and without them and comparing the results.
bool kernel_supports(const FusionKind& k);
// True while a probe is compiling (passes are then skipped).
bool probing();

}  // namespace jiffy::passes
