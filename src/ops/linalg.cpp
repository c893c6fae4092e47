// linalg ops: Gemm, MatMul, MatMulInteger, Einsum, Softmax / LogSoftmax / Hardmax, Resize,
// Upsample and Dropout (inference). Reference kernels: plain loops, with the matrix products in
// i-k-j order so the inner loop is an axpy over contiguous rows. See docs/adding-an-op.md.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/activation.h"
#include "kernels/amx.h"
#include "kernels/conv.h"
#include "kernels/weight_alloc.h"
#include "kernels/gemm.h"
#include "kernels/gemv_narrow.h"
#include "kernels/norm.h"
#include "kernels/resize.h"
#include "ops/linalg.h"
#include "ops/util.h"
#include "runtime/plan.h"

namespace jiffy {
namespace {

// ================================================================ matrix products

// y[0..n) += a * x[0..n): the inner loop of every product here (contiguous, vectorizable).
template <typename T>
inline void axpy(T* __restrict y, const T* __restrict x, T a, int64_t n) {
    for (int64_t j = 0; j < n; ++j) y[j] += a * x[j];
}

// y[M x N] = a[M x K] * b[K x N], all row-major and contiguous. Overwrites y.
template <typename T>
void matmul_block(const T* __restrict a, const T* __restrict b, T* __restrict y, int64_t M,
                  int64_t K, int64_t N) {
    if (N == 1) {  // matrix x vector: dot products over contiguous rows of a
        for (int64_t i = 0; i < M; ++i) {
            const T* ar = a + i * K;
            T s = T(0);
            for (int64_t k = 0; k < K; ++k) s += ar[k] * b[k];
            y[i] = s;
        }
        return;
    }
    for (int64_t i = 0; i < M; ++i) {
        T* yr = y + i * N;
        for (int64_t j = 0; j < N; ++j) yr[j] = T(0);
        const T* ar = a + i * K;
        for (int64_t k = 0; k < K; ++k) axpy(yr, b + k * N, ar[k], N);
    }
}

// Shapes of a numpy-style matmul: 1-D operands are promoted (and the added dim dropped from the
// output), batch dims broadcast. Per output batch, the element offsets of the A and B matrices.
struct MatMulGeom {
    int64_t M = 0, K = 0, N = 0;
    Shape a_shape, b_shape;  // promoted to rank >= 2
    Shape batch;             // broadcast batch dims
    Shape out;
    std::vector<int64_t> a_off, b_off;  // per batch, in elements
    // Row strides of A, B and Y (B: N x K rows when trans_b) and the per-batch Y offsets: the
    // contiguous layout unless _perm_a / _perm_b / _perm_y read or write through a transpose.
    int64_t lda = 0, ldb = 0, ldc = 0;
    bool trans_b = false;
    std::vector<int64_t> y_off;
    bool strided() const {
        if (lda != K || ldb != N || ldc != N || trans_b) return true;
        for (size_t i = 0; i < y_off.size(); ++i)
            if (y_off[i] != int64_t(i) * M * N) return true;
        return false;
    }
};

Status matmul_geometry(const OpContext& ctx, const Shape& a, const Shape& b, MatMulGeom* g) {
    if (a.empty() || b.empty())
        return ctx.fail("inputs must have rank >= 1, got shapes ", shape_str(a), " and ", shape_str(b));
    g->a_shape = a.size() == 1 ? Shape{1, a[0]} : a;
    g->b_shape = b.size() == 1 ? Shape{b[0], 1} : b;
    const Shape& A = g->a_shape;
    const Shape& B = g->b_shape;
    g->M = A[A.size() - 2];
    g->K = A[A.size() - 1];
    g->N = B[B.size() - 1];
    if (B[B.size() - 2] != g->K)
        return ctx.fail("inner dimensions do not match: A is ", shape_str(a), ", B is ", shape_str(b),
                        " (", g->K, " vs ", B[B.size() - 2], ")");
    Shape ab(A.begin(), A.end() - 2), bb(B.begin(), B.end() - 2);
    if (!broadcast_shapes(ab, bb, &g->batch))
        return ctx.fail("batch dimensions of ", shape_str(a), " and ", shape_str(b), " do not broadcast");
    g->out = g->batch;
    if (a.size() > 1) g->out.push_back(g->M);
    if (b.size() > 1) g->out.push_back(g->N);
    int64_t nb = shape_numel(g->batch);
    if (nb < 0) return ctx.fail("batch shape ", shape_str(g->batch), " is invalid");
    g->a_off.assign(size_t(nb), 0);
    g->b_off.assign(size_t(nb), 0);
    if (g->batch.size() > size_t(kMaxRank)) return ctx.fail("rank is too large");
    Shape sa = broadcast_strides(ab, g->batch), sb = broadcast_strides(bb, g->batch);
    const int64_t amat = g->M * g->K, bmat = g->K * g->N;
    for_each_broadcast2(g->batch, sa, sb, [&](int64_t i, int64_t oa, int64_t ob) {
        g->a_off[size_t(i)] = oa * amat;
        g->b_off[size_t(i)] = ob * bmat;
    });
    g->lda = g->K;
    g->ldb = g->ldc = g->N;
    g->trans_b = false;
    g->y_off.resize(size_t(nb));
    for (int64_t i = 0; i < nb; ++i) g->y_off[size_t(i)] = i * g->M * g->N;
    return {};
}

// ---------------------------------------------------------------- transposed operands
// The fold_matmul_transpose pass (attention heads) folds Transposes around a float32 MatMul into
// attributes: `_perm_a` / `_perm_b`: the operand is Transpose(input, perm); `_perm_y`: the output
// is Transpose(product, perm). The kernel reads and writes through strides, no copy: A's and Y's
// last axis must stay innermost, B's last or second-to-last axis must be innermost (the latter is
// a transposed B, packed per run).
bool read_perm(const OpContext& ctx, const char* name, std::vector<int64_t>* p) {
    const Attr* a = ctx.attr(name);
    if (!a) return false;
    *p = a->ints;
    return true;
}

Status check_perm(const OpContext& ctx, const char* name, const std::vector<int64_t>& p, size_t rank) {
    std::vector<char> seen(rank, 0);
    bool ok = p.size() == rank && rank >= 2;
    for (int64_t v : p) {
        if (!ok || v < 0 || v >= int64_t(rank) || seen[size_t(v)]) {
            ok = false;
            break;
        }
        seen[size_t(v)] = 1;
    }
    if (!ok) return ctx.fail(name, " must be a permutation of the ", rank, " axes (rank >= 2)");
    return {};
}

Shape contiguous_strides(const Shape& s) {
    Shape st(s.size(), 1);
    for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
    return st;
}

// Logical shape and element strides of Transpose(raw, perm) read in place; raw's own strides cs
// (contiguous unless the operand is a _view_*).
void permuted_view(const Shape& raw, const Shape& cs, const std::vector<int64_t>& perm, Shape* shape, Shape* strides) {
    shape->resize(raw.size());
    strides->resize(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
        (*shape)[i] = raw[size_t(perm[i])];
        (*strides)[i] = cs[size_t(perm[i])];
    }
}

// Offset of each output batch (in g.batch order) in a tensor of logical shape `l` / strides `ls`
// whose leading rank-2 dims broadcast against the batch.
std::vector<int64_t> batch_offsets(const Shape& batch, const Shape& l, const Shape& ls) {
    const int64_t nb = shape_numel(batch);
    const size_t lb = l.size() - 2, skip = batch.size() - lb;
    std::vector<int64_t> off(size_t(nb), 0), idx(batch.size(), 0);
    for (int64_t i = 0; i < nb; ++i) {
        int64_t o = 0;
        for (size_t j = 0; j < lb; ++j)
            if (l[j] != 1) o += idx[skip + j] * ls[j];
        off[size_t(i)] = o;
        for (size_t d = batch.size(); d-- > 0;) {
            if (++idx[d] < batch[d]) break;
            idx[d] = 0;
        }
    }
    return off;
}

// `_view_a` / `_view_b` (fold_matmul_transpose: an operand that was Reshape(Slice(x)) along x's
// last axis, PyTorch's Q / K / V of one in-projection): the input is x itself, read as the view of
// shape _view_*, element strides _view_*_strides, first element _view_*_offset. False when absent;
// an error when the view leaves x.
Status read_view(const OpContext& ctx, int slot, Shape* shape, Shape* strides, int64_t* offset, bool* has) {
    const std::string name = slot == 0 ? "_view_a" : "_view_b";
    const Attr* v = ctx.attr(name.c_str());
    *has = v != nullptr;
    if (!v) return {};
    const Attr* st = ctx.attr((name + "_strides").c_str());
    *shape = v->ints;
    *strides = st ? st->ints : Shape{};
    *offset = ctx.attr_int((name + "_offset").c_str(), 0);
    int64_t last = *offset;
    bool ok = !shape->empty() && strides->size() == shape->size() && *offset >= 0;
    for (size_t i = 0; ok && i < shape->size(); ++i) {
        ok = (*shape)[i] > 0 && (*strides)[i] >= 0;
        if (ok) last += ((*shape)[i] - 1) * (*strides)[i];
    }
    if (!ok || last >= shape_numel(ctx.in_shape(slot)))
        return ctx.fail(name, " ", shape_str(*shape), " (strides ", shape_str(*strides), ", offset ",
                        *offset, ") does not lie within input ", slot, " of shape ", shape_str(ctx.in_shape(slot)));
    return {};
}

// MatMul geometry with the _perm_* and _view_* attributes applied; *strided is false when none is
// present.
Status matmul_geometry_perm(const OpContext& ctx, MatMulGeom* g, Shape* out_shape, bool* strided) {
    Shape ra = ctx.in_shape(0), rb = ctx.in_shape(1), csa = contiguous_strides(ra), csb = contiguous_strides(rb);
    int64_t offa = 0, offb = 0;
    bool va = false, vb = false;
    JIFFY_RETURN_IF_ERROR(read_view(ctx, 0, &ra, &csa, &offa, &va));
    JIFFY_RETURN_IF_ERROR(read_view(ctx, 1, &rb, &csb, &offb, &vb));
    std::vector<int64_t> pa, pb, py;
    const bool ha = read_perm(ctx, "_perm_a", &pa), hb = read_perm(ctx, "_perm_b", &pb),
               hy = read_perm(ctx, "_perm_y", &py);
    *strided = ha || hb || hy || va || vb;
    if (!*strided) {
        JIFFY_RETURN_IF_ERROR(matmul_geometry(ctx, ra, rb, g));
        *out_shape = g->out;
        return {};
    }
    if (ra.size() < 2 || rb.size() < 2)
        return ctx.fail("_perm_a/_perm_b/_perm_y need inputs of rank >= 2, got ", shape_str(ra), " and ", shape_str(rb));
    if (ha) JIFFY_RETURN_IF_ERROR(check_perm(ctx, "_perm_a", pa, ra.size()));
    if (hb) JIFFY_RETURN_IF_ERROR(check_perm(ctx, "_perm_b", pb, rb.size()));
    auto identity = [](size_t r) {
        std::vector<int64_t> p(r);
        for (size_t i = 0; i < r; ++i) p[i] = int64_t(i);
        return p;
    };
    if (!ha) pa = identity(ra.size());
    if (!hb) pb = identity(rb.size());
    Shape la, lsa, lb, lsb;
    permuted_view(ra, csa, pa, &la, &lsa);
    permuted_view(rb, csb, pb, &lb, &lsb);
    JIFFY_RETURN_IF_ERROR(matmul_geometry(ctx, la, lb, g));
    const size_t a1 = la.size() - 1, b1 = lb.size() - 1;
    if (lsa[a1] != 1) return ctx.fail("_perm_a must keep A's last axis innermost");
    g->lda = lsa[a1 - 1];
    if (lsb[b1] == 1) {
        g->ldb = lsb[b1 - 1];
    } else if (lsb[b1 - 1] == 1) {
        g->trans_b = true;
        g->ldb = lsb[b1];
    } else {
        return ctx.fail("_perm_b must keep one of B's last two axes innermost");
    }
    g->a_off = batch_offsets(g->batch, la, lsa);
    g->b_off = batch_offsets(g->batch, lb, lsb);
    for (int64_t& o : g->a_off) o += offa;
    for (int64_t& o : g->b_off) o += offb;
    const size_t ry = g->out.size();
    if (!hy) py = identity(ry);
    JIFFY_RETURN_IF_ERROR(check_perm(ctx, "_perm_y", py, ry));
    Shape o(ry), lsy(ry);
    for (size_t i = 0; i < ry; ++i) o[i] = g->out[size_t(py[i])];
    const Shape cso = contiguous_strides(o);
    for (size_t i = 0; i < ry; ++i) lsy[size_t(py[i])] = cso[i];
    if (lsy[ry - 1] != 1) return ctx.fail("_perm_y must keep the product's last axis innermost");
    g->ldc = lsy[ry - 2];
    g->y_off = batch_offsets(g->batch, g->out, lsy);
    *out_shape = o;
    return {};
}

// ---------------------------------------------------------------- fused epilogue
// A graph pass may fuse a following activation into Gemm / MatMul: `_fused_act` (ONNX op name),
// `_fused_alpha`, `_fused_beta`; and a following Add of a constant [N] vector into MatMul as a 3rd
// input with `_fused_bias` = 1. Absent attributes: plain Gemm / MatMul.
Status fused_activation(const OpContext& ctx, kernels::Activation* act) {
    *act = kernels::Activation{};
    const Attr* at = ctx.attr("_fused_act");
    if (!at) return {};
    const std::string name = ctx.attr_str("_fused_act", "");
    const float alpha = ctx.has_attr("_fused_alpha") ? ctx.attr_float("_fused_alpha", 0.0f) : NAN;
    const float beta = ctx.has_attr("_fused_beta") ? ctx.attr_float("_fused_beta", 0.0f) : NAN;
    if (!kernels::parse_activation(name, alpha, beta, act))
        return ctx.fail("unknown fused activation _fused_act='", name, "'");
    return {};
}

// The float32 products' end: y += res (a _fused_residual, laid out as y; may be null), then the
// activation where `post` (the product did not apply it on registers), over n values.
void residual_then_act(kernels::Isa isa, float* y, const float* res, int64_t n, bool post,
                       const kernels::Activation& act, kernels::ActApplyFn act_fn) {
    if (res) kernels::conv_epilogue(isa, y, res, n, kernels::ConvEpi{});
    if (post) act_fn(act, y, y, n);
}

// y[rows x N] = act(y + bias[N]) in place (reference paths; bias may be null).
template <typename T>
void bias_act_rows(T* y, int64_t rows, int64_t N, const T* bias, const kernels::Activation& act) {
    if (!bias && act.kind == kernels::ActKind::kNone) return;
    for (int64_t i = 0; i < rows; ++i) {
        T* yr = y + i * N;
        if (bias)
            for (int64_t j = 0; j < N; ++j) yr[j] = T(yr[j] + bias[j]);
        if (act.kind != kernels::ActKind::kNone)
            for (int64_t j = 0; j < N; ++j) yr[j] = kernels::act_scalar_t<T>(act, yr[j]);
    }
}

template <typename T>
class MatMulKernel : public Kernel {
public:
    MatMulKernel(MatMulGeom g, bool has_bias, kernels::Activation act)
        : g_(std::move(g)), has_bias_(has_bias), act_(act) {}
    Status run(const void* const* in, void* const* out) const override {
        const T* a = static_cast<const T*>(in[0]);
        const T* b = static_cast<const T*>(in[1]);
        const T* bias = has_bias_ ? static_cast<const T*>(in[2]) : nullptr;
        T* y = static_cast<T*>(out[0]);
        const int64_t ymat = g_.M * g_.N;
        for (size_t i = 0; i < g_.a_off.size(); ++i)
            matmul_block(a + g_.a_off[i], b + g_.b_off[i], y + int64_t(i) * ymat, g_.M, g_.K, g_.N);
        bias_act_rows(y, int64_t(g_.a_off.size()) * g_.M, g_.N, bias, act_);
        return {};
    }

private:
    MatMulGeom g_;
    bool has_bias_;
    kernels::Activation act_;
};

// One GEMM or GEMV split across the intra-op pool (docs/threading.md): GEMM by row blocks when
// tall enough, else by column panels of the packed B; GEMV by column panels of kGemvPanel (the
// packed weights' panels, so each column keeps its accumulation order). The sub-views
// of B are built at prepare (non-owning), so run only indexes them. Every output is summed in the
// same order as on one thread.
class ParGemm {
public:
    bool on() const { return pool_ != nullptr; }
    int chunks() const { return chunks_; }

    void setup_gemm(ThreadPool* pool, int chunks, int64_t M, const kernels::PackedB& B) {
        if (!pool || chunks < 2) return;
        const int64_t panels = (B.N + B.NR - 1) / B.NR;
        if (M >= 16 * chunks) {
            rows_ = true;
            if (chunks == pool->threads()) bal_ = std::make_unique<Balance>(chunks);  // rows cut per run
        } else if (panels >= 2) {
            chunks = int(std::min<int64_t>(chunks, panels));
            for (int t = 0; t < chunks; ++t) {
                int64_t p0, p1;
                chunk_range(panels, chunks, t, 1, &p0, &p1);
                kernels::PackedB v = B;
                v.N = std::min(B.N, p1 * B.NR) - p0 * B.NR;
                v.data = std::shared_ptr<float>(std::shared_ptr<float>(), const_cast<float*>(B.panel(p0)));
                col0_.push_back(p0 * B.NR);
                gemm_views_.push_back(std::move(v));
            }
        } else {
            return;
        }
        chunks_ = chunks;
        pool_ = pool;
    }

    // B: the kernel's GEMV weights, repacked here into the split layout (narrow panels: each
    // thread's columns one contiguous stretch) when the GEMV splits.
    void setup_gemv(ThreadPool* pool, int chunks, kernels::PackedGemv* B) {
        if (!pool || chunks < 2) return;
        // Column ranges of sgemv_split_unit (4 vectors) over the main columns; the tail block
        // (past the last full 8-vector block) goes with the last range. A range's columns sum in
        // the same order as in the whole GEMV (sgemv_cols_for), so results are bitwise equal.
        const kernels::Isa isa = kernels::active_isa();
        const int64_t unit = kernels::sgemv_split_unit(isa), main = kernels::sgemv_main_cols(isa, B->N);
        const int64_t units = main / unit + (main < B->N ? 1 : 0);
        chunks = int(std::min<int64_t>(chunks, units));
        if (chunks < 2) return;
        for (int t = 0; t < chunks; ++t) {
            int64_t u0, u1;
            chunk_range(units, chunks, t, 1, &u0, &u1);
            col0_.push_back(u0 * unit);  // < N: every range holds at least one unit
        }
        col0_.push_back(B->N);
        // One range per thread: cut per run at the threads' measured speeds (whole units).
        const bool balanced = chunks == pool->threads();
        if (balanced) unit_ = unit, units_ = units, bal_ = std::make_unique<Balance>(chunks);
        // Alternating directions pays only where a thread's share of the weights is past L2 too
        // (weather's 528 KiB halves: 1.09x slower with it). The segmented sums stay, so that the
        // bits are those of one thread (docs/threading.md). A balanced range can grow to the
        // largest share a thread can get.
        int64_t widest = 0;
        for (int t = 0; t < chunks; ++t) widest = std::max(widest, col0_[size_t(t) + 1] - col0_[size_t(t)]);
        if (balanced)
            widest = std::max(widest, std::min(B->N, int64_t(std::ceil(double(units) * Balance::max_share(chunks))) * unit));
        // The fewest columns of a part that alternates (kGemvSerpentineMin of weights): each run, a
        // narrower part reads forward only (gemv()); no part can reach it: none alternates.
        serp_cols_ = (kernels::kGemvSerpentineMin + B->K * int64_t(sizeof(float)) - 1) / (B->K * int64_t(sizeof(float)));
        if (widest < serp_cols_) B->alternate = false;
        cols_fn_ = kernels::sgemv_cols_for(isa);
        *B = kernels::repack_gemv_split(*B, isa);
        gemv_ = B;
        chunks_ = chunks;
        pool_ = pool;
    }

    void gemm(kernels::SgemmFn fn, int64_t M, const float* A, int64_t lda, const kernels::PackedB& B,
              const float* bias, float* C, int64_t ldc, kernels::Act act) const {
        if (rows_ && bal_) {
            pool_->for_balanced(M, 8, bal_.get(), [&](int, int64_t m0, int64_t m1) {
                if (m1 > m0) fn(m1 - m0, A + m0 * lda, lda, B, bias, C + m0 * ldc, ldc, act);
            });
        } else if (rows_) {
            pool_->parallel_for(chunks_, [&](int t) {
                int64_t m0, m1;
                chunk_range(M, chunks_, t, 8, &m0, &m1);
                if (m1 > m0) fn(m1 - m0, A + m0 * lda, lda, B, bias, C + m0 * ldc, ldc, act);
            });
        } else {
            pool_->parallel_for(chunks_, [&](int t) {
                const int64_t n0 = col0_[size_t(t)];
                fn(M, A, lda, gemm_views_[size_t(t)], bias ? bias + n0 : nullptr, C + n0, ldc, act);
            });
        }
    }

    void gemv(const float* a, const float* bias, float* y, const kernels::Activation& act, bool backward) const {
        if (bal_) {
            const int64_t N = gemv_->N;
            pool_->for_balanced(units_, 1, bal_.get(), [&](int, int64_t u0, int64_t u1) {
                const int64_t c0 = u0 * unit_, c1 = u1 == units_ ? N : u1 * unit_;
                if (u1 > u0) cols_fn_(a, *gemv_, c0, c1, bias, y, act, backward && c1 - c0 >= serp_cols_);
            });
            return;
        }
        pool_->parallel_for(chunks_, [&](int t) {
            const int64_t c0 = col0_[size_t(t)], c1 = col0_[size_t(t) + 1];
            cols_fn_(a, *gemv_, c0, c1, bias, y, act, backward && c1 - c0 >= serp_cols_);
        });
    }

private:
    ThreadPool* pool_ = nullptr;
    int chunks_ = 1;
    bool rows_ = false;
    // Balanced (one range per thread, cut per run): GEMM rows, or GEMV units of unit_ columns
    // (the last one the tail block).
    std::unique_ptr<Balance> bal_;
    int64_t unit_ = 0, units_ = 0;
    int64_t serp_cols_ = 0;  // the fewest columns of a part that alternates directions
    std::vector<int64_t> col0_;
    std::vector<kernels::PackedB> gemm_views_;
    const kernels::PackedGemv* gemv_ = nullptr;  // the kernel's own (outlives this)
    kernels::SgemvColsFn cols_fn_ = nullptr;
};

// The bytes of the constants the graph being compiled reads: all of them, and those a run reads
// whole (`streamed`: not a Gather's table, of which a run reads a few rows). One walk.
struct ConstantBytes {
    int64_t all = 0, streamed = 0;
};
ConstantBytes graph_constant_bytes(const OpContext& ctx) {
    const Graph& g = ctx.graph();
    std::vector<char> seen(g.values.size(), 0), whole(g.values.size(), 0);
    ConstantBytes total;
    for (const Node& n : g.nodes)
        for (size_t i = 0; i < n.inputs.size(); ++i) {
            const int v = n.inputs[i];
            if (v < 0 || !g.values[size_t(v)].constant) continue;
            const int64_t b = int64_t(g.values[size_t(v)].constant->nbytes());
            if (!seen[size_t(v)]) seen[size_t(v)] = 1, total.all += b;
            if (!whole[size_t(v)] && !(i == 0 && n.op == "Gather")) whole[size_t(v)] = 1, total.streamed += b;
        }
    return total;
}

// A GEMV's choices that depend on the graph being compiled (it reads the whole graph once; before
// set_parallel, whose split layout copies the order). Returns whether its fast weights
// (kernels::gemv_set_fast: 24-bit, or 20-bit blocks on Intel) would pay.
// - The serpentine order (kernels/gemm.h) that pack_b_gemv chose by size stays only when the rest
//   of the graph's constants total <= 256 KiB, so its weights are still in L2 when it runs next
//   (the openWakeWord heads; not an MLP whose other layers read megabytes between two runs of
//   each: 1.5% slower there, docs/gemv.md).
// - The 24-bit weights (docs/gemv.md) cut the bytes a run streams by 1/4 for one byte permute per
//   16 weights, a gain where the weights come from L2 or further on every run and a loss (~1.3x on
//   Zen 4) where they stay in L1 between runs. So: the GEMV's weights at least 16 KiB and the
//   graph's constants at least 64 KiB (twice an L1: between two runs of the GEMV the rest of the
//   model has pushed its weights out).
bool choose_gemv_modes(const OpContext& ctx, kernels::PackedGemv* g) {
    if (!g->data) return false;
    const int64_t own = 4 * g->K * g->N;
    const ConstantBytes total = graph_constant_bytes(ctx);
    if (g->seg_rows > 0 && total.all - own > (256 << 10)) g->seg_rows = 0, g->alternate = false;
    if (own < (16 << 10) || total.all < (64 << 10)) return false;
    // Intel's cores run the 24-bit block from L2 at ~half float32's rate (768 KB: 8.9 against 5.7
    // us) and from L3 at 1.5x it (4 MB: 103 against 152 us); the 20-bit blocks they take instead
    // (kernels::gemv_set_fast) cost more still in L2: there only where the constants a run reads
    // whole overflow L2, so that they come from L3 every run (a Gather's table not counted).
    return kernels::tuning_vendor() != kernels::CpuVendor::kIntel || total.streamed > kernels::l2_cache_bytes();
}

// Kernel::set_fast_weights of a GEMV: its less exact weights (kernels::gemv_set_fast: 20-bit
// blocks on Intel, 24-bit elsewhere; group "products") where they pay and the ISA has them, else kNone.
Kernel::FastWeights gemv_fast_weights(kernels::PackedGemv* g, kernels::Isa isa, bool pays, bool fast) {
    if (!pays || !kernels::gemv_set_fast(g, isa, fast)) return Kernel::FastWeights::kNone;
    return Kernel::FastWeights::kProduct;
}

// The kernel column's name of a GEMV (jiffy inspect --steps).
std::string gemv_name(const kernels::PackedGemv& g) {
    std::string k = g.alternate ? "gemv serpentine" : g.seg_rows ? "gemv segmented" : "gemv";
    return g.use20 ? k + " i20" : g.use24 ? k + " w24" : k;
}

// The serpentine GEMV's direction (kernels/gemm.h, docs/gemv.md), flipped on every run: a plan
// runs on one thread at a time (like its shared scratch), so a plain flag.
struct GemvDirection {
    mutable bool backward = false;
    bool next() const {  // this run's direction
        backward = !backward;
        return !backward;
    }
};

// ---------------------------------------------------------------- AMX products
// One tall product with constant weights on AMX (kernels/amx.h; BF16x3 by default, FP32's
// accuracy), split by 32-column blocks across the pool where set_parallel says: shared by MatMul
// and Gemm. Their AVX-512 packings stay: the fallback for inputs AMX's parts cannot carry.
class AmxProduct {
public:
    // Rows >= 16, K >= 64, N >= 32 on a core with AMX; false (nothing kept) otherwise or where B
    // holds a value the parts cannot carry. B is K x N (ldb) or, trans_b, N x K.
    bool init(int64_t M, int64_t K, int64_t N, const float* B, int64_t ldb, bool trans_b) {
        if (M < 16 || K < 64 || N < 32 || !kernels::amx_usable()) return false;
        amx_ = kernels::AmxGemm(M, K, N);
        w_ = kernels::alloc_weights((amx_.packed_b_halves() + 1) / 2);
        if (!amx_.pack_b(B, ldb, trans_b, reinterpret_cast<uint16_t*>(w_.get()))) {
            w_.reset();
            return false;
        }
        scr_.assign(amx_.scratch_floats(), 0.0f);
        return true;
    }
    bool on() const { return w_ != nullptr; }
    // BF16x3 only: the weights to 17 bits (B's lo parts left out; Kernel::set_fast_weights).
    Kernel::FastWeights set_fast_weights(bool fast) {
        return amx_fast_weights(amx_, w_ != nullptr, fast, Kernel::FastWeights::kProduct);
    }
    std::string describe() const {
        return std::string("gemm ") + amx_.mode_name() + " 32x32" +
               (pool_ ? " threaded x" + std::to_string(bal_->threads()) : "");
    }
    // By 32-column blocks, one part per thread (each splits A itself, its own scratch).
    void set_parallel(ThreadPool* pool, int chunks) {
        if (!w_ || !pool || chunks < 2 || chunks != pool->threads() || (amx_.N() + 31) / 32 < chunks) return;
        pool_ = pool;
        bal_ = std::make_unique<Balance>(chunks);
        scr_.assign(amx_.scratch_floats() * size_t(chunks), 0.0f);
    }
    // y = act(a . B + bias + res) (bias and res may be null; res laid out as y; `act` applied
    // with act_fn where not kNone); false where A holds a value the parts cannot carry (the
    // caller runs its AVX-512 kernel).
    bool run(const float* a, const float* bias, float* y, const kernels::Activation& act,
             kernels::ActApplyFn act_fn, const float* res = nullptr) const {
        const kernels::ConvEpi add_res;  // the row pass adds res (no activation: act_fn follows)
        const kernels::ConvEpi* epi = res ? &add_res : nullptr;
        const uint16_t* w = reinterpret_cast<const uint16_t*>(w_.get());
        const int64_t K = amx_.K(), N = amx_.N(), M = amx_.M();
        const bool has_act = act.kind != kernels::ActKind::kNone;
        if (!pool_ || pool_->serial()) {  // one part (caller-only mode: A split once)
            if (!amx_.run(a, K, w, bias, y, N, scr_.data(), 0, -1, res, epi)) return false;
            if (has_act) act_fn(act, y, y, M * N);
            return true;
        }
        bool ok[ThreadPool::kMaxThreads];
        const size_t sn = amx_.scratch_floats();
        for (int t = 0; t < bal_->threads(); ++t) ok[t] = true;
        // Each part applies the activation to its own columns (still in its core's cache).
        pool_->for_balanced((N + 31) / 32, 1, bal_.get(), [&](int t, int64_t b, int64_t e) {
            const int64_t n0 = b * 32, n1 = std::min(N, e * 32);
            ok[t] = amx_.run(a, K, w, bias, y, N, scr_.data() + size_t(t) * sn, n0, n1, res, epi);
            if (ok[t] && has_act && n1 > n0)
                for (int64_t m = 0; m < M; ++m) act_fn(act, y + m * N + n0, y + m * N + n0, n1 - n0);
        });
        for (int t = 0; t < bal_->threads(); ++t)
            if (!ok[t]) return false;
        return true;
    }

private:
    kernels::AmxGemm amx_;
    std::shared_ptr<float> w_;         // packed B (BF16 parts)
    mutable std::vector<float> scr_;   // the split A, per run and thread (not reentrant)
    ThreadPool* pool_ = nullptr;       // set: split by 32-column blocks across it
    std::unique_ptr<Balance> bal_;
};

// float32 MatMul on the packed SGEMM. B constant: packed once here (one PackedB per distinct B
// matrix; batches that share B and have contiguous A rows run as one tall GEMM, M = 1 as a GEMV).
// B not constant: packed per run into a scratch buffer sized here (mutable state: this kernel is
// not reentrant; a later change moves scratch into the arena).
class MatMulF32Kernel : public Kernel {
public:
    // residual: `_fused_residual` (its input after A, B and the bias), added before the activation.
    MatMulF32Kernel(const MatMulGeom& g, const float* bconst, bool has_bias, kernels::Activation act,
                    bool residual = false)
        : g_(g), has_bias_(has_bias), residual_(residual), act_(act) {
        const kernels::Isa isa = kernels::active_isa();
        const int64_t M = g.M, K = g.K, N = g.N, nb = int64_t(g.a_off.size());
        isa_ = isa;
        gemm_ = kernels::sgemm_for(isa);
        // The microkernel fuses ReLU itself; other activations run over the finished rows (and
        // every activation where a residual comes first, as do the GEMVs' then).
        gemm_act_ = act.kind == kernels::ActKind::kRelu && !residual ? kernels::Act::kRelu : kernels::Act::kNone;
        post_act_ = act.kind != kernels::ActKind::kNone && (residual || act.kind != kernels::ActKind::kRelu);
        if (!residual) vec_act_ = act;
        act_fn_ = kernels::act_apply_for(isa);
        bool shared_b = true, contiguous_a = true;
        for (int64_t i = 0; i < nb; ++i) {
            shared_b = shared_b && g.b_off[size_t(i)] == g.b_off[0];
            contiguous_a = contiguous_a && g.a_off[size_t(i)] == i * M * K;
        }
        tall_ = shared_b && contiguous_a && !g.strided();
        if (bconst) {
            if (tall_ && nb * M == 1 && N <= kernels::kGemvNarrowMaxN && kernels::sgemv_narrow_for(isa)) {
                narrow_ = kernels::pack_gemv_narrow(bconst + g.b_off[0], K, N, N, false);
                narrow_fn_ = kernels::sgemv_narrow_for(isa);
            } else if (tall_ && nb * M == 1) {
                gemv_ = kernels::pack_b_gemv(bconst + g.b_off[0], K, N, N, false);
                gemv_fn_ = kernels::sgemv_for(isa);
            } else {
                // One packed matrix per distinct B batch offset.
                for (int64_t i = 0; i < nb; ++i) {
                    int64_t idx = -1;
                    for (size_t j = 0; j < b_keys_.size(); ++j)
                        if (b_keys_[j] == g.b_off[size_t(i)]) idx = int64_t(j);
                    if (idx < 0) {
                        idx = int64_t(b_keys_.size());
                        b_keys_.push_back(g.b_off[size_t(i)]);
                        packed_.push_back(kernels::pack_b(bconst + g.b_off[size_t(i)], K, N, g.ldb, g.trans_b, isa));
                    }
                    b_index_.push_back(idx);
                }
                // One tall product on a core with AMX (AmxProduct).
                if (tall_) amx_.init(nb * M, K, N, bconst + g.b_off[0], g.ldb, g.trans_b);
            }
        } else {
            scratch_.assign(size_t(kernels::packed_floats(K, N, isa)) + 16, 0.0f);
            float* p = scratch_.data();
            p += (16 - (reinterpret_cast<uintptr_t>(p) / sizeof(float)) % 16) % 16;  // 64-byte align
            view_ = kernels::packed_view(K, N, isa, p);
        }
    }

    FastWeights set_fast_weights(bool fast) override {
        if (gemv_.data) return gemv_fast_weights(&gemv_, isa_, fast_pays_, fast);
        return amx_.set_fast_weights(fast);
    }
    std::string describe() const override {
        if (amx_.on()) return amx_.describe();
        std::string k = narrow_.data       ? "gemv_narrow dot"
                        : gemv_.data       ? gemv_name(gemv_)
                        : !packed_.empty() ? "gemm packed-B"
                                           : "gemm runtime-B";
        return par_.on() ? k + " threaded x" + std::to_string(par_.chunks()) : k;
    }

    Status run(const void* const* in, void* const* out) const override {
        const float* a = static_cast<const float*>(in[0]);
        const float* b = static_cast<const float*>(in[1]);
        const float* bias = has_bias_ ? static_cast<const float*>(in[2]) : nullptr;
        const float* res = residual_ ? static_cast<const float*>(in[has_bias_ ? 3 : 2]) : nullptr;
        float* y = static_cast<float*>(out[0]);
        const int64_t M = g_.M, K = g_.K, N = g_.N, nb = int64_t(g_.a_off.size());
        if (narrow_.data || gemv_.data) {
            if (narrow_.data) {
                narrow_fn_(a, narrow_, bias, y, vec_act_);
            } else {
                const bool backward = gemv_.alternate && dir_.next();
                if (par_.on())
                    par_.gemv(a, bias, y, vec_act_, backward);
                else
                    gemv_fn_(a, gemv_, bias, y, vec_act_, backward);
            }
            residual_then_act(isa_, y, res, nb * M * N, residual_ && act_.kind != kernels::ActKind::kNone, act_,
                              act_fn_);
            return {};
        }
        if (amx_.on() && amx_.run(a, bias, y, act_, act_fn_, res)) return {};
        if (!packed_.empty()) {
            if (tall_) {
                if (par_.on())
                    par_.gemm(gemm_, nb * M, a, K, packed_[0], bias, y, N, gemm_act_);
                else
                    gemm_(nb * M, a, K, packed_[0], bias, y, N, gemm_act_);
            } else {
                for (int64_t i = 0; i < nb; ++i)
                    gemm_(M, a + g_.a_off[size_t(i)], g_.lda, packed_[size_t(b_index_[size_t(i)])], bias,
                          y + g_.y_off[size_t(i)], g_.ldc, gemm_act_);
            }
        } else {
            int64_t last = -1;
            for (int64_t i = 0; i < nb; ++i) {
                const float* bi = b + g_.b_off[size_t(i)];
                if (N == view_.NR && !g_.trans_b && g_.ldb == N && reinterpret_cast<uintptr_t>(bi) % 64 == 0) {
                    // One K x NR panel is B itself (e.g. attention's 32-wide heads): no packing.
                    kernels::PackedB direct = view_;
                    direct.data = std::shared_ptr<float>(std::shared_ptr<float>(), const_cast<float*>(bi));
                    gemm_(M, a + g_.a_off[size_t(i)], g_.lda, direct, bias, y + g_.y_off[size_t(i)], g_.ldc,
                          gemm_act_);
                    continue;
                }
                if (g_.b_off[size_t(i)] != last) {
                    last = g_.b_off[size_t(i)];
                    kernels::pack_b_into(bi, g_.ldb, g_.trans_b, view_);
                }
                gemm_(M, a + g_.a_off[size_t(i)], g_.lda, view_, bias, y + g_.y_off[size_t(i)], g_.ldc, gemm_act_);
            }
        }
        residual_then_act(isa_, y, res, nb * M * N, post_act_, act_, act_fn_);
        return {};
    }

    bool is_gemv() const { return gemv_.data != nullptr; }
    bool on_amx() const { return amx_.on(); }

    // The GEMV's order in this model and whether its fast weights would pay (choose_gemv_modes).
    // Before set_parallel.
    void choose_order(const OpContext& ctx) { fast_pays_ = choose_gemv_modes(ctx, &gemv_); }
    // Threads (docs/threading.md): the one-GEMM/GEMV paths with a constant B split across `pool`.
    void set_parallel(ThreadPool* pool, int chunks) {
        if (gemv_.data)
            par_.setup_gemv(pool, chunks, &gemv_);
        else if (amx_.on())
            amx_.set_parallel(pool, chunks);  // the AVX-512 fallback then runs on the caller
        else if (tall_ && !packed_.empty()) {
            par_.setup_gemm(pool, chunks, int64_t(g_.a_off.size()) * g_.M, packed_[0]);
        }
    }

private:
    ParGemm par_;
    MatMulGeom g_;
    bool has_bias_, residual_;
    kernels::Isa isa_;
    kernels::Activation act_, vec_act_;  // vec_act_: what the GEMVs apply on registers
    kernels::SgemmFn gemm_ = nullptr;
    kernels::Act gemm_act_ = kernels::Act::kNone;
    bool post_act_ = false, tall_ = false;
    kernels::ActApplyFn act_fn_ = nullptr;
    kernels::PackedGemv gemv_;
    kernels::SgemvFn gemv_fn_ = nullptr;
    GemvDirection dir_;
    bool fast_pays_ = false;            // set_fast_weights may take the GEMV's fast weights (choose_order)
    kernels::PackedGemvNarrow narrow_;  // M = 1, N <= 16 (AVX-512): dot products, no thread split
    kernels::SgemvNarrowFn narrow_fn_ = nullptr;
    std::vector<kernels::PackedB> packed_;
    std::vector<int64_t> b_keys_, b_index_;
    AmxProduct amx_;                      // on(): the product runs on AMX
    mutable std::vector<float> scratch_;  // non-constant B, packed per run (not reentrant)
    kernels::PackedB view_;
};

Status prep_MatMul(OpContext& ctx) {
    if (!ctx.has_input(0) || !ctx.has_input(1)) return ctx.fail("needs two inputs A and B");
    DType t = ctx.in_dtype(0);
    if (ctx.in_dtype(1) != t)
        return ctx.fail("inputs have different dtypes: ", dtype_name(t), " and ", dtype_name(ctx.in_dtype(1)));
    if (!dtype_is_int(t) && t != DType::kF32 && t != DType::kF64)
        return ctx.fail_unsupported("dtype ", dtype_name(t), " is not supported");
    MatMulGeom g;
    Shape out_shape;
    bool strided = false;
    JIFFY_RETURN_IF_ERROR(matmul_geometry_perm(ctx, &g, &out_shape, &strided));
    if (strided && t != DType::kF32) return ctx.fail("_perm_a/_perm_b/_perm_y need float32, got ", dtype_name(t));
    kernels::Activation act;
    JIFFY_RETURN_IF_ERROR(fused_activation(ctx, &act));
    const bool has_bias = ctx.attr_int("_fused_bias", 0) != 0;
    const bool residual = ctx.attr_int("_fused_residual", 0) != 0;
    const int n_in = 2 + int(has_bias) + int(residual);
    if (ctx.num_inputs() > n_in)
        return ctx.fail("takes ", n_in, " inputs here (A, B, one more with _fused_bias=1, one more with "
                        "_fused_residual=1), got ", ctx.num_inputs());
    if (has_bias) {
        if (!ctx.has_input(2) || ctx.in_dtype(2) != t || shape_numel(ctx.in_shape(2)) != g.N)
            return ctx.fail("_fused_bias=1 needs a 3rd input of ", g.N, " ", dtype_name(t), " values, got ",
                            ctx.has_input(2) ? shape_str(ctx.in_shape(2)) : std::string("none"));
    }
    if (residual) {
        const int ri = n_in - 1;
        if (!ctx.has_input(ri) || ctx.in_dtype(ri) != DType::kF32 || t != DType::kF32 ||
            shape_numel(ctx.in_shape(ri)) != shape_numel(out_shape))
            return ctx.fail("_fused_residual=1 needs float32 and a last input of ", shape_numel(out_shape),
                            " values (the output's), got ",
                            ctx.has_input(ri) ? shape_str(ctx.in_shape(ri)) : std::string("none"));
    }
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, t, out_shape));
    const Tensor* bc = ctx.in_const(1);
    // float32: the packed SGEMM when B is constant or the product is tall enough to repay
    // packing B per run (always when strided: the reference loop assumes contiguous operands).
    if (t == DType::kF32 && g.K > 0 && g.N > 0 && shape_numel(g.out) > 0 && (bc || g.M >= 4 || strided)) {
        auto k = std::make_unique<MatMulF32Kernel>(g, bc ? bc->as<float>() : nullptr, has_bias, act, residual);
        k->choose_order(ctx);
        const int64_t flops = 2 * int64_t(g.a_off.size()) * g.M * g.K * g.N;
        // On AMX a product splits from 16x the FLOPs: it runs ~1.5x faster and each part splits
        // all of A itself. transformer_encoder's 32 x 128 x 128 and 32 x 512 x 128 took 3.4 /
        // 11.6 us on one thread, 5.3 / 16.5 split in two (the model 43 -> 61 us at two threads);
        // from transformer_gelu's 64 x 256 x 256 (8.4 MFLOP) up the split gains.
        k->set_parallel(ctx.options().pool.get(),
                        k->is_gemv()  ? parallel_chunks_gemv(ctx.options(), flops, 4 * g.K * g.N)
                        : k->on_amx() ? parallel_chunks(ctx.options(), flops / 16)
                                      : parallel_chunks(ctx.options(), flops));
        ctx.set_kernel(std::move(k));
        return {};
    }
    if (residual) return ctx.fail("_fused_residual=1 needs the float32 product kernel (a constant B or 4+ rows)");
    return visit_numeric(t, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<MatMulKernel<T>>(std::move(g), has_bias, act));
        return {};
    });
}

// ---------------------------------------------------------------- Gemm

template <typename T>
class GemmKernel : public Kernel {
public:
    GemmKernel(int64_t M, int64_t K, int64_t N, bool ta, bool tb, float alpha, float beta, bool has_c,
               int64_t c_rs, int64_t c_cs, std::vector<T> packed_b, kernels::Activation act)
        : M_(M), K_(K), N_(N), ta_(ta), tb_(tb), alpha_(alpha), beta_(beta), has_c_(has_c),
          c_rs_(c_rs), c_cs_(c_cs), packed_b_(std::move(packed_b)), act_(act) {}

    Status run(const void* const* in, void* const* out) const override {
        const T* a = static_cast<const T*>(in[0]);
        const bool packed = !packed_b_.empty();
        const T* b = packed ? packed_b_.data() : static_cast<const T*>(in[1]);
        const T* c = has_c_ ? static_cast<const T*>(in[2]) : nullptr;
        T* y = static_cast<T*>(out[0]);
        const int64_t M = M_, K = K_, N = N_;
        constexpr bool kFloat = std::is_floating_point_v<T>;
        // 1. y = beta * C (floats; integers add C at the end), else 0.
        for (int64_t i = 0; i < M; ++i) {
            T* yr = y + i * N;
            if (kFloat && c) {
                const T* cr = c + i * c_rs_;
                for (int64_t j = 0; j < N; ++j) yr[j] = T(beta_) * cr[j * c_cs_];
            } else {
                for (int64_t j = 0; j < N; ++j) yr[j] = T(0);
            }
        }
        // 2. y += alpha * A' B' (alpha applied later for integers).
        const T alpha = kFloat ? T(alpha_) : T(1);
        if (!tb_ || packed) {  // b is K x N
            for (int64_t i = 0; i < M; ++i)
                for (int64_t k = 0; k < K; ++k)
                    axpy(y + i * N, b + k * N, T(alpha * (ta_ ? a[k * M + i] : a[i * K + k])), N);
        } else {  // b is N x K: transpose 64 x 64 tiles of it on the stack
            constexpr int64_t kT = 64;
            T tile[kT * kT];
            for (int64_t n0 = 0; n0 < N; n0 += kT) {
                const int64_t nb = std::min(kT, N - n0);
                for (int64_t k0 = 0; k0 < K; k0 += kT) {
                    const int64_t kb = std::min(kT, K - k0);
                    for (int64_t jj = 0; jj < nb; ++jj)
                        for (int64_t kk = 0; kk < kb; ++kk) tile[kk * nb + jj] = b[(n0 + jj) * K + k0 + kk];
                    for (int64_t i = 0; i < M; ++i)
                        for (int64_t kk = 0; kk < kb; ++kk) {
                            const int64_t k = k0 + kk;
                            axpy(y + i * N + n0, tile + kk * nb, T(alpha * (ta_ ? a[k * M + i] : a[i * K + k])), nb);
                        }
                }
            }
        }
        // 3. Integers: y = alpha * y + beta * C.
        if constexpr (!kFloat) {
            for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < N; ++j) {
                    T& v = y[i * N + j];
                    if (alpha_ != 1.0f) v = T(double(alpha_) * double(v));
                    if (c) {
                        T cv = c[i * c_rs_ + j * c_cs_];
                        v = T(v + (beta_ == 1.0f ? cv : T(double(beta_) * double(cv))));
                    }
                }
        }
        bias_act_rows<T>(y, M, N, nullptr, act_);
        return {};
    }

private:
    int64_t M_, K_, N_;
    bool ta_, tb_;
    float alpha_, beta_;
    bool has_c_;
    int64_t c_rs_, c_cs_;
    std::vector<T> packed_b_;  // constant B transposed to K x N (when transB)
    kernels::Activation act_;
};

// float32 Gemm with a constant B: alpha folded into B, packed once (GEMV layout when M = 1).
// C: a per-column vector ([N], [1, N]) or a scalar goes into the bias argument (pre-scaled by
// beta when constant; a non-constant per-column C with beta = 1 is passed through); any other C
// is added as beta * C after the product. transA copies A into a scratch buffer at run (mutable:
// this kernel is not reentrant; a later change moves scratch into the arena).
class GemmF32Kernel : public Kernel {
public:
    enum CMode { kNoC, kConstBias, kInputBias, kGeneralC };
    // amx: the product may run on AMX (AmxProduct: M >= 16, K >= 64, N >= 32; prep_Gemm's nodes).
    // residual: `_fused_residual` (input 3, laid out as Y), added after C, before the activation.
    GemmF32Kernel(int64_t M, int64_t K, int64_t N, bool ta, bool tb, float alpha, float beta, const float* bconst,
                  CMode cmode, std::vector<float> bias, int64_t c_rs, int64_t c_cs, kernels::Activation act,
                  bool amx = false, bool residual = false)
        : M_(M), K_(K), N_(N), ta_(ta && M > 1), beta_(beta), cmode_(cmode), bias_(std::move(bias)), c_rs_(c_rs),
          c_cs_(c_cs), residual_(residual), act_(act) {
        const kernels::Isa isa = kernels::active_isa();
        isa_ = isa;
        std::vector<float> scaled;  // B x alpha, for both packings (M > 1)
        if (M == 1) {
            if (N <= kernels::kGemvNarrowMaxN && kernels::sgemv_narrow_for(isa)) {
                narrow_ = kernels::pack_gemv_narrow(bconst, K, N, tb ? K : N, tb, alpha);
                narrow_fn_ = kernels::sgemv_narrow_for(isa);
            } else {
                gemv_ = kernels::pack_b_gemv(bconst, K, N, tb ? K : N, tb, alpha);
                gemv_fn_ = kernels::sgemv_for(isa);
            }
        } else {
            if (alpha != 1.0f) {
                scaled.assign(bconst, bconst + K * N);
                for (float& v : scaled) v *= alpha;
                bconst = scaled.data();
            }
            packed_ = kernels::pack_b(bconst, K, N, tb ? K : N, tb, isa);
            gemm_ = kernels::sgemm_for(isa);
            if (ta_) a_scratch_.assign(size_t(M * K), 0.0f);
        }
        // plain: nothing comes between the product and the activation, which the kernels may then
        // apply on registers.
        const bool plain = cmode_ != kGeneralC && !residual;
        gemm_act_ = plain && act.kind == kernels::ActKind::kRelu ? kernels::Act::kRelu : kernels::Act::kNone;
        post_act_ = act.kind != kernels::ActKind::kNone && (!plain || act.kind != kernels::ActKind::kRelu);
        if (M == 1 && plain) post_act_ = false, gemv_act_ = act;  // the GEMV applies it on registers
        act_fn_ = kernels::act_apply_for(isa);
        // What the FP32 microkernel fuses (Relu) the AMX path applies over its rows; C and the
        // other activations follow as on the FP32 path. The AVX-512 packing stays (fallback).
        if (amx && M > 1 && amx_.init(M, K, N, bconst, tb ? K : N, tb) && gemm_act_ == kernels::Act::kRelu)
            amx_act_ = act;
    }

    FastWeights set_fast_weights(bool fast) override {
        if (gemv_.data) return gemv_fast_weights(&gemv_, isa_, fast_pays_, fast);
        return amx_.set_fast_weights(fast);
    }
    std::string describe() const override {
        if (amx_.on()) return label_ + amx_.describe();
        std::string k = narrow_.data ? "gemv_narrow dot" : gemv_.data ? gemv_name(gemv_) : "gemm packed-B";
        k = label_ + k;
        return par_.on() ? k + " threaded x" + std::to_string(par_.chunks()) : k;
    }
    void set_label(std::string label) { label_ = std::move(label); }
    bool on_amx() const { return amx_.on(); }

    Status run(const void* const* in, void* const* out) const override {
        const float* a = static_cast<const float*>(in[0]);
        const float* c = cmode_ == kInputBias || cmode_ == kGeneralC ? static_cast<const float*>(in[2]) : nullptr;
        const float* res = residual_ ? static_cast<const float*>(in[3]) : nullptr;
        float* y = static_cast<float*>(out[0]);
        const int64_t M = M_, K = K_, N = N_;
        const float* bias = cmode_ == kConstBias ? bias_.data() : (cmode_ == kInputBias ? c : nullptr);
        if (narrow_.data) {
            narrow_fn_(a, narrow_, bias, y, gemv_act_);
        } else if (gemv_.data) {
            const bool backward = gemv_.alternate && dir_.next();
            if (par_.on())
                par_.gemv(a, bias, y, gemv_act_, backward);
            else
                gemv_fn_(a, gemv_, bias, y, gemv_act_, backward);
        } else {
            if (ta_) {  // A is K x M
                float* at = a_scratch_.data();
                for (int64_t k = 0; k < K; ++k)
                    for (int64_t i = 0; i < M; ++i) at[i * K + k] = a[k * M + i];
                a = at;
            }
            // The residual in AMX's row pass where no general C comes between.
            const float* amx_res = cmode_ == kGeneralC ? nullptr : res;
            const bool on_amx = amx_.on() && amx_.run(a, bias, y, amx_act_, act_fn_, amx_res);  // false: AVX-512
            if (on_amx && amx_res) res = nullptr;  // added already
            if (!on_amx && par_.on())
                par_.gemm(gemm_, M, a, K, packed_, bias, y, N, gemm_act_);
            else if (!on_amx)
                gemm_(M, a, K, packed_, bias, y, N, gemm_act_);
        }
        if (cmode_ == kGeneralC) {
            for (int64_t i = 0; i < M; ++i) {
                float* yr = y + i * N;
                const float* cr = c + i * c_rs_;
                if (c_cs_)
                    for (int64_t j = 0; j < N; ++j) yr[j] += beta_ * cr[j];
                else
                    for (int64_t j = 0; j < N; ++j) yr[j] += beta_ * cr[0];
            }
        }
        residual_then_act(isa_, y, res, M * N, post_act_, act_, act_fn_);
        return {};
    }

    // As MatMulF32Kernel::choose_order.
    void choose_order(const OpContext& ctx) { fast_pays_ = choose_gemv_modes(ctx, &gemv_); }
    void set_parallel(ThreadPool* pool, int chunks) {
        if (narrow_.data) return;  // one short dot product per column: not worth a handoff
        if (gemv_.data)
            par_.setup_gemv(pool, chunks, &gemv_);
        else if (amx_.on())
            amx_.set_parallel(pool, chunks);  // the AVX-512 fallback then runs on the caller
        else
            par_.setup_gemm(pool, chunks, M_, packed_);
    }

private:
    ParGemm par_;
    int64_t M_, K_, N_;
    bool ta_;
    float beta_;
    CMode cmode_;
    std::vector<float> bias_;
    int64_t c_rs_, c_cs_;
    bool residual_;
    kernels::Isa isa_;
    kernels::Activation act_, gemv_act_;
    kernels::PackedGemv gemv_;
    kernels::SgemvFn gemv_fn_ = nullptr;
    GemvDirection dir_;
    bool fast_pays_ = false;            // as MatMulF32Kernel's
    kernels::PackedGemvNarrow narrow_;  // M = 1, N <= 16 (AVX-512)
    kernels::SgemvNarrowFn narrow_fn_ = nullptr;
    kernels::PackedB packed_;
    kernels::SgemmFn gemm_ = nullptr;
    kernels::Act gemm_act_ = kernels::Act::kNone;
    bool post_act_ = false;
    kernels::ActApplyFn act_fn_ = nullptr;
    mutable std::vector<float> a_scratch_;  // transA: A transposed at run (not reentrant)
    AmxProduct amx_;                        // on(): the product runs on AMX (constructor's amx)
    kernels::Activation amx_act_;           // what the AMX path applies (Relu where fused)
    std::string label_;                     // prefix of describe() (e.g. "conv_" for a Conv)
};

Status prep_Gemm(OpContext& ctx) {
    if (!ctx.has_input(0) || !ctx.has_input(1)) return ctx.fail("needs inputs A and B");
    const bool has_c = ctx.has_input(2);
    const bool residual = ctx.attr_int("_fused_residual", 0) != 0;
    if (ctx.num_inputs() > (residual ? 4 : 3))
        return ctx.fail("takes ", residual ? "4 inputs (A, B, C, the _fused_residual)" : "at most 3 inputs", ", got ",
                        ctx.num_inputs());
    if (!has_c && ctx.opset() < 11) return ctx.fail("input C is required before opset 11");
    DType t = ctx.in_dtype(0);
    if (ctx.in_dtype(1) != t || (has_c && ctx.in_dtype(2) != t))
        return ctx.fail("inputs have different dtypes: A is ", dtype_name(t), ", B is ",
                        dtype_name(ctx.in_dtype(1)),
                        has_c ? str_cat(", C is ", dtype_name(ctx.in_dtype(2))) : std::string());
    if (t != DType::kF32 && t != DType::kF64 && t != DType::kI32 && t != DType::kI64 &&
        t != DType::kU32 && t != DType::kU64)
        return ctx.fail_unsupported("dtype ", dtype_name(t), " is not supported");
    const Shape& a = ctx.in_shape(0);
    const Shape& b = ctx.in_shape(1);
    if (a.size() != 2 || b.size() != 2)
        return ctx.fail("A and B must be 2-D, got ", shape_str(a), " and ", shape_str(b));
    const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
    const float alpha = ctx.attr_float("alpha", 1.0f), beta = ctx.attr_float("beta", 1.0f);
    const int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1];
    const int64_t KB = tb ? b[1] : b[0], N = tb ? b[0] : b[1];
    if (K != KB)
        return ctx.fail("inner dimensions do not match: A", ta ? "'" : "", " is ", M, "x", K, ", B",
                        tb ? "'" : "", " is ", KB, "x", N);
    int64_t c_rs = 0, c_cs = 0;
    if (has_c) {
        const Shape& c = ctx.in_shape(2);
        bool ok = c.size() <= 2;
        if (ok && c.size() == 2) ok = (c[0] == 1 || c[0] == M) && (c[1] == 1 || c[1] == N);
        if (ok && c.size() == 1) ok = c[0] == 1 || c[0] == N;
        if (!ok)
            return ctx.fail("C of shape ", shape_str(c), " cannot be broadcast to ", M, "x", N);
        if (c.size() == 2 && c[0] != 1) c_rs = c[1];
        if (!c.empty() && c.back() != 1) c_cs = 1;
    }
    kernels::Activation act;
    JIFFY_RETURN_IF_ERROR(fused_activation(ctx, &act));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, t, {M, N}));
    const Tensor* bc = ctx.in_const(1);
    const bool f32_kernel = t == DType::kF32 && bc && M > 0 && N > 0 && K > 0;
    if (residual && (!f32_kernel || !ctx.has_input(3) || ctx.in_dtype(3) != DType::kF32 ||
                     shape_numel(ctx.in_shape(3)) != M * N))
        return ctx.fail("_fused_residual=1 needs float32, a constant B and a 4th input of ", M * N,
                        " values (Y's), got ", ctx.has_input(3) ? shape_str(ctx.in_shape(3)) : std::string("none"));
    if (f32_kernel) {
        GemmF32Kernel::CMode mode = GemmF32Kernel::kNoC;
        std::vector<float> bias;
        const Tensor* cc = has_c ? ctx.in_const(2) : nullptr;
        if (has_c && beta != 0.0f) {
            mode = GemmF32Kernel::kGeneralC;
            if (c_rs == 0) {  // one row of C broadcast over M: a bias vector
                if (cc) {
                    mode = GemmF32Kernel::kConstBias;
                    const float* cv = cc->as<float>();
                    bias.resize(size_t(N));
                    for (int64_t j = 0; j < N; ++j) bias[size_t(j)] = beta * cv[c_cs ? j : 0];
                } else if (c_cs == 1 && beta == 1.0f) {
                    mode = GemmF32Kernel::kInputBias;
                }
            }
        }
        auto k = std::make_unique<GemmF32Kernel>(M, K, N, ta, tb, alpha, beta, bc->as<float>(), mode,
                                                 std::move(bias), c_rs, c_cs, act, true, residual);
        k->choose_order(ctx);
        // On AMX from 16x the FLOPs, as MatMul (prep_MatMul).
        k->set_parallel(ctx.options().pool.get(), M == 1     ? parallel_chunks_gemv(ctx.options(), 2 * K * N, 4 * K * N)
                                                  : k->on_amx() ? parallel_chunks(ctx.options(), 2 * M * K * N / 16)
                                                                : parallel_chunks(ctx.options(), 2 * M * K * N));
        ctx.set_kernel(std::move(k));
        return {};
    }
    return visit_numeric(t, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        std::vector<T> packed;
        if (tb && bc && K > 0 && N > 0) {  // pre-transpose constant weights to K x N
            packed.resize(size_t(K * N));
            const T* src = bc->as<T>();
            for (int64_t n = 0; n < N; ++n)
                for (int64_t k = 0; k < K; ++k) packed[size_t(k * N + n)] = src[n * K + k];
        }
        ctx.set_kernel(std::make_unique<GemmKernel<T>>(M, K, N, ta, tb, alpha, beta, has_c, c_rs, c_cs,
                                                       std::move(packed), act));
        return {};
    });
}

// ---------------------------------------------------------------- MatMulInteger

// Zero point layout: value for (batch b, row/col r) is zp[off[b] + r * stride]; `off` empty when
// there is no zero point.
struct ZeroPoint {
    bool present = false;
    int64_t stride = 0;
    std::vector<int64_t> off;
};

// `which` is 0 for A (per-row zero points, shape [..., M, 1] or [M]) and 1 for B (per-column,
// shape [..., 1, N] or [N]).
Status zero_point_layout(const OpContext& ctx, int input, int which, const MatMulGeom& g, ZeroPoint* zp) {
    if (!ctx.has_input(input)) return {};
    DType want = ctx.in_dtype(which);
    if (ctx.in_dtype(input) != want)
        return ctx.fail("zero point input ", input, " has dtype ", dtype_name(ctx.in_dtype(input)),
                        ", expected ", dtype_name(want), " like its matrix");
    const Shape& z = ctx.in_shape(input);
    const int64_t len = which == 0 ? g.M : g.N;
    const size_t nb = g.a_off.size();
    zp->present = true;
    zp->off.assign(nb, 0);
    int64_t n = shape_numel(z);
    if (n == 1) return {};  // per tensor
    if (z.size() == 1 && z[0] == len) {
        zp->stride = 1;
        return {};
    }
    // N-D: batch dims + [M, 1] (A) or [1, N] (B).
    const Shape& full = which == 0 ? g.a_shape : g.b_shape;
    bool ok = z.size() == full.size() && z.size() >= 2;
    if (ok) {
        int64_t r = z[z.size() - 2], c = z[z.size() - 1];
        ok = which == 0 ? (c == 1 && (r == len || r == 1)) : (r == 1 && (c == len || c == 1));
    }
    Shape zb(z.begin(), z.end() - (ok ? 2 : 0)), out;
    if (ok) ok = broadcast_shapes(zb, g.batch, &out) && out == g.batch;
    if (!ok)
        return ctx.fail("zero point input ", input, " has shape ", shape_str(z), ", which fits neither ",
                        "a scalar, a ", len, "-element vector nor ", which == 0 ? "[..., M, 1]" : "[..., 1, N]",
                        " for ", which == 0 ? "A " : "B ", shape_str(ctx.in_shape(which)));
    const int64_t zlen = which == 0 ? z[z.size() - 2] : z[z.size() - 1];
    zp->stride = zlen == 1 ? 0 : 1;
    Shape s = broadcast_strides(zb, g.batch);
    for_each_broadcast2(g.batch, s, s, [&](int64_t i, int64_t o, int64_t) { zp->off[size_t(i)] = o * zlen; });
    return {};
}

template <typename TA, typename TB>
class MatMulIntegerKernel : public Kernel {
public:
    MatMulIntegerKernel(MatMulGeom g, ZeroPoint za, ZeroPoint zb)
        : g_(std::move(g)), za_(std::move(za)), zb_(std::move(zb)) {}
    Status run(const void* const* in, void* const* out) const override {
        const TA* a = static_cast<const TA*>(in[0]);
        const TB* b = static_cast<const TB*>(in[1]);
        const TA* za = za_.present ? static_cast<const TA*>(in[2]) : nullptr;
        const TB* zb = zb_.present ? static_cast<const TB*>(in[3]) : nullptr;
        int32_t* y = static_cast<int32_t*>(out[0]);
        const int64_t M = g_.M, K = g_.K, N = g_.N;
        for (size_t bi = 0; bi < g_.a_off.size(); ++bi) {
            const TA* ab = a + g_.a_off[bi];
            const TB* bb = b + g_.b_off[bi];
            int32_t* yb = y + int64_t(bi) * M * N;
            for (int64_t i = 0; i < M; ++i) {
                const int32_t zai = za ? int32_t(za[za_.off[bi] + i * za_.stride]) : 0;
                int32_t* __restrict yr = yb + i * N;
                for (int64_t j = 0; j < N; ++j) yr[j] = 0;
                int32_t asum = 0;
                for (int64_t k = 0; k < K; ++k) {
                    const int32_t av = int32_t(ab[i * K + k]) - zai;
                    asum += av;
                    const TB* __restrict br = bb + k * N;
                    for (int64_t j = 0; j < N; ++j) yr[j] += av * int32_t(br[j]);
                }
                if (zb) {  // sum_k av * (b - zb_j) = sum_k av * b - zb_j * sum_k av
                    const TB* zr = zb + zb_.off[bi];
                    for (int64_t j = 0; j < N; ++j) yr[j] -= int32_t(zr[j * zb_.stride]) * asum;
                }
            }
        }
        return {};
    }

private:
    MatMulGeom g_;
    ZeroPoint za_, zb_;
};

template <typename F>
Status visit_int8(DType t, F&& f) {
    if (t == DType::kU8) return f(TypeTag<uint8_t>{});
    if (t == DType::kI8) return f(TypeTag<int8_t>{});
    return unsupported("dtype ", dtype_name(t), " is not supported here");
}

Status prep_MatMulInteger(OpContext& ctx) {
    if (!ctx.has_input(0) || !ctx.has_input(1)) return ctx.fail("needs two inputs A and B");
    for (int i = 0; i < 2; ++i)
        if (ctx.in_dtype(i) != DType::kU8 && ctx.in_dtype(i) != DType::kI8)
            return ctx.fail_unsupported("input ", i, " has dtype ", dtype_name(ctx.in_dtype(i)),
                                        "; MatMulInteger takes uint8 or int8");
    MatMulGeom g;
    JIFFY_RETURN_IF_ERROR(matmul_geometry(ctx, ctx.in_shape(0), ctx.in_shape(1), &g));
    ZeroPoint za, zb;
    JIFFY_RETURN_IF_ERROR(zero_point_layout(ctx, 2, 0, g, &za));
    JIFFY_RETURN_IF_ERROR(zero_point_layout(ctx, 3, 1, g, &zb));
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kI32, g.out));
    return visit_int8(ctx.in_dtype(0), [&](auto ta) -> Status {
        using TA = typename decltype(ta)::type;
        return visit_int8(ctx.in_dtype(1), [&](auto tb) -> Status {
            using TB = typename decltype(tb)::type;
            ctx.set_kernel(std::make_unique<MatMulIntegerKernel<TA, TB>>(std::move(g), std::move(za),
                                                                         std::move(zb)));
            return {};
        });
    });
}

// ================================================================ Einsum

constexpr int kEinsumMaxOperands = 32;
constexpr int kEinsumMaxLabels = 52 + kMaxRank;  // letters + ellipsis dims

// A reference loop over every combination of the output labels (outer) and the summed labels
// (inner). Strides per operand per label; repeated labels in one operand sum their strides
// (diagonals); broadcast dims have stride 0.
template <typename T>
class EinsumKernel : public Kernel {
public:
    EinsumKernel(Shape dims, int n_out, std::vector<Shape> strides)
        : dims_(std::move(dims)), n_out_(n_out), strides_(std::move(strides)) {
        Shape od(dims_.begin(), dims_.begin() + n_out_), cd(dims_.begin() + n_out_, dims_.end());
        out_n_ = shape_numel(od);
        sum_n_ = shape_numel(cd);
    }
    Status run(const void* const* in, void* const* out) const override {
        using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
        const int nops = int(strides_.size());
        const int nl = int(dims_.size());
        const T* ops[kEinsumMaxOperands];
        for (int o = 0; o < nops; ++o) ops[o] = static_cast<const T*>(in[o]);
        T* y = static_cast<T*>(out[0]);
        int64_t idx[kEinsumMaxLabels] = {0};
        int64_t off[kEinsumMaxOperands] = {0};
        for (int64_t oi = 0; oi < out_n_; ++oi) {
            Acc sum = Acc(0);
            for (int64_t si = 0; si < sum_n_; ++si) {
                Acc p = Acc(1);
                for (int o = 0; o < nops; ++o) p *= Acc(ops[o][off[o]]);
                sum += p;
                // advance the summed labels (innermost last)
                for (int l = nl - 1; l >= n_out_; --l) {
                    if (++idx[l] < dims_[size_t(l)]) {
                        for (int o = 0; o < nops; ++o) off[o] += strides_[size_t(o)][size_t(l)];
                        break;
                    }
                    for (int o = 0; o < nops; ++o) off[o] -= strides_[size_t(o)][size_t(l)] * (dims_[size_t(l)] - 1);
                    idx[l] = 0;
                }
            }
            y[oi] = T(sum);
            for (int l = n_out_ - 1; l >= 0; --l) {
                if (++idx[l] < dims_[size_t(l)]) {
                    for (int o = 0; o < nops; ++o) off[o] += strides_[size_t(o)][size_t(l)];
                    break;
                }
                for (int o = 0; o < nops; ++o) off[o] -= strides_[size_t(o)][size_t(l)] * (dims_[size_t(l)] - 1);
                idx[l] = 0;
            }
        }
        return {};
    }

private:
    Shape dims_;
    int n_out_;
    std::vector<Shape> strides_;  // [operand][label]
    int64_t out_n_ = 0, sum_n_ = 0;
};

constexpr int kEllipsis = -2;

int einsum_letter(char c) {
    if (c >= 'a' && c <= 'z') return c - 'a';
    if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
    return -1;
}

// Parses one term ("ij", "...ii", "b...") into label codes (kEllipsis for "...").
bool einsum_term(const std::string& s, std::vector<int>* out, std::string* why) {
    out->clear();
    bool ell = false;
    for (size_t i = 0; i < s.size();) {
        if (s[i] == '.') {
            if (s.compare(i, 3, "...") != 0 || ell) {
                *why = "bad ellipsis in term '" + s + "'";
                return false;
            }
            ell = true;
            out->push_back(kEllipsis);
            i += 3;
            continue;
        }
        int l = einsum_letter(s[i]);
        if (l < 0) {
            *why = std::string("bad character '") + s[i] + "' in term '" + s + "'";
            return false;
        }
        out->push_back(l);
        ++i;
    }
    return true;
}

// A two-operand float32 Einsum that is one (batched) matrix product: every label is a batch
// label (both inputs and the output), an M (A and output), N (B and output) or K (both inputs,
// summed) label, each role's labels nesting into one dim; no repeated or broadcast dims. A must have
// K innermost, B K or N, the output N (else the operands are tried the other way round). Then the
// product runs on the packed SGEMM through MatMulF32Kernel's strided geometry (attention's
// 'bhqd,bhkd->bhqk' on 1x8x64x64: ~7.8 ms in the reference loop -> ~42 us). False: the reference.
bool einsum_matmul(const OpContext& ctx, const std::vector<std::vector<int>>& labels, const std::vector<int>& out_labels,
                   const Shape& out_shape, bool swap, MatMulGeom* g) {
    const int ia = swap ? 1 : 0, ib = 1 - ia;
    const std::vector<int>& la = labels[size_t(ia)];
    const std::vector<int>& lb = labels[size_t(ib)];
    auto has = [](const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); };
    auto pos = [](const std::vector<int>& v, int l) { return size_t(std::find(v.begin(), v.end(), l) - v.begin()); };
    for (const auto* v : {&la, &lb})
        for (size_t i = 0; i < v->size(); ++i)
            for (size_t j = i + 1; j < v->size(); ++j)
                if ((*v)[i] == (*v)[j]) return false;
    const Shape &sa_shape = ctx.in_shape(ia), &sb_shape = ctx.in_shape(ib);
    std::vector<int> batch, ms, ns, ks;  // ms, ns in output order; ks in A's order
    for (int l : out_labels) {
        const bool a = has(la, l), b = has(lb, l);
        if (a && b) batch.push_back(l);
        else if (a) ms.push_back(l);
        else if (b) ns.push_back(l);
        else return false;
    }
    for (int l : la)
        if (!has(out_labels, l)) {
            if (!has(lb, l)) return false;  // summed over A alone
            ks.push_back(l);
        }
    for (int l : lb)
        if (!has(out_labels, l) && !has(la, l)) return false;
    if (ms.empty() || ns.empty() || ks.empty()) return false;
    // Equal sizes wherever a label appears (no broadcasting), nothing empty.
    for (int l : out_labels)
        if (out_shape[pos(out_labels, l)] <= 0) return false;
    for (int l : batch)
        if (sa_shape[pos(la, l)] != sb_shape[pos(lb, l)] || sa_shape[pos(la, l)] != out_shape[pos(out_labels, l)])
            return false;
    for (int l : ks)
        if (sa_shape[pos(la, l)] != sb_shape[pos(lb, l)] || sa_shape[pos(la, l)] <= 0) return false;
    const Shape sa = strides_of(sa_shape), sb = strides_of(sb_shape), sy = strides_of(out_shape);
    // Several labels of one role act as one dim when they nest (outer stride = inner stride x
    // inner size) in both tensors that hold them, in the same order ('bnd,dh->bnh': M = b x n).
    struct Side {
        const std::vector<int>* l;
        const Shape *shape, *st;
    };
    auto nests = [&](const std::vector<int>& role, std::initializer_list<Side> sides, int64_t* size) {
        *size = 1;
        for (size_t i = 0; i < role.size(); ++i) {
            const Side& s0 = *sides.begin();
            *size *= (*s0.shape)[pos(*s0.l, role[i])];
            if (i + 1 == role.size()) continue;
            for (const Side& t : sides) {
                const size_t p = pos(*t.l, role[i]), q = pos(*t.l, role[i + 1]);
                if ((*t.st)[p] != (*t.st)[q] * (*t.shape)[q]) return false;
            }
        }
        return true;
    };
    int64_t M = 0, N = 0, K = 0;
    const Side A{&la, &sa_shape, &sa}, B{&lb, &sb_shape, &sb}, Y{&out_labels, &out_shape, &sy};
    if (!nests(ms, {A, Y}, &M) || !nests(ns, {B, Y}, &N) || !nests(ks, {A, B}, &K))
        return false;
    const int m = ms.back(), n = ns.back(), k = ks.back();  // the innermost of each role
    if (sa[pos(la, k)] != 1 || sy[pos(out_labels, n)] != 1) return false;
    g->M = M;
    g->K = K;
    g->N = N;
    g->lda = sa[pos(la, m)];
    if (sb[pos(lb, n)] == 1) {
        g->trans_b = false;
        g->ldb = sb[pos(lb, k)];
    } else if (sb[pos(lb, k)] == 1) {
        g->trans_b = true;
        g->ldb = sb[pos(lb, n)];
    } else {
        return false;
    }
    g->ldc = sy[pos(out_labels, m)];
    g->a_shape = sa_shape;
    g->b_shape = sb_shape;
    g->out = out_shape;
    g->batch.clear();
    for (int l : batch) g->batch.push_back(out_shape[pos(out_labels, l)]);
    const int64_t nb = shape_numel(g->batch);
    g->a_off.assign(size_t(nb), 0);
    g->b_off.assign(size_t(nb), 0);
    g->y_off.assign(size_t(nb), 0);
    std::vector<int64_t> idx(batch.size(), 0);
    for (int64_t i = 0; i < nb; ++i) {
        for (size_t j = 0; j < batch.size(); ++j) {
            g->a_off[size_t(i)] += idx[j] * sa[pos(la, batch[j])];
            g->b_off[size_t(i)] += idx[j] * sb[pos(lb, batch[j])];
            g->y_off[size_t(i)] += idx[j] * sy[pos(out_labels, batch[j])];
        }
        for (size_t d = batch.size(); d-- > 0;) {
            if (++idx[d] < g->batch[d]) break;
            idx[d] = 0;
        }
    }
    return true;
}

// Runs an inner kernel with its two inputs swapped (an Einsum whose product runs as B x A).
class SwappedInputsKernel : public Kernel {
public:
    explicit SwappedInputsKernel(std::unique_ptr<Kernel> inner) : inner_(std::move(inner)) {}
    Status run(const void* const* in, void* const* out) const override {
        const void* swapped[2] = {in[1], in[0]};
        return inner_->run(swapped, out);
    }
    std::string describe() const override { return inner_->describe() + " (operands swapped)"; }
    FastWeights set_fast_weights(bool fast) override { return inner_->set_fast_weights(fast); }

private:
    std::unique_ptr<Kernel> inner_;
};

Status prep_Einsum(OpContext& ctx) {
    std::string eq;
    for (char c : ctx.attr_str("equation", "")) {
        if (c != ' ') eq += c;
    }
    if (eq.empty()) return ctx.fail("missing attribute 'equation'");
    const int nops = ctx.num_inputs();
    if (nops < 1) return ctx.fail("needs at least one input");
    if (nops > kEinsumMaxOperands) return ctx.fail("too many inputs (", nops, ")");
    DType t = ctx.in_dtype(0);
    for (int i = 0; i < nops; ++i) {
        if (!ctx.has_input(i)) return ctx.fail("input ", i, " is missing");
        if (ctx.in_dtype(i) != t)
            return ctx.fail("inputs have different dtypes: ", dtype_name(t), " and ", dtype_name(ctx.in_dtype(i)));
    }
    if (!dtype_is_int(t) && t != DType::kF32 && t != DType::kF64)
        return ctx.fail_unsupported("dtype ", dtype_name(t), " is not supported");

    size_t arrow = eq.find("->");
    const bool explicit_out = arrow != std::string::npos;
    std::string lhs = explicit_out ? eq.substr(0, arrow) : eq;
    std::string rhs = explicit_out ? eq.substr(arrow + 2) : "";
    if (rhs.find("->") != std::string::npos) return ctx.fail("equation '", eq, "' has more than one '->'");
    std::vector<std::string> terms;
    {
        size_t p = 0;
        while (true) {
            size_t q = lhs.find(',', p);
            terms.push_back(lhs.substr(p, q == std::string::npos ? std::string::npos : q - p));
            if (q == std::string::npos) break;
            p = q + 1;
        }
    }
    if (int(terms.size()) != nops)
        return ctx.fail("equation '", eq, "' has ", terms.size(), " input terms but the node has ", nops, " inputs");

    // Parse the terms; ellipsis dims (right-aligned across operands) get labels 52 + k.
    std::vector<std::vector<int>> labels(static_cast<size_t>(nops));  // per operand, per dim
    int ell_rank = 0;
    std::vector<int> ell_of(size_t(nops), 0);
    std::string why;
    for (int o = 0; o < nops; ++o) {
        std::vector<int> raw;
        if (!einsum_term(terms[size_t(o)], &raw, &why)) return ctx.fail("equation '", eq, "': ", why);
        int letters = 0;
        bool ell = false;
        for (int l : raw) {
            if (l == kEllipsis) ell = true;
            else ++letters;
        }
        const int r = ctx.in_rank(o);
        if (ell ? r < letters : r != letters)
            return ctx.fail("equation term '", terms[size_t(o)], "' does not match input ", o, " of rank ", r);
        ell_of[size_t(o)] = ell ? r - letters : 0;
        ell_rank = std::max(ell_rank, ell_of[size_t(o)]);
        for (int l : raw) {
            if (l == kEllipsis) {
                for (int k = 0; k < ell_of[size_t(o)]; ++k)
                    labels[size_t(o)].push_back(52 + k);
            } else {
                labels[size_t(o)].push_back(l);
            }
        }
    }
    // Re-map ellipsis placeholders now that the full ellipsis rank is known (right-aligned).
    for (int o = 0; o < nops; ++o)
        for (int& l : labels[size_t(o)])
            if (l >= 52) l = 52 + (ell_rank - ell_of[size_t(o)]) + (l - 52);
    if (52 + ell_rank > kEinsumMaxLabels) return ctx.fail("ellipsis covers too many dims");

    // Label sizes (size-1 dims broadcast).
    std::vector<int64_t> size(size_t(kEinsumMaxLabels), -1);
    std::vector<int> count(size_t(kEinsumMaxLabels), 0);
    for (int o = 0; o < nops; ++o) {
        const Shape& s = ctx.in_shape(o);
        for (size_t d = 0; d < s.size(); ++d) {
            int l = labels[size_t(o)][d];
            ++count[size_t(l)];
            int64_t& cur = size[size_t(l)];
            if (cur < 0 || cur == 1) cur = s[d];
            else if (s[d] != cur && s[d] != 1)
                return ctx.fail("equation '", eq, "': dimension ", d, " of input ", o, " has size ", s[d],
                                " but the same label has size ", cur, " elsewhere");
        }
        // A label repeated within one operand (a diagonal) needs equal sizes there.
        for (size_t d = 0; d < s.size(); ++d)
            for (size_t e = d + 1; e < s.size(); ++e)
                if (labels[size_t(o)][d] == labels[size_t(o)][e] && s[d] != s[e])
                    return ctx.fail("equation '", eq, "': repeated label in input ", o,
                                    " has different sizes ", s[d], " and ", s[e]);
    }

    // Output labels.
    std::vector<int> out_labels;
    if (explicit_out) {
        std::vector<int> raw;
        if (!einsum_term(rhs, &raw, &why)) return ctx.fail("equation '", eq, "': ", why);
        for (int l : raw) {
            if (l == kEllipsis) {
                for (int k = 0; k < ell_rank; ++k) out_labels.push_back(52 + k);
                continue;
            }
            if (count[size_t(l)] == 0)
                return ctx.fail("equation '", eq, "': output label '", rhs, "' does not appear in the inputs");
            if (std::find(out_labels.begin(), out_labels.end(), l) != out_labels.end())
                return ctx.fail("equation '", eq, "': output repeats a label");
            out_labels.push_back(l);
        }
    } else {
        for (int k = 0; k < ell_rank; ++k) out_labels.push_back(52 + k);
        for (int l = 26; l < 52; ++l)  // 'A'..'Z' sort before 'a'..'z'
            if (count[size_t(l)] == 1) out_labels.push_back(l);
        for (int l = 0; l < 26; ++l)
            if (count[size_t(l)] == 1) out_labels.push_back(l);
    }
    Shape out_shape;
    for (int l : out_labels) out_shape.push_back(size[size_t(l)]);
    if (out_shape.size() > size_t(kMaxRank)) return ctx.fail("output rank is too large");

    // Loop labels: output labels, then the summed ones.
    std::vector<int> loop = out_labels;
    for (int l = 0; l < kEinsumMaxLabels; ++l)
        if (count[size_t(l)] > 0 && std::find(out_labels.begin(), out_labels.end(), l) == out_labels.end())
            loop.push_back(l);
    Shape dims;
    for (int l : loop) dims.push_back(size[size_t(l)]);
    std::vector<Shape> strides(size_t(nops), Shape(loop.size(), 0));
    for (int o = 0; o < nops; ++o) {
        const Shape& s = ctx.in_shape(o);
        Shape st = strides_of(s);
        for (size_t d = 0; d < s.size(); ++d) {
            if (s[d] == 1) continue;  // broadcast (or a single index): stride irrelevant
            size_t pos = size_t(std::find(loop.begin(), loop.end(), labels[size_t(o)][d]) - loop.begin());
            strides[size_t(o)][pos] += st[d];
        }
    }
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, t, out_shape));
    if (t == DType::kF32 && nops == 2) {
        for (bool swap : {false, true}) {
            MatMulGeom g;
            if (!einsum_matmul(ctx, labels, out_labels, out_shape, swap, &g)) continue;
            const Tensor* bc = ctx.in_const(swap ? 0 : 1);
            auto k = std::make_unique<MatMulF32Kernel>(g, bc ? bc->as<float>() : nullptr, false, kernels::Activation{});
            k->choose_order(ctx);
            if (swap) ctx.set_kernel(std::make_unique<SwappedInputsKernel>(std::move(k)));
            else ctx.set_kernel(std::move(k));
            return {};
        }
    }
    const int n_out = int(out_labels.size());
    return visit_numeric(t, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        ctx.set_kernel(std::make_unique<EinsumKernel<T>>(dims, n_out, std::move(strides)));
        return {};
    });
}


// ================================================================ Softmax, LogSoftmax, Hardmax

enum class SoftKind { kSoftmax, kLogSoftmax, kHardmax };

// Normalizes along the middle dim of an [outer, n, inner] view of the input. `_fused_scale` (set by
// the fuse_softmax_scale pass for Softmax(Mul(x, s)), attention's 1/sqrt(d)): the op normalizes
// s * x instead of x.
template <typename T, SoftKind K>
class SoftmaxKernel : public Kernel {
public:
    SoftmaxKernel(int64_t outer, int64_t n, int64_t inner, double scale)
        : outer_(outer), n_(n), inner_(inner), scale_(scale) {
        // float softmax over contiguous rows: the vector kernel (kernels/norm.h; scale > 0).
        if (std::is_same_v<T, float> && K == SoftKind::kSoftmax && inner_ == 1 && n_ > 0 && scale_ > 0)
            fast_ = kernels::softmax_rows_for(kernels::active_isa());
        // float softmax over a middle axis (segmentation heads: 1 x 19 x 64 x 64 over the
        // classes): rows of `inner` elementwise, the vector exp over each row (reference: ~1.7 ms
        // there, strided scalar exp per element).
        if (std::is_same_v<T, float> && K == SoftKind::kSoftmax && inner_ > 1 && n_ > 0 && scale_ > 0) {
            exp_ = kernels::act_apply_for(kernels::active_isa());
            cols_.assign(size_t(2 * inner_), 0.0f);
        }
        // float log-softmax over contiguous rows (a CTC head's 32 x 97: 13.8 -> 4.2 us): the
        // vector exp into a row buffer, its sum in double as the reference's.
        if (std::is_same_v<T, float> && K == SoftKind::kLogSoftmax && inner_ == 1 && n_ > 0) {
            exp_ = kernels::act_apply_for(kernels::active_isa());
            cols_.assign(size_t(n_), 0.0f);
        }
    }
    // Rows split across the pool (the vector row kernel only; session 39): an OCR head's softmax
    // over 160 x 6625 classes took 500 us on one core.
    void set_parallel(ThreadPool* pool, int chunks) {
        if (!fast_ || !pool || chunks < 2 || outer_ < 2) return;
        pool_ = pool;
        bal_ = std::make_unique<Balance>(pool->threads());
    }
    std::string describe() const override { return pool_ ? "softmax rows threads" : ""; }
    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out[0]);
        if (n_ == 0) return {};
        if constexpr (std::is_same_v<T, float>) {
            if (fast_) {
                const int64_t n = n_;
                const float sc = float(scale_);
                for_balanced_or_caller(pool_, outer_, 1, bal_.get(), [&](int, int64_t b, int64_t e) {
                    if (e > b) fast_(x + b * n, y + b * n, e - b, n, sc);
                });
                return {};
            }
            if (exp_) {
                if constexpr (K == SoftKind::kLogSoftmax) log_softmax_rows(x, y);
                else softmax_columns(x, y);
                return {};
            }
        }
        const int64_t st = inner_;
        const T sc = T(scale_);
        for (int64_t o = 0; o < outer_; ++o) {
            for (int64_t s = 0; s < inner_; ++s) {
                const T* xp = x + o * n_ * inner_ + s;
                T* yp = y + o * n_ * inner_ + s;
                T mx = xp[0] * sc;
                int64_t arg = 0;
                for (int64_t i = 1; i < n_; ++i)
                    if (xp[i * st] * sc > mx) {
                        mx = xp[i * st] * sc;
                        arg = i;
                    }
                if constexpr (K == SoftKind::kHardmax) {
                    for (int64_t i = 0; i < n_; ++i) yp[i * st] = T(0);
                    yp[arg * st] = T(1);
                } else if constexpr (K == SoftKind::kSoftmax) {
                    double sum = 0;
                    for (int64_t i = 0; i < n_; ++i) {
                        T e = std::exp(xp[i * st] * sc - mx);
                        yp[i * st] = e;
                        sum += double(e);
                    }
                    const T inv = T(1.0 / sum);
                    for (int64_t i = 0; i < n_; ++i) yp[i * st] *= inv;
                } else {
                    double sum = 0;
                    for (int64_t i = 0; i < n_; ++i) sum += double(std::exp(xp[i * st] * sc - mx));
                    const T lse = T(std::log(sum));
                    for (int64_t i = 0; i < n_; ++i) yp[i * st] = xp[i * st] * sc - mx - lse;
                }
            }
        }
        return {};
    }

private:
    // Softmax over the middle axis of [outer, n, inner] (float): per outer block, the column max,
    // then each of the n rows of `inner` exp'd into y with the sums accumulated, then scaled.
    void softmax_columns(const float* x, float* y) const {
        const int64_t n = n_, in = inner_;
        const float sc = float(scale_);
        float* mx = cols_.data();
        float* sum = mx + in;
        const kernels::Activation e{kernels::ActKind::kExp};
        for (int64_t o = 0; o < outer_; ++o) {
            const float* xo = x + o * n * in;
            float* yo = y + o * n * in;
            for (int64_t s = 0; s < in; ++s) mx[s] = xo[s];
            for (int64_t i = 1; i < n; ++i)
                for (int64_t s = 0; s < in; ++s) mx[s] = xo[i * in + s] > mx[s] ? xo[i * in + s] : mx[s];
            for (int64_t s = 0; s < in; ++s) {
                mx[s] *= sc;
                sum[s] = 0.0f;
            }
            for (int64_t i = 0; i < n; ++i) {
                float* yr = yo + i * in;
                const float* xr = xo + i * in;
                for (int64_t s = 0; s < in; ++s) yr[s] = xr[s] * sc - mx[s];
                exp_(e, yr, yr, in);
                for (int64_t s = 0; s < in; ++s) sum[s] += yr[s];
            }
            for (int64_t s = 0; s < in; ++s) sum[s] = 1.0f / sum[s];
            for (int64_t i = 0; i < n; ++i)
                for (int64_t s = 0; s < in; ++s) yo[i * in + s] *= sum[s];
        }
    }

    // LogSoftmax over contiguous rows of n (float): y = s x - max - log(sum(exp(s x - max))).
    void log_softmax_rows(const float* x, float* y) const {
        const int64_t n = n_;
        const float sc = float(scale_);
        float* e = cols_.data();
        const kernels::Activation ex{kernels::ActKind::kExp};
        for (int64_t o = 0; o < outer_; ++o) {
            const float* xr = x + o * n;
            float* yr = y + o * n;
            // 8 running maxima and sums (vector registers; the order does not change the max,
            // and the sums stay in double)
            float m8[8];
            for (int j = 0; j < 8; ++j) m8[j] = xr[0] * sc;
            int64_t i = 0;
            for (; i + 8 <= n; i += 8)
                for (int j = 0; j < 8; ++j) m8[j] = std::max(m8[j], xr[i + j] * sc);
            for (; i < n; ++i) m8[0] = std::max(m8[0], xr[i] * sc);
            float mx = m8[0];
            for (int j = 1; j < 8; ++j) mx = std::max(mx, m8[j]);
            for (i = 0; i < n; ++i) yr[i] = xr[i] * sc - mx;
            exp_(ex, yr, e, n);
            double s8[8] = {};
            for (i = 0; i + 8 <= n; i += 8)
                for (int j = 0; j < 8; ++j) s8[j] += double(e[i + j]);
            for (; i < n; ++i) s8[0] += double(e[i]);
            double sum = 0;
            for (int j = 0; j < 8; ++j) sum += s8[j];
            const float lse = float(std::log(sum));
            for (i = 0; i < n; ++i) yr[i] -= lse;
        }
    }

    int64_t outer_, n_, inner_;
    ThreadPool* pool_ = nullptr;  // set_parallel: rows split across it
    std::unique_ptr<Balance> bal_;
    double scale_;
    kernels::SoftmaxRowsFn fast_ = nullptr;
    kernels::ActApplyFn exp_ = nullptr;
    mutable std::vector<float> cols_;  // column max and sums (softmax_columns), or a row's exps (not reentrant)
};

template <SoftKind K>
Status prep_softmax(OpContext& ctx) {
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kF32, DType::kF64}));
    const Shape& s = ctx.in_shape(0);
    const int64_t r = int64_t(s.size());
    const bool coerce = ctx.opset() < 13;  // before 13: flatten to 2-D at `axis`
    const int64_t axis_attr = ctx.attr_int("axis", coerce ? 1 : -1);
    int64_t axis = 0;
    if (r == 0 || !normalize_axis(axis_attr, r, &axis))
        return ctx.fail("axis ", axis_attr, " is out of range for input of rank ", r);
    int64_t outer = 1, n = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= s[size_t(d)];
    if (coerce) {
        for (int64_t d = axis; d < r; ++d) n *= s[size_t(d)];
    } else {
        n = s[size_t(axis)];
        for (int64_t d = axis + 1; d < r; ++d) inner *= s[size_t(d)];
    }
    const double scale = ctx.has_attr("_fused_scale") ? double(ctx.attr_float("_fused_scale", 1.0f)) : 1.0;
    if (!std::isfinite(scale)) return ctx.fail("_fused_scale must be finite, got ", scale);
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, ctx.in_dtype(0), s));
    return visit_float(ctx.in_dtype(0), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        auto k = std::make_unique<SoftmaxKernel<T, K>>(outer, n, inner, scale);
        // ~16 flops an element (the vector exp and the three passes) against the split threshold.
        if (inner == 1) k->set_parallel(ctx.options().pool.get(), parallel_chunks(ctx.options(), 16 * outer * n));
        ctx.set_kernel(std::move(k));
        return {};
    });
}

// ================================================================ Resize, Upsample

enum class Coord { kHalfPixel, kHalfPixelSym, kPytorchHalfPixel, kAlignCorners, kAsymmetric, kTfCrop, kTfHalfPixelNN };
enum class Interp { kNearest, kLinear, kCubic };
enum class NearestMode { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };

struct ResizeParams {
    Interp mode = Interp::kNearest;
    Coord coord = Coord::kHalfPixel;
    NearestMode nearest = NearestMode::kRoundPreferFloor;
    double cubic_a = -0.75;
    bool exclude_outside = false;
    bool antialias = false;
    double extrapolation = 0;
};

// Sampling taps of one axis: for output coordinate o, taps first[o] .. first[o+1]-1 read input
// element offset off[t] (index * stride) with weight w[t]; outside[o] marks coordinates that get
// the extrapolation value (tf_crop_and_resize).
struct AxisTaps {
    std::vector<int64_t> first;
    std::vector<int64_t> off;
    std::vector<double> w;
    std::vector<uint8_t> outside;
    bool any_outside = false;
};

double cubic_coeff(double x, double A) {
    x = std::abs(x);
    if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}

// Maps output coordinate x of an axis to the input coordinate, with the same float32 / float64
// expressions as ONNX Runtime so that nearest-neighbour rounding at exact ties agrees with it.
// Exception: align_corners and tf_crop_and_resize divide by the unrounded output length
// scale * in_len - 1, as the ONNX reference implementation (and so the conformance data) does;
// ONNX Runtime uses the integer length. Both agree whenever scale * in_len is an integer.
double resize_source_coord(const ResizeParams& p, int64_t xi, int64_t in_len, int64_t out_len, double scale_d,
                           double roi_start, double roi_end) {
    const float x = float(xi), scale = float(scale_d), lin = float(in_len), lout = float(out_len);
    const double out_w = scale_d * double(in_len);
    switch (p.coord) {
        case Coord::kHalfPixel: return (x + 0.5f) / scale - 0.5f;
        case Coord::kHalfPixelSym: {
            const float fw = scale * lin;
            const float adj = lout / fw;
            const float center = lin / 2;
            const float offset = center * (1 - adj);
            return float(offset + (double(x) + 0.5) / scale - 0.5);
        }
        case Coord::kPytorchHalfPixel: return out_len > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
        case Coord::kAlignCorners: return out_len == 1 ? 0.0 : double(xi) * double(in_len - 1) / (out_w - 1);
        case Coord::kAsymmetric: return x / scale;
        case Coord::kTfHalfPixelNN: return (x + 0.5f) / scale;
        case Coord::kTfCrop:
            if (out_len > 1)
                return roi_start * double(in_len - 1) +
                       double(xi) * (roi_end - roi_start) * double(in_len - 1) / (out_w - 1);
            return 0.5 * (roi_start + roi_end) * double(in_len - 1);
    }
    return 0;
}

AxisTaps make_axis_taps(const ResizeParams& p, int64_t in_len, int64_t out_len, double scale, double roi_start,
                        double roi_end, int64_t stride) {
    AxisTaps t;
    t.first.reserve(size_t(out_len) + 1);
    t.outside.assign(size_t(out_len), 0);
    auto clampi = [&](int64_t i) { return std::min(std::max(i, int64_t(0)), in_len - 1); };
    std::vector<double> coeff;
    for (int64_t o = 0; o < out_len; ++o) {
        t.first.push_back(int64_t(t.off.size()));
        const double x = resize_source_coord(p, o, in_len, out_len, scale, roi_start, roi_end);
        if (p.coord == Coord::kTfCrop && (x < 0 || x > double(in_len - 1))) {
            t.outside[size_t(o)] = 1;
            t.any_outside = true;
            continue;
        }
        const double fx = std::floor(x);
        const int64_t x0 = int64_t(fx);
        const double r = x - fx;  // in [0, 1)
        if (p.mode == Interp::kNearest) {
            int64_t i = x0;
            if (r > 0) {
                switch (p.nearest) {
                    case NearestMode::kRoundPreferFloor: i = r <= 0.5 ? x0 : x0 + 1; break;
                    case NearestMode::kRoundPreferCeil: i = r < 0.5 ? x0 : x0 + 1; break;
                    case NearestMode::kFloor: i = x0; break;
                    case NearestMode::kCeil: i = x0 + 1; break;
                    case NearestMode::kSimple: i = scale < 1 ? x0 + 1 : x0; break;
                }
            }
            t.off.push_back(clampi(i) * stride);
            t.w.push_back(1.0);
            continue;
        }
        // Linear / cubic, with the filter stretched by 1/scale when antialiasing a downscale.
        const double s = p.antialias ? std::min(scale, 1.0) : 1.0;
        const double support = p.mode == Interp::kLinear ? 1.0 : 2.0;
        const int64_t start = p.antialias ? int64_t(std::floor(-support / s)) + 1 : 1 - int64_t(support);
        const int64_t n = 2 - 2 * start;
        coeff.assign(size_t(n), 0.0);
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) {
            const double arg = (double(start + i) - r) * s;
            double c = p.mode == Interp::kLinear ? std::max(0.0, 1 - std::abs(arg)) : cubic_coeff(arg, p.cubic_a);
            const int64_t idx = x0 + start + i;
            if (p.exclude_outside && (idx < 0 || idx >= in_len)) c = 0;
            coeff[size_t(i)] = c;
            sum += c;
        }
        const bool normalize = (p.antialias || p.exclude_outside) && sum != 0;
        for (int64_t i = 0; i < n; ++i) {
            double c = coeff[size_t(i)];
            if (normalize) c /= sum;
            if (c == 0) continue;
            t.off.push_back(clampi(x0 + start + i) * stride);
            t.w.push_back(c);
        }
    }
    t.first.push_back(int64_t(t.off.size()));
    return t;
}

template <typename T>
T resize_cast(double v) {
    if constexpr (std::is_floating_point_v<T>) {
        return T(v);
    } else {
        if (std::isnan(v)) return T(0);
        v = std::nearbyint(v);
        if (v <= double(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
        if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
        return T(v);
    }
}

template <typename T>
class ResizeKernel : public Kernel {
public:
    ResizeKernel(Shape out, std::vector<AxisTaps> ax, bool nearest, double extrap)
        : out_(std::move(out)), ax_(std::move(ax)), nearest_(nearest), extrap_(resize_cast<T>(extrap)) {
        // Nearest without tf_crop_and_resize's outside points: every output row is a gather of
        // one input row through the same last-axis table, so a row whose source row equals the
        // previous row's is a copy of it, and an integer upsampling factor f (source index j / f)
        // is a repeat of each element f times.
        fast_nearest_ = nearest_ && !out_.empty();
        for (const AxisTaps& a : ax_) fast_nearest_ = fast_nearest_ && !a.any_outside;
        if constexpr (std::is_same_v<T, float>) init_separable();
        if (!fast_nearest_) return;
        const AxisTaps& last = ax_.back();
        const int64_t W = out_.back();
        for (int64_t j = 0; j < W; ++j) last_idx_.push_back(last.off[size_t(last.first[size_t(j)])]);
        const int64_t in_w = W > 0 ? last_idx_.back() + 1 : 0;
        if (in_w > 0 && W % in_w == 0) {
            const int64_t f = W / in_w;
            bool ok = true;
            for (int64_t j = 0; j < W && ok; ++j) ok = last_idx_[size_t(j)] == j / f;
            if (ok) repeat_ = f;
        }
        // Each output row's source offset, once (run then reads one number per row instead of
        // walking the outer axes' tables: YOLO's 2x upsamplings of 40-wide rows spent ~20 ns per
        // row there). Up to 1 M rows.
        const int r = int(out_.size());
        const int64_t rows = W > 0 ? shape_numel(out_) / W : 0;
        if (rows > (1 << 20)) return;
        row_base_.reserve(size_t(rows));
        int64_t idx[kMaxRank] = {0};
        for (int64_t row = 0; row < rows; ++row) {
            int64_t base = 0;
            for (int d = 0; d < r - 1; ++d) base += ax_[size_t(d)].off[size_t(ax_[size_t(d)].first[size_t(idx[d])])];
            row_base_.push_back(base);
            next_row(idx);
        }
    }

    Status run(const void* const* in, void* const* out) const override {
        const T* x = static_cast<const T*>(in[0]);
        T* y = static_cast<T*>(out[0]);
        const int r = int(out_.size());
        const int64_t n = shape_numel(out_);
        if (n <= 0) return {};
        if (r == 0) {
            y[0] = x[0];
            return {};
        }
        const int64_t W = out_[size_t(r - 1)];
        const int64_t rows = n / W;
        if constexpr (std::is_same_v<T, float>) {
            if (sep_) {
                if (!pool_) {
                    separable_rows(x, y, 0, rows, vrow_.data());
                    return {};
                }
                auto part = [&](int t) {
                    int64_t r0, r1;
                    chunk_range(rows, int(vrows_.size()), t, 1, &r0, &r1);
                    separable_rows(x, y, r0, r1, vrows_[size_t(t)].data());
                };
                pool_->parallel_for(int(vrows_.size()), part);
                return {};
            }
        }
        if (!row_base_.empty()) {
            auto part = [&](int64_t r0, int64_t r1) {
                const int64_t* rb = row_base_.data();
                for (int64_t row = r0; row < r1; ++row) {
                    T* yr = y + row * W;
                    if (row > r0 && rb[row] == rb[row - 1]) std::memcpy(yr, yr - W, size_t(W) * sizeof(T));
                    else nearest_row(x + rb[row], yr, W);
                }
            };
            for_balanced_or_caller(pool_, rows, 1, near_bal_.get(), [&](int, int64_t b, int64_t e) { part(b, e); });
            return {};
        }
        const AxisTaps& last = ax_[size_t(r - 1)];
        int64_t idx[kMaxRank] = {0};
        int64_t prev_base = -1;
        for (int64_t row = 0; row < rows; ++row) {
            T* yr = y + row * W;
            bool outside = false;
            int64_t base = 0;
            for (int d = 0; d < r - 1; ++d) {
                const AxisTaps& a = ax_[size_t(d)];
                if (a.outside[size_t(idx[d])]) outside = true;
                else if (nearest_) base += a.off[size_t(a.first[size_t(idx[d])])];
            }
            if (fast_nearest_) {
                if (row > 0 && base == prev_base) std::memcpy(yr, yr - W, size_t(W) * sizeof(T));
                else nearest_row(x + base, yr, W);
                prev_base = base;
            } else if (outside) {
                for (int64_t j = 0; j < W; ++j) yr[j] = extrap_;
            } else if (nearest_) {
                for (int64_t j = 0; j < W; ++j)
                    yr[j] = last.outside[size_t(j)] ? extrap_ : x[base + last.off[size_t(last.first[size_t(j)])]];
            } else {
                for (int64_t j = 0; j < W; ++j) {
                    if (last.outside[size_t(j)]) {
                        yr[j] = extrap_;
                        continue;
                    }
                    idx[r - 1] = j;
                    yr[j] = resize_cast<T>(accum(x, 0, idx, 0));
                }
                idx[r - 1] = 0;
            }
            next_row(idx);
        }
        return {};
    }

private:
    // The next output row's index on the outer axes (all but the last), row-major.
    void next_row(int64_t* idx) const {
        for (int d = int(out_.size()) - 2; d >= 0; --d) {
            if (++idx[d] < out_[size_t(d)]) break;
            idx[d] = 0;
        }
    }

    // Linear / cubic float32 resizes whose outer axes (all but the last two) take one input index
    // with weight 1 (an image resize: scale 1 on N and C) and with no extrapolated points run
    // separably per output row: the row's taps down the plane's columns into a row of the input's
    // width (vectorizable), then each output column's taps along it. Taps are padded to the axis'
    // largest count (weight 0), in float: 2 per axis for linear. ~25x faster than the generic
    // nested sum in double (M-LSD-like upsampling of 32 x 80x80 to 160x160: ~19 ms before).
    void init_separable() {
        const int r = int(out_.size());
        if (nearest_ || r < 2) return;
        for (const AxisTaps& a : ax_)
            if (a.any_outside) return;
        for (int d = 0; d < r - 2; ++d) {
            const AxisTaps& a = ax_[size_t(d)];
            for (int64_t o = 0; o < out_[size_t(d)]; ++o)
                if (a.first[size_t(o) + 1] - a.first[size_t(o)] != 1 || a.w[size_t(a.first[size_t(o)])] != 1.0) return;
        }
        auto pad = [](const AxisTaps& a, int64_t n, int64_t* k, std::vector<int64_t>* off, std::vector<float>* w) {
            *k = 1;
            for (int64_t o = 0; o < n; ++o) *k = std::max(*k, a.first[size_t(o) + 1] - a.first[size_t(o)]);
            off->assign(size_t(n * *k), 0);
            w->assign(size_t(n * *k), 0.0f);
            for (int64_t o = 0; o < n; ++o)
                for (int64_t t = a.first[size_t(o)], j = 0; t < a.first[size_t(o) + 1]; ++t, ++j) {
                    (*off)[size_t(o * *k + j)] = a.off[size_t(t)];
                    (*w)[size_t(o * *k + j)] = float(a.w[size_t(t)]);
                }
        };
        pad(ax_[size_t(r - 2)], out_[size_t(r - 2)], &kh_, &offh_, &wh_);
        pad(ax_[size_t(r - 1)], out_[size_t(r - 1)], &kw_, &offw_, &ww_);
        // The input row length: the largest last-axis offset + 1 (stride 1 on the last axis).
        int64_t in_w = 1;
        for (int64_t o : offw_) in_w = std::max(in_w, o + 1);
        in_w_ = in_w;
        vrow_.assign(size_t(in_w + 32), 0.0f);  // 32 floats past the row: the column kernel's window
        sep_ = true;
        // Exact 2x upsampling of the last axis with 2 taps (bilinear): between the edges, output
        // columns 2i and 2i + 1 take fixed weights at offsets that move by one per i, so the
        // column pass runs as two shifted vector sums instead of a gather per output (the line
        // detector's 32 x 80x80 -> 160x160 in the model: ~840 -> ~200 us; ORT ~260).
        const int64_t OW = out_.back();
        if (kw_ == 2 && OW == 2 * in_w && in_w >= 4) {
            const int64_t* o = offw_.data();
            const float* w = ww_.data();
            bool ok = true;
            for (int64_t j = 4; j < OW - 2 && ok; ++j)
                ok = o[2 * j] == o[2 * (j - 2)] + 1 && o[2 * j + 1] == o[2 * (j - 2) + 1] + 1 &&
                     w[2 * j] == w[2 * (j - 2)] && w[2 * j + 1] == w[2 * (j - 2) + 1];
            if (ok) {
                x2_ = true;
                for (int t = 0; t < 4; ++t) {
                    x2_off_[t] = o[4 + t] - 1;  // columns 2 and 3 (i = 1): offset - i
                    x2_w_[t] = w[4 + t];
                }
            }
        }
        // Other two-tap column passes: the lane-permute column kernel (kernels/resize.h) where it
        // has one (exact 2x runs its shifted sums above instead).
        if (kw_ == 2 && !x2_) {
            cols2_fn_ = kernels::resize_cols2_for(kernels::active_isa());
            if (cols2_fn_ && !kernels::resize_cols2_setup(offw_.data(), ww_.data(), OW, &cols2_)) cols2_fn_ = nullptr;
        }
    }

public:
    // Threads (docs/threading.md): the separable path splits its output rows into `chunks`
    // contiguous ranges, each with its own row buffer (every output row is computed the same way);
    // the fast nearest path (never separable) splits its rows by measured shares.
    void set_parallel(ThreadPool* pool, int chunks) {
        if (!pool || chunks < 2) return;
        const int64_t rows = out_.empty() || out_.back() <= 0 ? 0 : shape_numel(out_) / out_.back();
        if (!row_base_.empty() && chunks == pool->threads() && rows >= chunks) {
            pool_ = pool, near_bal_ = std::make_unique<Balance>(chunks);  // nearest: rows per run
            return;
        }
        if (!sep_) return;
        pool_ = pool;
        vrows_.assign(size_t(chunks), std::vector<float>(vrow_.size(), 0.0f));
    }
    std::string describe() const override {
        if (near_bal_) return "nearest x" + std::to_string(pool_->threads()) + " threads by rows";
        if (!sep_) return std::string();
        std::string d = x2_ ? "separable 2x" : cols2_fn_ ? "separable permuted columns" : "separable";
        return pool_ ? d + " x" + std::to_string(vrows_.size()) + " threads by rows" : d;
    }
    // The split threshold's work: the separable path's multiply-adds x 2; a nearest resize's
    // copies count as elementwise work (8 per value, as binary ops).
    int64_t flops() const {
        if (out_.empty()) return 0;
        const int64_t W = out_.back(), rows = shape_numel(out_) / std::max<int64_t>(1, W);
        if (!row_base_.empty()) return 8 * shape_numel(out_);
        return sep_ ? 2 * rows * (in_w_ * kh_ + W * kw_) : 0;
    }

private:
    // Output rows [r0, r1) of the separable path; v: a row buffer of in_w_ floats.
    void separable_rows(const float* x, float* y, int64_t r0, int64_t r1, float* v) const {
        const int r = int(out_.size());
        const int64_t W = out_[size_t(r - 1)], OH = out_[size_t(r - 2)];
        for (int64_t row = r0; row < r1;) {
            // The plane's base from its outer index (each outer axis takes one input index), once
            // per plane: the divisions cost more than a short row (M-LSD's 40 -> 80 columns).
            int64_t plane = row / OH, base = 0;
            const int64_t end = std::min(r1, (plane + 1) * OH);
            for (int d = r - 3; d >= 0; --d) {
                const AxisTaps& a = ax_[size_t(d)];
                const int64_t i = plane % out_[size_t(d)];
                plane /= out_[size_t(d)];
                base += a.off[size_t(a.first[size_t(i)])];
            }
            for (int64_t oy = row % OH; row < end; ++row, ++oy) separable_row(x + base, oy, y + row * W, v);
        }
    }

    void separable_row(const float* plane, int64_t oy, float* __restrict yr, float* __restrict v) const {
        const int64_t IW = in_w_, OW = out_.back();
        const int64_t* oh = offh_.data() + oy * kh_;
        const float* wh = wh_.data() + oy * kh_;
        if (kh_ == 2) {
            const float *r0 = plane + oh[0], *r1 = plane + oh[1];
            const float w0 = wh[0], w1 = wh[1];
            for (int64_t i = 0; i < IW; ++i) v[i] = w0 * r0[i] + w1 * r1[i];
        } else {
            for (int64_t i = 0; i < IW; ++i) v[i] = 0.0f;
            for (int64_t k = 0; k < kh_; ++k) {
                const float* rk = plane + oh[k];
                const float wk = wh[k];
                for (int64_t i = 0; i < IW; ++i) v[i] += wk * rk[i];
            }
        }
        const int64_t* ow = offw_.data();
        const float* w = ww_.data();
        if (x2_) {
            // Columns 0, 1 and the last two by their taps; 2 .. OW - 3 as shifted sums.
            for (int64_t j : {int64_t(0), int64_t(1), OW - 2, OW - 1})
                yr[j] = w[2 * j] * v[ow[2 * j]] + w[2 * j + 1] * v[ow[2 * j + 1]];
            const float a0 = x2_w_[0], a1 = x2_w_[1], b0 = x2_w_[2], b1 = x2_w_[3];
            // Column 2i (2i + 1) reads v[i + x2_off_[0 / 1]] (v[i + x2_off_[2 / 3]]), i from 1.
            const float* __restrict va0 = v + x2_off_[0] + 1;
            const float* __restrict va1 = v + x2_off_[1] + 1;
            const float* __restrict vb0 = v + x2_off_[2] + 1;
            const float* __restrict vb1 = v + x2_off_[3] + 1;
            float* __restrict y2 = yr + 2;
            for (int64_t k = 0; k < IW - 2; ++k) {
                y2[2 * k] = a0 * va0[k] + a1 * va1[k];
                y2[2 * k + 1] = b0 * vb0[k] + b1 * vb1[k];
            }
        } else if (cols2_fn_) {
            cols2_fn_(cols2_, v, yr);
        } else if (kw_ == 2) {
            for (int64_t j = 0; j < OW; ++j) yr[j] = w[2 * j] * v[ow[2 * j]] + w[2 * j + 1] * v[ow[2 * j + 1]];
        } else {
            for (int64_t j = 0; j < OW; ++j) {
                float s = 0.0f;
                for (int64_t k = 0; k < kw_; ++k) s += w[j * kw_ + k] * v[ow[j * kw_ + k]];
                yr[j] = s;
            }
        }
    }

    void nearest_row(const T* __restrict xr, T* __restrict yr, int64_t W) const {
        switch (repeat_) {
            case 1: std::memcpy(yr, xr, size_t(W) * sizeof(T)); return;
            case 2:
                for (int64_t j = 0; j < W / 2; ++j) yr[2 * j] = yr[2 * j + 1] = xr[j];
                return;
            case 0: {
                const int64_t* li = last_idx_.data();
                for (int64_t j = 0; j < W; ++j) yr[j] = xr[li[j]];
                return;
            }
            default:
                for (int64_t j = 0, k = 0; j < W / repeat_; ++j)
                    for (int64_t r = 0; r < repeat_; ++r) yr[k++] = xr[j];
                return;
        }
    }

    // Weighted sum over the taps of axes d.. at output index idx, from input offset off.
    double accum(const T* x, int d, const int64_t* idx, int64_t off) const {
        if (d == int(ax_.size())) return double(x[off]);
        const AxisTaps& a = ax_[size_t(d)];
        const int64_t o = idx[d];
        double s = 0;
        for (int64_t t = a.first[size_t(o)]; t < a.first[size_t(o) + 1]; ++t)
            s += a.w[size_t(t)] * accum(x, d + 1, idx, off + a.off[size_t(t)]);
        return s;
    }

    Shape out_;
    std::vector<AxisTaps> ax_;
    bool nearest_;
    T extrap_;
    bool fast_nearest_ = false;
    int64_t repeat_ = 0;               // integer upsampling factor of the last axis, 0: none
    std::vector<int64_t> last_idx_;    // nearest: source index per output column
    std::vector<int64_t> row_base_;    // fast nearest: source offset per output row
    // Separable float linear / cubic (init_separable): taps per output row / column, padded to
    // kh_ / kw_ each (offsets: row offsets into the plane / column indices), and the row buffer.
    bool sep_ = false;
    int64_t kh_ = 0, kw_ = 0, in_w_ = 0;
    kernels::ResizeCols2Fn cols2_fn_ = nullptr;  // two taps a column: the vector column pass, if any
    kernels::ResizeCols2 cols2_;
    bool x2_ = false;  // exact 2x on the last axis: columns 2i, 2i + 1 = taps at i + x2_off_ (init_separable)
    int64_t x2_off_[4] = {};
    float x2_w_[4] = {};
    std::vector<int64_t> offh_, offw_;
    std::vector<float> wh_, ww_;
    mutable std::vector<float> vrow_;
    ThreadPool* pool_ = nullptr;                     // set: the separable or the nearest path splits
    mutable std::vector<std::vector<float>> vrows_;  // per part (threads)
    std::unique_ptr<Balance> near_bal_;              // the fast nearest path's row split
};

// Creates the kernel for per-axis scales and output sizes (both of the input's rank) and roi
// (starts then ends, 2 x rank).
Status make_resize(OpContext& ctx, const ResizeParams& p, const std::vector<double>& scale, const Shape& out,
                   const std::vector<double>& roi) {
    const Shape& in = ctx.in_shape(0);
    const size_t r = in.size();
    DType t = ctx.in_dtype(0);
    if (!dtype_is_int(t) && t != DType::kF32 && t != DType::kF64)
        return ctx.fail_unsupported("dtype ", dtype_name(t), " is not supported");
    for (size_t d = 0; d < r; ++d) {
        if (out[d] < 0) return ctx.fail("output dim ", d, " would be negative (", out[d], ")");
        if (in[d] == 0 && out[d] != 0)
            return ctx.fail("cannot resize dim ", d, " of size 0 to ", out[d]);
    }
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, t, out));
    Shape st = strides_of(in);
    std::vector<AxisTaps> ax;
    for (size_t d = 0; d < r; ++d)
        ax.push_back(make_axis_taps(p, in[d], out[d], scale[d], roi[d], roi[r + d], st[d]));
    return visit_numeric(t, [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        auto k = std::make_unique<ResizeKernel<T>>(out, std::move(ax), p.mode == Interp::kNearest, p.extrapolation);
        k->set_parallel(ctx.options().pool.get(), parallel_chunks(ctx.options(), k->flops()));
        ctx.set_kernel(std::move(k));
        return {};
    });
}

Status parse_interp(const OpContext& ctx, bool allow_cubic, ResizeParams* p) {
    std::string m = ctx.attr_str("mode", "nearest");
    if (m == "nearest") p->mode = Interp::kNearest;
    else if (m == "linear" || m == "bilinear") p->mode = Interp::kLinear;
    else if (m == "cubic" && allow_cubic) p->mode = Interp::kCubic;
    else return ctx.fail("unknown mode '", m, "' (expected nearest, linear", allow_cubic ? " or cubic)" : ")");
    return {};
}

// Scales as doubles from a constant tensor; each must be finite and > 0.
Status read_scales(const OpContext& ctx, int input, std::vector<double>* out) {
    const Tensor* t = ctx.in_const(input);
    if (!t) return ctx.need_value(input);
    if (t->dtype() != DType::kF32 && t->dtype() != DType::kF64)
        return ctx.fail("scales must be float, got ", dtype_name(t->dtype()));
    out->clear();
    for (int64_t i = 0; i < t->numel(); ++i) {
        double v = t->get_f64(i);
        if (!(v > 0) || !std::isfinite(v)) return ctx.fail("scale ", i, " is ", v, "; scales must be > 0");
        out->push_back(v);
    }
    return {};
}

// Resize-10 and Upsample: asymmetric coordinates, "simple" nearest rounding.
Status resize_simple(OpContext& ctx, const ResizeParams& p, const std::vector<double>& scales) {
    const Shape& in = ctx.in_shape(0);
    if (scales.size() != in.size())
        return ctx.fail("scales has ", scales.size(), " values but the input has rank ", in.size());
    Shape out(in.size());
    for (size_t d = 0; d < in.size(); ++d) out[d] = int64_t(std::floor(scales[d] * double(in[d])));
    std::vector<double> roi(2 * in.size(), 0.0);
    std::fill(roi.begin() + long(in.size()), roi.end(), 1.0);
    return make_resize(ctx, p, scales, out, roi);
}

Status prep_Upsample(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input X is missing");
    ResizeParams p;
    JIFFY_RETURN_IF_ERROR(parse_interp(ctx, false, &p));
    p.coord = Coord::kAsymmetric;
    p.nearest = NearestMode::kSimple;
    std::vector<double> scales;
    if (ctx.has_input(1)) {
        JIFFY_RETURN_IF_ERROR(read_scales(ctx, 1, &scales));
    } else {
        if (!ctx.has_attr("scales")) return ctx.fail("needs the 'scales' attribute or input");
        for (float f : ctx.attr_floats("scales")) {
            if (!(f > 0) || !std::isfinite(f)) return ctx.fail("scale ", f, " must be > 0");
            scales.push_back(double(f));
        }
    }
    for (double s : scales)
        if (s < 1) return ctx.fail("Upsample scales must be >= 1, got ", s);
    return resize_simple(ctx, p, scales);
}

Status prep_Resize(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input X is missing");
    const Shape& in = ctx.in_shape(0);
    const int64_t r = int64_t(in.size());
    ResizeParams p;
    if (ctx.opset() < 11) {
        JIFFY_RETURN_IF_ERROR(parse_interp(ctx, false, &p));
        p.coord = Coord::kAsymmetric;
        p.nearest = NearestMode::kSimple;
        if (!ctx.has_input(1)) return ctx.fail("input scales is missing");
        std::vector<double> scales;
        JIFFY_RETURN_IF_ERROR(read_scales(ctx, 1, &scales));
        return resize_simple(ctx, p, scales);
    }
    JIFFY_RETURN_IF_ERROR(parse_interp(ctx, true, &p));
    const std::string cm = ctx.attr_str("coordinate_transformation_mode", "half_pixel");
    if (cm == "half_pixel") p.coord = Coord::kHalfPixel;
    else if (cm == "half_pixel_symmetric") p.coord = Coord::kHalfPixelSym;
    else if (cm == "pytorch_half_pixel") p.coord = Coord::kPytorchHalfPixel;
    else if (cm == "align_corners") p.coord = Coord::kAlignCorners;
    else if (cm == "asymmetric") p.coord = Coord::kAsymmetric;
    else if (cm == "tf_crop_and_resize") p.coord = Coord::kTfCrop;
    else if (cm == "tf_half_pixel_for_nn") p.coord = Coord::kTfHalfPixelNN;
    else return ctx.fail("unknown coordinate_transformation_mode '", cm, "'");
    const std::string nm = ctx.attr_str("nearest_mode", "round_prefer_floor");
    if (nm == "round_prefer_floor") p.nearest = NearestMode::kRoundPreferFloor;
    else if (nm == "round_prefer_ceil") p.nearest = NearestMode::kRoundPreferCeil;
    else if (nm == "floor") p.nearest = NearestMode::kFloor;
    else if (nm == "ceil") p.nearest = NearestMode::kCeil;
    else return ctx.fail("unknown nearest_mode '", nm, "'");
    p.cubic_a = ctx.attr_float("cubic_coeff_a", -0.75f);
    p.exclude_outside = ctx.attr_int("exclude_outside", 0) != 0;
    p.extrapolation = ctx.attr_float("extrapolation_value", 0.0f);

    // opset 18: axes, keep_aspect_ratio_policy, antialias.
    std::vector<int64_t> axes;
    std::string policy = "stretch";
    if (ctx.opset() >= 18) {
        p.antialias = ctx.attr_int("antialias", 0) != 0 && p.mode != Interp::kNearest;
        policy = ctx.attr_str("keep_aspect_ratio_policy", "stretch");
        if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
            return ctx.fail("unknown keep_aspect_ratio_policy '", policy, "'");
        if (ctx.has_attr("axes")) {
            for (int64_t a : ctx.attr_ints("axes")) {
                int64_t n = 0;
                if (!normalize_axis(a, r, &n)) return ctx.fail("axis ", a, " is out of range for rank ", r);
                if (std::find(axes.begin(), axes.end(), n) != axes.end()) return ctx.fail("axis ", a, " is repeated");
                axes.push_back(n);
            }
        }
    }
    if (axes.empty() && !ctx.has_attr("axes"))
        for (int64_t d = 0; d < r; ++d) axes.push_back(d);
    const size_t na = axes.size();

    auto given = [&](int i) { return ctx.has_input(i) && shape_numel(ctx.in_shape(i)) > 0; };
    const bool has_scales = given(2), has_sizes = given(3);
    if (has_scales == has_sizes)
        return ctx.fail(has_scales ? "both scales and sizes are given; exactly one is allowed"
                                   : "one of scales or sizes must be given");
    std::vector<double> scale(size_t(r), 1.0);
    Shape out = in;
    if (has_scales) {
        std::vector<double> s;
        JIFFY_RETURN_IF_ERROR(read_scales(ctx, 2, &s));
        if (s.size() != na) return ctx.fail("scales has ", s.size(), " values, expected ", na);
        for (size_t i = 0; i < na; ++i) {
            const size_t d = size_t(axes[i]);
            scale[d] = s[i];
            out[d] = int64_t(std::floor(s[i] * double(in[d])));
        }
    } else {
        const Tensor* t = ctx.in_const(3);
        if (!t) return ctx.need_value(3);
        if (!dtype_is_int(t->dtype())) return ctx.fail("sizes must be int64, got ", dtype_name(t->dtype()));
        std::vector<int64_t> sz = t->to_i64_vector();
        if (sz.size() != na) return ctx.fail("sizes has ", sz.size(), " values, expected ", na);
        for (size_t i = 0; i < na; ++i) {
            const size_t d = size_t(axes[i]);
            if (sz[i] < 0) return ctx.fail("sizes[", i, "] is negative (", sz[i], ")");
            out[d] = sz[i];
            scale[d] = in[d] > 0 ? double(sz[i]) / double(in[d]) : 1.0;
        }
        if (policy != "stretch" && na > 0) {
            double s = scale[size_t(axes[0])];
            for (size_t i = 1; i < na; ++i)
                s = policy == "not_larger" ? std::min(s, scale[size_t(axes[i])]) : std::max(s, scale[size_t(axes[i])]);
            for (size_t i = 0; i < na; ++i) {
                const size_t d = size_t(axes[i]);
                scale[d] = s;
                out[d] = int64_t(s * double(in[d]) + 0.5);
            }
        }
    }
    for (size_t d = 0; d < size_t(r); ++d)
        if (!(scale[d] > 0)) return ctx.fail("scale for dim ", d, " is ", scale[d], "; it must be > 0");

    std::vector<double> roi(2 * size_t(r), 0.0);
    std::fill(roi.begin() + r, roi.end(), 1.0);
    if (p.coord == Coord::kTfCrop && given(1)) {
        const Tensor* t = ctx.in_const(1);
        if (!t) return ctx.need_value(1);
        if (size_t(t->numel()) != 2 * na)
            return ctx.fail("roi has ", t->numel(), " values, expected ", 2 * na, " (starts then ends)");
        for (size_t i = 0; i < na; ++i) {
            roi[size_t(axes[i])] = t->get_f64(int64_t(i));
            roi[size_t(r) + size_t(axes[i])] = t->get_f64(int64_t(na + i));
        }
    }
    return make_resize(ctx, p, scale, out, roi);
}

// ================================================================ Dropout (inference)

class DropoutKernel : public Kernel {
public:
    DropoutKernel(size_t bytes, int64_t mask_n, size_t mask_elem, const uint8_t* one)
        : bytes_(bytes), mask_n_(mask_n), mask_elem_(mask_elem) {
        std::memcpy(one_, one, mask_elem);
    }
    Status run(const void* const* in, void* const* out) const override {
        if (bytes_) std::memmove(out[0], in[0], bytes_);
        if (out[1]) {
            uint8_t* m = static_cast<uint8_t*>(out[1]);
            for (int64_t i = 0; i < mask_n_; ++i) std::memcpy(m + size_t(i) * mask_elem_, one_, mask_elem_);
        }
        return {};
    }

private:
    size_t bytes_;
    int64_t mask_n_;
    size_t mask_elem_;
    uint8_t one_[8] = {0};
};

Status prep_Dropout(OpContext& ctx) {
    if (!ctx.has_input(0)) return ctx.fail("input data is missing");
    const DType t = ctx.in_dtype(0);
    const size_t es = dtype_size(t);
    if (es == 0) return ctx.fail_unsupported("dtype ", dtype_name(t), " is not supported");
    if (ctx.opset() >= 12) {
        // training_mode fed at run time could be true: ask for its value rather than guess.
        const Tensor* tm = ctx.in_const(2);
        if (ctx.has_input(2) && !tm) return ctx.need_value(2);
        if (tm && tm->numel() > 0 && tm->get_i64(0) != 0) {
            // Training mode with ratio 0 keeps everything; any other ratio is random.
            const Tensor* ratio = ctx.in_const(1);
            if (ctx.has_input(1) && !ratio) return ctx.need_value(1);
            const bool zero_ratio = ratio && ratio->numel() > 0 && ratio->get_f64(0) == 0.0;
            if (!zero_ratio)
                return ctx.fail_unsupported("training_mode is true: training-mode (random) dropout is not supported");
        }
        if (ctx.has_input(1)) {
            const Tensor* ratio = ctx.in_const(1);
            if (ratio && ratio->numel() > 0) {
                double v = ratio->get_f64(0);
                if (!(v >= 0 && v < 1)) return ctx.fail("ratio ", v, " must be in [0, 1)");
            }
        }
    } else {
        float v = ctx.attr_float("ratio", 0.5f);
        if (!(v >= 0 && v < 1)) return ctx.fail("ratio ", v, " must be in [0, 1)");
    }
    const Shape& s = ctx.in_shape(0);
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, t, s));
    // The mask is bool from opset 10; before that it has the input's type. All kept: true / 1.
    uint8_t one[8] = {0};
    size_t mes = 1;
    if (ctx.has_output(1)) {
        if (ctx.opset() >= 10) {
            JIFFY_RETURN_IF_ERROR(ctx.set_output(1, DType::kBool, s));
            one[0] = 1;
        } else {
            JIFFY_RETURN_IF_ERROR(ctx.set_output(1, t, s));
            mes = es;
            Status st = visit_all(t, [&](auto tag) -> Status {
                using T = typename decltype(tag)::type;
                T v = T(1);
                std::memcpy(one, &v, sizeof(T));
                return {};
            });
            if (!st.ok()) return ctx.fail_unsupported("mask of dtype ", dtype_name(t), " is not supported");
        }
    }
    const int64_t n = shape_numel(s);
    ctx.set_kernel(std::make_unique<DropoutKernel>(size_t(n) * es, ctx.has_output(1) ? n : 0, mes, one));
    return {};
}

}  // namespace

std::unique_ptr<Kernel> make_gemm_f32_nk_kernel(int64_t M, int64_t K, int64_t N, const float* w_nk, bool has_bias,
                                                const kernels::Activation& act, ThreadPool* pool, int chunks,
                                                const std::string& label, const OpContext& ctx) {
    auto k = std::make_unique<GemmF32Kernel>(M, K, N, false, true, 1.0f, 1.0f, w_nk,
                                             has_bias ? GemmF32Kernel::kInputBias : GemmF32Kernel::kNoC,
                                             std::vector<float>{}, 0, 1, act);
    k->choose_order(ctx);
    k->set_parallel(pool, chunks);
    k->set_label(label);
    return k;
}

void register_linalg_ops(OpRegistry& r) {
    r.add("Gemm", prep_Gemm);
    r.add("MatMul", prep_MatMul);
    r.add("MatMulInteger", prep_MatMulInteger);
    r.add("Einsum", prep_Einsum);
    r.add("Softmax", prep_softmax<SoftKind::kSoftmax>);
    r.add("LogSoftmax", prep_softmax<SoftKind::kLogSoftmax>);
    r.add("Hardmax", prep_softmax<SoftKind::kHardmax>);
    r.add("Resize", prep_Resize);
    r.add("Upsample", prep_Upsample);
    r.add("Dropout", prep_Dropout);
}

}  // namespace jiffy
