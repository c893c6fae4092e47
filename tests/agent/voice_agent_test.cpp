// The built-in voice agent (`jiffy agent --demo`, examples/voice/agent.yaml) end to end: the real
// binary over the synthesized clips (scripts/make_clips.sh). Every wake phrase gives exactly one
// detection of its head; other speech, silence and noise give none and keep every head <= 0.1;
// the per-step scores and VAD probabilities the agent writes (--scores) equal the ONNX Runtime
// reference of the authors' streaming rules (tests/agent/oww_ref.mjs) within 1e-3.
#include "../test_tmp.h"
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

const std::string kSrc = JIFFY_SOURCE_DIR;
const std::string kModels = kSrc + "/.cache/models";
const std::string kClips = kSrc + "/.cache/clips";
constexpr double kTol = 1e-3;

bool exists(const std::string& p) { return std::ifstream(p).good(); }
std::string tmp(const std::string& name) { return jiffy::testing::scratch("voice_agent_" + name); }
void write(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
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

struct Clip {
    std::string name, kind, head;  // head: file stem (hey_jarvis_v0.1) or "-"
};

std::vector<Clip> manifest() {
    std::vector<Clip> v;
    std::ifstream f(kClips + "/clips.tsv");
    std::string line;
    while (std::getline(f, line)) {
        std::istringstream is(line);
        Clip c;
        std::getline(is, c.name, '\t');
        std::getline(is, c.kind, '\t');
        std::getline(is, c.head, '\t');
        if (!c.name.empty()) v.push_back(c);
    }
    return v;
}

bool have_data() {
    for (const char* m : {"melspectrogram", "embedding_model", "hey_jarvis_v0.1", "alexa_v0.1", "hey_mycroft_v0.1", "timer_v0.1",
                          "weather_v0.1", "silero_vad_v5"})
        if (!exists(kModels + "/" + m + ".onnx")) return false;
    auto m = manifest();
    if (m.empty()) return false;
    for (const auto& c : m)
        if (!exists(kClips + "/" + c.name + ".wav") || !exists(kClips + "/refs/" + c.name + ".txt")) return false;
    return true;
}

// Scores in the reference format: oww / cls / vad rows of one clip.
struct Scores {
    std::vector<std::string> heads;
    std::vector<std::vector<double>> oww;
    std::map<std::string, std::vector<std::vector<double>>> cls;
    std::vector<double> vad;
};

// Parses one reference file, or the agent's --scores file (sections begin with `clip NAME`).
std::map<std::string, Scores> read_scores(const std::string& path, const std::string& single_clip = "") {
    std::map<std::string, Scores> out;
    std::ifstream f(path);
    std::string line, clip = single_clip, heads_line;
    std::vector<std::string> heads;
    while (std::getline(f, line)) {
        std::istringstream is(line);
        std::string kind;
        is >> kind;
        double v;
        size_t step;
        if (kind == "heads") {
            std::string h;
            heads.clear();
            while (is >> h) heads.push_back(h);
            if (!clip.empty()) out[clip].heads = heads;
        } else if (kind == "clip") {
            is >> clip;
            out[clip].heads = heads;
        } else if (kind == "oww") {
            is >> step;
            std::vector<double> row;
            while (is >> v) row.push_back(v);
            EXPECT_EQ(step, out[clip].oww.size()) << path << ": " << clip;
            out[clip].oww.push_back(row);
        } else if (kind == "cls") {
            std::string h;
            is >> step >> h;
            std::vector<double> row;
            while (is >> v) row.push_back(v);
            out[clip].cls[h].push_back(row);
        } else if (kind == "vad") {
            is >> step >> v;
            EXPECT_EQ(step, out[clip].vad.size()) << path << ": " << clip;
            out[clip].vad.push_back(v);
        }
    }
    return out;
}

std::string short_name(const std::string& stem) { return stem.substr(0, stem.rfind("_v")); }

struct Detection {
    std::string clip, head;
    double t = 0, score = 0, vad = 0;
};

// "hey_jarvis_130  hey_jarvis  t=2.08s  score=0.916  vad=0.90"
std::vector<Detection> parse_detections(const std::string& out) {
    std::vector<Detection> v;
    std::istringstream is(out);
    std::string line;
    while (std::getline(is, line)) {
        Detection d;
        char clip[128], head[128];
        if (std::sscanf(line.c_str(), "%127s %127s t=%lfs score=%lf vad=%lf", clip, head, &d.t, &d.score, &d.vad) == 5) {
            d.clip = clip;
            d.head = head;
            v.push_back(d);
        } else {
            ADD_FAILURE() << "unexpected stdout line: " << line;
        }
    }
    return v;
}

#define SKIP_WITHOUT_DATA() \
    if (!have_data()) {                                                                                       \
        GTEST_SKIP() << "models or clips missing in .cache: run scripts/setup.sh (fetch_models.sh, make_clips.sh)"; \
    }

TEST(VoiceAgent, DemoDetectsEachPhraseOnceAndMatchesTheReference) {
    SKIP_WITHOUT_DATA();
    int rc = 0;
    std::string cmd = "cd " + kSrc + " && " + JIFFY_BINARY + " agent --demo " + kClips + " --models " + kModels + " --scores " +
                      tmp("scores.txt") + " 2>" + tmp("demo.err");
    std::string out = sh(cmd, &rc);
    ASSERT_EQ(rc, 0) << slurp(tmp("demo.err"));
    std::string err = slurp(tmp("demo.err"));
    EXPECT_NE(err.find("stage wake (openwakeword)"), std::string::npos) << err;
    EXPECT_NE(err.find("embedding"), std::string::npos) << err;
    EXPECT_NE(err.find("vad (one 512-sample chunk)"), std::string::npos) << err;
    EXPECT_NE(err.find("real-time factor"), std::string::npos) << err;

    std::vector<Detection> dets = parse_detections(out);
    std::map<std::string, Scores> got = read_scores(tmp("scores.txt"));
    auto clips = manifest();
    ASSERT_EQ(got.size(), clips.size()) << "the scores file should hold every clip";
    size_t positives = 0;
    for (const auto& c : clips) {
        SCOPED_TRACE(c.name);
        std::vector<Detection> mine;
        for (const auto& d : dets)
            if (d.clip == c.name) mine.push_back(d);
        const Scores& s = got[c.name];
        Scores ref = read_scores(kClips + "/refs/" + c.name + ".txt", c.name)[c.name];
        ASSERT_EQ(s.heads, ref.heads);
        // Steps: floor(samples / 1280) on both sides; VAD: the agent runs the 512-sample chunks
        // that fit in those steps, the reference every chunk of the clip (at most 2 more).
        ASSERT_EQ(s.oww.size(), ref.oww.size());
        ASSERT_LE(s.vad.size(), ref.vad.size());
        ASSERT_GE(s.vad.size() + 2, ref.vad.size());
        double worst = 0;
        for (size_t k = 0; k < s.oww.size(); ++k) {
            ASSERT_EQ(s.oww[k].size(), ref.oww[k].size());
            for (size_t h = 0; h < s.oww[k].size(); ++h) worst = std::max(worst, std::fabs(s.oww[k][h] - ref.oww[k][h]));
        }
        for (const auto& [h, rows] : ref.cls) {
            ASSERT_EQ(s.cls.at(h).size(), rows.size());
            for (size_t k = 0; k < rows.size(); ++k)
                for (size_t j = 0; j < rows[k].size(); ++j) worst = std::max(worst, std::fabs(s.cls.at(h)[k][j] - rows[k][j]));
        }
        for (size_t k = 0; k < s.vad.size(); ++k) worst = std::max(worst, std::fabs(s.vad[k] - ref.vad[k]));
        EXPECT_LE(worst, kTol) << "largest difference from the reference";

        std::vector<double> peak(s.heads.size(), 0.0);
        for (const auto& row : s.oww)
            for (size_t h = 0; h < row.size(); ++h) peak[h] = std::max(peak[h], row[h]);
        if (c.kind == "pos") {
            ++positives;
            ASSERT_EQ(mine.size(), 1u) << "one utterance, one detection";
            EXPECT_EQ(mine[0].head, short_name(c.head));
            EXPECT_GT(mine[0].score, 0.5);
            EXPECT_GT(mine[0].t, 1.0);  // after the clip's leading second of silence
            for (size_t h = 0; h < s.heads.size(); ++h) {
                if (s.heads[h] == c.head) continue;
                EXPECT_LE(peak[h], 0.5) << s.heads[h] << " fires on a clip without it";
            }
        } else {
            EXPECT_TRUE(mine.empty()) << mine.size() << " detections, first " << (mine.empty() ? "" : mine[0].head);
            for (size_t h = 0; h < s.heads.size(); ++h) EXPECT_LE(peak[h], 0.1) << s.heads[h];
        }
    }
    EXPECT_GE(positives, 10u);
    EXPECT_EQ(dets.size(), positives);
}

TEST(VoiceAgent, ExampleConfigIsTheBuiltInOne) {
    int rc = 0;
    std::string printed = sh(std::string(JIFFY_BINARY) + " agent --print-config", &rc);
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(printed, slurp(kSrc + "/examples/voice/agent.yaml"));
    SKIP_WITHOUT_DATA();
    std::string out = sh(std::string(JIFFY_BINARY) + " agent " + kSrc + "/examples/voice/agent.yaml --fast 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0);
    std::vector<Detection> d = parse_detections(out);
    ASSERT_EQ(d.size(), 2u) << out;
    EXPECT_EQ(d[0].clip + " " + d[0].head, "hey_jarvis_130 hey_jarvis");
    EXPECT_EQ(d[1].clip + " " + d[1].head, "alexa_150 alexa");
}

TEST(VoiceAgent, BadVoiceConfigsGiveClearErrors) {
    SKIP_WITHOUT_DATA();
    const std::string clip = kClips + "/hello_world.wav";
    auto check = [&](const std::string& name, const std::string& stages, const std::string& chunk, const std::string& want) {
        std::string cfg = "agents:\n  - name: v\n    sources: [{name: mic, type: wav, chunk: " + chunk + ", file: " + clip +
                          "}]\n    stages:\n" + stages + "    sinks: [{type: stdout}]\n";
        write(tmp(name + ".yaml"), cfg);
        int rc = 0;
        std::string out = sh(std::string(JIFFY_BINARY) + " agent " + tmp(name + ".yaml") + " --check 2>&1", &rc);
        EXPECT_EQ(rc, 2) << name << ": " << out;
        EXPECT_NE(out.find(want), std::string::npos) << name << ": " << out;
    };
    const std::string wake = "      - {name: wake, type: openwakeword, models: " + kModels + ", heads: [hey_jarvis]";
    check("chunk", wake + "}\n", "512", "takes frames of 1280 samples");
    check("head", "      - {name: wake, type: openwakeword, models: " + kModels + ", heads: [hey_nobody]}\n", "1280",
          "head 'hey_nobody'");
    check("gate", wake + ", gate: {when: \"vad.prob > 0.5\"}}\n", "1280", "unknown value 'vad.prob'");
    check("vadmodel", "      - {name: vad, type: silero_vad, model: /nonexistent/vad.onnx}\n", "1280", "/nonexistent/vad.onnx");
    check("value", wake + "}\n      - {name: r, type: rule, when: \"wake.alexa > 0.5\"}\n", "1280", "no value 'alexa'");
    check("rules", wake + "}\n      - {name: d, type: rules, rules: [{name: a, score: wake.hey_jarvis}]}\n", "1280",
          "'when'");
    {
        std::string cfg = "agents:\n  - name: v\n    sources: [{name: mic, type: wav, files: [" + clip + ", " + clip +
                          "]}]\n    sinks: [{type: stdout, template: \"{media} {x:.3q}\"}]\n";
        write(tmp("template.yaml"), cfg);
        int rc = 0;
        std::string out = sh(std::string(JIFFY_BINARY) + " agent " + tmp("template.yaml") + " --check 2>&1", &rc);
        EXPECT_EQ(rc, 2) << out;
        EXPECT_NE(out.find("must be a printf float format"), std::string::npos) << out;
    }
    check("timer", "      - {name: wake, type: openwakeword, models: " + kModels +
          ", heads: [timer]}\n      - {name: r, type: rule, when: \"wake.timer[7] > 0.5\"}\n", "1280", "index 7 is out of range");
}

}  // namespace
