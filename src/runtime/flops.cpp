// FLOP counts (2 x multiply-adds) of the compute-heavy ops, from the shapes a plan executes.
#include "runtime/plan.h"

namespace jiffy {

static int64_t prod(const Shape& s, size_t from = 0, size_t to = SIZE_MAX) {
    int64_t p = 1;
    for (size_t i = from; i < s.size() && i < to; ++i) p *= s[i];
    return p;
}

int64_t step_flops(const StepInfo& s) {
    int64_t total = 0;
    {
        if (s.in_shapes.empty() || s.out_shapes.empty()) return 0;
        const Shape& x = s.in_shapes[0];
        const Shape& y = s.out_shapes[0];
        if ((s.op == "Conv" || s.op == "ConvNhwc") && s.in_shapes.size() >= 2) {  // ConvNhwc: the same count
            const Shape& w = s.in_shapes[1];  // M x C/g x k...
            total += 2 * prod(y) * prod(w, 1);
        } else if (s.op == "ConvNhwcBand" && s.in_shapes.size() >= 4 && !s.in_shapes[1].empty()) {
            // The expand 1x1 (X's pixels x K x M) or the stem (its output pixels x M x C x 3 x 3)
            // and the depthwise (Y x kh x kw).
            const Shape& w1 = s.in_shapes[1];
            if (w1.size() == 4 && w1[2] == 3 && x.size() == 4) {
                auto pads = s.attrs.find("_pw_pads");
                const bool p4 = pads != s.attrs.end() && pads->second.ints.size() == 4;
                const int64_t oh = (x[2] + (p4 ? pads->second.ints[0] + pads->second.ints[2] : 0) - 3) / 2 + 1;
                const int64_t ow = (x[3] + (p4 ? pads->second.ints[1] + pads->second.ints[3] : 0) - 3) / 2 + 1;
                total += 2 * x[0] * oh * ow * prod(w1);
            } else {
                total += 2 * prod(x) * w1[0];
            }
            total += 2 * prod(y) * prod(s.in_shapes[3], 1);
        } else if (s.op == "ConvTranspose" && s.in_shapes.size() >= 2) {
            const Shape& w = s.in_shapes[1];  // C x M/g x k...
            total += 2 * prod(x) * prod(w, 1);
        } else if ((s.op == "MatMul" || s.op == "Gemm") && s.in_shapes.size() >= 2 && !x.empty()) {
            int64_t k = s.op == "Gemm" ? 0 : x.back();
            if (auto v = s.attrs.find("_view_a"); s.op == "MatMul" && v != s.attrs.end() && !v->second.ints.empty())
                k = v->second.ints.back();  // A read as a view of its input (fold_matmul_transpose)
            if (s.op == "Gemm") {
                auto it = s.attrs.find("transA");
                bool ta = it != s.attrs.end() && it->second.i != 0;
                k = x.size() == 2 ? (ta ? x[0] : x[1]) : 0;
            }
            total += 2 * prod(y) * k;
        } else if ((s.op == "LSTM" || s.op == "GRU" || s.op == "RNN") && s.in_shapes.size() >= 3) {
            const Shape& w = s.in_shapes[1];  // dirs x G*H x I
            const Shape& r = s.in_shapes[2];  // dirs x G*H x H
            int64_t seq = x.size() == 3 ? x[0] * x[1] : 0;  // seq x batch
            total += 2 * seq * (prod(w) + prod(r));
        }
    }
    return total;
}

int64_t Plan::flops() const {
    int64_t total = 0;
    for (const StepInfo& s : step_info) total += step_flops(s);
    return total;
}

}  // namespace jiffy
