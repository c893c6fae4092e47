#include "agent/resample.h"

#include <cmath>
#include <cstring>
#include <numeric>

namespace jiffy::agent {

namespace {

// Modified Bessel function of the first kind, order 0 (power series; converges fast for x < 30).
double bessel_i0(double x) {
    double sum = 1, term = 1, q = x * x / 4;
    for (int k = 1; k < 64; ++k) {
        term *= q / (double(k) * double(k));
        sum += term;
        if (term < sum * 1e-17) break;
    }
    return sum;
}

}  // namespace

Status Resampler::init(int64_t from, int64_t to, int zeros, double rolloff, double beta) {
    if (from <= 0 || to <= 0 || from > 10000000 || to > 10000000) return invalid("rates must be 1..10000000 Hz, got ", from, " -> ", to);
    if (zeros < 2 || zeros > 256) return invalid("'zeros' must be 2..256, got ", zeros);
    int64_t g = std::gcd(from, to);
    L_ = to / g, M_ = from / g;
    if (L_ > 4096) return invalid("the ratio ", to, "/", from, " reduces to ", L_, "/", M_, "; at most 4096 output phases are supported");
    // Cutoff in cycles per input sample: below the lower of the two Nyquist frequencies.
    const double fc = 0.5 * std::min(1.0, double(L_) / double(M_)) * rolloff;
    W_ = int(std::ceil(double(zeros) / (2 * fc)));
    W_ = std::max<int>(W_, int((M_ + L_ - 1) / L_) + 1);  // a step never skips past the history
    const int T = 2 * W_;
    table_.assign(size_t(L_) * size_t(T), 0.0f);
    const double i0b = bessel_i0(beta);
    for (int64_t p = 0; p < L_; ++p) {
        double sum = 0;
        std::vector<double> row(static_cast<size_t>(T), 0.0);
        for (int j = 0; j < T; ++j) {
            // Distance (input samples) from the output's time to tap j's sample.
            double d = double(p) / double(L_) + double(W_ - 1 - j);
            double x = d / double(W_);
            double w = std::fabs(x) >= 1 ? 0 : bessel_i0(beta * std::sqrt(1 - x * x)) / i0b;
            double a = 2 * fc * d;
            double s = a == 0 ? 1 : std::sin(M_PI * a) / (M_PI * a);
            row[size_t(j)] = 2 * fc * s * w;
            sum += row[size_t(j)];
        }
        for (int j = 0; j < T; ++j) table_[size_t(p) * size_t(T) + size_t(j)] = float(row[size_t(j)] / sum);  // DC gain 1 per phase
    }
    buf_.assign(size_t(T) + kBlock, 0.0f);
    reset();
    return {};
}

void Resampler::reset() {
    std::fill(buf_.begin(), buf_.end(), 0.0f);
    fill_ = size_t(2 * W_ - 1);  // zeros before the stream's first sample
    start_ = 0;
    phase_ = 0;
}

size_t Resampler::process(const float* in, size_t n, float* out) {
    const size_t T = size_t(2 * W_);
    size_t produced = 0;
    while (n > 0) {
        size_t take = std::min(n, buf_.size() - fill_);
        std::memcpy(&buf_[fill_], in, take * sizeof(float));
        fill_ += take, in += take, n -= take;
        // An output is ready when its last tap's sample is here.
        while (start_ + T <= fill_) {
            const float* x = &buf_[start_];
            const float* h = &table_[size_t(phase_) * T];
            float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            size_t j = 0;
            for (; j + 4 <= T; j += 4) {
                a0 += x[j] * h[j];
                a1 += x[j + 1] * h[j + 1];
                a2 += x[j + 2] * h[j + 2];
                a3 += x[j + 3] * h[j + 3];
            }
            for (; j < T; ++j) a0 += x[j] * h[j];
            out[produced++] = (a0 + a1) + (a2 + a3);
            phase_ += M_;
            start_ += size_t(phase_ / L_);
            phase_ %= L_;
        }
        // Keep what later outputs still need (start_ <= fill_: W > M/L).
        size_t keep = fill_ - std::min(start_, fill_);
        std::memmove(buf_.data(), &buf_[fill_ - keep], keep * sizeof(float));
        start_ -= fill_ - keep;
        fill_ = keep;
    }
    return produced;
}

}  // namespace jiffy::agent
