// A small expression language over named values, compiled once and evaluated without allocation:
//
//   expr   := or
//   or     := and ('or' and | '||' and)*
//   and    := not ('and' not | '&&' not)*
//   not    := ('not' | '!') not | cmp
//   cmp    := sum (('<' | '<=' | '>' | '>=' | '==' | '!=') sum)?
//   sum    := prod (('+' | '-') prod)*
//   prod   := unary (('*' | '/') unary)*
//   unary  := '-' unary | atom
//   atom   := NUMBER | NAME ('[' INT ']')? | FUNC '(' expr (',' expr)* ')' | '(' expr ')'
//   NAME   := [A-Za-z_][A-Za-z0-9_.]*     e.g. wake.hey_jarvis, vad.prob, sensor.temp
//   FUNC   := abs | min | max
//
// Truth is != 0; comparisons and logic give 0 or 1. A name is resolved once, at compile, to a
// pointer to a float that some stage owns (so evaluation reads it in place). Errors name the
// position: "expression 'a >> 1': at column 4: expected a value".
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace jiffy::agent {

// Maps "name" or "name[i]" (index -1 when absent) to the float it denotes.
using Resolver = std::function<Status(const std::string& name, int index, const float** out)>;

class Expr {
public:
    static Status compile(const std::string& text, const Resolver& resolve, Expr* out);
    double eval() const { return nodes_.empty() ? 0.0 : eval(int(nodes_.size()) - 1); }
    const std::string& text() const { return text_; }
    // Names referenced, in order of first use ("vad.prob", "x[2]").
    const std::vector<std::string>& names() const { return names_; }
    const std::vector<const float*>& name_ptrs() const { return name_ptrs_; }

    enum Op : uint8_t { kNum, kVar, kNeg, kNot, kAdd, kSub, kMul, kDiv, kLt, kLe, kGt, kGe, kEq, kNe, kAnd, kOr,
                        kAbs, kMin, kMax };
    struct Node {
        Op op;
        int a = -1, b = -1;
        double k = 0;
        const float* p = nullptr;
    };

private:
    double eval(int i) const;
    friend class ExprParser;
    std::string text_;
    std::vector<Node> nodes_;  // postorder: children before parents; the root is last
    std::vector<std::string> names_;
    std::vector<const float*> name_ptrs_;
};

}  // namespace jiffy::agent
