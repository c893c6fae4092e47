// Built-in pre/post-processing stages: scale/normalize (affine), window (the last N frames),
// frame (re-chunk a sample stream into frames of F with hop H), resample (sample-rate
// conversion of a stream), argmax/topk.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "agent/agent.h"
#include "agent/registry.h"
#include "agent/resample.h"
#include "agent/ring.h"

namespace jiffy::agent {

namespace {

// y = (x - offset) * scale, or (x - mean) / std; scalars or per-channel vectors over the last
// dimension. `scale` with no fields is int16 -> float: x / 32768.
class AffineStage : public SimpleStage {
public:
    std::vector<double> mul, add;  // y = x * mul + add
    Status prepare(const Port& in, Pipeline&) override {
        in_ = in;
        int64_t c = in.shape.empty() ? 1 : in.shape.back();
        for (auto* v : {&mul, &add})
            if (v->size() != 1 && int64_t(v->size()) != c)
                return invalid("has ", v->size(), " per-channel values but the input's last dimension is ", c);
        mulf_.assign(size_t(c), 0), addf_.assign(size_t(c), 0);
        for (int64_t i = 0; i < c; ++i) {
            mulf_[size_t(i)] = float(mul.size() == 1 ? mul[0] : mul[size_t(i)]);
            addf_[size_t(i)] = float(add.size() == 1 ? add[0] : add[size_t(i)]);
        }
        c_ = size_t(c);
        alloc_out(in.shape);
        return {};
    }
    Status run(bool*) override {
        const float* x = in_.data;
        float* y = out_.data;
        size_t n = size_t(in_.numel);
        if (c_ == 1) {
            float m = mulf_[0], a = addf_[0];
            for (size_t i = 0; i < n; ++i) y[i] = x[i] * m + a;
        } else {
            for (size_t i = 0; i < n; ++i) y[i] = x[i] * mulf_[i % c_] + addf_[i % c_];
        }
        return {};
    }

private:
    Port in_;
    std::vector<float> mulf_, addf_;
    size_t c_ = 1;
};

// The last `frames` inputs as one [1, frames, ...input dims without the batch] tensor; emits every
// `hop` inputs once full. The mirror ring keeps the window contiguous; it is copied once into the
// stage's output buffer on emit (one memcpy of frames*F floats) because the next stage has bound
// that buffer's fixed address.
class WindowStage : public SimpleStage {
public:
    int64_t frames = 1, hop = 1;
    bool emit_partial = false;
    Status prepare(const Port& in, Pipeline&) override {
        in_ = in;
        ring_.reset(size_t(frames), size_t(in.numel));
        std::vector<int64_t> shape = {1, frames};
        for (size_t i = (in.shape.size() > 1 && in.shape[0] == 1) ? 1 : 0; i < in.shape.size(); ++i) shape.push_back(in.shape[i]);
        alloc_out(shape);
        return {};
    }
    Status run(bool* emit) override {
        ring_.push(in_.data);
        *emit = (ring_.full() || emit_partial) && (++since_ >= hop);
        if (*emit) {
            since_ = 0;
            std::memcpy(out_.data, ring_.window(), size_t(out_.numel) * sizeof(float));
        }
        return {};
    }

private:
    Port in_;
    MirrorRing ring_;
    int64_t since_ = 0;
};

// Re-chunks a stream: appends each input's samples and emits every `hop` samples a frame of the
// last `size` samples (output [1, size]).
class FrameStage : public Stage {
public:
    int64_t size = 0, hop = 0;
    Status prepare(const Port& in, Pipeline&) override {
        in_ = in;
        if (hop <= 0) hop = size;
        if (hop > size) return invalid("'hop' (", hop, ") must not exceed 'size' (", size, ")");
        buf_.assign(size_t(size + in.numel + hop), 0.0f);
        alloc_out({1, size});
        return {};
    }
    Status push() override {
        // Keep at most size-1+in samples: buf_[0..fill_) is the pending stream.
        std::memcpy(&buf_[fill_], in_.data, size_t(in_.numel) * sizeof(float));
        fill_ += size_t(in_.numel);
        return {};
    }
    bool next() override {
        if (fill_ < size_t(size)) return false;
        std::memcpy(out_.data, buf_.data(), size_t(size) * sizeof(float));
        std::memmove(buf_.data(), &buf_[size_t(hop)], (fill_ - size_t(hop)) * sizeof(float));
        fill_ -= size_t(hop);
        return true;
    }

private:
    Port in_;
    std::vector<float> buf_;
    size_t fill_ = 0;
};

// Converts a sample stream from `from` Hz to `to` Hz (Resampler: polyphase windowed sinc, state
// kept across frames) and emits frames of `chunk` output samples ([1, chunk]), 0..k per input.
// A new stream (FrameMeta::stream) starts the filter over.
class ResampleStage : public Stage {
public:
    double from = 0, to = 0;
    int64_t chunk = 0, zeros = 16;
    Status prepare(const Port& in, Pipeline& pipe) override {
        in_ = in;
        pipe_ = &pipe;
        if (from <= 0) {
            for (const auto& s : pipe.sources)
                if (s->sample_rate() > 0) {
                    if (from > 0 && from != s->sample_rate())
                        return invalid("the sources have different rates (", from, ", ", s->sample_rate(), " Hz); give 'from'");
                    from = s->sample_rate();
                }
            if (from <= 0) return invalid("the source does not say its sample rate; give 'from' (Hz)");
        }
        for (const auto& s : pipe.sources)
            if (s->sample_rate() > 0 && s->sample_rate() != from)
                return invalid("'from' is ", from, " Hz but source '", s->name, "' is ", s->sample_rate(), " Hz");
        if (from != std::floor(from) || to != std::floor(to)) return invalid("rates must be whole Hz, got ", from, " -> ", to);
        JIFFY_RETURN_IF_ERROR(rs_.init(int64_t(from), int64_t(to), int(zeros)));
        if (chunk <= 0) {
            // Default: one output frame per input frame, when the ratio makes that whole.
            int64_t num = in.numel * rs_.up();
            if (num % rs_.down() != 0)
                return invalid("an input frame of ", in.numel, " samples is ", double(in.numel) * to / from, " samples at ", to,
                               " Hz; give 'chunk' (output samples per frame)");
            chunk = num / rs_.down();
        }
        pending_.assign(size_t(chunk) + rs_.max_out(size_t(in.numel)), 0.0f);
        alloc_out({1, chunk});
        return {};
    }
    Status push() override {
        if (pipe_->frame && pipe_->frame->stream != stream_) {
            stream_ = pipe_->frame->stream;
            rs_.reset();
            fill_ = 0;
        }
        fill_ += rs_.process(in_.data, size_t(in_.numel), &pending_[fill_]);
        return {};
    }
    bool next() override {
        if (fill_ < size_t(chunk)) return false;
        std::memcpy(out_.data, pending_.data(), size_t(chunk) * sizeof(float));
        std::memmove(pending_.data(), &pending_[size_t(chunk)], (fill_ - size_t(chunk)) * sizeof(float));
        fill_ -= size_t(chunk);
        return true;
    }

private:
    Port in_;
    Pipeline* pipe_ = nullptr;
    Resampler rs_;
    std::vector<float> pending_;  // converted samples not yet emitted
    size_t fill_ = 0;
    uint32_t stream_ = 0;
};

// Top-k over the input's elements: output [k, 2] = (index, score) pairs, best first. Values:
// <name>.index / <name>.score (the best), <name>.index[i] / <name>.score[i].
class TopkStage : public SimpleStage {
public:
    int64_t k = 1;
    Status prepare(const Port& in, Pipeline&) override {
        in_ = in;
        if (k > in.numel) return invalid("k = ", k, " is larger than the input (", in.numel, " values)");
        alloc_out({k, 2});
        return {};
    }
    Status run(bool*) override {
        const float* x = in_.data;
        float* y = out_.data;
        for (int64_t j = 0; j < k; ++j) y[2 * j] = -1, y[2 * j + 1] = -3.4e38f;
        for (int64_t i = 0; i < in_.numel; ++i) {
            float v = x[i];
            if (v <= y[2 * (k - 1) + 1]) continue;
            int64_t j = k - 1;
            while (j > 0 && y[2 * (j - 1) + 1] < v) {
                y[2 * j] = y[2 * (j - 1)], y[2 * j + 1] = y[2 * (j - 1) + 1];
                --j;
            }
            y[2 * j] = float(i), y[2 * j + 1] = v;
        }
        return {};
    }
    Status value(const std::string& sub, int index, const float** p) const override {
        int i = index < 0 ? 0 : index;
        if (i >= k) return invalid("index ", i, " is out of range: stage '", name, "' keeps the top ", k);
        if (sub == "index") *p = out_.data + 2 * i;
        else if (sub == "score" || sub.empty()) *p = out_.data + 2 * i + 1;
        else return invalid("stage '", name, "' (", type, ") has values 'index' and 'score', not '", sub, "'");
        return {};
    }

private:
    Port in_;
};

}  // namespace

Status make_scale_stage(Fields& f, const BuildEnv&, std::unique_ptr<Stage>* out) {
    auto s = std::make_unique<AffineStage>();
    std::string type = f.node()["type"].Scalar();
    if (type == "scale") {
        std::vector<double> scale{1.0 / 32768.0}, offset{0.0};
        JIFFY_RETURN_IF_ERROR(f.get_doubles("scale", &scale));
        JIFFY_RETURN_IF_ERROR(f.get_doubles("offset", &offset));
        s->mul = scale;
        s->add = offset;
    } else {  // normalize: (x - mean) / std
        std::vector<double> mean, stdev;
        JIFFY_RETURN_IF_ERROR(f.get_doubles("mean", &mean, true));
        JIFFY_RETURN_IF_ERROR(f.get_doubles("std", &stdev, true));
        for (double d : stdev)
            if (d == 0) return f.error(f.node()["std"], "field 'std' must not contain 0");
        if (mean.size() != stdev.size() && mean.size() != 1 && stdev.size() != 1)
            return f.error(f.node()["std"], "'mean' and 'std' must have the same length (or one of them 1)");
        size_t n = std::max(mean.size(), stdev.size());
        for (size_t i = 0; i < n; ++i) {
            double m = mean.size() == 1 ? mean[0] : mean[i], d = stdev.size() == 1 ? stdev[0] : stdev[i];
            s->mul.push_back(1.0 / d);
            s->add.push_back(-m / d);
        }
    }
    *out = std::move(s);
    return {};
}

Status make_window_stage(Fields& f, const BuildEnv&, std::unique_ptr<Stage>* out) {
    auto s = std::make_unique<WindowStage>();
    JIFFY_RETURN_IF_ERROR(f.get_int("frames", &s->frames, true, 1, 1 << 20));
    JIFFY_RETURN_IF_ERROR(f.get_int("hop", &s->hop, false, 1, 1 << 20));
    JIFFY_RETURN_IF_ERROR(f.get_bool("partial", &s->emit_partial));
    *out = std::move(s);
    return {};
}

Status make_frame_stage(Fields& f, const BuildEnv&, std::unique_ptr<Stage>* out) {
    auto s = std::make_unique<FrameStage>();
    JIFFY_RETURN_IF_ERROR(f.get_int("size", &s->size, true, 1, 1 << 24));
    JIFFY_RETURN_IF_ERROR(f.get_int("hop", &s->hop, false, 1, 1 << 24));
    *out = std::move(s);
    return {};
}

Status make_resample_stage(Fields& f, const BuildEnv&, std::unique_ptr<Stage>* out) {
    auto s = std::make_unique<ResampleStage>();
    JIFFY_RETURN_IF_ERROR(f.get_double("from", &s->from));
    JIFFY_RETURN_IF_ERROR(f.get_double("to", &s->to, true));
    for (const char* k : {"from", "to"}) {
        double v = std::string(k) == "from" ? s->from : s->to;
        if (f.has(k) && (!(v >= 1 && v <= 1e7) || v != std::floor(v)))
            return f.error(f.node()[k], std::string("field '") + k + "' must be a whole number of Hz, 1..10000000");
    }
    JIFFY_RETURN_IF_ERROR(f.get_int("chunk", &s->chunk, false, 1, 1 << 24));
    JIFFY_RETURN_IF_ERROR(f.get_int("zeros", &s->zeros, false, 2, 256));
    *out = std::move(s);
    return {};
}

Status make_topk_stage(Fields& f, const BuildEnv&, std::unique_ptr<Stage>* out) {
    auto s = std::make_unique<TopkStage>();
    if (f.node()["type"].Scalar() == "topk") JIFFY_RETURN_IF_ERROR(f.get_int("k", &s->k, true, 1, 1 << 20));
    *out = std::move(s);
    return {};
}

}  // namespace jiffy::agent
