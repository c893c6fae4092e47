// One-node graphs for the op unit tests: a graph of one node over graph inputs and constants,
// compiled with the default options and run. Each op test file keeps a small wrapper with the
// argument order and result type its tests use; the graph building lives here once.
#pragma once
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"
#include "runtime/plan.h"
#include "runtime/scratch.h"

namespace jiffy::testnode {

struct NodeIn {
    Tensor t;
    bool constant = false;  // a compile-time constant (else a graph input)
    bool absent = false;    // an omitted optional input
};

struct NodeRun {
    Status st;
    std::vector<Tensor> outs;  // the wired outputs, in order
    std::string kernel;        // the plan steps' describe(), concatenated
    std::shared_ptr<const Plan> plan;
};

// A float32 tensor of shape s holding v (v.size() == the shape's element count).
inline Tensor f32(Shape s, const std::vector<float>& v) {
    Tensor t(DType::kF32, std::move(s));
    std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
    return t;
}

// Tensors with a constant mask (a mask shorter than `ins`: the rest are graph inputs); a tensor of
// undefined dtype marks an omitted input.
inline std::vector<NodeIn> node_inputs(const std::vector<Tensor>& ins, const std::vector<bool>& constant) {
    std::vector<NodeIn> v;
    for (size_t i = 0; i < ins.size(); ++i)
        v.push_back(NodeIn{ins[i], i < constant.size() && constant[i], ins[i].dtype() == DType::kUndefined});
    return v;
}

// Inputs are named x0, x1, ... and outputs y0, y1, ...; out_present[i] false omits output i.
// The session runs `runs` times on the same inputs (a second run checks that a kernel carries
// nothing over in its scratch), the plan's shared scratch filled with NaN before each run (a
// kernel that relied on scratch kept from prepare or from an earlier run fails: as the model
// tests, tests/models/refs.h); the last run's outputs are returned. `opt`: the compile options
// (threads, parallel_min_flops for the thread-split tests).
inline NodeRun run_one_node(const std::string& op, const std::vector<NodeIn>& ins, const std::map<std::string, Attr>& attrs,
                            int64_t opset,
                            const std::vector<bool>& out_present = {true}, int runs = 1,
                            const CompileOptions& opt = CompileOptions{}, const std::string& domain = "") {
    Graph g;
    g.opset = opset;
    Node n;
    n.op = op;
    n.domain = domain;
    n.name = "n";
    for (size_t i = 0; i < ins.size(); ++i) {
        if (ins[i].absent) {
            n.inputs.push_back(-1);
            continue;
        }
        const int id = g.add_value("x" + std::to_string(i));
        Value& v = g.values[size_t(id)];
        v.dtype = ins[i].t.dtype();
        if (ins[i].constant) {
            v.constant = std::make_shared<Tensor>(ins[i].t);
        } else {
            v.has_shape = true;
            for (int64_t d : ins[i].t.shape()) v.dims.push_back(Dim{d, ""});
            g.inputs.push_back(id);
        }
        n.inputs.push_back(id);
    }
    n.num_explicit_inputs = int(n.inputs.size());
    for (size_t i = 0; i < out_present.size(); ++i) {
        if (!out_present[i]) {
            n.outputs.push_back(-1);
            continue;
        }
        const int id = g.add_value("y" + std::to_string(i));
        g.values[size_t(id)].producer = 0;
        n.outputs.push_back(id);
        g.outputs.push_back(id);
    }
    n.attrs = attrs;
    g.nodes.push_back(std::move(n));

    NodeRun r;
    r.st = compile_graph(g, opt, &r.plan);
    if (!r.st.ok()) return r;
    for (const auto& step : r.plan->steps)
        if (step.kernel) r.kernel += step.kernel->describe();
    Session s(r.plan);
    for (int rep = 0; rep < runs; ++rep) {
        size_t k = 0;
        for (const NodeIn& in : ins) {
            if (in.absent || in.constant) continue;
            if (in.t.nbytes()) std::memcpy(s.input_data(k), in.t.data(), in.t.nbytes());
            ++k;
        }
        if (r.plan->scratch && r.plan->scratch->floats())
            std::fill_n(r.plan->scratch->data(), r.plan->scratch->floats(), std::numeric_limits<float>::quiet_NaN());
        r.st = s.run();
        if (!r.st.ok()) return r;
    }
    for (size_t i = 0; i < r.plan->outputs.size(); ++i) {
        const IoDesc& d = r.plan->outputs[i];
        Tensor t(d.dtype, d.shape);
        if (d.nbytes) std::memcpy(t.data(), s.output_data(i), d.nbytes);
        r.outs.push_back(std::move(t));
    }
    return r;
}

}  // namespace jiffy::testnode
