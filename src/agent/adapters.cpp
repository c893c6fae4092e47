// Registration point for source/stage/sink types built on other modules. Each adapter is a small
// class over that module's API; CMake defines JIFFY_AGENT_MQTT when src/agent/mqtt.cpp exists and
// JIFFY_AGENT_VOICE when src/agent/oww.cpp and vad.cpp exist.
//
//   type: mqtt (source)  host, port, client_id, keepalive_s, topic | topics, qos, format
//                        (f32|i16|json_array|json_field), field, size, shared_group, inbox
//   type: mqtt (sink)    host, port, client_id, keepalive_s, topic, qos, outbox, flush_ms
//   type: oww  (stage)   the openWakeWord chain: input 1280 int16-valued samples, values <head names>
//   type: vad  (stage)   Silero VAD: input 512 samples (int16 values), value 'prob'
#include "agent/agent.h"
#include "agent/payload.h"
#include "agent/registry.h"

#ifdef JIFFY_AGENT_MQTT
#include <mosquitto.h>
#include <unistd.h>

#include <cstdio>

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
// Broker fields shared by the MQTT source and sink.
Status read_broker(Fields& f, MqttOptions* mo) {
    int64_t port = 1883, keepalive = 10;
    JIFFY_RETURN_IF_ERROR(f.get_string("host", &mo->host));
    if (mo->host.empty()) return f.error(f.get("host"), "field 'host' is empty");
    JIFFY_RETURN_IF_ERROR(f.get_int("port", &port, false, 1, 65535));
    JIFFY_RETURN_IF_ERROR(f.get_int("keepalive_s", &keepalive, false, 5, 3600));
    JIFFY_RETURN_IF_ERROR(f.get_string("client_id", &mo->client_id));
    mo->port = int(port);
    mo->keepalive_s = int(keepalive);
    return {};
}

std::string broker_of(const MqttOptions& mo) { return mo.host + ":" + std::to_string(mo.port); }

// Push source: subscribes (optionally as a member of an MQTT 5 shared subscription group), pops
// messages from the client's bounded drop-oldest inbox and decodes each payload into a frame. The
// client is created when the agent starts (so --check never connects); a missing broker is one
// warning line and retries with backoff. A payload that does not decode into exactly `size` values
// is counted as bad input and reported, never fatal.
class MqttSource : public Source {
public:
    MqttOptions mo;
    std::vector<std::string> topics;
    int qos = 0;
    PayloadFormat fmt;
    int64_t size = 1;
    size_t frame_size() const override { return size_t(size); }

    void run(FrameSink* sink, const std::atomic<bool>& stop) override {
        MqttOptions o = mo;
        const std::string who = "mqtt source '" + name + "'";
        o.log = [who](const std::string& l) { std::fprintf(stderr, "jiffy agent: %s: %s\n", who.c_str(), l.c_str()); };
        std::unique_ptr<MqttClient> c;
        Status st = MqttClient::create(o, &c);
        for (size_t i = 0; st.ok() && i < topics.size(); ++i) st = c->subscribe(topics[i], qos);
        if (!st.ok()) {
            std::fprintf(stderr, "jiffy agent: error: %s: %s\n", who.c_str(), st.message().c_str());
            return;
        }
        {
            std::lock_guard<std::mutex> g(mu_);
            client_ = std::move(c);
        }
        MqttClient* cl = client_.get();
        std::vector<float> buf(static_cast<size_t>(size));
        MqttMessage msg;
        bool announced = false;
        while (!stop.load()) {
            if (!announced && cl->ready()) {
                std::string t;
                for (const auto& x : topics) t += (t.empty() ? "'" : ", '") + x + "'";
                std::fprintf(stderr, "jiffy agent: %s: subscribed to %s (QoS %d%s) on %s\n", who.c_str(), t.c_str(), qos,
                             mo.shared_group.empty() ? "" : (", shared group '" + mo.shared_group + "'").c_str(),
                             broker_of(mo).c_str());
                announced = true;
            }
            if (!cl->pop(&msg, 50000)) continue;
            size_t n = 0;
            st = decode_payload(fmt, msg.payload.data(), msg.payload.size(), buf.data(), buf.size(), &n);
            if (st.ok() && n != size_t(size)) st = invalid("payload has ", n, " values, frames hold ", size);
            if (!st.ok()) {
                sink->bad_input(who + " topic '" + msg.topic + "' (" + std::to_string(msg.payload.size()) + " bytes): " + st.message());
                continue;
            }
            FrameMeta m;
            m.event_us = msg.recv_us;  // steady clock, when the network thread received it
            m.n = n;
            sink->push(buf.data(), m);
        }
    }
    uint64_t dropped() const override {
        std::lock_guard<std::mutex> g(mu_);
        return client_ ? client_->stats().in_dropped : 0;
    }
    std::string report() const override {
        std::lock_guard<std::mutex> g(mu_);
        if (!client_) return "broker " + broker_of(mo) + ": never started";
        MqttClient::Stats s = client_->stats();
        return str_cat("broker ", broker_of(mo), client_->connected() ? " (connected)" : " (not connected)", ", ", s.connects,
                       " connect(s), ", s.in_msgs, " received, ", s.in_dropped, " dropped (inbox full), ", s.duplicates_in,
                       " duplicate(s) dropped");
    }

private:
    mutable std::mutex mu_;
    std::unique_ptr<MqttClient> client_;
};

Status make_mqtt_source(Fields& f, const BuildEnv&, std::unique_ptr<Source>* out) {
    auto s = std::make_unique<MqttSource>();
    JIFFY_RETURN_IF_ERROR(read_broker(f, &s->mo));
    if (f.has("topic") == f.has("topics")) return invalid(f.at(), "give one of 'topic' (a string) or 'topics' (a list)");
    const char* tkey = f.has("topic") ? "topic" : "topics";
    JIFFY_RETURN_IF_ERROR(f.get_strings(tkey, &s->topics, true));
    if (s->topics.empty()) return f.error(f.get(tkey), std::string("field '") + tkey + "' is empty");
    for (const auto& t : s->topics)
        if (t.empty() || mosquitto_sub_topic_check(t.c_str()) != MOSQ_ERR_SUCCESS)
            return f.error(f.get(tkey), std::string("field '") + tkey + "': '" + t +
                                            "' is not a valid subscription topic ('+' and '#' only as whole levels, '#' last)");
    int64_t qos = 0, inbox = 64;
    JIFFY_RETURN_IF_ERROR(f.get_int("qos", &qos, false, 0, 1));
    JIFFY_RETURN_IF_ERROR(f.get_string("shared_group", &s->mo.shared_group));
    if (s->mo.shared_group.find_first_of("/+#") != std::string::npos)
        return f.error(f.get("shared_group"), "field 'shared_group' must not contain '/', '+' or '#'");
    std::string fmt = "json_array";
    JIFFY_RETURN_IF_ERROR(f.get_enum("format", &fmt, {"f32", "i16", "json", "json_array", "json_field"}));
    PayloadFormat::parse(fmt, &s->fmt.kind);
    JIFFY_RETURN_IF_ERROR(f.get_string("field", &s->fmt.field, s->fmt.kind == PayloadFormat::kJsonField));
    if (s->fmt.kind != PayloadFormat::kJsonField && f.has("field"))
        return f.error(f.get("field"), "field 'field' needs format: json_field");
    JIFFY_RETURN_IF_ERROR(f.get_int("size", &s->size, true, 1, 1 << 24));
    JIFFY_RETURN_IF_ERROR(f.get_int("inbox", &inbox, false, 1, 1 << 20));
    s->qos = int(qos);
    s->mo.inbox_capacity = size_t(inbox);
    *out = std::move(s);
    return {};
}

// Publishes each action's JSON line through the client's outbox. The MQTT "seq" user property is
// the agent's action seq (the same number as in the payload), so a receiver drops duplicates by
// (src, seq); a stale action carries "stale":true in the payload. QoS 1 actions accepted while the
// broker is away are sent when it returns; on exit the sink waits up to flush_ms for their PUBACKs.
class MqttSink : public Sink {
public:
    MqttOptions mo;
    std::string topic;
    int qos = 0;
    int64_t flush_ms = 3000;

    Status start() override {
        MqttOptions o = mo;
        std::string who = "mqtt sink '" + name + "'";
        o.log = [who](const std::string& l) { std::fprintf(stderr, "jiffy agent: %s: %s\n", who.c_str(), l.c_str()); };
        std::lock_guard<std::mutex> g(mu_);
        return MqttClient::create(o, &client_);
    }
    void emit(const Action& a, const std::string& json) override {
        Status st = client_->publish(topic, json.data(), json.size(), qos, nullptr, a.seq);
        if (st.ok()) {
            sent.fetch_add(1, std::memory_order_relaxed);
            return;
        }
        uint64_t e = errors.fetch_add(1, std::memory_order_relaxed);
        if (e % 1000 == 0)
            std::fprintf(stderr, "jiffy agent: warning: mqtt sink '%s': action %llu not sent: %s [%llu so far]\n", name.c_str(),
                         (unsigned long long)a.seq, st.message().c_str(), (unsigned long long)(e + 1));
    }
    void stop() override {
        std::unique_ptr<MqttClient> c;
        {
            std::lock_guard<std::mutex> g(mu_);
            if (!client_) return;
            int64_t end = mqtt_now_us() + flush_ms * 1000;
            while (client_->stats().out_pending > 0 && mqtt_now_us() < end) usleep(2000);
            final_ = client_->stats();
            connected_ = client_->connected();
            c = std::move(client_);
        }
        dropped.fetch_add(final_.out_dropped_offline + final_.out_unrouted + final_.out_failed, std::memory_order_relaxed);
        if (final_.out_pending > 0)
            std::fprintf(stderr, "jiffy agent: warning: mqtt sink '%s': %llu QoS 1 action(s) not acknowledged by %s after %lld ms; lost\n",
                         name.c_str(), (unsigned long long)final_.out_pending, broker_of(mo).c_str(), (long long)flush_ms);
        c.reset();  // disconnects
    }
    ~MqttSink() override { stop(); }
    std::string report() const override {
        std::lock_guard<std::mutex> g(mu_);
        MqttClient::Stats s = client_ ? client_->stats() : final_;
        bool up = client_ ? client_->connected() : connected_;
        return str_cat("broker ", broker_of(mo), up ? " (connected)" : " (not connected)", ", ", s.connects, " connect(s), QoS ", qos,
                       ": ", s.out_accepted + s.out_qos0, " accepted, ", s.out_delivered, " acked, ", s.out_pending, " pending, ",
                       s.out_resent, " re-sent, ", s.out_unrouted, " unrouted, ", s.out_failed, " refused, ", s.out_dropped_offline,
                       " dropped offline");
    }

private:
    mutable std::mutex mu_;
    std::unique_ptr<MqttClient> client_;
    MqttClient::Stats final_{};
    bool connected_ = false;
};

Status make_mqtt_sink(Fields& f, const BuildEnv&, std::unique_ptr<Sink>* out) {
    auto s = std::make_unique<MqttSink>();
    JIFFY_RETURN_IF_ERROR(read_broker(f, &s->mo));
    JIFFY_RETURN_IF_ERROR(f.get_string("topic", &s->topic, true));
    if (s->topic.empty() || mosquitto_pub_topic_check(s->topic.c_str()) != MOSQ_ERR_SUCCESS)
        return f.error(f.get("topic"), "field 'topic': '" + s->topic + "' is not a valid publish topic (no '+' or '#')");
    int64_t qos = 0, outbox = 10000;
    JIFFY_RETURN_IF_ERROR(f.get_int("qos", &qos, false, 0, 1));
    JIFFY_RETURN_IF_ERROR(f.get_int("outbox", &outbox, false, 1, 10000000));
    JIFFY_RETURN_IF_ERROR(f.get_int("flush_ms", &s->flush_ms, false, 0, 600000));
    s->qos = int(qos);
    s->mo.outbox_capacity = size_t(outbox);
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
