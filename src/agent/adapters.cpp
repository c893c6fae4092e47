// Registration point for source/stage/sink types built on other modules. Each adapter is a small
// class over that module's API; CMake defines JIFFY_AGENT_MQTT when src/agent/mqtt.cpp exists and
// JIFFY_AGENT_VOICE when src/agent/oww.cpp and vad.cpp exist.
//
//   type: mqtt (source)  host, port, client_id, keepalive_s, topic | topics, qos, format
//                        (f32|i16|json_array|json_field), field, size, shared_group, inbox,
//                        rate (values per second: media_s = position in the stream)
//   type: mqtt (sink)    host, port, client_id, keepalive_s, topic, qos, outbox, flush_ms,
//                        share_connection (default true: publish on the agent's MQTT source's
//                        connection to the same broker)
//   type: openwakeword (stage)  the openWakeWord chain: frames of 1280 int16-valued samples;
//                               models | melspectrogram + embedding, heads, gate {when, steps}, scores
//   type: silero_vad   (stage)  Silero VAD, 512-sample chunks of any frame; model, scores
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

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
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
    double rate = 0;  // values per second (e.g. 16000 for 16 kHz audio); 0: no media_s
    size_t frame_size() const override { return size_t(size); }
    double sample_rate() const override { return rate; }
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
        uint64_t values = 0;  // decoded so far: the stream position when `rate` is set
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
            values += n;
            if (rate > 0) m.media_s = double(values) / rate;  // the end of this frame, like a file source
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
    JIFFY_RETURN_IF_ERROR(f.get_double("rate", &s->rate));
    if (!(s->rate >= 0) || !std::isfinite(s->rate)) return f.error(f.get("rate"), "field 'rate' must be a number >= 0 (values per second)");
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
// A text file of per-step scores shared by the voice stages of a process (`scores: PATH`), in the
// reference's format (tests/agent/oww_ref.mjs): `clip NAME` when a stream starts, then
// `oww STEP s...`, `cls STEP HEAD c...` and `vad CHUNK p`. Buffered; written on the agent thread.
class ScoreLog {
public:
    static Status open(const std::string& path, std::shared_ptr<ScoreLog>* out) {
        static std::mutex mu;
        static std::map<std::string, std::weak_ptr<ScoreLog>> open_logs;
        std::lock_guard<std::mutex> g(mu);
        if (auto l = open_logs[path].lock()) {
            *out = l;
            return {};
        }
        FILE* f = std::fopen(path.c_str(), "w");
        if (!f) return invalid("'scores': cannot open '", path, "' for writing: ", std::strerror(errno));
        auto l = std::shared_ptr<ScoreLog>(new ScoreLog(f));
        open_logs[path] = l;
        *out = l;
        return {};
    }
    ~ScoreLog() { std::fclose(f_); }
    FILE* file() const { return f_; }
    // Writes `clip NAME` once per stream (whichever stage sees the stream first).
    void begin(const FrameMeta* m) {
        uint32_t s = m ? m->stream : 0;
        if (started_ && s == stream_) return;
        started_ = true;
        stream_ = s;
        std::fprintf(f_, "clip %s\n", m && m->media ? m->media : "-");
    }

private:
    explicit ScoreLog(FILE* f) : f_(f) { std::setvbuf(f_, nullptr, _IOFBF, 1 << 20); }
    FILE* f_;
    bool started_ = false;
    uint32_t stream_ = 0;
};

// int16-valued floats (what a wav/raw i16 source delivers) -> int16, clamped.
void to_pcm(const float* in, size_t n, int16_t* out) {
    for (size_t i = 0; i < n; ++i) {
        float v = std::nearbyint(in[i]);
        out[i] = int16_t(v > 32767.f ? 32767.f : v < -32768.f ? -32768.f : v);
    }
}

// Silero VAD over frames of any size (int16 values): the samples are cut into 512-sample chunks
// (a remainder waits for the next frame), so a 1280-sample wake-word step runs 2 or 3 chunks
// (2.5 on average). Per frame: `prob` = the largest probability of the chunks that ended in it,
// `last` = the newest chunk's, `chunks` = how many ran (0: values kept from before). The LSTM state
// is carried between chunks and frames; a new stream (FrameMeta::stream) starts it over. The stage
// passes its input through (the next stage reads the same audio, no copy).
class VadStage : public Stage {
public:
    std::string model_path;
    std::shared_ptr<ScoreLog> log;

    Status prepare(const Port& in, Pipeline& pipe) override {
        pipe_ = &pipe;
        in_ = in;
        out_ = in;
        JIFFY_RETURN_IF_ERROR(SileroVad::create(model_path, &vad_));
        pcm_.assign(SileroVad::kChunk + size_t(in.numel), 0);
        return {};
    }
    bool is_model() const override { return true; }
    Status push() override {
        if (pipe_->frame && pipe_->frame->stream != stream_) {
            stream_ = pipe_->frame->stream;
            vad_->reset();
            have_ = 0;
            chunk_no_ = 0;
        }
        if (log) log->begin(pipe_->frame);
        to_pcm(in_.data, size_t(in_.numel), pcm_.data() + have_);
        have_ += size_t(in_.numel);
        size_t off = 0;
        float best = 0;
        chunks_ = 0;
        while (have_ - off >= SileroVad::kChunk) {
            float p = 0;
            JIFFY_RETURN_IF_ERROR(vad_->step(pcm_.data() + off, &p));
            h_chunk_.record_ns(int64_t(vad_->last_us() * 1000.0));
            if (log) std::fprintf(log->file(), "vad %zu %.9g\n", chunk_no_, double(p));
            ++chunk_no_;
            best = chunks_ == 0 ? p : std::max(best, p);
            last_ = p;
            chunks_ += 1;
            off += SileroVad::kChunk;
        }
        if (chunks_ > 0) prob_ = best;
        if (off > 0) {
            std::memmove(pcm_.data(), pcm_.data() + off, (have_ - off) * sizeof(int16_t));
            have_ -= off;
        }
        pending_ = true;
        return {};
    }
    bool next() override {
        bool p = pending_;
        pending_ = false;
        return p;
    }
    Status value(const std::string& sub, int index, const float** p) const override {
        if (index > 0) return invalid("silero_vad '", name, "': values take no index");
        if (sub.empty() || sub == "prob") *p = &prob_;
        else if (sub == "last") *p = &last_;
        else if (sub == "chunks") *p = &chunks_;
        else return invalid("silero_vad '", name, "' has no value '", sub, "' (values: prob, last, chunks)");
        return {};
    }
    std::vector<std::pair<std::string, const observe::Histogram*>> sub_timings() const override {
        return {{"vad (one 512-sample chunk)", &h_chunk_}};
    }

private:
    Pipeline* pipe_ = nullptr;
    Port in_;
    std::unique_ptr<SileroVad> vad_;
    std::vector<int16_t> pcm_;
    size_t have_ = 0, chunk_no_ = 0;
    uint32_t stream_ = 0;
    float prob_ = 0, last_ = 0, chunks_ = 0;
    bool pending_ = false;
    observe::Histogram h_chunk_;
};

Status make_vad_stage(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out) {
    auto s = std::make_unique<VadStage>();
    std::string model, scores;
    JIFFY_RETURN_IF_ERROR(f.get_string("model", &model, true));
    JIFFY_RETURN_IF_ERROR(f.get_string("scores", &scores));
    s->model_path = env.path(model);
    if (!scores.empty()) {
        Status st = ScoreLog::open(env.path(scores), &s->log);
        if (!st.ok()) return f.error(f.node()["scores"], st.message());
    }
    *out = std::move(s);
    return {};
}

// "hey_jarvis_v0.1" -> "hey_jarvis".
std::string short_head_name(const std::string& stem) {
    size_t v = stem.rfind("_v");
    if (v != std::string::npos && v + 2 < stem.size() && std::isdigit(static_cast<unsigned char>(stem[v + 2]))) return stem.substr(0, v);
    return stem;
}

// The openWakeWord chain (WakeWordChain, docs/voice.md) on frames of 1280 int16-valued samples.
// Output [1, heads]: each head's score, gated: while `gate` is set and its condition has not held
// in the last `gate.steps` steps, the reported scores are 0. The chain runs on every step, gated
// or not, so its mel and embedding buffers stay exactly the reference's. Values: `<stage>.<head>`
// (gated), `<stage>.raw.<head>` (ungated), `<stage>.<head>[c]` (class c of a multi-class head, e.g.
// timer), `<stage>.gate` (1 while open). A new stream resets the chain.
class WakeStage : public Stage {
public:
    OwwOptions opt;
    std::string gate_text;
    int64_t gate_steps = 0;
    std::shared_ptr<ScoreLog> log;

    Status prepare(const Port& in, Pipeline& pipe) override {
        pipe_ = &pipe;
        in_ = in;
        if (in.numel != int64_t(WakeWordChain::kStepSamples))
            return invalid("openwakeword takes frames of ", WakeWordChain::kStepSamples,
                           " samples (80 ms at 16 kHz), its input has ", in.numel, "; give the source 'chunk: 1280'");
        if (!gate_text.empty()) JIFFY_RETURN_IF_ERROR(Expr::compile(gate_text, pipe.resolver(), &gate_).prefix("'gate': "));
        JIFFY_RETURN_IF_ERROR(WakeWordChain::create(opt, &chain_));
        size_t n = chain_->head_names().size();
        alloc_out({1, int64_t(n)});
        raw_.assign(n, 0.0f);
        pcm_.assign(WakeWordChain::kStepSamples, 0);
        h_heads_ = std::vector<observe::Histogram>(n);
        for (const auto& h : chain_->head_names()) short_.push_back(short_head_name(h));
        if (log) {
            std::fprintf(log->file(), "heads");
            for (const auto& h : chain_->head_names()) std::fprintf(log->file(), " %s", h.c_str());
            std::fprintf(log->file(), "\n");
        }
        return {};
    }
    bool is_model() const override { return true; }
    Status push() override {
        if (pipe_->frame && pipe_->frame->stream != stream_) {
            stream_ = pipe_->frame->stream;
            chain_->reset();
            since_gate_ = INT64_MAX;
        }
        to_pcm(in_.data, WakeWordChain::kStepSamples, pcm_.data());
        JIFFY_RETURN_IF_ERROR(chain_->step(pcm_.data(), raw_.data()));
        const WakeWordChain::Times& t = chain_->last_times();
        h_mel_.record_ns(int64_t(t.mel_us * 1000.0));
        h_emb_.record_ns(int64_t(t.emb_us * 1000.0));
        for (size_t h = 0; h < raw_.size(); ++h) h_heads_[h].record_ns(int64_t(t.head_us[h] * 1000.0));
        bool open = true;
        if (!gate_text.empty()) {
            if (gate_.eval() != 0.0) since_gate_ = 0;
            else if (since_gate_ < INT64_MAX) ++since_gate_;
            open = since_gate_ < gate_steps;
        }
        gate_f_ = open ? 1.0f : 0.0f;
        for (size_t h = 0; h < raw_.size(); ++h) out_.data[h] = open ? raw_[h] : 0.0f;
        if (log) write_scores();
        pending_ = true;
        return {};
    }
    bool next() override {
        bool p = pending_;
        pending_ = false;
        return p;
    }
    Status value(const std::string& sub, int index, const float** p) const override {
        if (sub.empty()) return Stage::value(sub, index, p);
        if (sub == "gate") {
            *p = &gate_f_;
            return {};
        }
        bool raw = sub.rfind("raw.", 0) == 0;
        std::string head = raw ? sub.substr(4) : sub;
        for (size_t h = 0; h < short_.size(); ++h) {
            if (short_[h] != head && chain_->head_names()[h] != head) continue;
            if (index >= 0) {
                if (size_t(index) >= chain_->head_num_classes(h))
                    return invalid("head '", head, "' has ", chain_->head_num_classes(h), " classes; index ", index, " is out of range");
                *p = chain_->head_classes(h) + index;
                return {};
            }
            *p = raw ? &raw_[h] : &out_.data[h];
            return {};
        }
        std::string list;
        for (const auto& n : short_) list += (list.empty() ? "" : ", ") + n;
        return invalid("openwakeword '", name, "' has no value '", sub, "' (heads: ", list, "; also raw.<head>, gate)");
    }
    std::vector<std::pair<std::string, const observe::Histogram*>> sub_timings() const override {
        std::vector<std::pair<std::string, const observe::Histogram*>> v = {{"melspectrogram", &h_mel_}, {"embedding", &h_emb_}};
        for (size_t h = 0; h < h_heads_.size(); ++h) v.emplace_back("head " + short_[h], &h_heads_[h]);
        return v;
    }

private:
    void write_scores() {
        FILE* f = log->file();
        log->begin(pipe_->frame);
        size_t step = chain_->steps() - 1;
        for (size_t h = 0; h < raw_.size(); ++h) {
            if (chain_->head_num_classes(h) < 2) continue;
            std::fprintf(f, "cls %zu %s", step, chain_->head_names()[h].c_str());
            for (size_t c = 0; c < chain_->head_num_classes(h); ++c) std::fprintf(f, " %.9g", double(chain_->head_classes(h)[c]));
            std::fputc('\n', f);
        }
        std::fprintf(f, "oww %zu", step);
        for (float v : raw_) std::fprintf(f, " %.9g", double(v));
        std::fputc('\n', f);
    }

    Pipeline* pipe_ = nullptr;
    Port in_;
    std::unique_ptr<WakeWordChain> chain_;
    std::vector<float> raw_;
    std::vector<int16_t> pcm_;
    std::vector<std::string> short_;
    Expr gate_;
    int64_t since_gate_ = INT64_MAX;
    float gate_f_ = 1.0f;
    uint32_t stream_ = 0;
    bool pending_ = false;
    observe::Histogram h_mel_, h_emb_;
    std::vector<observe::Histogram> h_heads_;
};

Status make_wake_stage(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out) {
    auto s = std::make_unique<WakeStage>();
    std::string dir, mel, emb, scores;
    std::vector<std::string> heads;
    JIFFY_RETURN_IF_ERROR(f.get_string("models", &dir));
    JIFFY_RETURN_IF_ERROR(f.get_string("melspectrogram", &mel));
    JIFFY_RETURN_IF_ERROR(f.get_string("embedding", &emb));
    JIFFY_RETURN_IF_ERROR(f.get_strings("heads", &heads, true));
    JIFFY_RETURN_IF_ERROR(f.get_string("scores", &scores));
    if (heads.empty()) return f.error(f.node()["heads"], "'heads' is empty; name at least one wake-word head");
    if (dir.empty() && (mel.empty() || emb.empty()))
        return f.error(f.node(), "give 'models' (a folder with melspectrogram.onnx, embedding_model.onnx and the heads) or "
                                 "'melspectrogram' and 'embedding' paths");
    auto in_dir = [&](const std::string& file) { return env.path(dir.empty() ? file : dir + "/" + file); };
    s->opt.melspec_path = mel.empty() ? in_dir("melspectrogram.onnx") : env.path(mel);
    s->opt.embedding_path = emb.empty() ? in_dir("embedding_model.onnx") : env.path(emb);
    for (const auto& h : heads) {
        // A head is a path (ends in .onnx) or a name found in 'models' as NAME_v0.1.onnx or NAME.onnx.
        std::string path;
        if (h.size() > 5 && h.compare(h.size() - 5, 5, ".onnx") == 0) {
            path = h.find('/') == std::string::npos && !dir.empty() ? in_dir(h) : env.path(h);
        } else {
            for (const char* suffix : {"_v0.1.onnx", ".onnx"}) {
                std::string c = in_dir(h + suffix);
                if (FILE* t = std::fopen(c.c_str(), "rb")) {
                    std::fclose(t);
                    path = c;
                    break;
                }
            }
            if (path.empty()) return f.error(f.node()["heads"], "head '" + h + "': neither " + in_dir(h + "_v0.1.onnx") + " nor " + in_dir(h + ".onnx") + " exists");
        }
        s->opt.head_paths.push_back(path);
    }
    YAML::Node g = f.get("gate");
    if (g.IsDefined() && !g.IsNull()) {
        if (!g.IsMap()) return f.error(g, "'gate' must be a mapping {when: EXPRESSION, steps: N}");
        Fields gf(g, f.file(), f.what() + " gate");
        JIFFY_RETURN_IF_ERROR(gf.get_string("when", &s->gate_text, true));
        s->gate_steps = 12;
        JIFFY_RETURN_IF_ERROR(gf.get_int("steps", &s->gate_steps, false, 1, 1 << 20));
        JIFFY_RETURN_IF_ERROR(gf.finish());
    }
    if (!scores.empty()) {
        Status st = ScoreLog::open(env.path(scores), &s->log);
        if (!st.ok()) return f.error(f.node()["scores"], st.message());
    }
    *out = std::move(s);
    return {};
}
#endif

}  // namespace

void register_adapters() {
    static std::once_flag once;
    std::call_once(once, [] {
#ifdef JIFFY_AGENT_MQTT
        register_source("mqtt", make_mqtt_source);
        register_sink("mqtt", make_mqtt_sink);
#endif
#ifdef JIFFY_AGENT_VOICE
        register_stage("openwakeword", make_wake_stage);
        register_stage("silero_vad", make_vad_stage);
#endif
    });
}

}  // namespace jiffy::agent
