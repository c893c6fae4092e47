// The op interface. Every ONNX op is one `prepare` function (registered by name) that, given the
// node's attributes and its inputs' dtypes, static shapes and (where known) constant values,
//   - validates them (errors name the node and what is wrong),
//   - sets every output's dtype and shape (or its constant value),
//   - and creates the Kernel that computes the outputs at run time.
// The compiler folds a node whose inputs are all constant by running its kernel once at compile
// time, so an op never writes separate folding code.
//
// Kernels see raw pointers only: shapes are static and baked into the kernel at prepare. `run`
// must not allocate, lock, make syscalls or look up strings; it returns an error only for checks
// that depend on tensor *values* (e.g. a Gather index out of range).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/graph.h"

namespace jiffy {

class Kernel {
public:
    virtual ~Kernel() = default;
    // in[i]: input i (nullptr when the optional input is omitted); out[i]: output i (nullptr when
    // omitted). Inputs and outputs never alias unless the kernel says so at prepare.
    virtual Status run(const void* const* in, void* const* out) const = 0;
    // The kernel chosen at prepare, for inspect/profile (e.g. "conv_masked 12x32 avx512");
    // empty when the op has a single kernel.
    virtual std::string describe() const { return {}; }
    // Kernels with a faster, less exact mode for their constant weights (MatMul, Gemm and convs
    // on AMX: the weights to 17 bits, docs/amx.md; GEMVs: 24-bit weights, docs/gemv.md) switch
    // to it (fast) or back (!fast) and say
    // which group they belong to; others return kNone. Compile time only: the compiler tries the
    // fast mode on a probe input, a group at a time where all at once moves the outputs too
    // much, and keeps what leaves them close to the exact ones (runtime/precision.cpp).
    enum class FastWeights { kNone, kProduct, kConv };
    virtual FastWeights set_fast_weights(bool fast) {
        (void)fast;
        return FastWeights::kNone;
    }
};

// What the compiler knows about a tensor at prepare time.
struct TensorInfo {
    bool present = false;
    DType dtype = DType::kUndefined;
    Shape shape;
    std::shared_ptr<const Tensor> constant;  // non-null when the value is known at compile time
    std::string name;
};

struct Plan;
struct CompileOptions;

class OpContext {
public:
    OpContext(const Graph& g, int node, std::vector<TensorInfo> inputs, const CompileOptions& opt);

    const Node& node() const { return node_; }
    const Graph& graph() const { return graph_; }
    int64_t opset() const { return graph_.opset; }
    const CompileOptions& options() const { return opt_; }
    std::string label() const;  // "node 'conv1' (Conv)"

    // ---- inputs (explicit ones; implicit subgraph captures are not counted) ----
    int num_inputs() const { return node_.num_explicit_inputs; }
    bool has_input(int i) const { return i >= 0 && i < num_inputs() && inputs_[size_t(i)].present; }
    const TensorInfo& input(int i) const { return inputs_[size_t(i)]; }
    DType in_dtype(int i) const { return inputs_[size_t(i)].dtype; }
    const Shape& in_shape(int i) const { return inputs_[size_t(i)].shape; }
    int in_rank(int i) const { return int(inputs_[size_t(i)].shape.size()); }
    const Tensor* in_const(int i) const {
        return has_input(i) ? inputs_[size_t(i)].constant.get() : nullptr;
    }
    // All inputs including implicit captures (for If/Loop/Scan).
    const std::vector<TensorInfo>& all_inputs() const { return inputs_; }

    // ---- outputs ----
    int num_outputs() const { return int(node_.outputs.size()); }
    bool has_output(int i) const { return i >= 0 && i < num_outputs() && node_.outputs[size_t(i)] >= 0; }
    // Declares output i. Fails (returns an error) if the element count overflows or the
    // output would exceed the memory limit.
    Status set_output(int i, DType t, Shape s);
    // Declares output i as known at compile time (Shape, Size, ConstantOfShape of a constant...).
    void set_output_const(int i, std::shared_ptr<const Tensor> t);
    void set_kernel(std::unique_ptr<Kernel> k) { kernel_ = std::move(k); }

    // ---- attributes ----
    const Attr* attr(const char* name) const;
    bool has_attr(const char* name) const { return attr(name) != nullptr; }
    int64_t attr_int(const char* name, int64_t def) const;
    float attr_float(const char* name, float def) const;
    std::string attr_str(const char* name, const std::string& def) const;
    std::vector<int64_t> attr_ints(const char* name, std::vector<int64_t> def = {}) const;
    std::vector<float> attr_floats(const char* name, std::vector<float> def = {}) const;

    // ---- errors ----
    template <typename... Args>
    Status fail(Args&&... args) const {
        return invalid(label(), ": ", std::forward<Args>(args)...);
    }
    template <typename... Args>
    Status fail_unsupported(Args&&... args) const {
        return unsupported(label(), ": ", std::forward<Args>(args)...);
    }
    // Input i must be known at compile time (a shape, axes, repeats...). Returns kNeedValue naming
    // the value so that a caller holding the input's data can recompile with it frozen.
    Status need_value(int i) const;
    // Checks input i exists and has one of the given dtypes.
    Status expect_dtype(int i, std::initializer_list<DType> allowed) const;

    // ---- subgraphs (If, Loop, Scan) ----
    // Compiles `body` for the given formal-input infos; captures are bound to this node's
    // implicit inputs, which the kernel receives after its explicit inputs.
    Status compile_subgraph(const Graph& body, const std::vector<TensorInfo>& formal_inputs,
                            std::shared_ptr<const Plan>* out) const;

    // Results, read by the compiler.
    std::vector<TensorInfo> outputs_;
    std::unique_ptr<Kernel> kernel_;

private:
    const Graph& graph_;
    const Node& node_;
    std::vector<TensorInfo> inputs_;
    const CompileOptions& opt_;
};

using PrepareFn = Status (*)(OpContext&);

// Registry of ops by (domain, name). Filled once at start-up by the register_* functions below.
PrepareFn find_op(const std::string& domain, const std::string& op);
std::vector<std::string> registered_ops();

class OpRegistry {
public:
    void add(const char* name, PrepareFn fn, const char* domain = "");
    PrepareFn find(const std::string& domain, const std::string& name) const;
    std::vector<std::string> names() const;

private:
    std::vector<std::pair<std::string, PrepareFn>> ops_;  // "domain:name"
};

// One function per op family file (src/ops/<family>.cpp).
void register_elementwise_ops(OpRegistry& r);
void register_conv_ops(OpRegistry& r);    // conv.cpp: Conv, ConvTranspose, pools, normalizations
void register_linalg_ops(OpRegistry& r);  // linalg.cpp: Gemm, MatMul, Einsum, Softmax family, Resize
void register_shape_ops(OpRegistry& r);
void register_reduce_ops(OpRegistry& r);
void register_rnn_ops(OpRegistry& r);
void register_control_ops(OpRegistry& r);
void register_misc_ops(OpRegistry& r);  // misc.cpp: losses, quantization, windows, optimizers

}  // namespace jiffy
