// ONNX import: protobuf bytes -> Graph. Every count, index, dim and size read from the file is
// validated; external data is confined to the model's own folder. No other folder sees protobuf.
#pragma once
#include <memory>
#include <string>

#include "core/status.h"
#include "graph/graph.h"

namespace jiffy {

struct ImportOptions {
    uint64_t max_bytes = uint64_t(4) << 30;  // total tensor bytes a model may make us allocate
};

struct ImportedModel {
    std::shared_ptr<Graph> graph;
    int64_t ir_version = 0;
    std::string producer;
};

Status import_onnx_file(const std::string& path, const ImportOptions& opt, ImportedModel* out);
// `dir` confines external data ("" forbids external data).
Status import_onnx_bytes(const void* data, size_t size, const std::string& dir,
                         const ImportOptions& opt, ImportedModel* out);

// A serialized TensorProto (the ONNX backend tests' input_*.pb / output_*.pb files).
Status read_tensor_pb(const std::string& path, const ImportOptions& opt, Tensor* out, std::string* name);

}  // namespace jiffy
