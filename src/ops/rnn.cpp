// Recurrent ops: RNN, GRU, LSTM (ai.onnx opsets 7..21; `layout` from opset 14).
// Reference kernels: plain loops, one batch row and one time step at a time. The numerics follow
// ONNX Runtime where the spec is loose: activation_alpha/beta are consumed in order by the
// activations that take them; clip bounds the gate pre-activations (not the cell state); a batch
// entry with sequence length 0 gets zero final states; outputs past a sequence's length are zero.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "kernels/activation.h"
#include "kernels/gemm.h"
#include "ops/util.h"
#include "runtime/plan.h"
#include "runtime/threadpool.h"

namespace jiffy {
namespace {

// ---------------------------------------------------------------- activations

enum class Act {
    kSigmoid,
    kTanh,
    kRelu,
    kHardSigmoid,
    kAffine,
    kLeakyRelu,
    kThresholdedRelu,
    kScaledTanh,
    kElu,
    kSoftsign,
    kSoftplus
};

struct ActFn {
    Act kind = Act::kSigmoid;
    float alpha = 0, beta = 0;

    template <typename T>
    T operator()(T x) const {
        switch (kind) {
            case Act::kSigmoid:
                return x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
            case Act::kTanh: return std::tanh(x);
            case Act::kRelu: return x > T(0) ? x : T(0);
            case Act::kHardSigmoid: return std::max(T(0), std::min(T(1), T(alpha) * x + T(beta)));
            case Act::kAffine: return T(alpha) * x + T(beta);
            case Act::kLeakyRelu: return x >= T(0) ? x : T(alpha) * x;
            case Act::kThresholdedRelu: return x > T(alpha) ? x : T(0);
            case Act::kScaledTanh: return T(alpha) * std::tanh(T(beta) * x);
            case Act::kElu: return x >= T(0) ? x : T(alpha) * (std::exp(x) - T(1));
            case Act::kSoftsign: return x / (T(1) + std::abs(x));
            case Act::kSoftplus: return x > T(20) ? x : std::log1p(std::exp(x));
        }
        return x;
    }
};

struct ActInfo {
    const char* name;  // lower case
    Act kind;
    bool uses_alpha, uses_beta;
    float def_alpha, def_beta;  // defaults of the corresponding ONNX ops
};

constexpr ActInfo kActs[] = {
    {"sigmoid", Act::kSigmoid, false, false, 0, 0},
    {"tanh", Act::kTanh, false, false, 0, 0},
    {"relu", Act::kRelu, false, false, 0, 0},
    {"hardsigmoid", Act::kHardSigmoid, true, true, 0.2f, 0.5f},
    {"affine", Act::kAffine, true, true, 1.0f, 0.0f},
    {"leakyrelu", Act::kLeakyRelu, true, false, 0.01f, 0},
    {"thresholdedrelu", Act::kThresholdedRelu, true, false, 1.0f, 0},
    {"scaledtanh", Act::kScaledTanh, true, true, 1.0f, 1.0f},
    {"elu", Act::kElu, true, false, 1.0f, 0},
    {"softsign", Act::kSoftsign, false, false, 0, 0},
    {"softplus", Act::kSoftplus, false, false, 0, 0},
};

// Reads activations / activation_alpha / activation_beta: `per_dir` functions per direction.
// A bidirectional node may list only one direction's functions; they then apply to both.
Status parse_activations(const OpContext& ctx, const std::vector<std::string>& defaults, int64_t dirs,
                         std::vector<ActFn>* out) {
    const size_t per_dir = defaults.size();
    std::vector<std::string> names;
    const Attr* a = ctx.attr("activations");
    if (a && !a->strings.empty()) {
        names = a->strings;
        if (dirs == 2 && names.size() == per_dir) names.insert(names.end(), a->strings.begin(), a->strings.end());
        if (names.size() != per_dir * size_t(dirs))
            return ctx.fail("'activations' lists ", a->strings.size(), " functions; expected ",
                            per_dir * size_t(dirs), " (", per_dir, " per direction)");
    } else {
        for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
    }
    std::vector<float> alphas = ctx.attr_floats("activation_alpha");
    std::vector<float> betas = ctx.attr_floats("activation_beta");
    size_t ai = 0, bi = 0;
    out->clear();
    for (const std::string& n : names) {
        std::string lower = n;
        for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
        const ActInfo* info = nullptr;
        for (const ActInfo& k : kActs)
            if (lower == k.name) info = &k;
        if (!info)
            return ctx.fail_unsupported("activation '", n, "' is not supported (expected one of Sigmoid, Tanh, "
                                        "Relu, HardSigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
                                        "Elu, Softsign, Softplus)");
        ActFn f;
        f.kind = info->kind;
        if (info->uses_alpha) f.alpha = ai < alphas.size() ? alphas[ai++] : info->def_alpha;
        if (info->uses_beta) f.beta = bi < betas.size() ? betas[bi++] : info->def_beta;
        out->push_back(f);
    }
    return {};
}

// ---------------------------------------------------------------- kernel

enum class Cell { kRNN, kGRU, kLSTM };

struct RnnConfig {
    Cell cell = Cell::kRNN;
    int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1, gates = 1;
    bool layout1 = false;
    bool reverse[2] = {false, true};
    std::vector<ActFn> acts;  // per direction: RNN f; GRU f, g; LSTM f, g, h
    int acts_per_dir = 1;
    bool has_clip = false;
    float clip = 0;
    bool input_forget = false;         // LSTM
    bool linear_before_reset = false;  // GRU
    int num_in = 0, num_out = 0;       // the node's input / output counts (trailing ones may be absent)
};

// Float LSTM with constant weights, default activations, no clip / peepholes / input_forget: the
// gate pre-activations of a step are one GEMV [x, h] . [W; R]^T + (Wb + Rb) over weights packed
// at prepare (kernels/gemm.h), and the gates go through the vector sigmoid / tanh.
// Sequences of more than one step (seq x batch > 1) split the product: the input projections of
// every step are one GEMM up front, X . W^T + bias (the weights reused across the steps), and each
// step's GEMV reads only R, with that step's projection as its bias. A bidirectional LSTM of 40
// steps, 256 inputs, 256 hidden: ~1.85 -> ~1.2 ms (it streamed 2 MB of [W; R] per step; ORT ~1.65).
struct LstmFast {
    kernels::PackedGemv wr[2];          // per direction: (I + H) x 4H (one step)
    kernels::PackedB wx[2];             // per direction: I x 4H (sequences)
    kernels::PackedGemv rh[2];          // per direction: H x 4H (sequences)
    bool seq = false;                   // the split form
    std::vector<float> bias;            // per direction: 4H, Wb + Rb
    kernels::SgemvFn gemv = nullptr;
    kernels::SgemmFn gemm = nullptr;
    kernels::ActApplyFn act = nullptr;
};

// Float GRU with constant weights, default activations (Sigmoid, Tanh), no clip: the input
// projections of every step are one GEMM up front (X . W^T + Wb, gates z, r, h), and each step one
// GEMV over R (linear_before_reset) or two (R_zr, then R_h over r * h). A 40-step bidirectional
// GRU, 256 inputs, 256 hidden: ~8.7 -> ~1.0 ms (it ran scalar dot products; ORT ~1.8 ms).
struct GruFast {
    kernels::PackedB wx[2];     // per direction: I x 3H
    kernels::PackedGemv r[2];   // linear_before_reset: H x 3H; else H x 2H (z, r)
    kernels::PackedGemv rh[2];  // not linear_before_reset: H x H (h)
    std::vector<float> wb, rb;  // per direction: 3H each
    kernels::SgemvFn gemv = nullptr;
    kernels::SgemmFn gemm = nullptr;
    kernels::ActApplyFn act = nullptr;
};

// Float vanilla RNN with constant weights, activation Tanh, Relu or Sigmoid, no clip: the input
// projections of every step are one GEMM up front (X . W^T + Wb + Rb), then each step one GEMV
// over R with that step's projection as its bias, and the vector activation. 40 steps, 64
// inputs, 128 hidden: ~272 -> ~35 us (it ran scalar dot products; ORT via onnxruntime-node ~150 us).
struct RnnFast {
    kernels::PackedB wx[2];          // per direction: I x H
    kernels::PackedGemv r[2];        // per direction: H x H
    std::vector<float> bias;         // per direction: H, Wb + Rb
    kernels::ActKind act[2] = {};    // per direction
    kernels::SgemvFn gemv = nullptr;
    kernels::SgemmFn gemm = nullptr;
    kernels::ActApplyFn apply = nullptr;
};

// Eight independent partial sums: the FMA chains overlap (and the compiler can vectorize them)
// instead of one sum waiting ~4 cycles per element. Measured with `jiffy bench` on Silero v5
// (whose LSTM step is 512 gate rows x 256 inputs): min 203 -> 151 us per run, p50 ~245 -> 160 us.
template <typename T>
T dot(const T* a, const T* b, int64_t n) {
    T s[8] = {T(0), T(0), T(0), T(0), T(0), T(0), T(0), T(0)};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int u = 0; u < 8; ++u) s[u] += a[k + u] * b[k + u];
    T r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; k < n; ++k) r += a[k] * b[k];
    return r;
}

// Inputs: X, W, R, B, sequence_lens, initial_h[, initial_c, P]; outputs Y, Y_h[, Y_c].
//
// NOTE: the kernel keeps its per-step scratch (states and gate buffers) in a mutable member
// allocated at prepare, so it is NOT reentrant: one kernel object must not run on two threads at
// once. (A later change moves this scratch into the plan's arena.)
template <typename T>
class RnnKernel : public Kernel {
public:
    RnnKernel(RnnConfig c, std::vector<T> bias, std::unique_ptr<LstmFast> fast = nullptr,
              std::unique_ptr<GruFast> gfast = nullptr, std::unique_ptr<RnnFast> rfast = nullptr,
              ThreadPool* pool = nullptr)
        : c_(std::move(c)), bias_(std::move(bias)), fast_(std::move(fast)), gfast_(std::move(gfast)),
          rfast_(std::move(rfast)), pool_(c_.dirs == 2 ? pool : nullptr) {
        const int64_t bh = c_.batch * c_.hidden, gh = c_.gates * c_.hidden;
        // LstmFast::seq, GruFast and RnnFast: the input projections of every step
        const int64_t proj = (fast_ && fast_->seq) || gfast_ || rfast_ ? c_.seq * c_.batch * gh : 0;
        const int64_t per = 2 * bh + 2 * gh + c_.hidden + c_.input + c_.hidden + proj;
        const int sets = pool_ ? 2 : 1;  // with a pool, one set per direction (both run at once)
        scratch_.assign(size_t(sets * per), T(0));
        for (int d = 0; d < 2; ++d) {
            Bufs& w = bufs_[d];
            w.h = scratch_.data() + (d < sets ? d : 0) * per;
            w.cs = w.h + bh;
            w.gx = w.cs + bh;
            w.gh = w.gx + gh;
            w.tmp = w.gh + gh;
            w.xh = w.tmp + c_.hidden;
            w.proj = w.xh + c_.input + c_.hidden;
        }
    }

    std::string describe() const override { return pool_ ? "directions on 2 threads" : ""; }

    Status run(const void* const* in, void* const* out) const override {
        const RnnConfig& c = c_;
        auto arg = [&](int i) { return i < c.num_in ? in[i] : nullptr; };
        auto res = [&](int i) { return i < c.num_out ? out[i] : nullptr; };
        const T* X = static_cast<const T*>(in[0]);
        const T* W = static_cast<const T*>(in[1]);
        const T* R = static_cast<const T*>(in[2]);
        // bias_ holds the constant (or zero) bias; a run-time B is read in place.
        const T* Bias = bias_.empty() ? static_cast<const T*>(arg(3)) : bias_.data();
        const int32_t* lens = static_cast<const int32_t*>(arg(4));
        const T* h0 = static_cast<const T*>(arg(5));
        const bool lstm = c.cell == Cell::kLSTM;
        const T* c0 = lstm ? static_cast<const T*>(arg(6)) : nullptr;
        const T* P = lstm ? static_cast<const T*>(arg(7)) : nullptr;
        T* Y = static_cast<T*>(res(0));
        T* Yh = static_cast<T*>(res(1));
        T* Yc = lstm ? static_cast<T*>(res(2)) : nullptr;
        const int64_t S = c.seq, B = c.batch, H = c.hidden, D = c.dirs;

        if (lens) {
            for (int64_t b = 0; b < B; ++b)
                if (lens[b] < 0 || lens[b] > S)
                    return invalid("RNN: sequence_lens[", b, "] = ", lens[b], " is outside [0, ", S, "]");
            if (Y) std::fill(Y, Y + S * D * B * H, T(0));
        }
        // Each direction reads X and writes its own parts of Y, Y_h and Y_c: with a pool the
        // two run at once, each on its own scratch (the same bits as one after the other).
        const Io io{X, W, R, Bias, lens, h0, c0, P, Y, Yh, Yc};
        if (pool_ && !pool_->serial()) {
            pool_->parallel_for(2, [&](int d) { run_dir(d, io, bufs_[d]); });
        } else {
            for (int64_t d = 0; d < D; ++d) run_dir(d, io, bufs_[d]);
        }
        return {};
    }

private:
    // The pointers run() passes to each direction.
    struct Io {
        const T *X, *W, *R, *Bias;
        const int32_t* lens;
        const T *h0, *c0, *P;
        T *Y, *Yh, *Yc;
    };
    // Per-direction scratch (bufs_): states and gate buffers.
    struct Bufs {
        T* h = nullptr;     // [batch, hidden] hidden state
        T* cs = nullptr;    // [batch, hidden] cell state (LSTM)
        T* gx = nullptr;    // [gates * hidden]
        T* gh = nullptr;    // [gates * hidden]
        T* tmp = nullptr;   // [hidden]
        T* xh = nullptr;    // [input + hidden]: x then h (LstmFast)
        T* proj = nullptr;  // [seq * batch, gates * hidden]: input projections (the fast paths)
    };

    // Direction d over the whole sequence.
    void run_dir(int64_t d, const Io& io, const Bufs& w) const {
        const RnnConfig& c = c_;
        const T *X = io.X, *W = io.W, *R = io.R, *Bias = io.Bias, *h0 = io.h0, *c0 = io.c0, *P = io.P;
        const int32_t* lens = io.lens;
        T *Y = io.Y, *Yh = io.Yh, *Yc = io.Yc;
        const int64_t S = c.seq, B = c.batch, I = c.input, H = c.hidden, G = c.gates;
        const bool rev = c.reverse[d];
        const T* Wd = W + d * G * H * I;
        const T* Rd = R + d * G * H * H;
        const T* Wb = Bias + d * 2 * G * H;
        const T* Rb = Wb + G * H;
        const T* Pd = P ? P + d * 3 * H : nullptr;
        const ActFn* act = c.acts.data() + d * c.acts_per_dir;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t j = 0; j < H; ++j) {
                w.h[b * H + j] = h0 ? h0[state_off(d, b) + j] : T(0);
                w.cs[b * H + j] = c0 ? c0[state_off(d, b) + j] : T(0);
            }
        if constexpr (std::is_same_v<T, float>) {
            if (fast_ && fast_->seq)  // every step's input projection: rows in X's row order
                fast_->gemm(S * B, X, I, fast_->wx[d], fast_->bias.data() + d * 4 * H, w.proj, 4 * H,
                            kernels::Act::kNone);
            if (gfast_)
                gfast_->gemm(S * B, X, I, gfast_->wx[d], gfast_->wb.data() + d * 3 * H, w.proj, 3 * H,
                             kernels::Act::kNone);
            if (rfast_)
                rfast_->gemm(S * B, X, I, rfast_->wx[d], rfast_->bias.data() + d * H, w.proj, H, kernels::Act::kNone);
        }
        for (int64_t s = 0; s < S; ++s) {
            for (int64_t b = 0; b < B; ++b) {
                const int64_t len = lens ? lens[b] : S;
                if (s >= len) continue;
                const int64_t t = rev ? len - 1 - s : s;
                const T* x = X + x_off(t, b);
                T* h = w.h + b * H;
                // This step's row of input projections (the fast paths that precompute them).
                auto px = [&] { return w.proj + x_off(t, b) / I * G * H; };
                switch (c.cell) {
                    case Cell::kRNN:
                        if constexpr (std::is_same_v<T, float>) {
                            if (rfast_) {
                                step_rnn_fast(w, h, d, px());
                                break;
                            }
                        }
                        step_rnn(w, x, h, Wd, Rd, Wb, Rb, act);
                        break;
                    case Cell::kGRU:
                        if constexpr (std::is_same_v<T, float>) {
                            if (gfast_) {
                                step_gru_fast(w, h, d, px());
                                break;
                            }
                        }
                        step_gru(w, x, h, Wd, Rd, Wb, Rb, act);
                        break;
                    case Cell::kLSTM:
                        if constexpr (std::is_same_v<T, float>) {
                            if (fast_) {
                                step_lstm_fast(w, x, h, w.cs + b * H, d, px());
                                break;
                            }
                        }
                        step_lstm(w, x, h, w.cs + b * H, Wd, Rd, Wb, Rb, Pd, act);
                        break;
                }
                if (Y) std::copy(h, h + H, Y + y_off(t, d, b));
            }
        }
        for (int64_t b = 0; b < B; ++b) {
            const bool empty = lens && lens[b] == 0;
            if (Yh)
                for (int64_t j = 0; j < H; ++j) Yh[state_off(d, b) + j] = empty ? T(0) : w.h[b * H + j];
            if (Yc)
                for (int64_t j = 0; j < H; ++j) Yc[state_off(d, b) + j] = empty ? T(0) : w.cs[b * H + j];
        }
    }

    int64_t x_off(int64_t t, int64_t b) const {
        return (c_.layout1 ? b * c_.seq + t : t * c_.batch + b) * c_.input;
    }
    int64_t y_off(int64_t t, int64_t d, int64_t b) const {
        return (c_.layout1 ? (b * c_.seq + t) * c_.dirs + d : (t * c_.dirs + d) * c_.batch + b) * c_.hidden;
    }
    int64_t state_off(int64_t d, int64_t b) const {
        return (c_.layout1 ? b * c_.dirs + d : d * c_.batch + b) * c_.hidden;
    }
    T clip(T v) const {
        if (!c_.has_clip) return v;
        const T lim = T(c_.clip);
        return v > lim ? lim : (v < -lim ? -lim : v);
    }

    // Ht = f(Xt*Wi^T + Ht-1*Ri^T + Wbi + Rbi)
    void step_rnn(const Bufs& w, const T* x, T* h, const T* W, const T* R, const T* Wb, const T* Rb, const ActFn* act) const {
        const int64_t I = c_.input, H = c_.hidden;
        for (int64_t j = 0; j < H; ++j)
            w.gx[j] = act[0](clip(dot(W + j * I, x, I) + dot(R + j * H, h, H) + Wb[j] + Rb[j]));
        std::copy(w.gx, w.gx + H, h);
    }

    // The RnnFast path (T = float only): h = f(h . R^T + px), px = this step's input projection
    // (with Wb + Rb).
    void step_rnn_fast(const Bufs& w, T* h, int64_t d, const T* px) const {
        const RnnFast& f = *rfast_;
        f.gemv(h, f.r[d], px, w.gx, kernels::Activation{}, false);
        f.apply(kernels::Activation{f.act[d]}, w.gx, h, c_.hidden);
    }

    // Gates z, r, h (in that order in W, R, B).
    void step_gru(const Bufs& w, const T* x, T* h, const T* W, const T* R, const T* Wb, const T* Rb, const ActFn* act) const {
        const int64_t I = c_.input, H = c_.hidden;
        for (int64_t j = 0; j < 3 * H; ++j) w.gx[j] = dot(W + j * I, x, I) + Wb[j];
        T* z = w.gh;
        T* r = w.gh + H;
        T* hh = w.gh + 2 * H;
        for (int64_t j = 0; j < 2 * H; ++j) w.gh[j] = act[0](clip(w.gx[j] + dot(R + j * H, h, H) + Rb[j]));
        const T* Rh = R + 2 * H * H;
        if (c_.linear_before_reset) {
            for (int64_t j = 0; j < H; ++j)
                hh[j] = act[1](clip(w.gx[2 * H + j] + r[j] * (dot(Rh + j * H, h, H) + Rb[2 * H + j])));
        } else {
            for (int64_t j = 0; j < H; ++j) w.tmp[j] = r[j] * h[j];
            for (int64_t j = 0; j < H; ++j)
                hh[j] = act[1](clip(w.gx[2 * H + j] + dot(Rh + j * H, w.tmp, H) + Rb[2 * H + j]));
        }
        for (int64_t j = 0; j < H; ++j) h[j] = (T(1) - z[j]) * hh[j] + z[j] * h[j];
    }

    // Gates i, o, f, c (in that order in W, R, B); peepholes P = [Pi, Po, Pf].
    void step_lstm(const Bufs& w, const T* x, T* h, T* cell, const T* W, const T* R, const T* Wb, const T* Rb, const T* P,
                   const ActFn* act) const {
        const int64_t I = c_.input, H = c_.hidden;
        for (int64_t j = 0; j < 4 * H; ++j)
            w.gx[j] = dot(W + j * I, x, I) + dot(R + j * H, h, H) + Wb[j] + Rb[j];
        const T* gi = w.gx;
        const T* go = w.gx + H;
        const T* gf = w.gx + 2 * H;
        const T* gc = w.gx + 3 * H;
        for (int64_t j = 0; j < H; ++j) {
            const T cp = cell[j];
            const T i = act[0](clip(gi[j] + (P ? P[j] * cp : T(0))));
            const T f = c_.input_forget ? T(1) - i : act[0](clip(gf[j] + (P ? P[2 * H + j] * cp : T(0))));
            const T g = act[1](clip(gc[j]));
            const T cn = f * cp + i * g;
            const T o = act[0](clip(go[j] + (P ? P[H + j] * cn : T(0))));
            cell[j] = cn;
            h[j] = o * act[2](cn);  // h is no longer read in this step
        }
    }

    // The GruFast path (T = float only): px = this step's input projection (z, r, h, with Wb).
    void step_gru_fast(const Bufs& w, T* h, int64_t d, const T* px) const {
        const int64_t H = c_.hidden;
        const GruFast& f = *gfast_;
        const T* rb = f.rb.data() + d * 3 * H;
        T* z = w.gx;
        T* r = w.gx + H;
        T* hh = w.gx + 2 * H;
        const kernels::Activation sig{kernels::ActKind::kSigmoid}, th{kernels::ActKind::kTanh};
        f.gemv(h, f.r[d], rb, w.gx, kernels::Activation{}, false);  // z, r (and h . Rh^T + Rbh)
        for (int64_t j = 0; j < 2 * H; ++j) w.gx[j] += px[j];
        f.act(sig, w.gx, w.gx, 2 * H);
        if (c_.linear_before_reset) {
            for (int64_t j = 0; j < H; ++j) hh[j] = px[2 * H + j] + r[j] * hh[j];
        } else {
            for (int64_t j = 0; j < H; ++j) w.tmp[j] = r[j] * h[j];
            f.gemv(w.tmp, f.rh[d], rb + 2 * H, hh, kernels::Activation{}, false);
            for (int64_t j = 0; j < H; ++j) hh[j] += px[2 * H + j];
        }
        f.act(th, hh, hh, H);
        for (int64_t j = 0; j < H; ++j) h[j] = (T(1) - z[j]) * hh[j] + z[j] * h[j];
    }

    // The LstmFast path (T = float only): gates = [x, h] . [W; R]^T + bias in one GEMV, or (the
    // split form) h . R^T + this step's precomputed projection `proj`.
    void step_lstm_fast(const Bufs& w, const T* x, T* h, T* cell, int64_t d, const T* proj) const {
        const int64_t I = c_.input, H = c_.hidden;
        const LstmFast& f = *fast_;
        if (f.seq) {
            f.gemv(h, f.rh[d], proj, w.gx, kernels::Activation{}, false);  // h is written only at the end
        } else {
            std::copy(x, x + I, w.xh);
            std::copy(h, h + H, w.xh + I);
            f.gemv(w.xh, f.wr[d], f.bias.data() + d * 4 * H, w.gx, kernels::Activation{}, false);
        }
        f.act(kernels::Activation{kernels::ActKind::kSigmoid}, w.gx, w.gx, 3 * H);  // i, o, f
        f.act(kernels::Activation{kernels::ActKind::kTanh}, w.gx + 3 * H, w.gx + 3 * H, H);
        const T* gi = w.gx;
        const T* go = w.gx + H;
        const T* gf = w.gx + 2 * H;
        const T* gc = w.gx + 3 * H;
        for (int64_t j = 0; j < H; ++j) {
            const T cn = gf[j] * cell[j] + gi[j] * gc[j];
            cell[j] = cn;
            w.tmp[j] = cn;
        }
        f.act(kernels::Activation{kernels::ActKind::kTanh}, w.tmp, w.tmp, H);
        for (int64_t j = 0; j < H; ++j) h[j] = go[j] * w.tmp[j];
    }

    RnnConfig c_;
    std::vector<T> bias_;
    std::unique_ptr<LstmFast> fast_;
    std::unique_ptr<GruFast> gfast_;
    std::unique_ptr<RnnFast> rfast_;
    ThreadPool* pool_ = nullptr;  // bidirectional, compiled with threads > 1: one direction each
    // Non-reentrant scratch (see the class comment): bufs_[d] for direction d (both the same set
    // without a pool).
    mutable std::vector<T> scratch_;
    Bufs bufs_[2];
};

// ---------------------------------------------------------------- prepare

// The RnnFast form when it applies (see RnnFast), else null.
std::unique_ptr<RnnFast> rnn_fast(const OpContext& ctx, const RnnConfig& c, const std::vector<float>& bias) {
    if (c.cell != Cell::kRNN || c.has_clip) return nullptr;
    const Tensor* W = ctx.in_const(1);
    const Tensor* R = ctx.in_const(2);
    if (!W || !R || bias.empty()) return nullptr;
    auto f = std::make_unique<RnnFast>();
    for (int64_t d = 0; d < c.dirs; ++d) {
        const Act a = c.acts[size_t(d * c.acts_per_dir)].kind;
        if (a == Act::kTanh) f->act[d] = kernels::ActKind::kTanh;
        else if (a == Act::kRelu) f->act[d] = kernels::ActKind::kRelu;
        else if (a == Act::kSigmoid) f->act[d] = kernels::ActKind::kSigmoid;
        else return nullptr;
    }
    const int64_t I = c.input, H = c.hidden;
    const kernels::Isa isa = kernels::active_isa();
    f->gemv = kernels::sgemv_for(isa);
    f->gemm = kernels::sgemm_for(isa);
    f->apply = kernels::act_apply_for(isa);
    f->bias.resize(size_t(c.dirs * H));
    for (int64_t d = 0; d < c.dirs; ++d) {
        for (int64_t j = 0; j < H; ++j)
            f->bias[size_t(d * H + j)] = bias[size_t(d * 2 * H + j)] + bias[size_t(d * 2 * H + H + j)];
        f->wx[d] = kernels::pack_b(W->as<float>() + d * H * I, I, H, I, /*trans_b=*/true, isa);
        f->r[d] = kernels::pack_b_gemv(R->as<float>() + d * H * H, H, H, H, /*trans_b=*/true);
    }
    return f;
}

// The LstmFast form when it applies (see LstmFast), else null.
std::unique_ptr<LstmFast> lstm_fast(const OpContext& ctx, const RnnConfig& c, const std::vector<float>& bias) {
    if (c.cell != Cell::kLSTM || c.has_clip || c.input_forget || ctx.has_input(7)) return nullptr;
    const Tensor* W = ctx.in_const(1);
    const Tensor* R = ctx.in_const(2);
    if (!W || !R || bias.empty()) return nullptr;
    for (int64_t d = 0; d < c.dirs; ++d) {
        const ActFn* a = c.acts.data() + d * c.acts_per_dir;
        if (a[0].kind != Act::kSigmoid || a[1].kind != Act::kTanh || a[2].kind != Act::kTanh) return nullptr;
    }
    const int64_t I = c.input, H = c.hidden, G4 = 4 * H, K = I + H;
    auto f = std::make_unique<LstmFast>();
    const kernels::Isa isa = kernels::active_isa();
    f->gemv = kernels::sgemv_for(isa);
    f->gemm = kernels::sgemm_for(isa);
    f->act = kernels::act_apply_for(isa);
    f->seq = c.seq * c.batch > 1;
    f->bias.resize(size_t(c.dirs * G4));
    std::vector<float> wr(f->seq ? 0 : size_t(G4 * K));  // 4H rows of [W row, R row]
    for (int64_t d = 0; d < c.dirs; ++d) {
        const float* Wd = W->as<float>() + d * G4 * I;
        const float* Rd = R->as<float>() + d * G4 * H;
        for (int64_t j = 0; j < G4; ++j)
            f->bias[size_t(d * G4 + j)] = bias[size_t(d * 2 * G4 + j)] + bias[size_t(d * 2 * G4 + G4 + j)];
        if (f->seq) {
            f->wx[d] = kernels::pack_b(Wd, I, G4, I, /*trans_b=*/true, isa);
            f->rh[d] = kernels::pack_b_gemv(Rd, H, G4, H, /*trans_b=*/true);
            continue;
        }
        for (int64_t j = 0; j < G4; ++j) {
            std::copy(Wd + j * I, Wd + (j + 1) * I, wr.data() + j * K);
            std::copy(Rd + j * H, Rd + (j + 1) * H, wr.data() + j * K + I);
        }
        f->wr[d] = kernels::pack_b_gemv(wr.data(), K, G4, K, /*trans_b=*/true);
    }
    return f;
}

// The GruFast form when it applies (see GruFast), else null.
std::unique_ptr<GruFast> gru_fast(const OpContext& ctx, const RnnConfig& c, const std::vector<float>& bias) {
    if (c.cell != Cell::kGRU || c.has_clip) return nullptr;
    const Tensor* W = ctx.in_const(1);
    const Tensor* R = ctx.in_const(2);
    if (!W || !R || bias.empty()) return nullptr;
    for (int64_t d = 0; d < c.dirs; ++d) {
        const ActFn* a = c.acts.data() + d * c.acts_per_dir;
        if (a[0].kind != Act::kSigmoid || a[1].kind != Act::kTanh) return nullptr;
    }
    const int64_t I = c.input, H = c.hidden, G3 = 3 * H;
    auto f = std::make_unique<GruFast>();
    const kernels::Isa isa = kernels::active_isa();
    f->gemv = kernels::sgemv_for(isa);
    f->gemm = kernels::sgemm_for(isa);
    f->act = kernels::act_apply_for(isa);
    f->wb.resize(size_t(c.dirs * G3));
    f->rb.resize(size_t(c.dirs * G3));
    for (int64_t d = 0; d < c.dirs; ++d) {
        const float* Wd = W->as<float>() + d * G3 * I;
        const float* Rd = R->as<float>() + d * G3 * H;
        for (int64_t j = 0; j < G3; ++j) {
            f->wb[size_t(d * G3 + j)] = bias[size_t(d * 2 * G3 + j)];
            f->rb[size_t(d * G3 + j)] = bias[size_t(d * 2 * G3 + G3 + j)];
        }
        f->wx[d] = kernels::pack_b(Wd, I, G3, I, /*trans_b=*/true, isa);
        if (c.linear_before_reset) {
            f->r[d] = kernels::pack_b_gemv(Rd, H, G3, H, /*trans_b=*/true);
        } else {
            f->r[d] = kernels::pack_b_gemv(Rd, H, 2 * H, H, /*trans_b=*/true);
            f->rh[d] = kernels::pack_b_gemv(Rd + 2 * H * H, H, H, H, /*trans_b=*/true);
        }
    }
    return f;
}

Status prep_recurrent(OpContext& ctx, Cell cell) {
    const int64_t G = cell == Cell::kRNN ? 1 : cell == Cell::kGRU ? 3 : 4;
    const int max_inputs = cell == Cell::kLSTM ? 8 : 6;
    const int max_outputs = cell == Cell::kLSTM ? 3 : 2;
    if (ctx.num_inputs() > max_inputs)
        return ctx.fail("has ", ctx.num_inputs(), " inputs; at most ", max_inputs, " are allowed");
    if (ctx.num_outputs() > max_outputs)
        return ctx.fail("has ", ctx.num_outputs(), " outputs; at most ", max_outputs, " are allowed");
    for (int i = 0; i < 3; ++i)
        if (!ctx.has_input(i)) return ctx.fail("input ", i, " (", i == 0 ? "X" : i == 1 ? "W" : "R", ") is missing");
    JIFFY_RETURN_IF_ERROR(ctx.expect_dtype(0, {DType::kF32, DType::kF64}));
    const DType T = ctx.in_dtype(0);
    const char* names[] = {"X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"};
    for (int i : {1, 2, 3, 5, 6, 7})
        if (ctx.has_input(i) && ctx.in_dtype(i) != T)
            return ctx.fail("input ", names[i], " has dtype ", dtype_name(ctx.in_dtype(i)), " but X has ",
                            dtype_name(T));

    RnnConfig c;
    c.cell = cell;
    c.gates = G;
    c.num_in = int(ctx.node().inputs.size());
    c.num_out = ctx.num_outputs();
    const int64_t layout = ctx.attr_int("layout", 0);
    if (layout != 0 && layout != 1) return ctx.fail("'layout' must be 0 or 1, got ", layout);
    if (layout == 1 && ctx.opset() < 14)
        return ctx.fail("'layout' = 1 needs opset 14 or later (model opset ", ctx.opset(), ")");
    c.layout1 = layout == 1;
    const std::string dir = ctx.attr_str("direction", "forward");
    if (dir == "forward") {
        c.dirs = 1;
        c.reverse[0] = false;
    } else if (dir == "reverse") {
        c.dirs = 1;
        c.reverse[0] = true;
    } else if (dir == "bidirectional") {
        c.dirs = 2;
        c.reverse[0] = false;
        c.reverse[1] = true;
    } else {
        return ctx.fail("'direction' must be forward, reverse or bidirectional, got '", dir, "'");
    }
    const int64_t D = c.dirs;

    const Shape& xs = ctx.in_shape(0);
    if (xs.size() != 3) return ctx.fail("X must have rank 3, got shape ", shape_str(xs));
    c.seq = c.layout1 ? xs[1] : xs[0];
    c.batch = c.layout1 ? xs[0] : xs[1];
    c.input = xs[2];
    const Shape& ws = ctx.in_shape(1);
    const Shape& rs = ctx.in_shape(2);
    if (ws.size() != 3) return ctx.fail("W must have rank 3, got shape ", shape_str(ws));
    if (rs.size() != 3) return ctx.fail("R must have rank 3, got shape ", shape_str(rs));
    int64_t H = rs[2];
    if (ctx.has_attr("hidden_size")) {
        H = ctx.attr_int("hidden_size", 0);
        if (H <= 0) return ctx.fail("'hidden_size' must be positive, got ", H);
    }
    if (H <= 0) return ctx.fail("hidden size (R's last dim) must be positive, got ", H);
    c.hidden = H;
    const Shape want_w{D, G * H, c.input}, want_r{D, G * H, H};
    if (ws != want_w)
        return ctx.fail("W has shape ", shape_str(ws), "; expected ", shape_str(want_w),
                        " (num_directions x ", G, "*hidden_size x input_size)");
    if (rs != want_r)
        return ctx.fail("R has shape ", shape_str(rs), "; expected ", shape_str(want_r),
                        " (num_directions x ", G, "*hidden_size x hidden_size)");
    if (ctx.has_input(3) && ctx.in_shape(3) != Shape{D, 2 * G * H})
        return ctx.fail("B has shape ", shape_str(ctx.in_shape(3)), "; expected ", shape_str(Shape{D, 2 * G * H}));
    if (ctx.has_input(4)) {
        if (ctx.in_dtype(4) != DType::kI32)
            return ctx.fail("sequence_lens must be int32, got ", dtype_name(ctx.in_dtype(4)));
        if (ctx.in_shape(4) != Shape{c.batch})
            return ctx.fail("sequence_lens has shape ", shape_str(ctx.in_shape(4)), "; expected ",
                            shape_str(Shape{c.batch}));
    }
    const Shape state = c.layout1 ? Shape{c.batch, D, H} : Shape{D, c.batch, H};
    for (int i : {5, 6})
        if (ctx.has_input(i) && ctx.in_shape(i) != state)
            return ctx.fail(names[i], " has shape ", shape_str(ctx.in_shape(i)), "; expected ", shape_str(state));
    if (ctx.has_input(7) && ctx.in_shape(7) != Shape{D, 3 * H})
        return ctx.fail("P has shape ", shape_str(ctx.in_shape(7)), "; expected ", shape_str(Shape{D, 3 * H}));

    if (ctx.has_attr("clip")) {
        c.has_clip = true;
        c.clip = ctx.attr_float("clip", 0);
        if (!(c.clip > 0)) return ctx.fail("'clip' must be positive, got ", c.clip);
    }
    if (cell == Cell::kLSTM) c.input_forget = ctx.attr_int("input_forget", 0) != 0;
    if (cell == Cell::kGRU) c.linear_before_reset = ctx.attr_int("linear_before_reset", 0) != 0;
    std::vector<std::string> defaults;
    if (cell == Cell::kRNN) defaults = {"Tanh"};
    else if (cell == Cell::kGRU) defaults = {"Sigmoid", "Tanh"};
    else defaults = {"Sigmoid", "Tanh", "Tanh"};
    c.acts_per_dir = int(defaults.size());
    JIFFY_RETURN_IF_ERROR(parse_activations(ctx, defaults, D, &c.acts));

    const Shape y = c.layout1 ? Shape{c.batch, c.seq, D, H} : Shape{c.seq, D, c.batch, H};
    if (ctx.has_output(0)) JIFFY_RETURN_IF_ERROR(ctx.set_output(0, T, y));
    if (ctx.has_output(1)) JIFFY_RETURN_IF_ERROR(ctx.set_output(1, T, state));
    if (ctx.has_output(2)) JIFFY_RETURN_IF_ERROR(ctx.set_output(2, T, state));

    return visit_float(T, [&](auto tag) -> Status {
        using E = typename decltype(tag)::type;
        // Bias: copied here when constant, zeros when absent; a run-time B is read in place.
        std::vector<E> bias;
        if (!ctx.has_input(3)) {
            bias.assign(size_t(D * 2 * G * H), E(0));
        } else if (const Tensor* b = ctx.in_const(3)) {
            bias.assign(b->as<E>(), b->as<E>() + b->numel());
        }
        std::unique_ptr<LstmFast> fast;
        std::unique_ptr<GruFast> gfast;
        std::unique_ptr<RnnFast> rfast;
        if constexpr (std::is_same_v<E, float>) {
            fast = lstm_fast(ctx, c, bias);
            gfast = gru_fast(ctx, c, bias);
            rfast = rnn_fast(ctx, c, bias);
        }
        // Both directions at once where the plan has a pool and the op is worth splitting.
        const int64_t flops = 2 * c.seq * c.batch * D * G * H * (c.input + H);
        ThreadPool* pool = D == 2 && parallel_chunks(ctx.options(), flops) >= 2 ? ctx.options().pool.get() : nullptr;
        ctx.set_kernel(std::make_unique<RnnKernel<E>>(std::move(c), std::move(bias), std::move(fast), std::move(gfast),
                                                       std::move(rfast), pool));
        return {};
    });
}

Status prep_RNN(OpContext& ctx) { return prep_recurrent(ctx, Cell::kRNN); }
Status prep_GRU(OpContext& ctx) { return prep_recurrent(ctx, Cell::kGRU); }
Status prep_LSTM(OpContext& ctx) { return prep_recurrent(ctx, Cell::kLSTM); }

}  // namespace

void register_rnn_ops(OpRegistry& r) {
    r.add("RNN", prep_RNN);
    r.add("GRU", prep_GRU);
    r.add("LSTM", prep_LSTM);
}

}  // namespace jiffy
