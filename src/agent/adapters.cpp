// Registration point for source/stage/sink types built on other modules. Each adapter is a small
// class over that module's API; CMake defines JIFFY_AGENT_MQTT when src/agent/mqtt.cpp exists and
// JIFFY_AGENT_VOICE when src/agent/oww.cpp and vad.cpp exist.
//
//   type: mqtt (source)  host, port, client_id, keepalive_s, topic | topics, qos, format
//                        (f32|i16|json_array|json_field), field, size, shared_group, inbox
//   type: mqtt (sink)    host, port, client_id, keepalive_s, topic, qos, outbox, flush_ms,
//                        share_connection (default true: publish on the agent's MQTT source's
//                        connection to the same broker)
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

// One MQTT connection (one MqttClient: one socket, one network thread). An agent's MQTT source and
// sink share one when they name the same broker (and the same client_id, or none): the broker then
// serves one client per agent, the action's PUBLISH leaves on the socket the event came in on, and
// with `execution: inline` it is written by the thread that read the event. The client is created
// on first use (agent start), so --check never connects.
struct MqttLink {
    MqttOptions mo;
    std::string who;  // "mqtt source 's'", "mqtt source 's' and sink 'out'"; set before start
    bool has_sink = false;  // a sink publishes on this source's connection
    std::mutex mu;
    std::shared_ptr<MqttClient> client;

    Status get(std::shared_ptr<MqttClient>* out) {
        std::lock_guard<std::mutex> g(mu);
        if (!client) {
            MqttOptions o = mo;
            std::string w = who;
            o.log = [w](const std::string& l) { std::fprintf(stderr, "jiffy agent: %s: %s\n", w.c_str(), l.c_str()); };
            std::unique_ptr<MqttClient> c;
            JIFFY_RETURN_IF_ERROR(MqttClient::create(o, &c));
            client = std::move(c);
        }
        *out = client;
        return {};
    }
};

// Push source: subscribes (optionally as a member of an MQTT 5 shared subscription group) and
// decodes each message into a frame on the client's network thread (MqttClient::set_handler), which
// pushes it into the agent's queue — or, with `execution: inline`, runs the agent's stages right
// there. Messages still pass the client's bounded drop-oldest inbox first. A missing broker is one
// warning line and retries with backoff. A payload that does not decode into exactly `size` values
// is counted as bad input and reported, never fatal.
class MqttSource : public Source {
public:
    std::shared_ptr<MqttLink> link = std::make_shared<MqttLink>();
    std::vector<std::string> topics;
    int qos = 0;
    PayloadFormat fmt;
    int64_t size = 1;
    size_t frame_size() const override { return size_t(size); }
    bool inline_ok() const override { return true; }

    void run(FrameSink* sink, const std::atomic<bool>& stop) override {
        const MqttOptions& mo = link->mo;
        if (link->who.empty()) link->who = "mqtt source '" + name + "'";
        std::shared_ptr<MqttClient> c;
        Status st = link->get(&c);
        for (size_t i = 0; st.ok() && i < topics.size(); ++i) st = c->subscribe(topics[i], qos);
        if (!st.ok()) {
            std::fprintf(stderr, "jiffy agent: error: %s: %s\n", link->who.c_str(), st.message().c_str());
            return;
        }
        {
            std::lock_guard<std::mutex> g(mu_);
            client_ = c;
        }
        const std::string who = "mqtt source '" + name + "'";
        std::vector<float> buf(static_cast<size_t>(size));
        c->set_handler([&](const MqttMessage& msg) {  // network thread
            size_t n = 0;
            Status d = decode_payload(fmt, msg.payload.data(), msg.payload.size(), buf.data(), buf.size(), &n);
            if (d.ok() && n != size_t(size)) d = invalid("payload has ", n, " values, frames hold ", size);
            if (!d.ok()) {
                sink->bad_input(who + " topic '" + msg.topic + "' (" + std::to_string(msg.payload.size()) + " bytes): " + d.message());
                return;
            }
            FrameMeta m;
            m.event_us = msg.recv_us;  // steady clock, when the network thread received it
            m.n = n;
            sink->push(buf.data(), m);
        });
        bool announced = false;
        while (!stop.load()) {
            if (!announced && c->ready()) {
                std::string t;
                for (const auto& x : topics) t += (t.empty() ? "'" : ", '") + x + "'";
                std::fprintf(stderr, "jiffy agent: %s: subscribed to %s (QoS %d%s) on %s\n", who.c_str(), t.c_str(), qos,
                             mo.shared_group.empty() ? "" : (", shared group '" + mo.shared_group + "'").c_str(),
                             broker_of(mo).c_str());
                announced = true;
            }
            usleep(announced ? 20000 : 2000);
        }
        c->set_handler(nullptr);  // returns once a running handler call is done
    }
    uint64_t dropped() const override {
        std::lock_guard<std::mutex> g(mu_);
        return client_ ? client_->stats().in_dropped : 0;
    }
    std::string report() const override {
        std::lock_guard<std::mutex> g(mu_);
        if (!client_) return "broker " + broker_of(link->mo) + ": never started";
        MqttClient::Stats s = client_->stats();
        return str_cat("broker ", broker_of(link->mo), client_->connected() ? " (connected)" : " (not connected)", ", ", s.connects,
                       " connect(s), ", s.in_msgs, " received, ", s.in_dropped, " dropped (inbox full), ", s.duplicates_in,
                       " duplicate(s) dropped");
    }

private:
    mutable std::mutex mu_;
    std::shared_ptr<MqttClient> client_;
};

Status make_mqtt_source(Fields& f, const BuildEnv&, std::unique_ptr<Source>* out) {
    auto s = std::make_unique<MqttSource>();
    JIFFY_RETURN_IF_ERROR(read_broker(f, &s->link->mo));
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
    JIFFY_RETURN_IF_ERROR(f.get_string("shared_group", &s->link->mo.shared_group));
    if (s->link->mo.shared_group.find_first_of("/+#") != std::string::npos)
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
    s->link->mo.inbox_capacity = size_t(inbox);
    *out = std::move(s);
    return {};
}

// Publishes each action's JSON line through the client's outbox. The MQTT "seq" user property is
// the agent's action seq (the same number as in the payload), so a receiver drops duplicates by
// (src, seq); a stale action carries "stale":true in the payload. QoS 1 actions accepted while the
// broker is away are sent when it returns; on exit the sink waits up to flush_ms for their PUBACKs.
// With `share_connection` (default) the sink publishes on the connection of the agent's MQTT
// source for the same broker (one sink per source connection: the "seq" property is per client).
class MqttSink : public Sink {
public:
    std::shared_ptr<MqttLink> link = std::make_shared<MqttLink>();
    std::string topic;
    int qos = 0;
    int64_t flush_ms = 3000;
    bool share = true;

    void share_with(const std::vector<std::unique_ptr<Source>>& sources) override {
        if (!share) return;
        for (const auto& src : sources) {
            auto* ms = dynamic_cast<MqttSource*>(src.get());
            if (!ms || ms->link->has_sink) continue;
            MqttOptions& a = ms->link->mo;
            const MqttOptions& b = link->mo;
            if (a.host != b.host || a.port != b.port || a.protocol != b.protocol) continue;
            if (!a.client_id.empty() && !b.client_id.empty() && a.client_id != b.client_id) continue;
            if (a.client_id.empty()) a.client_id = b.client_id;
            a.keepalive_s = std::min(a.keepalive_s, b.keepalive_s);
            a.outbox_capacity = b.outbox_capacity;
            ms->link->who = "mqtt source '" + ms->name + "' and sink '" + name + "'";
            ms->link->has_sink = true;
            link = ms->link;
            return;
        }
    }
    Status start() override {
        if (link->who.empty()) link->who = "mqtt sink '" + name + "'";
        std::shared_ptr<MqttClient> c;
        JIFFY_RETURN_IF_ERROR(link->get(&c));
        std::lock_guard<std::mutex> g(mu_);
        client_ = std::move(c);
        return {};
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
        std::shared_ptr<MqttClient> c;
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
                         name.c_str(), (unsigned long long)final_.out_pending, broker_of(link->mo).c_str(), (long long)flush_ms);
        c.reset();  // disconnects, unless the source still holds the shared connection
    }
    ~MqttSink() override { stop(); }
    std::string report() const override {
        std::lock_guard<std::mutex> g(mu_);
        MqttClient::Stats s = client_ ? client_->stats() : final_;
        bool up = client_ ? client_->connected() : connected_;
        return str_cat("broker ", broker_of(link->mo), up ? " (connected)" : " (not connected)", link->has_sink ? " shared with the source" : "",
                       ", ", s.connects, " connect(s), QoS ", qos, ": ", s.out_accepted + s.out_qos0, " accepted, ", s.out_delivered,
                       " acked, ", s.out_pending, " pending, ", s.out_resent, " re-sent, ", s.out_unrouted, " unrouted, ", s.out_failed,
                       " refused, ", s.out_dropped_offline, " dropped offline");
    }

private:
    mutable std::mutex mu_;
    std::shared_ptr<MqttClient> client_;
    MqttClient::Stats final_{};
    bool connected_ = false;
};

Status make_mqtt_sink(Fields& f, const BuildEnv&, std::unique_ptr<Sink>* out) {
    auto s = std::make_unique<MqttSink>();
    JIFFY_RETURN_IF_ERROR(read_broker(f, &s->link->mo));
    JIFFY_RETURN_IF_ERROR(f.get_string("topic", &s->topic, true));
    if (s->topic.empty() || mosquitto_pub_topic_check(s->topic.c_str()) != MOSQ_ERR_SUCCESS)
        return f.error(f.get("topic"), "field 'topic': '" + s->topic + "' is not a valid publish topic (no '+' or '#')");
    int64_t qos = 0, outbox = 10000;
    JIFFY_RETURN_IF_ERROR(f.get_int("qos", &qos, false, 0, 1));
    JIFFY_RETURN_IF_ERROR(f.get_int("outbox", &outbox, false, 1, 10000000));
    JIFFY_RETURN_IF_ERROR(f.get_int("flush_ms", &s->flush_ms, false, 0, 600000));
    JIFFY_RETURN_IF_ERROR(f.get_bool("share_connection", &s->share));
    s->qos = int(qos);
    s->link->mo.outbox_capacity = size_t(outbox);
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
