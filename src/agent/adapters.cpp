// Registration point for source/stage/sink types built on other modules. Each adapter is a small
// class over that module's API; CMake defines JIFFY_AGENT_MQTT when src/agent/mqtt.cpp exists and
// JIFFY_AGENT_VOICE when src/agent/oww.cpp and vad.cpp exist.
//
//   type: mqtt (source)  host, port, topic, qos, format (f32|i16|json_array|json_field), field, size
//   type: mqtt (sink)    host, port, topic, qos
//   type: oww  (stage)   the openWakeWord chain: input 1280 int16-valued samples, values <head names>
//   type: vad  (stage)   Silero VAD: input 512 samples (int16 values), value 'prob'
#include "agent/agent.h"
#include "agent/payload.h"
#include "agent/registry.h"

#ifdef JIFFY_AGENT_MQTT
#include "agent/mqtt.h"
#endif
#ifdef JIFFY_AGENT_VOICE
#include "agent/oww.h"
#include "agent/vad.h"
#endif

#include <mutex>

namespace jiffy::agent {

namespace {

#ifdef JIFFY_AGENT_MQTT
// Push source: pops messages from the client's bounded inbox, decodes each payload into a frame.
class MqttSource : public Source {
public:
    MqttOptions mo;
    std::string topic;
    int qos = 0;
    PayloadFormat fmt;
    int64_t size = 1;
    size_t frame_size() const override { return size_t(size); }
    Status open() {
        JIFFY_RETURN_IF_ERROR(MqttClient::create(mo, &client_));
        return client_->subscribe(topic, qos);
    }
    void run(FrameSink* sink, const std::atomic<bool>& stop) override {
        std::vector<float> buf(static_cast<size_t>(size));
        MqttMessage msg;
        while (!stop.load()) {
            if (!client_->pop(&msg, 100000)) continue;
            size_t n = 0;
            Status st = decode_payload(fmt, msg.payload.data(), msg.payload.size(), buf.data(), buf.size(), &n);
            if (st.ok() && n != size_t(size)) st = invalid("has ", n, " values, frames hold ", size);
            if (!st.ok()) {
                sink->bad_input("mqtt '" + msg.topic + "': " + st.message());
                continue;
            }
            FrameMeta m;
            m.event_us = msg.recv_us;
            m.n = n;
            sink->push(buf.data(), m);
        }
    }

private:
    std::unique_ptr<MqttClient> client_;
};

Status make_mqtt_source(Fields& f, const BuildEnv&, std::unique_ptr<Source>* out) {
    auto s = std::make_unique<MqttSource>();
    int64_t port = 1883, qos = 0;
    JIFFY_RETURN_IF_ERROR(f.get_string("host", &s->mo.host));
    JIFFY_RETURN_IF_ERROR(f.get_int("port", &port, false, 1, 65535));
    JIFFY_RETURN_IF_ERROR(f.get_string("topic", &s->topic, true));
    JIFFY_RETURN_IF_ERROR(f.get_int("qos", &qos, false, 0, 1));
    JIFFY_RETURN_IF_ERROR(f.get_string("shared_group", &s->mo.shared_group));
    JIFFY_RETURN_IF_ERROR(f.get_string("client_id", &s->mo.client_id));
    std::string fmt = "json_array";
    JIFFY_RETURN_IF_ERROR(f.get_enum("format", &fmt, {"f32", "i16", "json", "json_array", "json_field"}));
    PayloadFormat::parse(fmt, &s->fmt.kind);
    JIFFY_RETURN_IF_ERROR(f.get_string("field", &s->fmt.field, s->fmt.kind == PayloadFormat::kJsonField));
    JIFFY_RETURN_IF_ERROR(f.get_int("size", &s->size, true, 1, 1 << 24));
    s->mo.port = int(port);
    s->qos = int(qos);
    JIFFY_RETURN_IF_ERROR(s->open());
    *out = std::move(s);
    return {};
}

// Publishes each action's JSON line; the client's bounded outbox carries QoS 1 across outages.
class MqttSink : public Sink {
public:
    MqttOptions mo;
    std::string topic;
    int qos = 0;
    Status start() override { return MqttClient::create(mo, &client_); }
    void emit(const Action&, const std::string& json) override {
        uint64_t seq = 0;
        Status st = client_->publish(topic, json.data(), json.size(), qos, &seq);
        (st.ok() ? sent : errors).fetch_add(1, std::memory_order_relaxed);
    }

private:
    std::unique_ptr<MqttClient> client_;
};

Status make_mqtt_sink(Fields& f, const BuildEnv&, std::unique_ptr<Sink>* out) {
    auto s = std::make_unique<MqttSink>();
    int64_t port = 1883, qos = 0;
    JIFFY_RETURN_IF_ERROR(f.get_string("host", &s->mo.host));
    JIFFY_RETURN_IF_ERROR(f.get_int("port", &port, false, 1, 65535));
    JIFFY_RETURN_IF_ERROR(f.get_string("topic", &s->topic, true));
    JIFFY_RETURN_IF_ERROR(f.get_int("qos", &qos, false, 0, 1));
    JIFFY_RETURN_IF_ERROR(f.get_string("client_id", &s->mo.client_id));
    s->mo.port = int(port);
    s->qos = int(qos);
    *out = std::move(s);
    return {};
}
#endif  // JIFFY_AGENT_MQTT

#ifdef JIFFY_AGENT_VOICE
// The lead wires these two to the real option structs of oww.h / vad.h:
//
// class OwwStage : public SimpleStage {  // input [1,1280] int16 values as float
//     prepare: create the chain, alloc_out({1, n_heads}); value(sub): index of head `sub`
//     run:     convert in_ to int16 (preallocated), chain_->step(pcm, out_.data)
//     sub_timings: the chain's per-model histograms
// };
// class VadStage : public SimpleStage {   // input [1,512]
//     run: vad_->step(pcm, out_.data); value("prob") -> out_.data
// };
#endif

}  // namespace

void register_adapters() {
    static std::once_flag once;
    std::call_once(once, [] {
#ifdef JIFFY_AGENT_MQTT
        register_source("mqtt", make_mqtt_source);
        register_sink("mqtt", make_mqtt_sink);
#endif
    });
}

}  // namespace jiffy::agent
