// Jiffy local client: call models of a `jiffy serve --local-ring NAME` server on the same machine
// over shared memory, without HTTP. Same model and tensor semantics as the KServe v2 endpoints
// (inputs checked for name, datatype, shape and byte count; errors are the server's messages).
// Link with jiffy_serve.
//
//   #include "jiffy/client.h"
//   std::string err;
//   auto c = jiffy::client::LocalClient::connect("main", &err);  // jiffy serve ... --local-ring main
//   if (!c) { fprintf(stderr, "%s\n", err.c_str()); return 1; }
//   std::vector<float> x(1 * 16 * 96);
//   std::vector<jiffy::client::Tensor> in = {{"x.1", "FP32", {1, 16, 96}, x.data(), x.size() * 4}}, out;
//   if (!c->infer("jarvis", -1, in, &out, &err)) { fprintf(stderr, "%s\n", err.c_str()); return 1; }
//   float score = *static_cast<const float*>(out[0].data);  // valid until the next infer()
//
// Each request is written into this client's slot in the ring; the server thread picks it up by
// spinning on a sequence word and answers the same way. Waits spin for `spin_us`, then sleep on a
// futex (so an idle client or server burns no CPU). A LocalClient is for one thread at a time;
// use one per thread (the ring has 8 slots).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace jiffy::client {

struct Tensor {
    std::string name;
    std::string datatype;        // KServe names: "FP32", "INT64", "BOOL", ...
    std::vector<int64_t> shape;
    const void* data = nullptr;  // row-major, little-endian; outputs point into the ring
    size_t nbytes = 0;
};

class LocalClient {
public:
    // Claims a slot of ring NAME. nullptr with *err when there is no such server or no free slot.
    static std::unique_ptr<LocalClient> connect(const std::string& ring, std::string* err, int spin_us = 500);
    ~LocalClient();
    LocalClient(const LocalClient&) = delete;
    LocalClient& operator=(const LocalClient&) = delete;

    // version < 0: the latest loaded version. Outputs: every model output, in the model's order;
    // their data stays valid until the next infer() on this client. false with *err on any error
    // (unknown model, wrong input, server gone, request too large for the slot, ...).
    bool infer(const std::string& model, int64_t version, const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs,
               std::string* err);

private:
    LocalClient() = default;
    void* base_ = nullptr;
    uint32_t slot_ = 0, seq_ = 0;
    int spin_us_ = 500;
};

}  // namespace jiffy::client
