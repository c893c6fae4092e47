// The `resample` stage: the Resampler's filter (frequency and amplitude kept, anti-aliasing,
// streaming = one shot) and end to end, a clip upsampled to 48 kHz with sox run through the voice
// agent with a resample stage in front: the same head fires at the same time.
#include "../test_tmp.h"
#include <filesystem>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "agent/config.h"
#include "agent/resample.h"

using namespace jiffy;
using namespace jiffy::agent;

namespace {

const std::string kSrc = JIFFY_SOURCE_DIR;

std::vector<float> sine(double hz, double rate, double amp, size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = float(amp * std::sin(2 * M_PI * hz * double(i) / rate));
    return v;
}

std::vector<float> convert(int64_t from, int64_t to, const std::vector<float>& x) {
    Resampler r;
    Status st = r.init(from, to);
    EXPECT_TRUE(st.ok()) << st.message();
    std::vector<float> y(r.max_out(x.size()));
    y.resize(r.process(x.data(), x.size(), y.data()));
    return y;
}

// Amplitude of the component at `hz` (a DFT bin over a whole number of periods).
double amplitude_at(const std::vector<float>& y, size_t begin, size_t n, double hz, double rate) {
    double re = 0, im = 0;
    for (size_t i = 0; i < n; ++i) {
        double ph = 2 * M_PI * hz * double(i) / rate;
        re += y[begin + i] * std::cos(ph);
        im += y[begin + i] * std::sin(ph);
    }
    return 2 * std::sqrt(re * re + im * im) / double(n);
}

// Frequency from upward zero crossings (linear interpolation between samples).
double frequency(const std::vector<float>& y, size_t begin, size_t end, double rate) {
    double first = -1, last = -1;
    int count = 0;
    for (size_t i = begin + 1; i < end; ++i)
        if (y[i - 1] < 0 && y[i] >= 0) {
            double t = double(i - 1) + double(y[i - 1]) / double(y[i - 1] - y[i]);
            if (first < 0) first = t;
            else ++count;
            last = t;
        }
    return count > 0 ? double(count) * rate / (last - first) : 0;
}

TEST(Resample, SineKeepsFrequencyAndAmplitude) {
    struct Case {
        int64_t from;
        double hz;
    } cases[] = {{48000, 1000}, {48000, 3000}, {44100, 440}, {22050, 2500}, {8000, 1000}, {8000, 2500}, {48000, 6000}};
    for (const auto& c : cases) {
        // 1 s of a 0.5-amplitude sine, converted to 16 kHz; skip the first 0.1 s (filter start).
        auto y = convert(c.from, 16000, sine(c.hz, double(c.from), 0.5, size_t(c.from)));
        ASSERT_NEAR(double(y.size()), 16000, 1) << c.from;
        size_t begin = 1600, n = 12800;  // 0.8 s: a whole number of periods of every test tone
        double amp = amplitude_at(y, begin, n, c.hz, 16000);
        double f = frequency(y, begin, begin + n, 16000);
        std::printf("%lld Hz -> 16000 Hz: %.0f Hz tone: amplitude %.4f, frequency %.2f Hz\n", (long long)c.from, c.hz, amp, f);
        EXPECT_NEAR(amp, 0.5, 0.005) << c.from << " Hz, tone " << c.hz;
        EXPECT_NEAR(f, c.hz, 0.5) << c.from << " Hz, tone " << c.hz;
    }
}

// A low-pass, not an interpolator: a tone above the target's Nyquist frequency (8 kHz) is removed,
// not folded down to an alias (10 kHz at 48 kHz would alias to 6 kHz at 16 kHz).
TEST(Resample, RemovesWhatWouldAlias) {
    auto y = convert(48000, 16000, sine(10000, 48000, 0.5, 48000));
    double alias = amplitude_at(y, 1600, 12800, 6000, 16000);
    double rms = 0;
    for (size_t i = 1600; i < 14400; ++i) rms += double(y[i]) * y[i];
    rms = std::sqrt(rms / 12800);
    std::printf("10 kHz at 48 kHz -> 16 kHz: 6 kHz alias %.2e, rms %.2e (input rms 0.354)\n", alias, rms);
    EXPECT_LT(alias, 0.5e-3);  // < -60 dB
    EXPECT_LT(rms, 0.5e-3);
}

TEST(Resample, FrameByFrameEqualsOneShot) {
    std::mt19937 rng(7);
    std::normal_distribution<float> g(0, 1000);
    for (int64_t from : {48000, 44100, 22050, 8000}) {
        std::vector<float> x(size_t(from) / 2);
        for (auto& v : x) v = g(rng);
        auto whole = convert(from, 16000, x);
        Resampler r;
        ASSERT_TRUE(r.init(from, 16000).ok());
        std::vector<float> parts, buf;
        std::uniform_int_distribution<size_t> len(1, 5000);
        for (size_t at = 0; at < x.size();) {
            size_t n = std::min(len(rng), x.size() - at);
            buf.resize(r.max_out(n));
            size_t k = r.process(&x[at], n, buf.data());
            parts.insert(parts.end(), buf.begin(), buf.begin() + long(k));
            at += n;
        }
        ASSERT_EQ(parts.size(), whole.size()) << from;
        for (size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(parts[i], whole[i]) << from << " Hz, output " << i;
        // reset() starts a stream over: the same input gives the same output again.
        r.reset();
        buf.resize(r.max_out(x.size()));
        buf.resize(r.process(x.data(), x.size(), buf.data()));
        EXPECT_EQ(buf, whole);
    }
}

TEST(Resample, StageConfig) {
    auto load = [](const std::string& stage, const std::string& src) {
        std::vector<std::unique_ptr<Agent>> a;
        std::string y = "agents:\n  - name: r\n    sources: [" + src + "]\n    stages:\n      - " + stage +
                        "\n    sinks: [{type: stdout}]\n";
        return load_agents_text(y, "r.yaml", jiffy::testing::scratch_dir(), LoadOptions{true}, &a);
    };
    const std::string mqtt48 = "{name: m, type: mqtt, topic: a, size: 3840, rate: 48000}";
    const std::string mqtt_norate = "{name: m, type: mqtt, topic: a, size: 1000}";
    EXPECT_TRUE(load("{name: rs, type: resample, to: 16000}", mqtt48).ok());  // from = the source's rate; chunk 1280
    Status st = load("{name: rs, type: resample, to: 16000}", mqtt_norate);
    EXPECT_NE(st.message().find("give 'from'"), std::string::npos) << st.message();
    st = load("{name: rs, type: resample, from: 22050, to: 16000}", mqtt_norate);  // 1000 in -> 725.6 out
    EXPECT_NE(st.message().find("give 'chunk'"), std::string::npos) << st.message();
    EXPECT_TRUE(load("{name: rs, type: resample, from: 22050, to: 16000, chunk: 1280}", mqtt_norate).ok());
    st = load("{name: rs, type: resample, from: 44100, to: 16000}", mqtt48);
    EXPECT_NE(st.message().find("'from' is 44100 Hz but source 'm' is 48000 Hz"), std::string::npos) << st.message();
    st = load("{name: rs, type: resample}", mqtt48);
    EXPECT_NE(st.message().find("r.yaml:5:"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("missing required field 'to'"), std::string::npos) << st.message();
    st = load("{name: rs, type: resample,\n          to: 16000.5}", mqtt48);
    EXPECT_NE(st.message().find("r.yaml:6:"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("field 'to' must be a whole number of Hz"), std::string::npos) << st.message();
}

std::string sh(const std::string& cmd, int* rc) {
    std::string out;
    FILE* f = popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    int st = pclose(f);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

std::string replace_all(std::string s, const std::string& a, const std::string& b) {
    for (size_t p = s.find(a); p != std::string::npos; p = s.find(a, p + b.size())) s.replace(p, a.size(), b);
    return s;
}

// examples/voice/agent.yaml with 48 kHz clips (sox) and a resample stage in front: hey_jarvis fires
// once, at the time and with about the score of the 16 kHz run (docs/voice.md: t=2.08 s, 0.916);
// "hello world" gives nothing.
TEST(Resample, VoiceAgentOn48kHzClips) {
    const std::string clips = kSrc + "/.cache/clips", models = kSrc + "/.cache/models";
    if (!std::ifstream(clips + "/hey_jarvis_130.wav").good() || !std::ifstream(models + "/melspectrogram.onnx").good())
        GTEST_SKIP() << "clips or models missing in .cache: run scripts/setup.sh";
    int rc = 0;
    const std::string dir = jiffy::testing::scratch_dir();
    for (const char* c : {"hey_jarvis_130", "hello_world"}) {
        sh("sox " + clips + "/" + c + ".wav -r 48000 " + dir + "/" + c + ".wav 2>&1", &rc);
        ASSERT_EQ(rc, 0) << "sox failed for " << c;
    }
    std::ifstream in(kSrc + "/examples/voice/agent.yaml");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string y = ss.str();
    const std::string files = "files: [../../.cache/clips/hey_jarvis_130.wav, ../../.cache/clips/alexa_150.wav, ../../.cache/clips/hello_world.wav]";
    ASSERT_NE(y.find(files), std::string::npos) << "examples/voice/agent.yaml changed";
    y = replace_all(y, files, "files: [" + dir + "/hey_jarvis_130.wav, " + dir + "/hello_world.wav]");
    y = replace_all(y, "chunk: 1280 ", "chunk: 3840 ");
    y = replace_all(y, "../../.cache/models", models);
    const std::string stages = "    stages:\n";
    ASSERT_NE(y.find(stages), std::string::npos);
    y.replace(y.find(stages), stages.size(), stages + "      - {name: rs, type: resample, to: 16000}   # 48 kHz frames of 3840 -> 1280\n");
    { std::ofstream(dir + "/voice48k.yaml") << y; }
    std::string out = sh(std::string(JIFFY_BINARY) + " agent " + dir + "/voice48k.yaml --fast 2>" + dir + "/voice48k.err", &rc);
    ASSERT_EQ(rc, 0) << out;
    std::printf("%s", out.c_str());
    std::istringstream is(out);
    std::string line;
    int n = 0;
    while (std::getline(is, line)) {
        char clip[128], head[128];
        double t = 0, score = 0, vad = 0;
        ASSERT_EQ(std::sscanf(line.c_str(), "%127s %127s t=%lfs score=%lf vad=%lf", clip, head, &t, &score, &vad), 5) << line;
        EXPECT_EQ(std::string(clip) + " " + head, "hey_jarvis_130 hey_jarvis");
        EXPECT_NEAR(t, 2.08, 0.081);  // the same 80 ms step (or its neighbour)
        EXPECT_GT(score, 0.8);
        ++n;
    }
    EXPECT_EQ(n, 1);
}

}  // namespace
