#include "serve/json_fast.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <utility>

namespace jiffy::serve {

namespace {

constexpr int kMaxDepth = 64;       // nesting anywhere in the request
constexpr int kMaxDataDepth = 17;   // rank <= 16 plus the outer array

struct Fail {
    std::string msg;
};
[[noreturn]] void fail(std::string msg) { throw Fail{std::move(msg)}; }

std::string shape_json(const Shape& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
}

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return unsigned(c - '0') < 10; }

// Eight ASCII digits at p (little-endian load) -> their value; false if any byte is not a digit.
// Pairs are combined with one multiply-add, then the four pairs with two 32x32 products.
inline bool eight_digits(const char* p, uint64_t* v) {
    uint64_t x;
    std::memcpy(&x, p, 8);
    // every byte in '0'..'9': adding 0x46 keeps it below 0x80, subtracting 0x30 does not borrow
    if ((((x + 0x4646464646464646ull) | (x - 0x3030303030303030ull)) & 0x8080808080808080ull) != 0) return false;
    x -= 0x3030303030303030ull;
    x = x * 10 + (x >> 8);  // byte 2k: 10*d[2k] + d[2k+1]
    const uint64_t lo = 0x000000FF000000FFull;
    x = ((x & lo) * (100 + (1000000ull << 32)) + ((x >> 16) & lo) * (1 + (10000ull << 32))) >> 32;
    *v = uint32_t(x);
    return true;
}

// A number token's decimal parts: value = (neg ? -1 : 1) * m * 10^e10, where m holds the first
// 19 significant digits (exact: no nonzero digit was dropped after them).
struct Num {
    const char* s;
    uint64_t m;
    int e10;
    bool neg, is_int, exact;
};

class Parser {
public:
    explicit Parser(std::string_view s) : p_(s.data()), b_(s.data()), e_(s.data() + s.size()) {}

    [[noreturn]] void syntax(const char* what) {
        fail(std::string("malformed JSON in request: ") + what + " at byte " + std::to_string(p_ - b_));
    }
    void ws() {
        while (p_ < e_ && is_ws(*p_)) ++p_;
    }
    char peek() {
        ws();
        return p_ < e_ ? *p_ : '\0';
    }
    bool at_end() {
        ws();
        return p_ == e_;
    }
    void expect(char c) {
        if (peek() != c) {
            char m[32];
            std::snprintf(m, sizeof m, "expected '%c'", c);
            syntax(m);
        }
        ++p_;
    }
    const char* pos() const { return p_; }

    // A string literal (the opening quote is next).
    std::string string() {
        if (peek() != '"') syntax("expected a string");
        ++p_;
        std::string r;
        for (;;) {
            const char* q = p_;
            while (q < e_ && *q != '"' && *q != '\\' && static_cast<unsigned char>(*q) >= 0x20) ++q;
            r.append(p_, size_t(q - p_));
            p_ = q;
            if (p_ >= e_) syntax("unterminated string");
            char c = *p_++;
            if (c == '"') return r;
            if (c != '\\') syntax("control character in string");
            if (p_ >= e_) syntax("unterminated string");
            c = *p_++;
            switch (c) {
                case '"': r += '"'; break;
                case '\\': r += '\\'; break;
                case '/': r += '/'; break;
                case 'b': r += '\b'; break;
                case 'f': r += '\f'; break;
                case 'n': r += '\n'; break;
                case 'r': r += '\r'; break;
                case 't': r += '\t'; break;
                case 'u': {
                    uint32_t cp = hex4();
                    if (cp >= 0xD800 && cp <= 0xDBFF) {
                        if (e_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u') syntax("lone surrogate in \\u escape");
                        p_ += 2;
                        uint32_t lo = hex4();
                        if (lo < 0xDC00 || lo > 0xDFFF) syntax("invalid surrogate pair in \\u escape");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                        syntax("lone surrogate in \\u escape");
                    }
                    utf8(r, cp);
                    break;
                }
                default: syntax("invalid escape in string");
            }
        }
    }

    // A number token, validated against JSON's grammar in one pass that also collects its
    // decimal parts (first 19 significant digits, 8 at a time where it can); see Num.
    void number(Num* n) {
        ws();
        const char* q = p_;
        n->s = q;
        n->neg = q < e_ && *q == '-';
        if (n->neg) ++q;
        if (q >= e_ || !is_digit(*q)) syntax("invalid value");
        uint64_t m = 0, v8;
        int nd = 0, e10 = 0;
        bool exact = true;
        if (*q == '0') {
            ++q;
        } else {
            while (nd <= 11 && e_ - q >= 8 && eight_digits(q, &v8)) m = m * 100000000 + v8, nd += 8, q += 8;
            for (; q < e_ && is_digit(*q); ++q) {
                if (nd < 19) m = m * 10 + uint64_t(*q - '0'), ++nd;
                else exact &= *q == '0', ++e10;
            }
        }
        n->is_int = true;
        if (q < e_ && *q == '.') {
            ++q;
            if (q >= e_ || !is_digit(*q)) syntax("invalid number");
            n->is_int = false;
            if (nd == 0)
                for (; q < e_ && *q == '0'; ++q) --e10;  // leading zeros are not significant
            while (nd <= 11 && e_ - q >= 8 && eight_digits(q, &v8)) m = m * 100000000 + v8, nd += 8, q += 8, e10 -= 8;
            for (; q < e_ && is_digit(*q); ++q) {
                if (nd < 19) m = m * 10 + uint64_t(*q - '0'), ++nd, --e10;
                else exact &= *q == '0';
            }
        }
        if (q < e_ && (*q == 'e' || *q == 'E')) {
            ++q;
            n->is_int = false;
            bool en = q < e_ && *q == '-';
            if (q < e_ && (*q == '+' || *q == '-')) ++q;
            if (q >= e_ || !is_digit(*q)) syntax("invalid number");
            int x = 0;
            for (; q < e_ && is_digit(*q); ++q)
                if (x < 100000) x = x * 10 + (*q - '0');
            e10 += en ? -x : x;
        }
        n->m = m;
        n->e10 = e10;
        n->exact = exact;
        p_ = q;
    }
    // The span of a number token, validated against JSON's grammar; *is_int: no fraction/exponent.
    std::string_view number(bool* is_int) {
        Num n;
        number(&n);
        *is_int = n.is_int;
        return {n.s, size_t(p_ - n.s)};
    }

    bool literal(const char* w) {
        ws();  // after "key:" a value may follow whitespace ("binary_data": true, as Python writes it)
        size_t n = std::strlen(w);
        if (size_t(e_ - p_) >= n && std::memcmp(p_, w, n) == 0) {
            p_ += n;
            return true;
        }
        return false;
    }

    // Skips any value, checking its syntax and nesting depth.
    void skip(int depth) {
        if (depth > kMaxDepth) syntax("nested too deeply");
        char c = peek();
        if (c == '"') {
            string();
        } else if (c == '{') {
            ++p_;
            if (peek() == '}') {
                ++p_;
                return;
            }
            for (;;) {
                string();
                expect(':');
                skip(depth + 1);
                char d = peek();
                ++p_;
                if (d == '}') return;
                if (d != ',') syntax("expected ',' or '}'");
            }
        } else if (c == '[') {
            ++p_;
            if (peek() == ']') {
                ++p_;
                return;
            }
            for (;;) {
                skip(depth + 1);
                char d = peek();
                ++p_;
                if (d == ']') return;
                if (d != ',') syntax("expected ',' or ']'");
            }
        } else if (c == 't') {
            if (!literal("true")) syntax("invalid literal");
        } else if (c == 'f') {
            if (!literal("false")) syntax("invalid literal");
        } else if (c == 'n') {
            if (!literal("null")) syntax("invalid literal");
        } else {
            bool i;
            number(&i);
        }
    }

    // Skips a `data` value that a second pass will parse and validate: a flat or nested array of
    // numbers is passed over by finding its brackets with memchr (no per-number work); anything
    // else (strings, objects, unbalanced brackets) takes the validating skip().
    void skip_data(int depth) {
        const char* start = p_;
        if (peek() == '[') {
            const char* q = p_ + 1;
            int level = 1;
            while (level > 0 && level <= kMaxDataDepth) {
                const void* c = std::memchr(q, ']', size_t(e_ - q));
                if (!c) break;
                const char* close = static_cast<const char*>(c);
                size_t len = size_t(close - q);
                if (std::memchr(q, '"', len) || std::memchr(q, '{', len)) break;
                const void* o = std::memchr(q, '[', len);
                if (o) {
                    ++level;
                    q = static_cast<const char*>(o) + 1;
                } else {
                    --level;
                    q = close + 1;
                }
            }
            if (level == 0) {
                p_ = q;
                return;
            }
        }
        p_ = start;
        skip(depth);
    }

    // Iterates an object: calls fn(key) with the parser positioned at the value.
    template <typename F>
    void object(F&& fn) {
        expect('{');
        if (peek() == '}') {
            ++p_;
            return;
        }
        for (;;) {
            std::string k = string();
            expect(':');
            fn(k);
            char d = peek();
            ++p_;
            if (d == '}') return;
            if (d != ',') syntax("expected ',' or '}'");
        }
    }
    template <typename F>
    void array(F&& fn) {
        expect('[');
        if (peek() == ']') {
            ++p_;
            return;
        }
        for (;;) {
            fn();
            char d = peek();
            ++p_;
            if (d == ']') return;
            if (d != ',') syntax("expected ',' or ']'");
        }
    }

    void set(const char* p) { p_ = p; }

private:
    uint32_t hex4() {
        if (e_ - p_ < 4) syntax("short \\u escape");
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) {
            char c = *p_++;
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) syntax("invalid \\u escape");
            v = v * 16 + uint32_t(d);
        }
        return v;
    }
    static void utf8(std::string& r, uint32_t cp) {
        if (cp < 0x80) {
            r += char(cp);
        } else if (cp < 0x800) {
            r += char(0xC0 | (cp >> 6));
            r += char(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            r += char(0xE0 | (cp >> 12));
            r += char(0x80 | ((cp >> 6) & 0x3F));
            r += char(0x80 | (cp & 0x3F));
        } else {
            r += char(0xF0 | (cp >> 18));
            r += char(0x80 | ((cp >> 12) & 0x3F));
            r += char(0x80 | ((cp >> 6) & 0x3F));
            r += char(0x80 | (cp & 0x3F));
        }
    }

    const char* p_;
    const char* b_;
    const char* e_;
};

// ------------------------------------------------------------------ `data` straight into the buffer

constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                             1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

// Float parsing, correctly rounded, without the general algorithm for the common case: the
// decimal is computed in double (error < 4 double ulps) and rounded to float; when that double
// lies near a float rounding boundary (or out of the easy range) std::from_chars decides.
// ~3x faster than libstdc++'s from_chars here (23 -> ~7 ns per number).
inline bool parse_f32(const Num& n, std::string_view tok, float* out) {
    uint64_t m = n.m;
    int e = n.e10;
    bool neg = n.neg;
    if (m == 0) {
        *out = neg ? -0.0f : 0.0f;
        return true;
    }
    if (e >= -22 && e <= 22 && m != 0) {
        double d = double(m);
        d = e < 0 ? d / kPow10[-e] : d * kPow10[e];
        if (d >= 1.2e-38 && d <= 3.4e38) {
            uint64_t bits;
            std::memcpy(&bits, &d, 8);
            uint64_t low = bits & ((uint64_t(1) << 29) - 1);  // the bits a float drops
            uint64_t half = uint64_t(1) << 28;
            if ((low > half ? low - half : half - low) > 16) {
                float f = float(d);
                *out = neg ? -f : f;
                return true;
            }
        }
    }
    auto r = std::from_chars(tok.data(), tok.data() + tok.size(), *out);
    return r.ec == std::errc() && r.ptr == tok.data() + tok.size();
}

inline bool parse_f64(const Num& n, std::string_view tok, double* out) {
    uint64_t m = n.m;
    int e = n.e10;
    bool neg = n.neg;
    if (n.exact && m <= (uint64_t(1) << 53) && e >= -22 && e <= 22) {  // Clinger: one exact rounding
        double d = double(m);
        d = e < 0 ? d / kPow10[-e] : d * kPow10[e];
        *out = neg ? -d : d;
        return true;
    }
    auto r = std::from_chars(tok.data(), tok.data() + tok.size(), *out);
    return r.ec == std::errc() && r.ptr == tok.data() + tok.size();
}

struct DataWriter {
    Parser& ps;
    const std::string& tensor;
    DType t;
    uint8_t* out;
    int64_t cap;    // elements the shape holds
    int64_t n = 0;  // elements seen (may exceed cap: counted, not stored)

    [[noreturn]] void bad(std::string_view tok, const char* want) {
        std::string v(tok);
        if (v.size() > 40) v = v.substr(0, 40) + "...";
        fail("input '" + tensor + "': data element " + std::to_string(n) + " is " + v + ", expected " + want +
             " for datatype " + kserve_dtype(t));
    }

    template <typename T>
    void put_int(std::string_view tok, bool is_int) {
        if (!is_int) bad(tok, "an integer");
        T v{};
        auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
        if (r.ec != std::errc() || r.ptr != tok.data() + tok.size()) bad(tok, "an integer in range");
        if (n < cap) std::memcpy(out + size_t(n) * sizeof(T), &v, sizeof(T));
    }

    void leaf() {
        char c = ps.peek();
        const char* s = ps.pos();
        if (c == 't' || c == 'f' || c == 'n' || c == '"' || c == '{') {
            // Not a number: booleans for BOOL, everything else an error naming the element.
            bool b = false, is_bool = false;
            if (c == 't' && ps.literal("true")) b = true, is_bool = true;
            else if (c == 'f' && ps.literal("false")) is_bool = true;
            else {
                ps.skip(0);
            }
            std::string_view tok(s, size_t(ps.pos() - s));
            if (t == DType::kBool) {
                if (!is_bool) bad(tok, "true or false");
                if (n < cap) out[n] = b ? 1 : 0;
            } else {
                bad(tok, t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16 ? "a number" : "an integer");
            }
            ++n;
            return;
        }
        Num num;
        ps.number(&num);
        bool is_int = num.is_int;
        std::string_view tok(num.s, size_t(ps.pos() - num.s));
        switch (t) {
            case DType::kBool: bad(tok, "true or false");
            case DType::kU8: put_int<uint8_t>(tok, is_int); break;
            case DType::kU16: put_int<uint16_t>(tok, is_int); break;
            case DType::kU32: put_int<uint32_t>(tok, is_int); break;
            case DType::kU64: put_int<uint64_t>(tok, is_int); break;
            case DType::kI8: put_int<int8_t>(tok, is_int); break;
            case DType::kI16: put_int<int16_t>(tok, is_int); break;
            case DType::kI32: put_int<int32_t>(tok, is_int); break;
            case DType::kI64: put_int<int64_t>(tok, is_int); break;
            case DType::kF32: {
                float f;
                if (!parse_f32(num, tok, &f)) bad(tok, "a number in FP32 range");
                if (n < cap) std::memcpy(out + size_t(n) * 4, &f, 4);
                break;
            }
            case DType::kF64: {
                double d;
                if (!parse_f64(num, tok, &d)) bad(tok, "a number in FP64 range");
                if (n < cap) std::memcpy(out + size_t(n) * 8, &d, 8);
                break;
            }
            case DType::kF16:
            case DType::kBF16: {
                float f;
                if (!parse_f32(num, tok, &f)) bad(tok, "a number in range");
                uint16_t h = t == DType::kF16 ? f32_to_f16(f) : f32_to_bf16(f);
                if (n < cap) std::memcpy(out + size_t(n) * 2, &h, 2);
                break;
            }
            default: fail("input '" + tensor + "': unsupported datatype");
        }
        ++n;
    }

    void value(int depth) {
        if (ps.peek() != '[') return leaf();
        if (depth >= kMaxDataDepth) fail("input '" + tensor + "': 'data' is nested too deeply");
        ps.array([&] { value(depth + 1); });
    }
};

struct RawInput {
    std::string name;
    bool has_dt = false, has_shape = false, has_params = false;
    std::string dt;
    Shape shape;
    std::string shape_text;
    bool shape_bad = false;
    int64_t bsize = -1;
    bool bsize_bad = false;
    ShmParams shm;
    std::string shm_bad;         // a malformed shared_memory_* parameter
    bool has_shm_size = false;
    const char* data = nullptr;  // position of the `data` value
    std::string unknown;         // the first unknown field, if any
    bool direct = false;         // `data` came after name, datatype and shape: parsed in the first pass
    int64_t direct_n = 0;        // elements seen then
    std::vector<uint8_t> storage;
};

// A shared_memory_* key of a tensor's parameters: parsed into *shm (true), else false (not one).
bool parse_shm_param(Parser& ps, const std::string& pk, ShmParams* shm, bool* has_size, std::string* bad) {
    if (pk == "shared_memory_region") {
        if (ps.peek() != '"') {
            ps.skip(4);
            if (bad->empty()) *bad = "shared_memory_region must be a string";
        } else {
            shm->region = ps.string();
            if (shm->region.empty() && bad->empty()) *bad = "shared_memory_region must not be empty";
        }
        return true;
    }
    if (pk != "shared_memory_offset" && pk != "shared_memory_byte_size") return false;
    bool is_int = false;
    uint64_t v = 0;
    bool ok = false;
    if (ps.peek() >= '0' && ps.peek() <= '9') {
        std::string_view tok = ps.number(&is_int);
        auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
        ok = is_int && r.ec == std::errc();
    } else {
        ps.skip(4);
    }
    if (!ok) {
        if (bad->empty()) *bad = pk + " must be a non-negative integer";
        return true;
    }
    if (pk == "shared_memory_offset") shm->offset = v;
    else {
        shm->byte_size = v;
        *has_size = true;
    }
    return true;
}

void parse(std::string_view head, std::string_view bin, const InferSchema& sc, InferRequest* out) {
    Parser ps(head);
    if (ps.peek() != '{') {
        ps.skip(0);  // a syntax error, if any, reads better than "not an object"
        fail("request must be a JSON object");
    }
    const std::string& model = *sc.model;
    const auto& metas = *sc.inputs;
    out->inputs.assign(metas.size(), InferInput{});
    bool have_inputs = false;
    const char* outputs_at = nullptr;
    std::vector<RawInput> raws;
    ps.object([&](const std::string& k) {
        if (k == "id") {
            if (ps.peek() != '"') fail("'id' must be a string");
            out->id = ps.string();
            out->has_id = true;
        } else if (k == "parameters") {
            if (ps.peek() != '{') fail("'parameters' must be an object");
            ps.object([&](const std::string& pk) {
                if (pk == "binary_data_output") {
                    if (ps.literal("true")) out->binary_output = true;
                    else if (ps.literal("false")) out->binary_output = false;
                    else fail("parameter 'binary_data_output' must be a boolean");
                } else if (pk == "timeout") {
                    bool is_int;
                    if (ps.peek() == '-' || (ps.peek() >= '0' && ps.peek() <= '9')) {
                        std::string_view tok = ps.number(&is_int);
                        int64_t v = -1;
                        auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
                        if (!is_int || r.ec != std::errc() || v < 0)
                            fail("parameter 'timeout' must be a non-negative integer (microseconds), got " + std::string(tok));
                        out->timeout_us = v;
                    } else {
                        fail("parameter 'timeout' must be a non-negative integer (microseconds)");
                    }
                } else {
                    ps.skip(2);
                }
            });
        } else if (k == "inputs") {
            if (ps.peek() != '[') fail("request needs an 'inputs' array");
            have_inputs = true;
            ps.array([&] {
                if (ps.peek() != '{') fail("each element of 'inputs' must be an object");
                RawInput ri;
                bool has_name = false;
                ps.object([&](const std::string& ik) {
                    if (ik == "name") {
                        if (ps.peek() != '"') {
                            ps.skip(3);
                            return;
                        }
                        ri.name = ps.string();
                        has_name = true;
                    } else if (ik == "datatype") {
                        if (ps.peek() != '"') {
                            ps.skip(3);
                            return;
                        }
                        ri.dt = ps.string();
                        ri.has_dt = true;
                    } else if (ik == "shape") {
                        const char* s = ps.pos();
                        if (ps.peek() != '[') {
                            ps.skip(3);
                            return;
                        }
                        ri.has_shape = true;
                        ps.array([&] {
                            if (ps.peek() == '-' || (ps.peek() >= '0' && ps.peek() <= '9')) {
                                bool is_int;
                                std::string_view tok = ps.number(&is_int);
                                int64_t v = -1;
                                auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
                                if (!is_int || r.ec != std::errc() || v < 0) ri.shape_bad = true;
                                ri.shape.push_back(v);
                            } else {
                                ps.skip(4);
                                ri.shape_bad = true;
                            }
                        });
                        ri.shape_text = std::string(s, size_t(ps.pos() - s));
                        while (!ri.shape_text.empty() && is_ws(ri.shape_text.front())) ri.shape_text.erase(0, 1);
                    } else if (ik == "parameters") {
                        if (ps.peek() != '{') {
                            ps.skip(3);
                            ri.has_params = true;
                            ri.bsize_bad = true;  // reported as "must be an object" below
                            ri.bsize = -2;
                            return;
                        }
                        ri.has_params = true;
                        ps.object([&](const std::string& pk) {
                            if (parse_shm_param(ps, pk, &ri.shm, &ri.has_shm_size, &ri.shm_bad)) return;
                            if (pk != "binary_data_size") return ps.skip(4);
                            bool is_int = false;
                            if (ps.peek() == '-' || (ps.peek() >= '0' && ps.peek() <= '9')) {
                                std::string_view tok = ps.number(&is_int);
                                int64_t v = -1;
                                auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
                                if (!is_int || r.ec != std::errc() || v < 0) ri.bsize_bad = true;
                                else ri.bsize = v;
                            } else {
                                ps.skip(4);
                                ri.bsize_bad = true;
                            }
                        });
                    } else if (ik == "data") {
                        ri.data = ps.pos();
                        // Common order (name, datatype, shape, data): parse the numbers straight
                        // into the tensor in this pass; otherwise come back once all is known.
                        const TensorMeta* m = nullptr;
                        if (has_name && ri.has_dt && ri.has_shape && !ri.shape_bad)
                            for (const TensorMeta& t : metas)
                                if (t.name == ri.name) m = &t;
                        bool ok = m && ri.dt == kserve_dtype(m->dtype) && ri.shape.size() == m->shape.size();
                        for (size_t i = 0; ok && i < m->shape.size(); ++i) ok = m->shape[i] < 0 || m->shape[i] == ri.shape[i];
                        int64_t numel = ok ? shape_numel(ri.shape) : -1;
                        if (ok && numel >= 0 && uint64_t(numel) <= (uint64_t(1) << 40) / dtype_size(m->dtype)) {
                            ri.storage.resize(size_t(numel) * dtype_size(m->dtype));
                            DataWriter w{ps, ri.name, m->dtype, ri.storage.data(), numel};
                            w.value(0);
                            ri.direct = true;
                            ri.direct_n = w.n;
                        } else {
                            ps.skip_data(3);  // parsed (and validated) in the second pass
                        }
                    } else {
                        if (ri.unknown.empty()) ri.unknown = ik;
                        ps.skip(3);
                    }
                });
                if (!has_name) fail("an input has no 'name' string");
                raws.push_back(std::move(ri));
            });
        } else if (k == "outputs") {
            if (ps.peek() != '[') fail("'outputs' must be an array");
            outputs_at = ps.pos();
            ps.skip(1);
        } else {
            fail("unknown request field '" + k + "' (expected id, parameters, inputs, outputs)");
        }
    });
    if (!ps.at_end()) ps.syntax("unexpected data after the JSON value");
    if (!have_inputs) fail("request needs an 'inputs' array");

    // Inputs, validated in the order given (binary data is consumed in that order).
    size_t bin_off = 0;
    for (RawInput& ri : raws) {
        const std::string& tn = ri.name;
        size_t idx = 0;
        while (idx < metas.size() && metas[idx].name != tn) ++idx;
        if (idx == metas.size()) {
            std::string names;
            for (const TensorMeta& m : metas) names += (names.empty() ? "'" : ", '") + m.name + "'";
            fail("unexpected input '" + tn + "' for model '" + model + "' (its inputs: " + names + ")");
        }
        InferInput& it = out->inputs[idx];
        if (it.meta) fail("input '" + tn + "' is given twice");
        const TensorMeta& m = metas[idx];
        it.meta = &m;
        if (!ri.unknown.empty()) fail("input '" + tn + "': unknown field '" + ri.unknown + "'");
        if (!ri.has_dt) fail("input '" + tn + "': missing 'datatype'");
        if (ri.dt != kserve_dtype(m.dtype)) {
            DType tmp;
            fail("input '" + tn + "': datatype " + ri.dt + (dtype_from_kserve(ri.dt, &tmp) ? ""
                                                                  : ri.dt == "BYTES" ? " (BYTES tensors are not supported)"
                                                                                     : " (unknown)") +
                 " does not match the model's " + kserve_dtype(m.dtype));
        }
        if (!ri.has_shape) fail("input '" + tn + "': missing 'shape' array");
        if (ri.shape_bad) fail("input '" + tn + "': shape must hold non-negative integers, got " + ri.shape_text);
        it.shape = ri.shape;
        bool shape_ok = it.shape.size() == m.shape.size();
        for (size_t i = 0; shape_ok && i < m.shape.size(); ++i) shape_ok = m.shape[i] < 0 || m.shape[i] == it.shape[i];
        if (!shape_ok)
            fail("input '" + tn + "': shape " + shape_json(it.shape) + " does not match the expected " + shape_json(m.shape) +
                 (sc.configured->count(tn) ? " (fixed by config.yaml)" : ""));
        int64_t numel = shape_numel(it.shape);
        size_t esz = dtype_size(m.dtype);
        if (numel < 0 || uint64_t(numel) > (uint64_t(1) << 40) / esz) fail("input '" + tn + "': shape is too large");
        size_t want = size_t(numel) * esz;
        if (ri.bsize == -2) fail("input '" + tn + "': 'parameters' must be an object");
        if (ri.bsize_bad) fail("input '" + tn + "': binary_data_size must be a non-negative integer");
        if (!ri.shm_bad.empty()) fail("input '" + tn + "': " + ri.shm_bad);
        if (!ri.shm.region.empty()) {
            if (ri.data || ri.bsize >= 0) fail("input '" + tn + "': has both shared memory and 'data'/binary_data_size");
            if (!ri.has_shm_size) fail("input '" + tn + "': shared_memory_region needs shared_memory_byte_size");
            if (ri.shm.byte_size != want)
                fail("input '" + tn + "': shared_memory_byte_size is " + std::to_string(ri.shm.byte_size) + " bytes, expected " +
                     std::to_string(want) + " for " + kserve_dtype(m.dtype) + " shape " + shape_json(it.shape));
            it.shm = std::move(ri.shm);
            it.nbytes = want;  // data: resolved by the handler (serve/shm.h)
        } else if (ri.bsize >= 0) {
            if (ri.data) fail("input '" + tn + "': has both 'data' and binary_data_size");
            if (uint64_t(ri.bsize) != want)
                fail("input '" + tn + "': binary_data_size is " + std::to_string(ri.bsize) + " bytes, expected " +
                     std::to_string(want) + " for " + kserve_dtype(m.dtype) + " shape " + shape_json(it.shape));
            if (bin.size() - bin_off < want)
                fail("input '" + tn + "': binary data ends after " + std::to_string(bin.size() - bin_off) + " of " +
                     std::to_string(want) + " bytes (check Inference-Header-Content-Length)");
            it.data = reinterpret_cast<const uint8_t*>(bin.data()) + bin_off;
            it.nbytes = want;
            bin_off += want;
        } else {
            if (!ri.data) fail("input '" + tn + "': no 'data' and no binary_data_size parameter");
            int64_t got;
            if (ri.direct) {
                it.storage = std::move(ri.storage);
                got = ri.direct_n;
            } else {
                it.storage.resize(want);
                ps.set(ri.data);
                DataWriter w{ps, tn, m.dtype, it.storage.data(), numel};
                w.value(0);
                got = w.n;
            }
            if (got != numel)
                fail("input '" + tn + "': " + std::to_string(got) + " data elements, expected " + std::to_string(numel) +
                     " for shape " + shape_json(it.shape));
            it.data = it.storage.data();
            it.nbytes = want;
        }
    }
    if (bin_off != bin.size())
        fail(std::to_string(bin.size() - bin_off) +
             " bytes of binary data after the JSON header are not claimed by any input's binary_data_size");
    for (size_t i = 0; i < out->inputs.size(); ++i)
        if (!out->inputs[i].meta) fail("missing input '" + metas[i].name + "' for model '" + model + "'");

    // Outputs: the requested subset in order, or all.
    const auto& outs = *sc.outputs;
    if (outputs_at) {
        out->has_outputs = true;
        ps.set(outputs_at);
        ps.array([&] {
            if (ps.peek() != '{') fail("each requested output needs a 'name' string");
            std::string on, unknown, shm_bad;
            ShmParams shm;
            bool has_name = false, bad_params = false, bad_bin = false, has_shm_size = false, classification = false;
            int binary = -1;
            ps.object([&](const std::string& k) {
                if (k == "name" && ps.peek() == '"') {
                    on = ps.string();
                    has_name = true;
                } else if (k == "parameters") {
                    if (ps.peek() != '{') {
                        bad_params = true;
                        return ps.skip(3);
                    }
                    ps.object([&](const std::string& pk) {
                        if (parse_shm_param(ps, pk, &shm, &has_shm_size, &shm_bad)) return;
                        if (pk == "classification") classification = true;  // Triton's classification extension
                        if (pk != "binary_data") return ps.skip(4);
                        if (ps.literal("true")) binary = 1;
                        else if (ps.literal("false")) binary = 0;
                        else {
                            bad_bin = true;
                            ps.skip(4);
                        }
                    });
                } else {
                    if (k != "name" && unknown.empty()) unknown = k;
                    ps.skip(3);
                }
            });
            if (!has_name) fail("each requested output needs a 'name' string");
            size_t idx = 0;
            while (idx < outs.size() && outs[idx].name != on) ++idx;
            if (idx == outs.size()) {
                std::string names;
                for (const TensorMeta& d : outs) names += (names.empty() ? "'" : ", '") + d.name + "'";
                fail("unknown output '" + on + "' requested (model '" + model + "' has " + names + ")");
            }
            if (!unknown.empty()) fail("output '" + on + "': unknown field '" + unknown + "'");
            if (bad_params) fail("output '" + on + "': 'parameters' must be an object");
            if (bad_bin) fail("output '" + on + "': binary_data must be a boolean");
            if (classification) fail("output '" + on + "': the classification extension is not supported (request the raw output)");
            if (!shm_bad.empty()) fail("output '" + on + "': " + shm_bad);
            if (!shm.region.empty() && !has_shm_size) fail("output '" + on + "': shared_memory_region needs shared_memory_byte_size");
            for (const InferOutputSpec& x : out->outputs)
                if (x.idx == idx) fail("output '" + on + "' is requested twice");
            if (!shm.region.empty()) out->outputs.push_back({idx, false, std::move(shm), nullptr});
            else out->outputs.push_back({idx, binary < 0 ? out->binary_output : binary == 1, {}, nullptr});
        });
    } else {
        for (size_t i = 0; i < outs.size(); ++i) out->outputs.push_back({i, out->binary_output, {}, nullptr});
    }
}

}  // namespace

bool parse_infer_request(std::string_view head, std::string_view bin, const InferSchema& schema, InferRequest* out,
                         RequestError* err) {
    try {
        parse(head, bin, schema, out);
        return true;
    } catch (const Fail& f) {
        err->status = 400;
        err->msg = f.msg;
    }
    // A malformed document reads better as its syntax error than as whatever the schema pass
    // tripped on first (e.g. a truncated body): check the syntax, on the error path only.
    try {
        Parser ps(head);
        ps.skip(0);
        if (!ps.at_end()) ps.syntax("unexpected data after the JSON value");
    } catch (const Fail& f) {
        err->msg = f.msg;
    }
    return false;
}

void append_json_string(std::string& s, std::string_view v) {
    s += '"';
    size_t i = 0;
    while (i < v.size()) {
        unsigned char c = static_cast<unsigned char>(v[i]);
        if (c == '"' || c == '\\') {
            s += '\\';
            s += char(c);
            ++i;
        } else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", unsigned(c));
            s += b;
            ++i;
        } else if (c < 0x80) {
            s += char(c);
            ++i;
        } else {
            // Copy a valid UTF-8 sequence; replace an invalid byte with U+FFFD.
            int len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
            bool ok = len > 0 && i + size_t(len) <= v.size() && c >= 0xC2 && c <= 0xF4;
            for (int k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(v[i + size_t(k)]) & 0xC0) == 0x80;
            if (ok) {
                s.append(v.data() + i, size_t(len));
                i += size_t(len);
            } else {
                s += "\xEF\xBF\xBD";
                ++i;
            }
        }
    }
    s += '"';
}

void append_data_json(std::string& s, DType t, const void* p, int64_t n) {
    // Worst case per element: 24 chars ("-1.7976931348623157e+308" plus a comma).
    size_t at = s.size();
    s.resize(at + 2 + size_t(n) * 26);
    char* o = s.data() + at;
    char* const end = s.data() + s.size();
    *o++ = '[';
    for (int64_t i = 0; i < n; ++i) {
        if (i) *o++ = ',';
        switch (t) {
            case DType::kBool: {
                bool b = static_cast<const uint8_t*>(p)[i] != 0;
                std::memcpy(o, b ? "true" : "false", b ? 4 : 5);
                o += b ? 4 : 5;
                break;
            }
#define JIFFY_INT_CASE(D, T) \
    case D: o = std::to_chars(o, end, static_cast<const T*>(p)[i]).ptr; break;
            JIFFY_INT_CASE(DType::kU8, uint8_t)
            JIFFY_INT_CASE(DType::kU16, uint16_t)
            JIFFY_INT_CASE(DType::kU32, uint32_t)
            JIFFY_INT_CASE(DType::kU64, uint64_t)
            JIFFY_INT_CASE(DType::kI8, int8_t)
            JIFFY_INT_CASE(DType::kI16, int16_t)
            JIFFY_INT_CASE(DType::kI32, int32_t)
            JIFFY_INT_CASE(DType::kI64, int64_t)
#undef JIFFY_INT_CASE
            case DType::kF64: {
                double d = static_cast<const double*>(p)[i];
                if (!std::isfinite(d)) {
                    std::memcpy(o, "null", 4);
                    o += 4;
                } else {
                    o = std::to_chars(o, end, d).ptr;  // shortest text that reads back exactly
                }
                break;
            }
            case DType::kF32:
            case DType::kF16:
            case DType::kBF16: {
                float f = t == DType::kF32   ? static_cast<const float*>(p)[i]
                          : t == DType::kF16 ? f16_to_f32(static_cast<const uint16_t*>(p)[i])
                                             : bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
                if (!std::isfinite(f)) {
                    std::memcpy(o, "null", 4);
                    o += 4;
                } else {
                    o = std::to_chars(o, end, f).ptr;
                }
                break;
            }
            default: std::memcpy(o, "null", 4); o += 4;
        }
    }
    *o++ = ']';
    s.resize(size_t(o - s.data()));
}

}  // namespace jiffy::serve
