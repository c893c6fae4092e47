#include "agent/expr.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace jiffy::agent {

double Expr::eval(int i) const {
    const Node& n = nodes_[size_t(i)];
    switch (n.op) {
        case kNum: return n.k;
        case kVar: return double(*n.p);
        case kNeg: return -eval(n.a);
        case kNot: return eval(n.a) != 0.0 ? 0.0 : 1.0;
        case kAdd: return eval(n.a) + eval(n.b);
        case kSub: return eval(n.a) - eval(n.b);
        case kMul: return eval(n.a) * eval(n.b);
        case kDiv: return eval(n.a) / eval(n.b);
        case kLt: return eval(n.a) < eval(n.b);
        case kLe: return eval(n.a) <= eval(n.b);
        case kGt: return eval(n.a) > eval(n.b);
        case kGe: return eval(n.a) >= eval(n.b);
        case kEq: return eval(n.a) == eval(n.b);
        case kNe: return eval(n.a) != eval(n.b);
        case kAnd: return (eval(n.a) != 0.0 && eval(n.b) != 0.0) ? 1.0 : 0.0;
        case kOr: return (eval(n.a) != 0.0 || eval(n.b) != 0.0) ? 1.0 : 0.0;
        case kAbs: return std::fabs(eval(n.a));
        case kMin: return std::fmin(eval(n.a), eval(n.b));
        case kMax: return std::fmax(eval(n.a), eval(n.b));
    }
    return 0.0;
}

class ExprParser {
public:
    ExprParser(const std::string& s, const Resolver& r, Expr* e) : s_(s), resolve_(r), e_(e) {}

    Status parse() {
        int root;
        JIFFY_RETURN_IF_ERROR(parse_or(&root));
        skip();
        if (pos_ < s_.size()) return err("unexpected '" + s_.substr(pos_, 1) + "' after a complete expression");
        return {};
    }

private:
    Status err(const std::string& m) const {
        return invalid("expression '", s_, "': at column ", pos_ + 1, ": ", m);
    }
    void skip() {
        while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    // Matches a symbol or a keyword (keywords must not run into a name).
    bool eat(const char* tok) {
        skip();
        size_t n = std::char_traits<char>::length(tok);
        if (s_.compare(pos_, n, tok) != 0) return false;
        if (std::isalpha(static_cast<unsigned char>(tok[0]))) {
            char c = pos_ + n < s_.size() ? s_[pos_ + n] : ' ';
            if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') return false;
        }
        pos_ += n;
        return true;
    }
    int add(Expr::Op op, int a = -1, int b = -1, double k = 0, const float* p = nullptr) {
        e_->nodes_.push_back({op, a, b, k, p});
        return int(e_->nodes_.size()) - 1;
    }
    Status parse_or(int* out) {
        JIFFY_RETURN_IF_ERROR(parse_and(out));
        while (eat("||") || eat("or")) {
            int r;
            JIFFY_RETURN_IF_ERROR(parse_and(&r));
            *out = add(Expr::kOr, *out, r);
        }
        return {};
    }
    Status parse_and(int* out) {
        JIFFY_RETURN_IF_ERROR(parse_not(out));
        while (eat("&&") || eat("and")) {
            int r;
            JIFFY_RETURN_IF_ERROR(parse_not(&r));
            *out = add(Expr::kAnd, *out, r);
        }
        return {};
    }
    Status parse_not(int* out) {
        skip();
        if (s_.compare(pos_, 2, "!=") != 0 && (eat("!") || eat("not"))) {
            int a;
            JIFFY_RETURN_IF_ERROR(parse_not(&a));
            *out = add(Expr::kNot, a);
            return {};
        }
        return parse_cmp(out);
    }
    Status parse_cmp(int* out) {
        JIFFY_RETURN_IF_ERROR(parse_sum(out));
        static const struct { const char* t; Expr::Op op; } ops[] = {
            {"<=", Expr::kLe}, {">=", Expr::kGe}, {"==", Expr::kEq}, {"!=", Expr::kNe}, {"<", Expr::kLt}, {">", Expr::kGt}};
        for (const auto& o : ops)
            if (eat(o.t)) {
                int r;
                JIFFY_RETURN_IF_ERROR(parse_sum(&r));
                *out = add(o.op, *out, r);
                skip();
                for (const auto& o2 : ops)
                    if (s_.compare(pos_, std::char_traits<char>::length(o2.t), o2.t) == 0)
                        return err("comparisons do not chain; use 'and' (a < b and b < c)");
                return {};
            }
        return {};
    }
    Status parse_sum(int* out) {
        JIFFY_RETURN_IF_ERROR(parse_prod(out));
        for (;;) {
            Expr::Op op;
            if (eat("+")) op = Expr::kAdd;
            else if (eat("-")) op = Expr::kSub;
            else return {};
            int r;
            JIFFY_RETURN_IF_ERROR(parse_prod(&r));
            *out = add(op, *out, r);
        }
    }
    Status parse_prod(int* out) {
        JIFFY_RETURN_IF_ERROR(parse_unary(out));
        for (;;) {
            Expr::Op op;
            if (eat("*")) op = Expr::kMul;
            else if (eat("/")) op = Expr::kDiv;
            else return {};
            int r;
            JIFFY_RETURN_IF_ERROR(parse_unary(&r));
            *out = add(op, *out, r);
        }
    }
    Status parse_unary(int* out) {
        if (eat("-")) {
            int a;
            JIFFY_RETURN_IF_ERROR(parse_unary(&a));
            *out = add(Expr::kNeg, a);
            return {};
        }
        return parse_atom(out);
    }
    Status parse_atom(int* out) {
        skip();
        if (pos_ >= s_.size()) return err("expected a value, got the end of the expression");
        char c = s_[pos_];
        if (c == '(') {
            ++pos_;
            JIFFY_RETURN_IF_ERROR(parse_or(out));
            if (!eat(")")) return err("expected ')'");
            return {};
        }
        if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
            const char* b = s_.c_str() + pos_;
            char* end = nullptr;
            double v = std::strtod(b, &end);
            if (end == b) return err("bad number");
            pos_ += size_t(end - b);
            *out = add(Expr::kNum, -1, -1, v);
            return {};
        }
        if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            size_t start = pos_;
            while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' ||
                                        s_[pos_] == '.'))
                ++pos_;
            std::string name = s_.substr(start, pos_ - start);
            if (name.back() == '.') {
                pos_ = start;
                return err("name '" + name + "' ends with '.'");
            }
            if (name == "and" || name == "or" || name == "not" || name == "for") {
                pos_ = start;
                return err("expected a value, got the keyword '" + name + "'");
            }
            skip();
            if (pos_ < s_.size() && s_[pos_] == '(') {
                Expr::Op op;
                int arity;
                if (name == "abs") op = Expr::kAbs, arity = 1;
                else if (name == "min") op = Expr::kMin, arity = 2;
                else if (name == "max") op = Expr::kMax, arity = 2;
                else {
                    pos_ = start;
                    return err("unknown function '" + name + "' (known: abs, min, max)");
                }
                ++pos_;
                int a = -1, b = -1;
                JIFFY_RETURN_IF_ERROR(parse_or(&a));
                if (arity == 2) {
                    if (!eat(",")) return err("'" + name + "' takes two arguments");
                    JIFFY_RETURN_IF_ERROR(parse_or(&b));
                }
                if (!eat(")")) return err("expected ')' closing '" + name + "('");
                *out = add(op, a, b);
                return {};
            }
            int index = -1;
            if (pos_ < s_.size() && s_[pos_] == '[') {
                ++pos_;
                skip();
                size_t d = pos_;
                while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
                if (d == pos_ || pos_ - d > 9) return err("expected an index (a non-negative integer) after '['");
                index = std::atoi(s_.substr(d, pos_ - d).c_str());
                if (!eat("]")) return err("expected ']'");
            }
            const float* p = nullptr;
            Status st = resolve_(name, index, &p);
            if (!st.ok()) {
                size_t save = pos_;
                pos_ = start;
                Status e = err(st.message());
                pos_ = save;
                return e;
            }
            std::string full = index >= 0 ? name + "[" + std::to_string(index) + "]" : name;
            bool seen = false;
            for (const auto& n : e_->names_) seen |= n == full;
            if (!seen) {
                e_->names_.push_back(full);
                e_->name_ptrs_.push_back(p);
            }
            *out = add(Expr::kVar, -1, -1, 0, p);
            return {};
        }
        return err(std::string("expected a value, got '") + c + "'");
    }

    const std::string& s_;
    const Resolver& resolve_;
    Expr* e_;
    size_t pos_ = 0;
};

Status Expr::compile(const std::string& text, const Resolver& resolve, Expr* out) {
    *out = Expr{};
    out->text_ = text;
    ExprParser p(out->text_, resolve, out);
    Status st = p.parse();
    if (!st.ok()) *out = Expr{};
    return st;
}

}  // namespace jiffy::agent
