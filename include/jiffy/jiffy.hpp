// Jiffy C++ API: load -> compile(shapes) -> run.
//
//   namespace ja = jiffy::api;
//   ja::Error err;
//   ja::Model model = ja::Model::load("model.onnx", &err);        // validates the file
//   if (err) { fprintf(stderr, "%s\n", err.message.c_str()); return 2; }
//   ja::Compiled plan = model.compile({{"input", {1, 1280}}}, &err); // shapes -> static plan
//   ja::Runner run = plan.runner();                                  // per-caller state
//   std::memcpy(run.input(0), audio, plan.inputs()[0].nbytes);          // or run.bind_input(0, p)
//   if (ja::Error e = run.run()) { ... }                             // no allocation inside
//   const float* y = static_cast<const float*>(run.output(0));
//
// A Model and a Compiled plan are immutable and may be shared between threads; each thread uses
// its own Runner. Compiled plans are cached per shape signature inside the Model.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace jiffy {

class Model;  // internal types, opaque here
struct Plan;
class Session;

namespace api {

struct Error {
    int code = 0;         // 0 ok, 1 internal, 2 bad model or input, 3 unsupported
    std::string message;  // names the file / node / tensor and what is wrong
    explicit operator bool() const { return code != 0; }
};

struct TensorInfo {
    std::string name;
    std::string dtype;           // "float32", "int64", ...
    std::vector<int64_t> shape;  // declared: -1 for an unknown/symbolic dim
    size_t nbytes = 0;           // compiled plans only
};

// Input values fixed at compile time, for inputs whose *value* decides a shape (rare; e.g. a
// Reshape target fed as an input). Raw bytes in the input's dtype.
using FrozenInputs = std::map<std::string, std::vector<uint8_t>>;

class Runner;

class Compiled {
public:
    Compiled() = default;
    explicit operator bool() const { return plan_ != nullptr; }
    const std::vector<TensorInfo>& inputs() const { return inputs_; }
    const std::vector<TensorInfo>& outputs() const { return outputs_; }
    size_t arena_bytes() const;
    int64_t flops() const;
    Runner runner() const;

private:
    friend class Model;
    std::shared_ptr<const Plan> plan_;
    std::vector<TensorInfo> inputs_, outputs_;
};

class Runner {
public:
    Runner() = default;
    Runner(Runner&&) noexcept;
    Runner& operator=(Runner&&) noexcept;
    ~Runner();
    void* input(size_t i);               // session-owned input buffer
    const void* output(size_t i) const;  // output buffer (session-owned or bound)
    void bind_input(size_t i, const void* data);  // zero copy; nullptr restores own buffer
    void bind_output(size_t i, void* data);
    Error run();  // runs the plan: no allocation, lock or syscall

private:
    friend class Compiled;
    std::unique_ptr<jiffy::Session> s_;
};

class Model {
public:
    Model() = default;
    static Model load(const std::string& path, Error* err, uint64_t max_bytes = uint64_t(4) << 30);
    explicit operator bool() const { return m_ != nullptr; }
    std::vector<TensorInfo> inputs() const;
    std::vector<TensorInfo> outputs() const;
    // Inputs not named keep their declared shape (symbolic dims resolved from the given ones).
    // threads > 1: large ops split across an intra-op pool of threads - 1 pinned workers owned by
    // the plan (docs/threading.md); 1 (default): the caller's thread only.
    Compiled compile(const std::map<std::string, std::vector<int64_t>>& shapes, Error* err,
                     const FrozenInputs& frozen = {}, int threads = 1) const;

private:
    std::shared_ptr<jiffy::Model> m_;
    uint64_t max_bytes_ = 0;
};

}  // namespace api

}  // namespace jiffy
