// A lean, schema-driven parser for KServe v2 infer requests and a fast writer for tensor data.
// The request JSON is parsed once, without a DOM: numbers in `data` go straight into the input
// tensor's buffer (one scanning pass per number; std::from_chars only near float ties), everything
// else is validated as strictly as a DOM parse would (nesting depth, element counts, types,
// shape x count) and errors name the tensor and the expected vs actual value. Replaces
// nlohmann-json on the infer path (~0.25 us per number there; docs/serving.md has the numbers).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "serve/repository.h"

namespace jiffy::serve {

struct ShmRegion;  // serve/shm.h

// A tensor's shared_memory_region / _offset / _byte_size parameters (system shared memory
// extension), as given; the handler resolves the region (serve/shm.h).
struct ShmParams {
    std::string region;  // empty: the tensor names no region
    uint64_t offset = 0, byte_size = 0;
};

struct InferInput {
    const TensorMeta* meta = nullptr;  // null: not given
    Shape shape;
    const uint8_t* data = nullptr;  // into the request body (binary) or `storage` (JSON data)
    size_t nbytes = 0;
    std::vector<uint8_t> storage;
    ShmParams shm;  // read from shared memory (data stays null until the handler resolves it)
};

struct InferOutputSpec {
    size_t idx = 0;  // index into the model's outputs
    bool binary = false;
    ShmParams shm;                          // written into shared memory (not binary, not in the JSON)
    std::shared_ptr<ShmRegion> shm_region;  // set by the handler once resolved
};

struct InferRequest {
    bool has_id = false;
    std::string id;
    bool binary_output = false;  // request-level binary_data_output
    int64_t timeout_us = 0;      // parameters.timeout (microseconds); 0: none
    std::vector<InferInput> inputs;  // one per model input, in the model's order
    bool has_outputs = false;
    std::vector<InferOutputSpec> outputs;  // requested subset (has_outputs), else every output
};

struct RequestError {
    int status = 400;
    std::string msg;
};

struct InferSchema {
    const std::string* model;
    const std::vector<TensorMeta>* inputs;
    const std::vector<TensorMeta>* outputs;
    const std::map<std::string, Shape>* configured;  // shapes fixed by config.yaml (for messages)
};

// Parses the JSON part `head` of an infer request; `bin` is the binary tail (Triton's binary
// tensor extension; empty without Inference-Header-Content-Length). Inputs given as binary point
// into `bin`. Returns false with *err filled (status 400 and a message naming what is wrong).
bool parse_infer_request(std::string_view head, std::string_view bin, const InferSchema& schema, InferRequest* out,
                         RequestError* err);

// Appends `v` as a JSON string literal (quotes, escapes; invalid UTF-8 bytes become U+FFFD).
void append_json_string(std::string& s, std::string_view v);
// Appends a tensor's `n` elements as a flat JSON array: integers exactly, floats as the shortest
// text that reads back bit-exact in the tensor's precision, NaN/Inf as null.
void append_data_json(std::string& s, DType t, const void* p, int64_t n);

}  // namespace jiffy::serve
