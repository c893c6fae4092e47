// MqttClient: the agent runtime's MQTT connection, on libmosquitto.
//
//   std::unique_ptr<MqttClient> c;
//   Status st = MqttClient::create(opts, &c);      // never waits for the broker
//   c->subscribe("sensors/+/frame", 1);            // remembered; re-sent on every connect
//   c->publish("actions/door", buf, n, 1, &seq);   // QoS 1: kept in our outbox until PUBACK
//   MqttMessage m; if (c->pop(&m, 1000)) ...       // bounded inbox, drop-oldest
//
// Guarantees (docs/mqtt.md has the details and the measured cost):
// - One network thread per client polls the socket itself (poll + mosquitto_loop_read/write/misc)
//   and reconnects with capped exponential backoff; a missing or restarted broker is never an
//   error, only connected() == false and a log line when the state changes.
// - Every connection is a fresh libmosquitto instance; our outbox is the only copy of un-acked
//   QoS 1 messages. On every connect we re-subscribe to every remembered topic and re-send every
//   un-acked message (user property "dup"="1"). A PUBACK "no matching subscribers" (MQTT 5) keeps
//   the message and retries it for `unrouted_hold_ms` (a subscriber may not have re-subscribed yet
//   after a broker restart). Delivery is at least once; receivers drop duplicates by (src, seq).
// - Each publish carries MQTT 5 user properties "seq" (per-client counter from 1) and "src"
//   (client id + a per-process nonce, so a restarted publisher is a new source).
// - The outbox lives in memory: an accepted action survives broker restarts, not the death of
//   this process.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"

struct mosquitto;
struct mosquitto_message;
typedef struct mqtt5__property mosquitto_property;

namespace jiffy::agent {

struct MqttOptions {
    std::string host = "127.0.0.1";
    int port = 1883;
    std::string client_id;  // empty: "jiffy-<pid>-<random>"
    int keepalive_s = 10;
    int protocol = 5;          // 5 (MQTT 5) or 4 (MQTT 3.1.1: no "seq" property, no unrouted retry)
    std::string shared_group;  // non-empty: subscribe via $share/<group>/<topic>
    size_t inbox_capacity = 1024;
    size_t outbox_capacity = 10000;
    int reconnect_min_ms = 100, reconnect_max_ms = 1000;
    int connect_timeout_ms = 3000;  // no CONNACK within this: drop the attempt, back off
    int unrouted_hold_ms = 3000;    // keep re-sending "no matching subscribers" QoS 1 messages
    bool drop_duplicates = true;    // inbound (src, seq) already seen: count and drop
    // pop() polls the inbox for up to this long before sleeping on a condition variable: trades
    // CPU for the wake-up latency of a sleeping thread (docs/mqtt.md has the measured effect).
    int pop_spin_us = 0;
    // Log sink for state changes (connect, loss, retrying); default: one line on stderr.
    std::function<void(const std::string&)> log;
};

struct MqttMessage {
    std::string topic;
    std::vector<uint8_t> payload;
    int64_t recv_us = 0;    // CLOCK_MONOTONIC microseconds when the network thread received it
    uint64_t seq = 0;       // user property "seq" if present, else 0
    std::string src;        // user property "src" (the publisher) if present
    bool possible_dup = false;  // user property "dup": a re-send after a reconnect
};

// Receiver-side duplicate filter by (source, seq): a window of the last kWindow sequence numbers
// per source, O(1) and bounded. A seq older than the window counts as new (at least once wins).
class SeqDedupe {
public:
    static constexpr uint64_t kWindow = 16384;
    static constexpr size_t kMaxSources = 4096;
    // True if (src, seq) was seen before. seq == 0 (no sequence number) is never a duplicate.
    bool seen(const std::string& src, uint64_t seq);

private:
    struct Window {
        uint64_t max = 0;
        std::vector<uint64_t> bits = std::vector<uint64_t>(kWindow / 64, 0);
    };
    std::unordered_map<std::string, Window> by_src_;
};

int64_t mqtt_now_us();  // CLOCK_MONOTONIC, microseconds

class MqttClient {
public:
    static Status create(const MqttOptions& opts, std::unique_ptr<MqttClient>* out);
    ~MqttClient();
    MqttClient(const MqttClient&) = delete;
    MqttClient& operator=(const MqttClient&) = delete;

    // Remember `topic` (prefixed with $share/<group>/ when shared_group is set) and subscribe now
    // if connected; it is subscribed again on every later connect.
    Status subscribe(const std::string& topic, int qos);
    // QoS 1: accepted into the outbox (also while disconnected) unless it is full; *seq_out gets
    // the message's sequence number. QoS 0: sent now if connected, else dropped and counted
    // (out_dropped_offline). Thread-safe. `seq` > 0 sets the message's sequence number (it must be
    // above every earlier one of this client; gaps are allowed), e.g. an agent's action number, so
    // the "seq" property and the payload agree; 0 takes the next one.
    Status publish(const std::string& topic, const void* data, size_t n, int qos,
                   uint64_t* seq_out = nullptr, uint64_t seq = 0);
    // Oldest inbound message; waits up to timeout_us (0: do not wait, <0: forever).
    bool pop(MqttMessage* out, int timeout_us);
    // Delivers inbound messages on the network thread instead of pop(): each message still goes
    // through the inbox (dedupe, bounded, drop-oldest), then the network thread calls `h` with it,
    // one per loop turn and outside the client's lock, so `h` may publish() on this client (the
    // write then happens on the thread that read the event: no thread hand-off). Between two
    // calls the thread reads whatever arrived (up to 64 packets), so under a flood the inbox drops
    // the oldest and `h` always gets the freshest messages. `h` must not block for long: while it
    // runs this client reads nothing (keepalive, PUBACKs wait). An empty `h` turns it off; the call
    // returns after a running `h` has returned.
    using Handler = std::function<void(const MqttMessage&)>;
    void set_handler(Handler h);
    bool connected() const { return connected_.load(std::memory_order_acquire); }
    // Connected and every remembered subscription acknowledged on this connection.
    bool ready() const;
    // Waits until ready(); false on timeout.
    bool wait_ready(int timeout_ms) const;
    const std::string& source_id() const { return src_; }

    struct Stats {
        uint64_t connects, disconnects, in_msgs, in_dropped, out_accepted, out_delivered,
            out_pending, out_rejected_full, duplicates_in;
        uint64_t out_resent;           // re-sends after reconnect or "no matching subscribers"
        uint64_t out_unrouted;         // QoS 1 given up after unrouted_hold_ms with no subscriber
        uint64_t out_failed;           // QoS 1 refused by the broker (PUBACK reason >= 0x80)
        uint64_t out_dropped_offline;  // QoS 0 published while disconnected
        uint64_t out_qos0;             // QoS 0 handed to the socket
    };
    Stats stats() const;

private:
    explicit MqttClient(const MqttOptions& opts);
    struct Out {
        uint64_t seq;
        std::string topic;
        std::vector<uint8_t> payload;
        int mid = -1;               // mid on the current connection; -1: not sent on it
        bool acked = false;
        bool sent_before = false;   // sent on some connection: a re-send is a possible duplicate
        int64_t unrouted_since_us = 0;  // first "no matching subscribers" PUBACK
        int64_t retry_at_us = 0;
    };
    struct Sub {
        std::string topic;  // as sent to the broker (with $share/ prefix)
        int qos;
    };

    void run();
    void start_connect_locked(int64_t now);
    void drop_connection_locked(const char* why, int rc);
    int send_locked(Out& o);
    void send_unsent_locked(int64_t now);
    Out* find_locked(uint64_t seq);
    void settle_locked(Out& o);
    bool ready_locked() const;
    void wake();
    void log(const std::string& line) const;

    static void on_connect(struct mosquitto*, void*, int rc, int flags, const mosquitto_property*);
    static void on_disconnect(struct mosquitto*, void*, int rc, const mosquitto_property*);
    static void on_publish(struct mosquitto*, void*, int mid, int rc, const mosquitto_property*);
    static void on_message(struct mosquitto*, void*, const struct mosquitto_message*,
                           const mosquitto_property*);
    static void on_subscribe(struct mosquitto*, void*, int mid, int n, const int* granted,
                             const mosquitto_property*);

    MqttOptions opts_;
    std::string src_;
    int wake_fd_ = -1;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> connected_{false};

    // mu_ guards the libmosquitto instance, the outbox and the subscriptions. The network thread
    // holds it only around non-blocking libmosquitto calls, never while polling.
    mutable std::mutex mu_;
    mutable std::condition_variable ready_cv_;
    struct mosquitto* mosq_ = nullptr;
    bool session_up_ = false;    // CONNACK success on mosq_
    int64_t attempt_started_us_ = 0;
    int64_t next_attempt_us_ = 0;
    int backoff_ms_ = 0;
    bool logged_down_ = false;
    bool lost_ = false;          // set by callbacks: drop the connection after the loop call
    std::vector<Sub> subs_;
    std::vector<bool> sub_acked_;               // SUBACK received on this connection
    std::unordered_map<int, size_t> sub_mids_;  // pending SUBACK mid -> sub index
    std::deque<Out> outbox_;                    // seq order; acked entries inside are skipped
    size_t pending_ = 0;                        // un-acked entries in outbox_
    std::unordered_map<int, uint64_t> mid_seq_; // mid on this connection -> seq
    uint64_t next_seq_ = 1;
    bool has_unsent_ = false;                   // some un-acked entry is not on the wire

    std::mutex h_mu_;                 // held by the network thread while it runs handler_
    Handler handler_;
    std::atomic<bool> has_handler_{false};
    MqttMessage h_msg_;               // the message being handed to handler_ (network thread)
    bool run_handler_once();

    std::mutex in_mu_;
    std::condition_variable in_cv_;
    std::deque<MqttMessage> inbox_;
    std::atomic<size_t> inbox_size_{0};
    SeqDedupe dedupe_;

    struct Counters {
        std::atomic<uint64_t> connects{0}, disconnects{0}, in_msgs{0}, in_dropped{0},
            out_accepted{0}, out_delivered{0}, out_rejected_full{0}, duplicates_in{0},
            out_resent{0}, out_unrouted{0}, out_failed{0}, out_dropped_offline{0}, out_qos0{0};
    } n_;
};

}  // namespace jiffy::agent
