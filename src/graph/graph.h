// Graph IR: values (dtype, shape, optional constant data, producer) and nodes (op, attributes,
// inputs, outputs). Portable: no kernels, no pointers into buffers. Subgraphs (If/Loop/Scan
// bodies) are Graphs held by attributes; values they read from enclosing scopes are listed in
// Graph::captures and, on the owning node, appended after its explicit inputs.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace jiffy {

struct Graph;

// One dimension of a declared shape: a number, or a symbolic name (dim_param), or unknown.
struct Dim {
    int64_t value = -1;  // >= 0 when known
    std::string param;   // symbolic name, if any
};

struct Value {
    std::string name;
    DType dtype = DType::kUndefined;
    bool has_shape = false;     // declared/inferred rank known
    std::vector<Dim> dims;      // declared dims (inputs/outputs from the model file)
    std::shared_ptr<const Tensor> constant;  // initializer or Constant node output
    int producer = -1;          // node index, -1 for inputs/constants
};

struct Attr {
    enum Kind { kNone, kFloat, kInt, kString, kTensor, kGraph, kFloats, kInts, kStrings, kGraphs };
    Kind kind = kNone;
    float f = 0;
    int64_t i = 0;
    std::string s;
    std::shared_ptr<const Tensor> t;
    std::shared_ptr<const Graph> g;
    std::vector<float> floats;
    std::vector<int64_t> ints;
    std::vector<std::string> strings;
    std::vector<std::shared_ptr<const Graph>> graphs;
};

struct Node {
    std::string name;
    std::string op;
    std::string domain;  // "" for ai.onnx
    std::vector<int> inputs;   // value ids; -1 for an omitted optional input
    int num_explicit_inputs = 0;  // inputs after this are implicit captures of subgraphs
    std::vector<int> outputs;  // value ids; -1 for an omitted optional output
    std::map<std::string, Attr> attrs;
};

struct Graph {
    std::string name;
    std::vector<Value> values;
    std::vector<Node> nodes;
    std::vector<int> inputs;    // graph inputs (not initializers)
    std::vector<int> outputs;
    std::vector<int> captures;  // values of enclosing scopes read here (by name)
    int64_t opset = 0;          // ai.onnx opset
    std::map<std::string, int> by_name;

    int find(const std::string& n) const {
        auto it = by_name.find(n);
        return it == by_name.end() ? -1 : it->second;
    }
    int add_value(const std::string& n) {
        int id = int(values.size());
        values.push_back(Value{});
        values.back().name = n;
        if (!n.empty()) by_name[n] = id;
        return id;
    }
    // Sets every Value::producer from the node list (after nodes were added, removed or reordered).
    void index_producers() {
        for (auto& v : values) v.producer = -1;
        for (size_t i = 0; i < nodes.size(); ++i)
            for (int o : nodes[i].outputs)
                if (o >= 0) values[size_t(o)].producer = int(i);
    }
    // "node 'conv1' (Conv)" for error messages.
    std::string node_label(int node) const;
};

}  // namespace jiffy
