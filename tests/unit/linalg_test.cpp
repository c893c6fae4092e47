// linalg ops (Gemm, MatMul, MatMulInteger, Einsum, Softmax family, Resize, Upsample, Dropout):
// edge cases the ONNX conformance suite does not cover, checked against naive references written
// here or hand-computed values, plus error handling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "attr_util.h"
#include "one_node.h"
#include "runtime/plan.h"

using namespace jiffy;
using namespace jiffy::testattr;

namespace {

// ---------------------------------------------------------------- helpers



template <typename T>
Tensor make(DType dt, Shape s, const std::vector<T>& v) {
    Tensor t(dt, std::move(s));
    EXPECT_EQ(size_t(t.numel()), v.size());
    std::memcpy(t.data(), v.data(), v.size() * sizeof(T));
    return t;
}
Tensor f32(Shape s, const std::vector<float>& v) { return make<float>(DType::kF32, std::move(s), v); }
Tensor i64(Shape s, const std::vector<int64_t>& v) { return make<int64_t>(DType::kI64, std::move(s), v); }
Tensor none() { return Tensor(); }
Tensor boolean(bool v) {
    Tensor t(DType::kBool, {});
    *t.as<bool>() = v;
    return t;
}

// Deterministic pseudo-random float tensor in [-1, 1).
Tensor rnd(Shape s, uint32_t seed) {
    Tensor t(DType::kF32, std::move(s));
    float* p = t.as<float>();
    uint32_t x = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < t.numel(); ++i) {
        x = x * 1664525u + 1013904223u;
        p[i] = float(x >> 8) / float(1 << 24) * 2.0f - 1.0f;
    }
    return t;
}

struct Result {
    Status st;
    std::vector<Tensor> outs;
    std::string kernel;  // the step kernels' describe()
};

// Builds and runs a one-node graph. Inputs with const_in[i] = true become constants; an empty
// Tensor() marks an omitted optional input. out_present selects the node's outputs.
Result run_op(const std::string& op, const std::vector<Tensor>& ins, std::vector<bool> const_in,
              const Attrs& attrs, int64_t opset = 17, std::vector<bool> out_present = {true}) {
    testnode::NodeRun n = testnode::run_one_node(op, testnode::node_inputs(ins, const_in), attrs, opset, out_present);
    return Result{n.st, std::move(n.outs), std::move(n.kernel)};
}

void expect_close(const Tensor& got, const Tensor& want, double tol = 1e-5) {
    ASSERT_EQ(got.dtype(), want.dtype());
    ASSERT_EQ(got.shape(), want.shape()) << shape_str(got.shape()) << " vs " << shape_str(want.shape());
    for (int64_t i = 0; i < got.numel(); ++i) {
        double a = got.get_f64(i), b = want.get_f64(i);
        ASSERT_NEAR(a, b, tol * (1 + std::abs(b))) << "element " << i;
    }
}

void expect_error(const Result& r, const std::string& fragment) {
    ASSERT_FALSE(r.st.ok()) << "expected an error mentioning '" << fragment << "'";
    EXPECT_NE(r.st.message().find(fragment), std::string::npos) << r.st.message();
}

// Naive batched matmul of already-broadcast [B, M, K] x [B, K, N] (as flat arrays).
std::vector<float> ref_mm(const float* a, const float* b, int64_t M, int64_t K, int64_t N) {
    std::vector<float> y(size_t(M * N), 0.0f);
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) s += double(a[i * K + k]) * double(b[k * N + j]);
            y[size_t(i * N + j)] = float(s);
        }
    return y;
}

// ---------------------------------------------------------------- MatMul

TEST(Linalg, MatMulVectorVector) {
    Result r = run_op("MatMul", {f32({3}, {1, 2, 3}), f32({3}, {4, 5, 6})}, {}, {});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({}, {32}));
}

TEST(Linalg, MatMulVectorTimesBatch) {
    // [K] x [2, K, N] -> [2, N]; [2, M, K] x [K] -> [2, M]
    Tensor b = rnd({2, 3, 4}, 1), v = rnd({3}, 2);
    Result r = run_op("MatMul", {v, b}, {}, {});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    std::vector<float> want;
    for (int bi = 0; bi < 2; ++bi) {
        auto y = ref_mm(v.as<float>(), b.as<float>() + bi * 12, 1, 3, 4);
        want.insert(want.end(), y.begin(), y.end());
    }
    expect_close(r.outs[0], f32({2, 4}, want));

    Tensor a = rnd({2, 4, 3}, 3);
    r = run_op("MatMul", {a, v}, {}, {});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    want.clear();
    for (int bi = 0; bi < 2; ++bi) {
        auto y = ref_mm(a.as<float>() + bi * 12, v.as<float>(), 4, 3, 1);
        want.insert(want.end(), y.begin(), y.end());
    }
    expect_close(r.outs[0], f32({2, 4}, want));
}

TEST(Linalg, MatMulBroadcastBatch) {
    // [2, 1, 3, 4] x [5, 4, 2] -> [2, 5, 3, 2]
    Tensor a = rnd({2, 1, 3, 4}, 4), b = rnd({5, 4, 2}, 5);
    Result r = run_op("MatMul", {a, b}, {false, true}, {});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    std::vector<float> want;
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 5; ++j) {
            auto y = ref_mm(a.as<float>() + i * 12, b.as<float>() + j * 8, 3, 4, 2);
            want.insert(want.end(), y.begin(), y.end());
        }
    expect_close(r.outs[0], f32({2, 5, 3, 2}, want));
}

TEST(Linalg, MatMulIntAndEmptyK) {
    Result r = run_op("MatMul", {i64({2, 2}, {1, 2, 3, 4}), i64({2, 2}, {5, 6, 7, 8})}, {}, {});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], i64({2, 2}, {19, 22, 43, 50}));
    // K = 0: the output is all zeros.
    r = run_op("MatMul", {Tensor(DType::kF32, {2, 0}), Tensor(DType::kF32, {0, 3})}, {}, {});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({2, 3}, {0, 0, 0, 0, 0, 0}));
}

TEST(Linalg, MatMulErrors) {
    expect_error(run_op("MatMul", {rnd({2, 3}, 1), rnd({4, 2}, 2)}, {}, {}), "inner dimensions");
    expect_error(run_op("MatMul", {rnd({2, 2, 3}, 1), rnd({3, 3, 2}, 2)}, {}, {}), "do not broadcast");
    expect_error(run_op("MatMul", {f32({}, {1}), rnd({3}, 2)}, {}, {}), "rank >= 1");
}

// ---------------------------------------------------------------- Gemm

// alpha * A' B' + beta * C with C broadcast from (cm, cn).
std::vector<float> ref_gemm(const Tensor& a, const Tensor& b, const Tensor* c, bool ta, bool tb, float alpha,
                            float beta) {
    const int64_t M = ta ? a.shape()[1] : a.shape()[0], K = ta ? a.shape()[0] : a.shape()[1];
    const int64_t N = tb ? b.shape()[0] : b.shape()[1];
    std::vector<float> y(size_t(M * N));
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
                s += double(a.as<float>()[ta ? k * M + i : i * K + k]) * double(b.as<float>()[tb ? j * K + k : k * N + j]);
            double cv = 0;
            if (c) {
                const Shape& cs = c->shape();
                int64_t ci = 0;
                if (cs.size() == 2) ci = (cs[0] == 1 ? 0 : i) * cs[1] + (cs[1] == 1 ? 0 : j);
                else if (cs.size() == 1) ci = cs[0] == 1 ? 0 : j;
                cv = c->as<float>()[ci];
            }
            y[size_t(i * N + j)] = float(alpha * s + beta * cv);
        }
    return y;
}

TEST(Linalg, GemmTransposesAndBiasShapes) {
    const int64_t M = 3, K = 5, N = 4;
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
            for (bool const_b : {false, true})
                for (Shape cs : {Shape{M, N}, Shape{M, 1}, Shape{N}, Shape{1}, Shape{}, Shape{1, N}}) {
                    Tensor a = rnd(ta ? Shape{K, M} : Shape{M, K}, 7), b = rnd(tb ? Shape{N, K} : Shape{K, N}, 8);
                    Tensor c = rnd(cs, 9);
                    Attrs at = {{"transA", ai(ta)}, {"transB", ai(tb)}, {"alpha", af(0.5f)}, {"beta", af(2.0f)}};
                    Result r = run_op("Gemm", {a, b, c}, {false, const_b, false}, at);
                    ASSERT_TRUE(r.st.ok()) << r.st.message();
                    expect_close(r.outs[0], f32({M, N}, ref_gemm(a, b, &c, ta, tb, 0.5f, 2.0f)));
                }
}

TEST(Linalg, GemmNoBiasAndInt) {
    Tensor a = rnd({2, 3}, 1), b = rnd({4, 3}, 2);
    Result r = run_op("Gemm", {a, b}, {false, true}, {{"transB", ai(1)}}, 13);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({2, 4}, ref_gemm(a, b, nullptr, false, true, 1, 1)));

    Tensor ia = make<int32_t>(DType::kI32, {1, 2}, {1, 2}), ib = make<int32_t>(DType::kI32, {2, 2}, {3, 4, 5, 6});
    Tensor ic = make<int32_t>(DType::kI32, {2}, {100, 200});
    r = run_op("Gemm", {ia, ib, ic}, {}, {});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], make<int32_t>(DType::kI32, {1, 2}, {113, 216}));
}

TEST(Linalg, GemmErrors) {
    // Before opset 11, C is required.
    expect_error(run_op("Gemm", {rnd({2, 3}, 1), rnd({3, 4}, 2)}, {}, {}, 9), "input C is required");
    expect_error(run_op("Gemm", {rnd({2, 3}, 1), rnd({3, 4}, 2), rnd({3, 4}, 3)}, {}, {}), "cannot be broadcast");
    expect_error(run_op("Gemm", {rnd({2, 3}, 1), rnd({2, 4}, 2)}, {}, {}), "inner dimensions");
    expect_error(run_op("Gemm", {rnd({1, 2, 3}, 1), rnd({3, 4}, 2)}, {}, {}), "must be 2-D");
}

// ---------------------------------------------------------------- MatMulInteger

TEST(Linalg, MatMulIntegerZeroPoints) {
    // A int8 [2, 3] with per-row zero points, B uint8 [3, 2] with per-column zero points.
    std::vector<int8_t> av = {1, -2, 3, 4, 5, -6};
    std::vector<uint8_t> bv = {10, 20, 30, 40, 50, 60};
    std::vector<int8_t> za = {1, -1};
    std::vector<uint8_t> zb = {5, 7};
    Tensor a = make<int8_t>(DType::kI8, {2, 3}, av), b = make<uint8_t>(DType::kU8, {3, 2}, bv);
    std::vector<int32_t> want(4);
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            int s = 0;
            for (int k = 0; k < 3; ++k) s += (av[size_t(i * 3 + k)] - za[size_t(i)]) * (bv[size_t(k * 2 + j)] - zb[size_t(j)]);
            want[size_t(i * 2 + j)] = s;
        }
    Result r = run_op("MatMulInteger",
                      {a, b, make<int8_t>(DType::kI8, {2}, za), make<uint8_t>(DType::kU8, {2}, zb)}, {}, {});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], make<int32_t>(DType::kI32, {2, 2}, want));
    // The same with N-D zero points [2, 1] and [1, 2].
    r = run_op("MatMulInteger",
               {a, b, make<int8_t>(DType::kI8, {2, 1}, za), make<uint8_t>(DType::kU8, {1, 2}, zb)}, {}, {});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], make<int32_t>(DType::kI32, {2, 2}, want));
    // Only B's zero point (scalar).
    r = run_op("MatMulInteger", {a, b, none(), make<uint8_t>(DType::kU8, {}, {3})}, {}, {});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            int s = 0;
            for (int k = 0; k < 3; ++k) s += av[size_t(i * 3 + k)] * (bv[size_t(k * 2 + j)] - 3);
            EXPECT_EQ(r.outs[0].as<int32_t>()[i * 2 + j], s);
        }
}

TEST(Linalg, MatMulIntegerErrors) {
    Tensor a = make<uint8_t>(DType::kU8, {2, 3}, {1, 2, 3, 4, 5, 6});
    Tensor b = make<uint8_t>(DType::kU8, {3, 2}, {1, 2, 3, 4, 5, 6});
    expect_error(run_op("MatMulInteger", {a, b, make<uint8_t>(DType::kU8, {3}, {1, 2, 3})}, {}, {}),
                 "zero point input 2");
    expect_error(run_op("MatMulInteger", {a, b, make<int8_t>(DType::kI8, {}, {1})}, {}, {}), "dtype");
    expect_error(run_op("MatMulInteger", {rnd({2, 3}, 1), b}, {}, {}), "uint8 or int8");
}

// ---------------------------------------------------------------- Einsum

TEST(Linalg, EinsumTraceDiagonalAndImplicit) {
    Tensor m = f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
    Result r = run_op("Einsum", {m}, {}, {{"equation", as("ii")}}, 12);  // implicit: trace
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({}, {15}));
    r = run_op("Einsum", {m}, {}, {{"equation", as("ii->i")}}, 12);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({3}, {1, 5, 9}));
    r = run_op("Einsum", {m}, {}, {{"equation", as("ji")}}, 12);  // implicit output "ij": transpose
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({3, 3}, {1, 4, 7, 2, 5, 8, 3, 6, 9}));
    // Implicit output sorts uppercase before lowercase: "aB" -> "Ba".
    r = run_op("Einsum", {f32({2, 3}, {1, 2, 3, 4, 5, 6})}, {}, {{"equation", as("aB")}}, 12);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({3, 2}, {1, 4, 2, 5, 3, 6}));
}

TEST(Linalg, EinsumEllipsisBroadcastAndThreeOperands) {
    // "...ij,...jk->...ik" with batch dims [2, 1] and [3] broadcasting to [2, 3].
    Tensor a = rnd({2, 1, 2, 3}, 11), b = rnd({3, 3, 2}, 12);
    Result r = run_op("Einsum", {a, b}, {}, {{"equation", as("...ij, ...jk -> ...ik")}}, 12);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    std::vector<float> want;
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j) {
            auto y = ref_mm(a.as<float>() + i * 6, b.as<float>() + j * 6, 2, 3, 2);
            want.insert(want.end(), y.begin(), y.end());
        }
    expect_close(r.outs[0], f32({2, 3, 2, 2}, want));
    // Three operands: sum_ijk a_i b_ij c_j k ... "i,ij,j->" is a bilinear form.
    Tensor x = f32({2}, {1, 2}), w = f32({2, 2}, {1, 2, 3, 4}), y = f32({2}, {5, 6});
    r = run_op("Einsum", {x, w, y}, {}, {{"equation", as("i,ij,j->")}}, 12);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    // x^T W y = [1 2] [[1 2][3 4]] [5 6]^T = [7 10] . [5 6] = 95
    expect_close(r.outs[0], f32({}, {95}));
}

// Two-operand float32 contractions that are one batched matrix product run on the packed SGEMM
// (kernel "gemm ..."): each against the float64 reference loop on the same values; equations the
// product cannot take (the output's innermost label from A, a summed label alone, broadcasting)
// keep the reference loop and still agree.
TEST(Linalg, EinsumMatrixProductsMatchReference) {
    struct Case {
        const char* eq;
        Shape a, b;
        bool gemm;  // expected on the SGEMM
        bool b_const;
    };
    const Case cases[] = {
        {"bhqd,bhkd->bhqk", {2, 3, 17, 9}, {2, 3, 13, 9}, true, false},   // attention scores (B^T)
        {"bhqk,bhkd->bhqd", {2, 3, 17, 13}, {2, 3, 13, 9}, true, false},  // attention x V
        {"bqhd,bkhd->bhqk", {2, 17, 3, 9}, {2, 13, 3, 9}, true, false},   // heads in the middle
        {"ij,jk->ik", {37, 21}, {21, 45}, true, false},
        {"bnd,dh->bnh", {2, 19, 33}, {33, 40}, true, true},              // a constant weight; M = b x n
        {"ijk,jkl->il", {6, 5, 4}, {5, 4, 7}, true, false},               // K = j x k
        {"bnd,dh->nbh", {2, 19, 33}, {33, 40}, false, true},             // M labels do not nest in Y
        {"ik,jk->ij", {11, 7}, {5, 7}, true, false},
        {"kj,ik->ij", {7, 5}, {11, 7}, true, false},                      // runs as B x A
        {"ki,kj->ij", {7, 11}, {7, 5}, false, false},                     // A's K not innermost
        {"bij,bj->bi", {3, 5, 7}, {3, 7}, false, false},                  // no N label
        {"ij,jk->i", {5, 6}, {6, 4}, false, false},                       // k summed from B alone
    };
    uint32_t seed = 70;
    for (const Case& c : cases) {
        SCOPED_TRACE(c.eq);
        const Tensor a = rnd(c.a, seed++), b = rnd(c.b, seed++);
        auto f64 = [](const Tensor& t) {
            Tensor d(DType::kF64, t.shape());
            for (int64_t i = 0; i < t.numel(); ++i) d.as<double>()[i] = t.as<float>()[i];
            return d;
        };
        Result want = run_op("Einsum", {f64(a), f64(b)}, {}, {{"equation", as(c.eq)}}, 12);
        ASSERT_TRUE(want.st.ok()) << want.st.message();
        Result got = run_op("Einsum", {a, b}, {false, c.b_const}, {{"equation", as(c.eq)}}, 12);
        ASSERT_TRUE(got.st.ok()) << got.st.message();
        EXPECT_EQ(got.kernel.find("gemm") != std::string::npos, c.gemm) << got.kernel;
        ASSERT_EQ(got.outs[0].shape(), want.outs[0].shape());
        for (int64_t i = 0; i < got.outs[0].numel(); ++i)
            ASSERT_NEAR(got.outs[0].as<float>()[i], want.outs[0].as<double>()[i], 1e-5) << i;
    }
}

TEST(Linalg, EinsumErrors) {
    Tensor m = rnd({2, 3}, 1);
    expect_error(run_op("Einsum", {m, rnd({4, 2}, 2)}, {}, {{"equation", as("ij,jk->ik")}}, 12), "has size");
    expect_error(run_op("Einsum", {m}, {}, {{"equation", as("ijk->i")}}, 12), "does not match input 0");
    expect_error(run_op("Einsum", {m}, {}, {{"equation", as("i1->i")}}, 12), "bad character");
    expect_error(run_op("Einsum", {m}, {}, {{"equation", as("ij->ik")}}, 12), "does not appear");
    expect_error(run_op("Einsum", {m}, {}, {{"equation", as("ij,jk->ik")}}, 12), "input terms");
    expect_error(run_op("Einsum", {rnd({2, 3}, 1)}, {}, {{"equation", as("ii->i")}}, 12), "has size");
    expect_error(run_op("Einsum", {rnd({1, 3}, 1)}, {}, {{"equation", as("ii->i")}}, 12), "repeated label");
}

// ---------------------------------------------------------------- Softmax family

// Softmax over a middle axis (float32: rows of `inner` with the vector exp) against the float64
// reference loop, in a few shapes, with a -inf logit and large ones.
TEST(Linalg, SoftmaxMiddleAxisMatchesReference) {
    struct Case {
        Shape s;
        int64_t axis;
    };
    const Case cases[] = {{{1, 19, 8, 9}, 1}, {{2, 3, 4}, 1}, {{3, 5, 7, 2}, 2}, {{1, 2, 33}, -2}};
    uint32_t seed = 500;
    for (const Case& c : cases) {
        Tensor x = rnd(c.s, seed++);
        for (int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] *= 30.0f;
        x.as<float>()[1] = -INFINITY;
        Tensor xd(DType::kF64, c.s);
        for (int64_t i = 0; i < x.numel(); ++i) xd.as<double>()[i] = x.as<float>()[i];
        Result want = run_op("Softmax", {xd}, {}, {{"axis", ai(c.axis)}}, 13);
        Result got = run_op("Softmax", {x}, {}, {{"axis", ai(c.axis)}}, 13);
        ASSERT_TRUE(want.st.ok() && got.st.ok()) << got.st.message();
        for (int64_t i = 0; i < x.numel(); ++i)
            ASSERT_NEAR(got.outs[0].as<float>()[i], want.outs[0].as<double>()[i], 2e-6 * want.outs[0].as<double>()[i] + 1e-7)
                << shape_str(c.s) << " axis " << c.axis << " at " << i;
    }
}

TEST(Linalg, SoftmaxCoerceBefore13VsAxisFrom13) {
    Tensor x = rnd({2, 3, 4}, 21);
    // opset 11, axis 1: softmax over the flattened 3 x 4 = 12 elements of each batch row.
    Result r = run_op("Softmax", {x}, {}, {{"axis", ai(1)}}, 11);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    std::vector<float> want(24);
    for (int b = 0; b < 2; ++b) {
        double mx = -1e30, sum = 0;
        for (int i = 0; i < 12; ++i) mx = std::max(mx, double(x.as<float>()[b * 12 + i]));
        for (int i = 0; i < 12; ++i) sum += std::exp(double(x.as<float>()[b * 12 + i]) - mx);
        for (int i = 0; i < 12; ++i) want[size_t(b * 12 + i)] = float(std::exp(double(x.as<float>()[b * 12 + i]) - mx) / sum);
    }
    expect_close(r.outs[0], f32({2, 3, 4}, want));
    // opset 13, axis 1: softmax over the 3 elements at each (b, k).
    r = run_op("Softmax", {x}, {}, {{"axis", ai(1)}}, 13);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    for (int b = 0; b < 2; ++b)
        for (int k = 0; k < 4; ++k) {
            double sum = 0;
            for (int j = 0; j < 3; ++j) sum += std::exp(double(x.as<float>()[b * 12 + j * 4 + k]));
            for (int j = 0; j < 3; ++j)
                want[size_t(b * 12 + j * 4 + k)] = float(std::exp(double(x.as<float>()[b * 12 + j * 4 + k])) / sum);
        }
    expect_close(r.outs[0], f32({2, 3, 4}, want));
    // LogSoftmax default axis (-1 from 13) with large values stays finite.
    r = run_op("LogSoftmax", {f32({1, 3}, {1000, 1001, 1002})}, {}, {}, 13);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({1, 3}, {-2.4076059f, -1.4076059f, -0.4076059f}));
}

// LogSoftmax over contiguous rows (the vector path: running maxima and sums in blocks of 8, the
// vector exp) against a double reference: rows shorter and longer than a block, with a tail,
// values spread over +-40, -inf (exp 0: a finite result elsewhere, -inf there) and a NaN row.
TEST(Linalg, LogSoftmaxRowsMatchDouble) {
    for (int64_t n : {1, 7, 8, 97, 1000}) {
        SCOPED_TRACE(n);
        Tensor x = rnd({3, n}, uint32_t(40 + n));
        float* p = x.as<float>();
        for (int64_t i = 0; i < 3 * n; ++i) p[i] *= 40.0f;
        if (n > 1) p[n + 1] = -INFINITY;  // row 1
        Result r = run_op("LogSoftmax", {x}, {}, {}, 13);
        ASSERT_TRUE(r.st.ok()) << r.st.message();
        std::vector<float> want(size_t(3 * n));
        for (int64_t b = 0; b < 3; ++b) {
            double mx = -INFINITY, sum = 0;
            for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(p[b * n + i]));
            for (int64_t i = 0; i < n; ++i) sum += std::exp(double(p[b * n + i]) - mx);
            for (int64_t i = 0; i < n; ++i) want[size_t(b * n + i)] = float(double(p[b * n + i]) - mx - std::log(sum));
        }
        const Tensor& got = r.outs[0];
        for (int64_t i = 0; i < 3 * n; ++i) {
            const double w = want[size_t(i)], g = got.get_f64(i);
            if (std::isinf(w)) EXPECT_EQ(g, w) << i;
            else ASSERT_NEAR(g, w, 1e-5 * (1 + std::abs(w))) << i;
        }
        p[2 * n + n / 2] = NAN;  // row 2: NaN everywhere, as the reference
        r = run_op("LogSoftmax", {x}, {}, {}, 13);
        ASSERT_TRUE(r.st.ok());
        for (int64_t i = 2 * n; i < 3 * n; ++i) EXPECT_TRUE(std::isnan(r.outs[0].get_f64(i))) << i;
        EXPECT_FALSE(std::isnan(r.outs[0].get_f64(0)));
    }
}

TEST(Linalg, HardmaxFirstMaxWins) {
    Result r = run_op("Hardmax", {f32({2, 3}, {3, 7, 7, -1, -1, -1})}, {}, {}, 13);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({2, 3}, {0, 1, 0, 1, 0, 0}));
    // opset 11 with axis 0: the whole tensor is one row.
    r = run_op("Hardmax", {f32({2, 2}, {1, 2, 9, 4})}, {}, {{"axis", ai(0)}}, 11);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({2, 2}, {0, 0, 1, 0}));
}

TEST(Linalg, SoftmaxErrors) {
    expect_error(run_op("Softmax", {rnd({2, 3}, 1)}, {}, {{"axis", ai(2)}}, 13), "axis 2 is out of range");
    expect_error(run_op("LogSoftmax", {rnd({2, 3}, 1)}, {}, {{"axis", ai(-3)}}, 11), "out of range");
    Result r = run_op("Hardmax", {i64({2}, {1, 2})}, {}, {}, 13);
    ASSERT_FALSE(r.st.ok());
}

// ---------------------------------------------------------------- Resize / Upsample

TEST(Linalg, ResizeAntialiasLinearDownscale) {
    // 1-D [0 1 2 3] downscaled by 0.5 with half_pixel + antialias: the triangle filter is
    // stretched to 4 taps of weights (1 3 3 1)/8 around x = 0.5 and x = 2.5 (edges clamped).
    Result r = run_op("Resize", {f32({4}, {0, 1, 2, 3}), none(), f32({1}, {0.5f})}, {false, false, true},
                      {{"mode", as("linear")}, {"antialias", ai(1)}}, 18);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({2}, {0.625f, 2.375f}));
    // Without antialias: plain linear at 0.5 and 2.5.
    r = run_op("Resize", {f32({4}, {0, 1, 2, 3}), none(), f32({1}, {0.5f})}, {false, false, true},
               {{"mode", as("linear")}}, 18);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({2}, {0.5f, 2.5f}));
}

TEST(Linalg, ResizeAxesAndKeepAspectRatio) {
    // Input 1x1x2x4, sizes (3, 3) on axes (2, 3) with not_larger: scale = min(3/2, 3/4) = 0.75,
    // output = round(0.75 * (2, 4)) = (2, 3) (1.5 rounds half up to 2).
    Tensor x = f32({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
    Result r = run_op("Resize", {x, none(), none(), i64({2}, {3, 3})}, {false, false, false, true},
                      {{"axes", aints({2, 3})}, {"keep_aspect_ratio_policy", as("not_larger")},
                       {"coordinate_transformation_mode", as("asymmetric")}, {"nearest_mode", as("floor")}},
                      18);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    // rows: x = 0 / 0.75 = 0, 1 / 0.75 = 1.33 -> 1; cols: 0, 1.33 -> 1, 2.67 -> 2.
    expect_close(r.outs[0], f32({1, 1, 2, 3}, {1, 2, 3, 5, 6, 7}));
    // not_smaller: scale = 1.5 -> output (3, 6).
    r = run_op("Resize", {x, none(), none(), i64({2}, {3, 3})}, {false, false, false, true},
               {{"axes", aints({-2, -1})}, {"keep_aspect_ratio_policy", as("not_smaller")}}, 18);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_EQ(r.outs[0].shape(), (Shape{1, 1, 3, 6}));
}

TEST(Linalg, ResizeNearestFastPathsMatchDefinition) {
    // Nearest / asymmetric / floor (ppocrv4_det's upsampling) on odd sizes: integer factors 1-3
    // per axis (row copies + element repeats), a non-integer factor and a downscale (gathers).
    // Source index = floor(o / scale), clamped.
    const int64_t H = 5, W = 7;
    Tensor x(DType::kF32, Shape{2, 3, H, W});
    for (int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] = float(i) * 0.5f - 3.0f;
    const std::vector<std::pair<float, float>> scales = {{2, 2}, {3, 3}, {1, 2}, {2, 1}, {1.5f, 2.5f},
                                                         {0.5f, 0.75f}, {1, 1}, {4, 3}};
    for (auto [sh, sw] : scales) {
        Result r = run_op("Resize", {x, none(), f32({4}, {1, 1, sh, sw})}, {false, false, true},
                          {{"mode", as("nearest")}, {"coordinate_transformation_mode", as("asymmetric")},
                           {"nearest_mode", as("floor")}},
                          13);
        ASSERT_TRUE(r.st.ok()) << r.st.message();
        const int64_t OH = int64_t(std::floor(float(H) * sh)), OW = int64_t(std::floor(float(W) * sw));
        ASSERT_EQ(r.outs[0].shape(), (Shape{2, 3, OH, OW})) << sh << "x" << sw;
        const float* y = r.outs[0].as<float>();
        for (int64_t p = 0; p < 6; ++p)
            for (int64_t i = 0; i < OH; ++i)
                for (int64_t j = 0; j < OW; ++j) {
                    const int64_t si = std::min<int64_t>(H - 1, int64_t(std::floor(double(i) / sh)));
                    const int64_t sj = std::min<int64_t>(W - 1, int64_t(std::floor(double(j) / sw)));
                    ASSERT_EQ(y[(p * OH + i) * OW + j], x.as<float>()[(p * H + si) * W + sj])
                        << "scale " << sh << "x" << sw << " at " << p << "," << i << "," << j;
                }
    }
}

TEST(Linalg, ResizeSeparableFloatMatchesDoublePath) {
    // float32 image resizes (linear / cubic, scale 1 on N and C) take the separable row path;
    // float64 the generic nested sum: the same taps, so they agree to float rounding. Up- and
    // downscales on odd sizes, every coordinate mode that maps inside, antialias, exclude_outside.
    const int64_t H = 7, W = 9;
    Tensor xf(DType::kF32, Shape{2, 3, H, W}), xd(DType::kF64, Shape{2, 3, H, W});
    for (int64_t i = 0; i < xf.numel(); ++i) {
        xf.as<float>()[i] = std::sin(float(i) * 0.37f) * 3.0f;
        xd.as<double>()[i] = double(xf.as<float>()[i]);
    }
    struct Cfg {
        const char* mode;
        const char* coord;
        float sh, sw;
        int antialias, exclude;
    };
    const Cfg cfgs[] = {{"linear", "half_pixel", 2, 2, 0, 0},     {"linear", "align_corners", 2.5f, 1.5f, 0, 0},
                        {"linear", "asymmetric", 0.5f, 0.75f, 0, 0}, {"linear", "pytorch_half_pixel", 3, 1, 0, 0},
                        {"linear", "half_pixel", 0.5f, 0.4f, 1, 0},  {"cubic", "half_pixel", 2, 1.7f, 0, 0},
                        {"cubic", "half_pixel", 1.3f, 2, 0, 1},      {"cubic", "align_corners", 0.6f, 0.5f, 1, 0},
                        // Exact 2x along W: the shifted-sum column pass where the taps repeat
                        // (half_pixel above, asymmetric), the per-column taps where they do not.
                        {"linear", "asymmetric", 2, 2, 0, 0},        {"linear", "align_corners", 2, 2, 0, 0},
                        {"linear", "pytorch_half_pixel", 1, 2, 0, 0}};
    for (const Cfg& c : cfgs) {
        const Attrs at = {{"mode", as(c.mode)}, {"coordinate_transformation_mode", as(c.coord)},
                          {"antialias", ai(c.antialias)}, {"exclude_outside", ai(c.exclude)}};
        Result rf = run_op("Resize", {xf, none(), f32({4}, {1, 1, c.sh, c.sw})}, {false, false, true}, at, 18);
        Result rd = run_op("Resize", {xd, none(), f32({4}, {1, 1, c.sh, c.sw})}, {false, false, true}, at, 18);
        ASSERT_TRUE(rf.st.ok() && rd.st.ok()) << rf.st.message() << rd.st.message();
        ASSERT_EQ(rf.outs[0].shape(), rd.outs[0].shape());
        for (int64_t i = 0; i < rf.outs[0].numel(); ++i)
            ASSERT_NEAR(rf.outs[0].as<float>()[i], rd.outs[0].as<double>()[i], 2e-5)
                << c.mode << " " << c.coord << " " << c.sh << "x" << c.sw << " at " << i;
    }
}

TEST(Linalg, ResizeTrilinearAndCropExtrapolation) {
    // 3-D linear (all dims), align_corners 2x2x2 -> 3x3x3: the centre is the mean of all corners.
    Tensor x = f32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
    Result r = run_op("Resize", {x, none(), none(), i64({3}, {3, 3, 3})}, {false, false, false, true},
                      {{"mode", as("linear")}, {"coordinate_transformation_mode", as("align_corners")}}, 13);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    EXPECT_NEAR(r.outs[0].as<float>()[13], 3.5, 1e-6);
    EXPECT_NEAR(r.outs[0].as<float>()[26], 7.0, 1e-6);
    // tf_crop_and_resize with an roi reaching outside the input: those samples get the
    // extrapolation value.
    Tensor y = f32({1, 3}, {10, 20, 30});
    r = run_op("Resize", {y, f32({4}, {0, -0.5f, 1, 1}), none(), i64({2}, {1, 4})}, {false, true, false, true},
               {{"mode", as("linear")}, {"coordinate_transformation_mode", as("tf_crop_and_resize")},
                {"extrapolation_value", af(-1)}},
               13);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    // x = -1 + o * (1.5 * 2) / 3 = -1, 0, 1, 2
    expect_close(r.outs[0], f32({1, 4}, {-1, 10, 20, 30}));
}

TEST(Linalg, ResizeUint8RoundsAndNearestModes) {
    Tensor x = make<uint8_t>(DType::kU8, {2}, {0, 255});
    Result r = run_op("Resize", {x, none(), f32({1}, {2.0f})}, {false, false, true},
                      {{"mode", as("linear")}, {"coordinate_transformation_mode", as("align_corners")}}, 13);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    // x = 0, 1/3, 2/3, 1 -> 0, 85, 170, 255
    expect_close(r.outs[0], make<uint8_t>(DType::kU8, {4}, {0, 85, 170, 255}));
    // nearest 4 -> 8 half_pixel: x = -0.25, 0.25, 0.75, ... ceil mode picks the right neighbour.
    Tensor z = f32({4}, {1, 2, 3, 4});
    r = run_op("Resize", {z, none(), f32({1}, {2.0f})}, {false, false, true}, {{"nearest_mode", as("ceil")}}, 13);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({8}, {1, 2, 2, 3, 3, 4, 4, 4}));
    r = run_op("Resize", {z, none(), f32({1}, {2.0f})}, {false, false, true}, {{"nearest_mode", as("floor")}}, 13);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({8}, {1, 1, 1, 2, 2, 3, 3, 4}));
}

TEST(Linalg, ResizeNearestUpsampleFastPaths) {
    // 2x nearest (asymmetric, floor: the FPN upsample of PaddleOCR det): pairs duplicated, each
    // second row copied from the first; 3x and 1.5x go through the flat offset table.
    for (float sc : {2.0f, 3.0f, 1.5f}) {
        const int64_t C = 3, H = 5, W = 7, OH = int64_t(H * sc), OW = int64_t(W * sc);
        std::vector<float> xv(size_t(C * H * W));
        for (size_t i = 0; i < xv.size(); ++i) xv[i] = float(i) * 0.5f - 3.0f;
        Result r = run_op("Resize", {f32({1, C, H, W}, xv), none(), f32({4}, {1, 1, sc, sc})},
                          {false, false, true},
                          {{"coordinate_transformation_mode", as("asymmetric")}, {"nearest_mode", as("floor")}}, 13);
        ASSERT_TRUE(r.st.ok()) << r.st.message();
        std::vector<float> want(size_t(C * OH * OW));
        for (int64_t c = 0; c < C; ++c)
            for (int64_t oy = 0; oy < OH; ++oy)
                for (int64_t ox = 0; ox < OW; ++ox)
                    want[size_t((c * OH + oy) * OW + ox)] =
                        xv[size_t((c * H + int64_t(std::floor(float(oy) / sc))) * W + int64_t(std::floor(float(ox) / sc)))];
        expect_close(r.outs[0], f32({1, C, OH, OW}, want));
    }
}

TEST(Linalg, ResizeErrors) {
    Tensor x = rnd({1, 1, 2, 2}, 1);
    // Scales not known at compile time: the compiler must ask for the value.
    Result r = run_op("Resize", {x, none(), f32({4}, {1, 1, 2, 2})}, {}, {}, 13);
    ASSERT_FALSE(r.st.ok());
    EXPECT_EQ(r.st.code(), Code::kNeedValue) << r.st.message();
    expect_error(run_op("Resize", {x, none(), f32({4}, {1, 1, 2, 2}), i64({4}, {1, 1, 4, 4})},
                        {false, false, true, true}, {}, 13),
                 "exactly one");
    expect_error(run_op("Resize", {x, none(), f32({3}, {1, 2, 2})}, {false, false, true}, {}, 13), "expected 4");
    expect_error(run_op("Resize", {x, none(), f32({4}, {1, 1, 0, 2})}, {false, false, true}, {}, 13), "> 0");
    expect_error(run_op("Resize", {x, none(), f32({4}, {1, 1, 2, 2})}, {false, false, true},
                        {{"mode", as("bicubic")}}, 13),
                 "unknown mode");
    expect_error(run_op("Resize", {x, none(), f32({4}, {1, 1, 2, 2})}, {false, false, true},
                        {{"coordinate_transformation_mode", as("nope")}}, 13),
                 "coordinate_transformation_mode");
    expect_error(run_op("Resize", {x, none(), none(), i64({2}, {3, 3})}, {false, false, false, true},
                        {{"axes", aints({2, 2})}}, 18),
                 "repeated");
}

TEST(Linalg, UpsampleAttrAndInputScales) {
    Tensor x = f32({1, 2}, {1, 2});
    Result r = run_op("Upsample", {x}, {}, {{"scales", afloats({1, 2})}, {"mode", as("linear")}}, 7);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    // asymmetric: x = 0, 0.5, 1, 1.5 (clamped) -> 1, 1.5, 2, 2
    expect_close(r.outs[0], f32({1, 4}, {1, 1.5f, 2, 2}));
    r = run_op("Upsample", {x, f32({2}, {2, 1})}, {false, true}, {}, 9);
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], f32({2, 2}, {1, 2, 1, 2}));
    expect_error(run_op("Upsample", {x, f32({2}, {0.5f, 1})}, {false, true}, {}, 9), ">= 1");
    expect_error(run_op("Upsample", {x}, {}, {}, 7), "scales");
}

// ---------------------------------------------------------------- Dropout

TEST(Linalg, DropoutInference) {
    Tensor x = f32({2, 2}, {1, -2, 3, 4});
    // opset 7: the mask has the input's type, all ones.
    Result r = run_op("Dropout", {x}, {}, {{"ratio", af(0.3f)}}, 7, {true, true});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], x);
    expect_close(r.outs[1], f32({2, 2}, {1, 1, 1, 1}));
    // opset 13: bool mask; training with ratio 0 is the identity.
    Tensor t = boolean(true);
    r = run_op("Dropout", {x, f32({}, {0}), t}, {false, true, true}, {}, 13, {true, true});
    ASSERT_TRUE(r.st.ok()) << r.st.message();
    expect_close(r.outs[0], x);
    ASSERT_EQ(r.outs[1].dtype(), DType::kBool);
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(r.outs[1].as<bool>()[i]);
}

TEST(Linalg, DropoutErrors) {
    Tensor x = f32({2}, {1, 2});
    Result r = run_op("Dropout", {x, f32({}, {0.5f}), boolean(true)}, {false, true, true}, {},
                      13);
    ASSERT_FALSE(r.st.ok());
    EXPECT_EQ(r.st.code(), Code::kUnsupported);
    EXPECT_NE(r.st.message().find("training_mode"), std::string::npos) << r.st.message();
    expect_error(run_op("Dropout", {x}, {}, {{"ratio", af(1.5f)}}, 10), "ratio");
    // A training_mode fed at run time is asked for at compile time.
    r = run_op("Dropout", {x, none(), boolean(false)}, {}, {}, 13);
    ASSERT_FALSE(r.st.ok());
    EXPECT_EQ(r.st.code(), Code::kNeedValue);
}

}  // namespace
