// Attribute constructors shared by the op unit tests (which build one-node graphs in memory).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace jiffy::testattr {

inline Attr ai(int64_t v) {
    Attr a;
    a.kind = Attr::kInt;
    a.i = v;
    return a;
}
inline Attr af(float v) {
    Attr a;
    a.kind = Attr::kFloat;
    a.f = v;
    return a;
}
inline Attr as(const std::string& v) {
    Attr a;
    a.kind = Attr::kString;
    a.s = v;
    return a;
}
inline Attr aints(std::vector<int64_t> v) {
    Attr a;
    a.kind = Attr::kInts;
    a.ints = std::move(v);
    return a;
}
inline Attr afloats(std::vector<float> v) {
    Attr a;
    a.kind = Attr::kFloats;
    a.floats = std::move(v);
    return a;
}

using Attrs = std::map<std::string, Attr>;

}  // namespace jiffy::testattr
