// ElementwiseChain (domain "jiffy", made by the fuse_elementwise pass): a chain of float32
// elementwise steps over one tensor in one pass over memory. acc starts as input 0 (the output's
// shape); each step is
//   unary   acc = act(acc)               (the activation machinery: Relu, LeakyRelu, Clip,
//                                          HardSigmoid, HardSwish, Sigmoid, Tanh, Exp)
//   binary  acc = acc OP b  or  b OP acc (Add, Sub, Mul, Div, Max, Min)
// where b is an input that has the output's shape, one value per channel (axis 1; shape [C,1..]
// or [1,C,1..] right-aligned), or one value. Attributes (one entry per step): ops (100 + ActKind,
// 200 + BinOp for acc OP b, 300 + BinOp for b OP acc), operands (input index, -1 for unary),
// alphas / betas (activation parameters). The kernel walks blocks of <= 512 elements inside one
// channel plane (or, when each plane is one value as in a [1, C] Gemm output, along the row of
// channels), applying each step's vector row function (the same functions the unfused ops use,
// so results match them bit for bit) between two L1-resident buffers. With a pool, tensors of
// many planes split by whole channel planes (balanced ranges, each part its own two buffers; the
// same bits): a pre-activation net's BatchNorm + ReLU before each conv (DenseNet-121: 2.2 ms at
// one thread) otherwise runs on the caller alone at two threads, reading half of its input from
// the other core (3.8 ms).
#include <algorithm>
#include <vector>

#include "kernels/activation.h"
#include "kernels/binary.h"
#include "kernels/cpu.h"
#include "ops/op.h"
#include "ops/util.h"
#include "runtime/plan.h"
#include "runtime/threadpool.h"

namespace jiffy {
namespace {

constexpr int64_t kBlock = 512;

enum class OperandKind { kNone, kFull, kChannel, kScalar };

struct ChainStep {
    int kind = 0;  // 1 unary, 2 acc OP b, 3 b OP acc
    kernels::Activation act;
    kernels::BinaryRows rows;
    int input = -1;
    OperandKind operand = OperandKind::kNone;
};

class ElementwiseChainKernel : public Kernel {
public:
    ElementwiseChainKernel(std::vector<ChainStep> steps, int64_t outer, int64_t channels, int64_t inner)
        : steps_(std::move(steps)), outer_(outer), channels_(channels), inner_(inner),
          act_(kernels::act_apply_for(kernels::active_isa())), buf_(size_t(2 * kBlock)) {}

    // Splits by channel planes on `pool` (chunks = its threads) where there are at least 4 planes
    // a part; one-value planes (inner 1) stay whole.
    void set_parallel(ThreadPool* pool, int chunks) {
        if (!pool || chunks < 2 || chunks != pool->threads() || inner_ <= 1 || outer_ * channels_ < 4 * chunks) return;
        pool_ = pool;
        bal_ = std::make_unique<Balance>(chunks);
        buf_.assign(size_t(2 * kBlock * chunks), 0.0f);
    }
    std::string describe() const override {
        return pool_ ? "x" + std::to_string(pool_->threads()) + " threads by planes" : std::string();
    }

    Status run(const void* const* in, void* const* out) const override {
        const float* x = static_cast<const float*>(in[0]);
        float* y = static_cast<float*>(out[0]);
        if (inner_ == 1) {
            // One value per channel plane (e.g. a [1, 128] Gemm output): walk each row of
            // channels in blocks, a per-channel operand being a row of its own.
            for (int64_t n = 0; n < outer_; ++n)
                for (int64_t c0 = 0; c0 < channels_; c0 += kBlock)
                    run_block(in, x, y, n * channels_ + c0, std::min(kBlock, channels_ - c0), c0, -1, buf_.data());
            return {};
        }
        for_balanced_or_caller(pool_, outer_ * channels_, 1, bal_.get(), [&](int part, int64_t lo, int64_t hi) {
            planes(in, x, y, lo, hi, buf_.data() + 2 * kBlock * part);
        });
        return {};
    }

private:
    // Channel planes [lo, hi) (plane q: image q / channels, channel q % channels) through every
    // step, in blocks, with the two buffers at buf.
    void planes(const void* const* in, const float* x, float* y, int64_t lo, int64_t hi, float* buf) const {
        for (int64_t q = lo; q < hi; ++q) {
            const int64_t c = q % channels_;
            for (int64_t b0 = 0; b0 < inner_; b0 += kBlock)
                run_block(in, x, y, q * inner_ + b0, std::min(kBlock, inner_ - b0), 0, c, buf);
        }
    }

    // Elements [off, off + len) through every step. c >= 0: the block lies in channel c (a
    // per-channel operand is the one value b[c]); c < 0: the block spans channels c0 .. c0 + len
    // of one row (a per-channel operand is the row b + c0).
    void run_block(const void* const* in, const float* x, float* y, int64_t off, int64_t len, int64_t c0,
                   int64_t c, float* buf) const {
        float* bufs[2] = {buf, buf + kBlock};
        const size_t last = steps_.size() - 1;
        const float* src = x + off;
        for (size_t i = 0; i <= last; ++i) {
            const ChainStep& s = steps_[i];
            float* dst = i == last ? y + off : bufs[i & 1];
            if (s.kind == 1) {
                act_(s.act, src, dst, len);
            } else {
                const float* b = static_cast<const float*>(in[s.input]);
                const float* row = s.operand == OperandKind::kFull ? b + off
                                   : (s.operand == OperandKind::kChannel && c < 0) ? b + c0
                                                                                    : nullptr;
                if (row) {
                    if (s.kind == 2) s.rows.vv(src, row, dst, len);
                    else s.rows.vv(row, src, dst, len);
                } else {
                    const float v = s.operand == OperandKind::kChannel ? b[c] : b[0];
                    if (s.kind == 2) s.rows.vs(src, v, dst, len);
                    else s.rows.sv(v, src, dst, len);
                }
            }
            src = dst;
        }
    }

    std::vector<ChainStep> steps_;
    int64_t outer_, channels_, inner_;
    kernels::ActApplyFn act_;
    mutable std::vector<float> buf_;  // two blocks per part
    ThreadPool* pool_ = nullptr;
    std::unique_ptr<Balance> bal_;
};

// How operand shape b broadcasts against the output shape o (see the header comment).
OperandKind classify(const Shape& b, const Shape& o) {
    if (shape_numel(b) == 1) return OperandKind::kScalar;
    if (b == o) return OperandKind::kFull;
    if (o.size() < 2 || b.size() > o.size() || b.size() + 1 < o.size()) return OperandKind::kNone;
    const size_t lead = o.size() - b.size();  // b's dim i aligns with o's dim lead + i
    for (size_t i = 0; i < b.size(); ++i) {
        const size_t od = lead + i;
        if (od == 1 ? b[i] != o[1] : b[i] != 1) return OperandKind::kNone;
    }
    return OperandKind::kChannel;
}

}  // namespace

Status prep_ElementwiseChain(OpContext& ctx) {
    const std::vector<int64_t> ops = ctx.attr_ints("ops"), operands = ctx.attr_ints("operands");
    const std::vector<float> alphas = ctx.attr_floats("alphas"), betas = ctx.attr_floats("betas");
    const size_t n = ops.size();
    if (n == 0 || operands.size() != n || alphas.size() != n || betas.size() != n)
        return ctx.fail("attributes ops, operands, alphas, betas must be non-empty and of equal length");
    for (int i = 0; i < ctx.num_inputs(); ++i)
        if (!ctx.has_input(i) || ctx.in_dtype(i) != DType::kF32)
            return ctx.fail_unsupported("input ", i, " must be present and float32");
    const Shape& out = ctx.in_shape(0);
    const kernels::Isa isa = kernels::active_isa();
    std::vector<ChainStep> steps(n);
    for (size_t i = 0; i < n; ++i) {
        ChainStep& s = steps[i];
        const int64_t code = ops[i];
        s.kind = int(code / 100);
        const int sub = int(code % 100);
        if (s.kind == 1) {
            if (sub < int(kernels::ActKind::kRelu) || sub > int(kernels::ActKind::kExp))
                return ctx.fail("step ", i, ": unknown activation code ", code);
            s.act = kernels::Activation{kernels::ActKind(sub), alphas[i], betas[i]};
            continue;
        }
        if ((s.kind != 2 && s.kind != 3) || sub > int(kernels::BinOp::kMin))
            return ctx.fail("step ", i, ": unknown op code ", code);
        s.rows = kernels::binary_rows_for(isa, kernels::BinOp(sub));
        s.input = int(operands[i]);
        if (s.input < 0 || s.input >= ctx.num_inputs())
            return ctx.fail("step ", i, ": operand ", s.input, " is not an input");
        s.operand = classify(ctx.in_shape(s.input), out);
        if (s.operand == OperandKind::kNone)
            return ctx.fail("step ", i, ": operand shape ", shape_str(ctx.in_shape(s.input)),
                            " neither matches ", shape_str(out), " nor is per-channel or a scalar");
    }
    JIFFY_RETURN_IF_ERROR(ctx.set_output(0, DType::kF32, out));
    const int64_t outer = out.size() >= 2 ? out[0] : 1;
    const int64_t channels = out.size() >= 2 ? out[1] : 1;
    const int64_t total = shape_numel(out);
    const int64_t inner = outer * channels > 0 ? total / (outer * channels) : 0;
    auto k = std::make_unique<ElementwiseChainKernel>(std::move(steps), outer, channels, inner);
    // Worth a hand-off from ~64 K elements, as a same-shape binary op (ops/elementwise.cpp).
    k->set_parallel(ctx.options().pool.get(), parallel_chunks(ctx.options(), 8 * total));
    ctx.set_kernel(std::move(k));
    return {};
}

}  // namespace jiffy
