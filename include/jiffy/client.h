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
// The fastest path is a prepared request: prepare() once (the server resolves the model, checks
// the input specs and places the input and output buffers in the ring), then per call write the
// inputs in place, run(), read the outputs in place: no encoding, no copy, no lookup per call.
//
//   jiffy::client::Prepared* p = c->prepare("jarvis", -1, {{"x.1", "FP32", {1, 16, 96}}}, &err);
//   std::memcpy(p->input(0), x.data(), x.size() * 4);   // or compute straight into p->input(0)
//   if (!p->run(&err)) ...
//   float score = *static_cast<const float*>(p->outputs()[0].data);
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

class LocalClient;

// A request prepared by LocalClient::prepare; owned by its client (valid while the client lives).
class Prepared {
public:
    size_t num_inputs() const { return in_.size(); }
    // Where to write input k (in prepare()'s order; nbytes as inputs()[k].nbytes), 64-byte aligned.
    // The buffer lies in the ring: keep the values there between runs or rewrite them.
    void* input(size_t k) const { return in_ptr_[k]; }
    const std::vector<Tensor>& inputs() const { return in_; }
    // Every model output in the model's order; data points into the ring and holds the last
    // run()'s result until the next run() of this request.
    const std::vector<Tensor>& outputs() const { return out_; }
    // Runs the model on the inputs in place. false with *err (server gone, model unloaded or
    // changed its inputs since prepare(), ...).
    bool run(std::string* err);

private:
    friend class LocalClient;
    LocalClient* client_ = nullptr;
    uint32_t handle_ = 0;
    std::vector<Tensor> in_, out_;
    std::vector<void*> in_ptr_;
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

    // Prepares a request for `inputs` (name, datatype, shape; data ignored, nbytes 0 or exact).
    // The model must compile for these shapes alone (no input values needed). A reload of the
    // model that keeps its inputs and outputs is followed; one that changes them fails run().
    // nullptr with *err on any error. At most 64 per client, within 3/4 of the slot's areas.
    Prepared* prepare(const std::string& model, int64_t version, const std::vector<Tensor>& inputs, std::string* err);

private:
    friend class Prepared;
    LocalClient() = default;
    bool round_trip(uint32_t op, uint32_t handle, size_t req_bytes, std::string* err);  // post, wait, check the server
    bool encode(const std::string& model, int64_t version, const std::vector<Tensor>& inputs, bool with_data, std::string* err);
    std::string error_text() const;  // the error answer in the response area
    std::vector<std::unique_ptr<Prepared>> prepared_;
    size_t req_low_ = 0;  // infer() requests use the request area below this (prepared buffers above)
    size_t req_n_ = 0;    // bytes of the last encode()
    void* base_ = nullptr;
    uint32_t slot_ = 0, seq_ = 0;
    int spin_us_ = 500;
};

}  // namespace jiffy::client
