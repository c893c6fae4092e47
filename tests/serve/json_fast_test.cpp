// The infer-request parser's number conversion against std::from_chars (the correctly rounded
// reference), both key orders (data after name/datatype/shape: parsed in the first pass; data
// first: skipped by bracket search, parsed in the second pass), nested data, and malformed data.
#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "serve/json_fast.h"

using namespace jiffy::serve;
using jiffy::DType;

namespace {

struct Fixture {
    std::string model = "m";
    std::vector<TensorMeta> ins, outs{{"y", DType::kF32, {1}}};
    std::map<std::string, jiffy::Shape> cfg;
    explicit Fixture(DType t) : ins{{"x", t, {-1}}} {}
    InferSchema schema() const { return {&model, &ins, &outs, &cfg}; }
};

std::string join(const std::vector<std::string>& toks) {
    std::string r = "[";
    for (size_t i = 0; i < toks.size(); ++i) r += (i ? "," : "") + toks[i];
    return r + "]";
}

std::string body(const char* dt, size_t n, const std::string& data, bool data_first) {
    std::string meta = "\"name\":\"x\",\"datatype\":\"" + std::string(dt) + "\",\"shape\":[" + std::to_string(n) + "]";
    return data_first ? "{\"inputs\":[{\"data\":" + data + "," + meta + "}]}" : "{\"inputs\":[{" + meta + ",\"data\":" + data + "}]}";
}

// Random decimal tokens of every shape JSON allows, plus printf renderings of random floats and
// the exact midpoints between adjacent floats (the hardest rounding cases).
std::vector<std::string> tokens(std::mt19937_64& rng, size_t n, bool f64) {
    std::vector<std::string> v;
    char b[128];
    for (size_t i = 0; i < n; ++i) {
        int kind = int(rng() % 6);
        if (kind == 0) {  // arbitrary digits
            std::string t = rng() % 2 ? "-" : "";
            int id = int(rng() % 24), fd = int(rng() % 30);
            if (id == 0) t += '0';
            for (int k = 0; k < id; ++k) t += char('0' + (k == 0 ? 1 + rng() % 9 : rng() % 10));
            if (fd) {
                t += '.';
                int lz = int(rng() % 12);
                for (int k = 0; k < fd; ++k) t += char('0' + (k < lz ? 0 : rng() % 10));
            }
            if (rng() % 3 == 0) t += (rng() % 2 ? "e" : "E") + std::string(rng() % 2 ? "-" : "+") + std::to_string(rng() % 30);
            v.push_back(t);
        } else if (kind <= 2) {  // a float/double printed with 9 or 17 digits
            uint64_t bits = rng();
            double d;
            if (f64) std::memcpy(&d, &bits, 8);
            else {
                uint32_t b32 = uint32_t(bits);
                float f;
                std::memcpy(&f, &b32, 4);
                d = f;
            }
            if (!std::isfinite(d) || std::fabs(d) > 1e300 || (d != 0 && std::fabs(d) < 1e-300)) d = 0.5;
            std::snprintf(b, sizeof b, kind == 1 ? "%.9g" : "%.17g", d);
            v.push_back(b);
        } else if (kind == 3) {  // uniform in [-1, 1), as model inputs usually are
            std::snprintf(b, sizeof b, "%.*g", int(1 + rng() % 20), std::uniform_real_distribution<double>(-1, 1)(rng));
            v.push_back(b);
        } else {  // midpoints between adjacent floats, printed exactly or nearly
            float f = std::uniform_real_distribution<float>(kind == 4 ? 1e-30f : -1e6f, kind == 4 ? 1e30f : 1e6f)(rng);
            double mid = (double(f) + double(std::nextafter(f, INFINITY))) / 2;
            std::snprintf(b, sizeof b, "%.*g", int(9 + rng() % 25), mid);
            v.push_back(b);
        }
    }
    return v;
}

}  // namespace

TEST(JsonFast, NumbersMatchFromChars) {
    std::mt19937_64 rng(42);
    for (bool f64 : {false, true}) {
        Fixture fx(f64 ? DType::kF64 : DType::kF32);
        for (int round = 0; round < 40; ++round) {
            auto toks = tokens(rng, 4096, f64);
            // Drop tokens out of range (from_chars: out of range; checked separately below).
            std::vector<std::string> ok;
            for (auto& t : toks) {
                if (f64) {
                    double d;
                    if (std::from_chars(t.data(), t.data() + t.size(), d).ec == std::errc()) ok.push_back(t);
                } else {
                    float f;
                    if (std::from_chars(t.data(), t.data() + t.size(), f).ec == std::errc()) ok.push_back(t);
                }
            }
            bool data_first = round % 2 == 1;
            std::string b = body(f64 ? "FP64" : "FP32", ok.size(), join(ok), data_first);
            InferRequest rq;
            RequestError err;
            ASSERT_TRUE(parse_infer_request(b, {}, fx.schema(), &rq, &err)) << err.msg;
            ASSERT_EQ(rq.inputs[0].nbytes, ok.size() * (f64 ? 8 : 4));
            for (size_t i = 0; i < ok.size(); ++i) {
                const std::string& t = ok[i];
                if (f64) {
                    double want, got;
                    std::from_chars(t.data(), t.data() + t.size(), want);
                    std::memcpy(&got, rq.inputs[0].data + i * 8, 8);
                    ASSERT_EQ(std::memcmp(&want, &got, 8), 0) << t << " -> " << got << " want " << want;
                } else {
                    float want, got;
                    std::from_chars(t.data(), t.data() + t.size(), want);
                    std::memcpy(&got, rq.inputs[0].data + i * 4, 4);
                    ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << t << " -> " << got << " want " << want;
                }
            }
        }
    }
}

TEST(JsonFast, EdgeNumbers) {
    Fixture fx(DType::kF32);
    const char* toks[] = {"0", "-0", "0.0", "-0.000", "0e5", "1", "-1", "3.4028234663852886e38", "1.1754943508222875e-38",
                          "1e-45", "0.1", "16777217", "1.00000005960464477539", "123456789012345678901234567890",
                          "0.00000000000000000000000000000000000001"};
    for (const char* t : toks) {
        for (bool first : {false, true}) {
            InferRequest rq;
            RequestError err;
            ASSERT_TRUE(parse_infer_request(body("FP32", 1, std::string("[") + t + "]", first), {}, fx.schema(), &rq, &err))
                << t << ": " << err.msg;
            float want, got;
            std::from_chars(t, t + std::strlen(t), want);
            std::memcpy(&got, rq.inputs[0].data, 4);
            EXPECT_EQ(std::memcmp(&want, &got, 4), 0) << t;
        }
    }
    for (const char* t : {"1e39", "-3.5e38"}) {
        InferRequest rq;
        RequestError err;
        EXPECT_FALSE(parse_infer_request(body("FP32", 1, std::string("[") + t + "]", false), {}, fx.schema(), &rq, &err));
        EXPECT_NE(err.msg.find("FP32 range"), std::string::npos) << err.msg;
    }
}

TEST(JsonFast, NestedAndMalformedDataInBothOrders) {
    Fixture fx(DType::kF32);
    fx.ins[0].shape = {-1, -1};
    auto parse = [&](const std::string& data, const char* shape, bool first, RequestError* err, InferRequest* rq) {
        std::string meta = std::string("\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":") + shape;
        std::string b = first ? "{\"inputs\":[{\"data\":" + data + "," + meta + "}]}" : "{\"inputs\":[{" + meta + ",\"data\":" + data + "}]}";
        return parse_infer_request(b, {}, fx.schema(), rq, err);
    };
    for (bool first : {false, true}) {
        InferRequest rq;
        RequestError err;
        ASSERT_TRUE(parse("[[1, 2.5, -3],\n [4e0, 5, 6]]", "[2,3]", first, &err, &rq)) << err.msg;
        const float* f = reinterpret_cast<const float*>(rq.inputs[0].data);
        EXPECT_EQ(f[1], 2.5f);
        EXPECT_EQ(f[5], 6.0f);
        ASSERT_TRUE(parse("[1,2,3,4,5,6]", "[2,3]", first, &err, &rq)) << err.msg;  // flat works too
        struct Bad {
            const char* data;
            const char* want;
        } bad[] = {{"[1,2,]", "malformed JSON"},       {"[1,2", "malformed JSON"},
                   {"[[1,2],[3,\"x\"]]", "is \"x\""}, {"[1,2,3,4,5]", "5 data elements, expected 6"},
                   {"[01,2,3,4,5,6]", "malformed JSON"}, {"[1,2,3,4,5,6]]", "malformed JSON"},
                   {"[1,2,3,4,5,-]", "malformed JSON"}, {"[1.,2,3,4,5,6]", "malformed JSON"}};
        for (const Bad& b : bad) {
            InferRequest r2;
            RequestError e2;
            EXPECT_FALSE(parse(b.data, "[2,3]", first, &e2, &r2)) << b.data;
            EXPECT_NE(e2.msg.find(b.want), std::string::npos) << b.data << " (data first: " << first << "): " << e2.msg;
            EXPECT_EQ(e2.status, 400);
        }
    }
}
