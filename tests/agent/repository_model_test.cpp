// The `model` stage from a `jiffy serve` repository (repository: DIR, model: NAME[, version: N]):
// the latest version by default, a given version, config.yaml's fixed input shapes, and an error
// naming the line and the field for each way the reference can be wrong.
#include <unistd.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "agent/config.h"

using namespace jiffy;
using namespace jiffy::agent;
namespace fs = std::filesystem;

namespace {

const std::string kModels = std::string(JIFFY_SOURCE_DIR) + "/.cache/models";

class RepositoryModel : public testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kModels + "/mlp_64_128_128_10.onnx") || !fs::exists(kModels + "/one_node_relu.onnx"))
            GTEST_SKIP() << "models missing in .cache: run scripts/setup.sh";
        // One folder per test process: ctest runs the cases of this file in parallel.
        dir_ = testing::TempDir() + "/repo_model_test_" + std::to_string(getpid()) + "_" +
               testing::UnitTest::GetInstance()->current_test_info()->name();
        fs::remove_all(dir_);
        fs::create_directories(dir_ + "/repo/mlp/1");
        fs::create_directories(dir_ + "/repo/mlp/2");  // a version folder without a model.onnx
        fs::create_directories(dir_ + "/repo/mlp/3");
        fs::create_directories(dir_ + "/repo/empty");
        fs::copy_file(kModels + "/one_node_relu.onnx", dir_ + "/repo/mlp/1/model.onnx");      // [1,16] -> [1,16]
        fs::copy_file(kModels + "/mlp_64_128_128_10.onnx", dir_ + "/repo/mlp/3/model.onnx");  // [1,64] -> [1,10]
    }
    void TearDown() override {
        if (!dir_.empty()) fs::remove_all(dir_);
    }
    // An agent: timer -> window of `frames` -> the model stage given (one line: line 6).
    Status load(const std::string& stage, int frames, std::vector<std::unique_ptr<Agent>>* a) {
        std::string y = "agents:\n  - name: m\n    sources: [{name: s, type: timer, period_ms: 1, count: 3}]\n    stages:\n"
                        "      - {name: w, type: window, frames: " + std::to_string(frames) + "}\n"
                        "      - " + stage + "\n    sinks: [{type: stdout}]\n";
        return load_agents_text(y, "m.yaml", dir_, LoadOptions{true}, a);
    }
    int64_t out_numel(const std::vector<std::unique_ptr<Agent>>& a) { return a[0]->pipeline().stages[1]->out().numel; }
    std::string error(const std::string& stage, int frames = 64) {
        std::vector<std::unique_ptr<Agent>> a;
        Status st = load(stage, frames, &a);
        EXPECT_FALSE(st.ok()) << stage;
        return st.message();
    }
    std::string dir_;
};

#define EXPECT_HAS(s, sub) EXPECT_NE((s).find(sub), std::string::npos) << (s)

TEST_F(RepositoryModel, LatestVersionByDefault) {
    std::vector<std::unique_ptr<Agent>> a;
    Status st = load("{name: m, type: model, repository: repo, model: mlp}", 64, &a);  // relative to the config
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(out_numel(a), 10);  // version 3: the mlp
    a[0]->start();
    a[0]->join();
    EXPECT_EQ(a[0]->events.load(), 3u);
    EXPECT_EQ(a[0]->pipeline().stages[1]->errors.load(), 0u);
}

TEST_F(RepositoryModel, GivenVersion) {
    std::vector<std::unique_ptr<Agent>> a;
    Status st = load("{name: m, type: model, repository: " + dir_ + "/repo, model: mlp, version: 1}", 16, &a);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(out_numel(a), 16);  // version 1: one_node_relu
}

TEST_F(RepositoryModel, ConfigYamlShapesApply) {
    // Its fixed input shape is used (a wrong one shows: 2 x 64 floats expected, 64 given) ...
    std::ofstream(dir_ + "/repo/mlp/config.yaml") << "inputs:\n  x: [2, 64]\n";
    EXPECT_HAS(error("{name: m, type: model, repository: repo, model: mlp}"), "given shape 2x64");
    // ... unless the stage sets its own.
    std::vector<std::unique_ptr<Agent>> a;
    EXPECT_TRUE(load("{name: m, type: model, repository: repo, model: mlp, shapes: {x: [1, 64]}}", 64, &a).ok());
    std::ofstream(dir_ + "/repo/mlp/config.yaml") << "inputs:\n  x: [1, 64]\n";
    a.clear();
    EXPECT_TRUE(load("{name: m, type: model, repository: repo, model: mlp}", 64, &a).ok());
    // A broken config.yaml: its own file and line.
    std::ofstream(dir_ + "/repo/mlp/config.yaml") << "inputs:\n  x: [1, -64]\n";
    std::string e = error("{name: m, type: model, repository: repo, model: mlp}");
    EXPECT_HAS(e, "m.yaml:6:");
    EXPECT_HAS(e, "config.yaml:2:");
}

TEST_F(RepositoryModel, ErrorsNameLineAndField) {
    std::string e = error("{name: m, type: model, repository: repo, model: nope}");
    EXPECT_HAS(e, "m.yaml:6:");
    EXPECT_HAS(e, "field 'model': model 'nope' is not in repository");
    EXPECT_HAS(e, "(models: empty, mlp)");
    e = error("{name: m, type: model, repository: repo,\n         model: mlp, version: 7}");
    EXPECT_HAS(e, "m.yaml:7:");
    EXPECT_HAS(e, "field 'version': model 'mlp' has no version 7 (versions with a model.onnx: 1, 3)");
    e = error("{name: m, type: model, repository: repo, model: mlp, version: 2}");
    EXPECT_HAS(e, "field 'version': model 'mlp' version 2: no model.onnx in");
    e = error("{name: m, type: model, repository: repo, model: empty}");
    EXPECT_HAS(e, "field 'model': model 'empty' has no version folder with a model.onnx (expected");
    e = error("{name: m, type: model, repository: nowhere, model: mlp}");
    EXPECT_HAS(e, "field 'repository': repository '" + dir_ + "/nowhere' is not a folder");
    e = error("{name: m, type: model, repository: repo}");
    EXPECT_HAS(e, "missing required field 'model'");
    e = error("{name: m, type: model, file: x.onnx, repository: repo, model: mlp}");
    EXPECT_HAS(e, "give 'file' or 'repository' + 'model', not both");
    e = error("{name: m, type: model}");
    EXPECT_HAS(e, "missing required field 'file' (or 'repository' + 'model')");
    e = error("{name: m, type: model, repository: repo, model: ../repo}");
    EXPECT_HAS(e, "is not in repository");
    // A corrupt model.onnx: the engine's error, with the stage's line.
    std::ofstream(dir_ + "/repo/mlp/3/model.onnx", std::ios::trunc) << "not onnx";
    e = error("{name: m, type: model, repository: repo, model: mlp}");
    EXPECT_HAS(e, "m.yaml:6:");
}

}  // namespace
