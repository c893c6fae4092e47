// Unit tests of the agent runtime's parts: config errors, expressions, rules, rings, WAV, payloads.
#include "../test_tmp.h"
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "agent/config.h"
#include "agent/expr.h"
#include "agent/payload.h"
#include "agent/registry.h"
#include "agent/ring.h"
#include "agent/wav.h"
#include "observe/histogram.h"

using namespace jiffy;
using namespace jiffy::agent;

namespace {

const std::string kModels = std::string(JIFFY_SOURCE_DIR) + "/.cache/models";

// Loads YAML text; returns the error message ("" when it loaded).
std::string load_err(const std::string& yaml) {
    std::vector<std::unique_ptr<Agent>> agents;
    Status st = load_agents_text(yaml, "t.yaml", JIFFY_SOURCE_DIR, LoadOptions{true}, &agents);
    return st.message();
}

std::string tmpfile(const std::string& name, const std::string& content) {
    std::string p = jiffy::testing::scratch(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
}

const char* kGood =
    "agents:\n"
    "  - name: a\n"
    "    sources:\n"
    "      - {name: s, type: timer, period_ms: 1, count: 3}\n"
    "    stages:\n"
    "      - {name: r, type: rule, when: 's > 1'}\n"
    "    sinks:\n"
    "      - type: stdout\n";

}  // namespace

TEST(AgentConfig, GoodConfigLoads) { EXPECT_EQ(load_err(kGood), ""); }

TEST(AgentConfig, ErrorsNameLineAndField) {
    std::string y = kGood;
    // unknown key at line 3 (agent level)
    std::string e = load_err(std::string(y).replace(y.find("    sources:"), 0, "    deadlin_us: 5\n"));
    EXPECT_NE(e.find("t.yaml:3:"), std::string::npos) << e;
    EXPECT_NE(e.find("unknown field 'deadlin_us'"), std::string::npos) << e;
    // bad value type: line 3
    e = load_err(std::string(y).replace(y.find("    sources:"), 0, "    deadline_us: soon\n"));
    EXPECT_NE(e.find("t.yaml:3:"), std::string::npos) << e;
    EXPECT_NE(e.find("'deadline_us' must be an integer"), std::string::npos) << e;
    // unknown stage type (line 6)
    std::string bad = y;
    bad.replace(bad.find("type: rule"), 10, "type: rulez");
    e = load_err(bad);
    EXPECT_NE(e.find("t.yaml:6:"), std::string::npos) << e;
    EXPECT_NE(e.find("unknown stage type 'rulez'"), std::string::npos) << e;
    // unknown key inside a source (line 4)
    bad = y;
    bad.replace(bad.find("count: 3"), 8, "cnt: 3");
    e = load_err(bad);
    EXPECT_NE(e.find("t.yaml:4:"), std::string::npos) << e;
    EXPECT_NE(e.find("unknown field 'cnt'"), std::string::npos) << e;
    // a bad expression: the column is named
    bad = y;
    bad.replace(bad.find("'s > 1'"), 7, "'s > > 1'");
    e = load_err(bad);
    EXPECT_NE(e.find("column 5"), std::string::npos) << e;
    // missing sinks
    bad = y.substr(0, y.find("    sinks:"));
    e = load_err(bad);
    EXPECT_NE(e.find("missing required field 'sinks'"), std::string::npos) << e;
    // invalid YAML
    e = load_err("agents: [\n  {name: a\n");
    EXPECT_NE(e.find("invalid YAML"), std::string::npos) << e;
    // duplicate names, unknown values
    bad = y;
    bad.replace(bad.find("name: r"), 7, "name: s");
    EXPECT_NE(load_err(bad).find("used twice"), std::string::npos);
    bad = y;
    bad.replace(bad.find("'s > 1'"), 7, "'nope > 1'");
    EXPECT_NE(load_err(bad).find("unknown value 'nope'"), std::string::npos);
}

TEST(AgentConfig, ModelErrors) {
    std::string y = std::string("agents:\n  - name: m\n    sources: [{name: s, type: timer, period_ms: 1}]\n    stages:\n") +
                    "      - {name: k, type: model, file: .cache/models/does_not_exist.onnx}\n    sinks: [{type: stdout}]\n";
    std::string e = load_err(y);
    EXPECT_NE(e.find("does_not_exist.onnx"), std::string::npos) << e;
    EXPECT_NE(e.find("stage 'k'"), std::string::npos) << e;
    // wrong input size: a timer frame (1 value) into a [1,64] model
    y.replace(y.find("does_not_exist"), 14, "mlp_64_128_128_10");
    e = load_err(y);
    EXPECT_NE(e.find("t.yaml:5: agent 'm' stage 'k'"), std::string::npos) << e;
    EXPECT_NE(e.find("fixed to 64 by the model"), std::string::npos) << e;
    // carry naming a missing output
    std::string c = std::string("agents:\n  - name: m\n    sources: [{name: s, type: timer, period_ms: 1}]\n    stages:\n") +
                    "      - {name: k, type: model, file: .cache/models/silero_vad_v5.onnx, carry: {nope: state}}\n    sinks: [{type: stdout}]\n";
    e = load_err(c);
    EXPECT_NE(e.find("'carry' reads output 'nope'"), std::string::npos) << e;
}

// ---------------------------------------------------------------- expressions

namespace {
float g_vals[4] = {0.7f, 0.2f, 3.0f, -1.0f};
Status res(const std::string& n, int idx, const float** p) {
    if (n == "wake.hey_jarvis") *p = &g_vals[0];
    else if (n == "vad.prob") *p = &g_vals[1];
    else if (n == "x") {
        if (idx > 3) return invalid("index out of range");
        *p = &g_vals[idx < 0 ? 0 : idx];
    } else return invalid("unknown value '", n, "'");
    return {};
}
double ev(const std::string& s) {
    Expr e;
    Status st = Expr::compile(s, res, &e);
    EXPECT_TRUE(st.ok()) << s << ": " << st.message();
    return e.eval();
}
std::string err(const std::string& s) {
    Expr e;
    return Expr::compile(s, res, &e).message();
}
}  // namespace

TEST(AgentExpr, Evaluates) {
    EXPECT_DOUBLE_EQ(ev("1 + 2 * 3"), 7);
    EXPECT_DOUBLE_EQ(ev("(1 + 2) * 3"), 9);
    EXPECT_DOUBLE_EQ(ev("10 / 4 - 1"), 1.5);
    EXPECT_DOUBLE_EQ(ev("-x[2] + 1"), -2);
    EXPECT_DOUBLE_EQ(ev("wake.hey_jarvis > 0.5 and vad.prob < 0.5"), 1);
    EXPECT_DOUBLE_EQ(ev("wake.hey_jarvis > 0.5 && not (vad.prob < 0.5)"), 0);
    EXPECT_DOUBLE_EQ(ev("x[3] < 0 or x[2] == 2"), 1);
    EXPECT_DOUBLE_EQ(ev("!(x[2] != 3)"), 1);
    EXPECT_DOUBLE_EQ(ev("abs(x[3]) + max(1, x[2]) - min(2, 5)"), 2);
    EXPECT_DOUBLE_EQ(ev("1 - 2 - 3"), -4);  // left associative
    EXPECT_DOUBLE_EQ(ev("2 >= 2"), 1);
    // values are read at evaluation time, in place
    Expr e;
    ASSERT_TRUE(Expr::compile("vad.prob * 10", res, &e).ok());
    g_vals[1] = 0.5f;
    EXPECT_DOUBLE_EQ(e.eval(), 5);
    g_vals[1] = 0.2f;
    EXPECT_EQ(e.names(), std::vector<std::string>{"vad.prob"});
}

TEST(AgentExpr, ErrorsNamePosition) {
    EXPECT_NE(err("1 +").find("column 4"), std::string::npos) << err("1 +");
    EXPECT_NE(err("(1 + 2").find("expected ')'"), std::string::npos);
    EXPECT_NE(err("a.b > 1").find("column 1: unknown value 'a.b'"), std::string::npos) << err("a.b > 1");
    EXPECT_NE(err("1 < 2 < 3").find("do not chain"), std::string::npos);
    EXPECT_NE(err("x[").find("expected an index"), std::string::npos);
    EXPECT_NE(err("foo(1)").find("unknown function 'foo'"), std::string::npos);
    EXPECT_NE(err("1 2").find("column 3"), std::string::npos) << err("1 2");
    EXPECT_NE(err("x[9]").find("out of range"), std::string::npos);
    EXPECT_NE(err("").find("end of the expression"), std::string::npos);
    EXPECT_NE(err("1 $ 2").find("unexpected '$'"), std::string::npos) << err("1 $ 2");
}

// ---------------------------------------------------------------- rules

namespace {
// A pipeline whose input is one float, with one rule stage built from YAML.
struct RuleRig {
    Pipeline pipe;
    std::unique_ptr<Stage> rule;
    explicit RuleRig(const std::string& yaml) {
        register_builtins();
        pipe.input_buf_.assign(1, 0.0f);
        pipe.input_.data = pipe.input_buf_.data();
        pipe.input_.shape = {1, 1};
        pipe.input_.numel = 1;
        YAML::Node n = YAML::Load(yaml);
        Fields f(n, "t", "rule");
        f.get("type");
        Status st = find_stage(n["type"].Scalar())(f, BuildEnv{}, &rule);
        EXPECT_TRUE(st.ok()) << st.message();
        EXPECT_TRUE(f.finish().ok());
        rule->name = "r";
        st = rule->prepare(pipe.input_, pipe);
        EXPECT_TRUE(st.ok()) << st.message();
    }
    // Feeds values; returns the indices where the rule fired.
    std::vector<int> feed(const std::vector<float>& xs) {
        std::vector<int> fired;
        for (size_t i = 0; i < xs.size(); ++i) {
            pipe.input_buf_[0] = xs[i];
            EXPECT_TRUE(rule->push().ok());
            if (rule->next()) fired.push_back(int(i));
        }
        return fired;
    }
};
}  // namespace

TEST(AgentRule, DebounceForNFrames) {
    RuleRig r("{type: rule, when: 'input > 0.5 for 3 frames'}");
    //                        0    1    2    3    4    5    6    7    8    9
    EXPECT_EQ(r.feed({0.9f, 0.9f, 0.1f, 0.9f, 0.9f, 0.9f, 0.9f, 0.2f, 0.9f, 0.9f}), std::vector<int>{5});
}

TEST(AgentRule, HysteresisThreshold) {
    RuleRig r("{type: threshold, value: input, 'on': 0.6, 'off': 0.3}");
    // fires at 1; 0.5 and 0.4 keep it active (above off), 0.2 releases; fires again at 6
    EXPECT_EQ(r.feed({0.1f, 0.7f, 0.5f, 0.65f, 0.4f, 0.2f, 0.7f, 0.7f}), (std::vector<int>{1, 6}));
    float* active = nullptr;
    const float* p = nullptr;
    ASSERT_TRUE(r.rule->value("", -1, &p).ok());
    (void)active;
    EXPECT_EQ(*p, 1.0f);
}

TEST(AgentRule, CooldownAndLevel) {
    RuleRig c("{type: rule, when: 'input > 0.5', cooldown_frames: 3}");
    // fires at 0, releases at 1, cond again at 2,3 (cooling), 4 fires (3 frames after)
    EXPECT_EQ(c.feed({1, 0, 1, 0, 1, 1, 0}), (std::vector<int>{0, 4}));
    RuleRig l("{type: rule, when: 'input > 0.5', mode: level}");
    EXPECT_EQ(l.feed({1, 1, 0, 1}), (std::vector<int>{0, 1, 3}));
}

TEST(AgentRule, RateLimit) {
    RuleRig r("{type: ratelimit, min_interval_ms: 10000}");
    EXPECT_EQ(r.feed({1, 1, 1}), std::vector<int>{0});
}

// ---------------------------------------------------------------- rings, histogram

TEST(AgentRing, MirrorRingIsContiguousOldestFirst) {
    MirrorRing r(3, 2);
    float f[2];
    for (int i = 1; i <= 5; ++i) {
        f[0] = float(i), f[1] = float(10 * i);
        r.push(f);
        if (i < 3) EXPECT_FALSE(r.full());
    }
    ASSERT_TRUE(r.full());
    const float* w = r.window();
    std::vector<float> got(w, w + 6);
    EXPECT_EQ(got, (std::vector<float>{3, 30, 4, 40, 5, 50}));
    ValueRing<int> v(3);
    for (int i = 0; i < 5; ++i) v.push(i);
    EXPECT_EQ(v.ago(0), 4);
    EXPECT_EQ(v.ago(2), 2);
    EXPECT_EQ(v.size(), 3u);
}

TEST(AgentHistogram, QuantilesWithinBucketError) {
    observe::Histogram h;
    for (int i = 1; i <= 1000; ++i) h.record_ns(int64_t(i) * 1000);  // 1..1000 us
    EXPECT_NEAR(h.quantile_us(0.5), 500, 500 * 0.04);
    EXPECT_NEAR(h.quantile_us(0.99), 990, 990 * 0.04);
    EXPECT_EQ(h.count(), 1000u);
    EXPECT_NEAR(h.max_us(), 1000, 1e-9);
    for (uint64_t v : {0ull, 15ull, 16ull, 31ull, 32ull, 1000ull, 123456789ull})
        EXPECT_LE(observe::Histogram::lower(observe::Histogram::index(v)), v);
}

// ---------------------------------------------------------------- WAV

namespace {
std::string wav_bytes(uint16_t fmt, uint16_t ch, uint32_t rate, uint16_t bits, const std::vector<int16_t>& s, int32_t data_size = -1) {
    std::string b;
    auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) b += char((v >> (8 * i)) & 0xff); };
    auto u16 = [&](uint16_t v) { b += char(v & 0xff); b += char(v >> 8); };
    b += "RIFF";
    u32(36 + uint32_t(s.size() * 2));
    b += "WAVEfmt ";
    u32(16);
    u16(fmt), u16(ch), u32(rate), u32(rate * ch * bits / 8), u16(uint16_t(ch * bits / 8)), u16(bits);
    b += "data";
    u32(data_size < 0 ? uint32_t(s.size() * 2) : uint32_t(data_size));
    for (int16_t x : s) u16(uint16_t(x));
    return b;
}
std::string wav_err(const std::string& bytes) {
    WavData w;
    return parse_wav(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x.wav", &w).message();
}
}  // namespace

TEST(AgentWav, ReadsPcm16Mono) {
    std::string p = tmpfile("ok.wav", wav_bytes(1, 1, 16000, 16, {0, 1, -2, 32767, -32768}));
    WavData w;
    ASSERT_TRUE(read_wav(p, &w).ok());
    EXPECT_EQ(w.sample_rate, 16000);
    EXPECT_EQ(w.samples, (std::vector<int16_t>{0, 1, -2, 32767, -32768}));
}

TEST(AgentWav, BadHeadersAreNamed) {
    EXPECT_NE(wav_err("RIFF").find("too short"), std::string::npos);
    EXPECT_NE(wav_err(std::string(64, 'x')).find("not a WAV file"), std::string::npos);
    EXPECT_NE(wav_err(wav_bytes(3, 1, 16000, 32, {1, 2})).find("not PCM"), std::string::npos);
    EXPECT_NE(wav_err(wav_bytes(1, 2, 16000, 16, {1, 2})).find("2 channels"), std::string::npos);
    EXPECT_NE(wav_err(wav_bytes(1, 1, 16000, 8, {1, 2})).find("8-bit"), std::string::npos);
    EXPECT_NE(wav_err(wav_bytes(1, 1, 16000, 16, {1, 2}, 400)).find("truncated"), std::string::npos);
    std::string nodata = wav_bytes(1, 1, 16000, 16, {});
    EXPECT_NE(wav_err(nodata.substr(0, 36)).find("no 'data' chunk"), std::string::npos);
    WavData w;
    EXPECT_NE(read_wav("/nonexistent/x.wav", &w).message().find("cannot open"), std::string::npos);
}

// ---------------------------------------------------------------- payloads

namespace {
std::string dec(PayloadFormat::Kind k, const std::string& in, std::vector<float>* out, const std::string& field = "", size_t cap = 8) {
    PayloadFormat f;
    f.kind = k;
    f.field = field;
    out->assign(cap, -99);
    size_t n = 0;
    Status st = decode_payload(f, reinterpret_cast<const uint8_t*>(in.data()), in.size(), out->data(), cap, &n);
    out->resize(st.ok() ? n : 0);
    return st.message();
}
}  // namespace

TEST(AgentPayload, Decodes) {
    std::vector<float> v;
    EXPECT_EQ(dec(PayloadFormat::kJsonArray, "[1, 2.5, -3]", &v), "");
    EXPECT_EQ(v, (std::vector<float>{1, 2.5f, -3}));
    EXPECT_EQ(dec(PayloadFormat::kJsonField, R"({"sensor": {"temp": 21.5}, "id": 3})", &v, "sensor.temp"), "");
    EXPECT_EQ(v, std::vector<float>{21.5f});
    EXPECT_EQ(dec(PayloadFormat::kJsonField, R"({"pcm": [1,2]})", &v, "pcm"), "");
    EXPECT_EQ(v, (std::vector<float>{1, 2}));
    float f[2] = {1.5f, -2.0f};
    EXPECT_EQ(dec(PayloadFormat::kF32, std::string(reinterpret_cast<char*>(f), 8), &v), "");
    EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f}));
    const char i16[] = {char(0xff), char(0x7f), char(0x00), char(0x80)};
    EXPECT_EQ(dec(PayloadFormat::kI16, std::string(i16, 4), &v), "");
    EXPECT_EQ(v, (std::vector<float>{32767, -32768}));
}

TEST(AgentPayload, MalformedIsAnErrorNeverAnOverrun) {
    std::vector<float> v;
    EXPECT_NE(dec(PayloadFormat::kJsonArray, "[1, 2", &v).find("not valid JSON"), std::string::npos);
    EXPECT_NE(dec(PayloadFormat::kJsonArray, "[1, \"a\"]", &v).find("element 1 is string"), std::string::npos);
    EXPECT_NE(dec(PayloadFormat::kJsonArray, "{\"a\": 1}", &v).find("must be a number or an array"), std::string::npos);
    EXPECT_NE(dec(PayloadFormat::kJsonArray, "[1,2,3]", &v, "", 2).find("more than the frame holds"), std::string::npos);
    EXPECT_NE(dec(PayloadFormat::kJsonField, "{\"a\": 1}", &v, "b").find("no field 'b'"), std::string::npos);
    EXPECT_NE(dec(PayloadFormat::kJsonField, "{\"a\": 1}", &v, "a.b").find("cannot take field 'b'"), std::string::npos);
    EXPECT_NE(dec(PayloadFormat::kF32, "abc", &v).find("not a whole number"), std::string::npos);
    EXPECT_NE(dec(PayloadFormat::kI16, "abc", &v).find("not a whole number"), std::string::npos);
    EXPECT_NE(dec(PayloadFormat::kI16, std::string(40, 'a'), &v, "", 8).find("more than the frame holds"), std::string::npos);
    float nan = NAN;
    EXPECT_NE(dec(PayloadFormat::kF32, std::string(reinterpret_cast<char*>(&nan), 4), &v).find("not finite"), std::string::npos);
    EXPECT_NE(dec(PayloadFormat::kJsonArray, "", &v).find("not valid JSON"), std::string::npos);
}
