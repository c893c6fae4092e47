#include "graph/graph.h"

namespace jiffy {

std::string Graph::node_label(int node) const {
    const Node& n = nodes[size_t(node)];
    std::string label = n.name.empty() ? ("#" + std::to_string(node)) : n.name;
    return "node '" + label + "' (" + n.op + ")";
}

}  // namespace jiffy
