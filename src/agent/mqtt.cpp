// MqttClient on libmosquitto: our own poll loop, our own QoS 1 outbox (see mqtt.h, docs/mqtt.md).
//
// Locking: mu_ guards the libmosquitto instance, the outbox and the subscriptions. Every
// libmosquitto call is made with mu_ held, so every libmosquitto callback runs with mu_ held (from
// mosquitto_loop_read/write/misc on the network thread, or from mosquitto_publish_v5 in publish())
// and never locks it again. The inbox has its own lock so pop() never waits on the network.
#include "agent/mqtt.h"

#include <mosquitto.h>
#include <mqtt_protocol.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

namespace jiffy::agent {

int64_t mqtt_now_us() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

// ---- SeqDedupe ---------------------------------------------------------------------------------

bool SeqDedupe::seen(const std::string& src, uint64_t seq) {
    if (seq == 0) return false;
    auto it = by_src_.find(src);
    if (it == by_src_.end()) {
        if (by_src_.size() >= kMaxSources) by_src_.clear();  // bounded; rare (one key per publisher run)
        it = by_src_.emplace(src, Window{}).first;
    }
    Window& w = it->second;
    auto bit = [&](uint64_t s) -> std::pair<uint64_t&, uint64_t> {
        uint64_t i = s % kWindow;
        return {w.bits[i / 64], uint64_t(1) << (i % 64)};
    };
    if (seq > w.max) {
        if (seq - w.max >= kWindow) {
            std::fill(w.bits.begin(), w.bits.end(), 0);
        } else {
            for (uint64_t s = w.max + 1; s < seq; ++s) {
                auto [word, m] = bit(s);
                word &= ~m;
            }
        }
        auto [word, m] = bit(seq);
        word |= m;
        w.max = seq;
        return false;
    }
    if (w.max - seq >= kWindow) return false;  // older than the window: deliver (at least once)
    auto [word, m] = bit(seq);
    if (word & m) return true;
    word |= m;
    return false;
}

// ---- helpers -----------------------------------------------------------------------------------

namespace {

std::string describe_rc(int rc, int saved_errno) {
    if (rc == MOSQ_ERR_ERRNO) return std::strerror(saved_errno);
    return mosquitto_strerror(rc);
}

bool valid_pub_topic(const std::string& t) {
    return !t.empty() && t.find_first_of("+#") == std::string::npos &&
           t.find('\0') == std::string::npos;
}

std::string random_hex(int digits) {
    std::random_device rd;
    std::mt19937_64 g((uint64_t(rd()) << 32) ^ rd() ^ uint64_t(mqtt_now_us()) ^ uint64_t(getpid()));
    static const char* hex = "0123456789abcdef";
    std::string s;
    uint64_t v = g();
    for (int i = 0; i < digits; ++i, v >>= 4) s += hex[v & 15];
    return s;
}

void lib_init_once() {
    static std::once_flag once;
    std::call_once(once, [] { mosquitto_lib_init(); });
}

}  // namespace

// ---- lifecycle ---------------------------------------------------------------------------------

MqttClient::MqttClient(const MqttOptions& opts) : opts_(opts) {}

Status MqttClient::create(const MqttOptions& o, std::unique_ptr<MqttClient>* out) {
    JIFFY_CHECK(!o.host.empty(), "mqtt: broker host is empty");
    JIFFY_CHECK(o.port >= 1 && o.port <= 65535, "mqtt: broker port ", o.port,
                " is out of range (1..65535)");
    JIFFY_CHECK(o.protocol == 4 || o.protocol == 5, "mqtt: protocol ", o.protocol,
                " is not supported (4 = MQTT 3.1.1, 5 = MQTT 5)");
    JIFFY_CHECK(o.keepalive_s >= 5 && o.keepalive_s <= 65535, "mqtt: keepalive_s ", o.keepalive_s,
                " is out of range (5..65535)");
    JIFFY_CHECK(o.inbox_capacity >= 1, "mqtt: inbox_capacity must be at least 1");
    JIFFY_CHECK(o.outbox_capacity >= 1, "mqtt: outbox_capacity must be at least 1");
    JIFFY_CHECK(o.reconnect_min_ms >= 1 && o.reconnect_max_ms >= o.reconnect_min_ms,
                "mqtt: reconnect backoff must satisfy 1 <= reconnect_min_ms (", o.reconnect_min_ms,
                ") <= reconnect_max_ms (", o.reconnect_max_ms, ")");
    JIFFY_CHECK(o.connect_timeout_ms >= 1, "mqtt: connect_timeout_ms must be positive");
    JIFFY_CHECK(o.unrouted_hold_ms >= 0, "mqtt: unrouted_hold_ms must not be negative");
    JIFFY_CHECK(o.client_id.size() <= 65535, "mqtt: client_id is longer than 65535 bytes");
    JIFFY_CHECK(o.shared_group.find_first_of("/+#") == std::string::npos, "mqtt: shared_group '",
                o.shared_group, "' must not contain '/', '+' or '#'");
    lib_init_once();

    std::unique_ptr<MqttClient> c(new MqttClient(o));
    if (c->opts_.client_id.empty())
        c->opts_.client_id = str_cat("jiffy-", getpid(), "-", random_hex(6));
    c->src_ = str_cat(c->opts_.client_id, "/", random_hex(8));
    c->backoff_ms_ = o.reconnect_min_ms;
    c->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->wake_fd_ < 0) return internal_error("mqtt: eventfd: ", std::strerror(errno));
    c->thread_ = std::thread([p = c.get()] { p->run(); });
    *out = std::move(c);
    return Status();
}

MqttClient::~MqttClient() {
    stop_.store(true);
    wake();
    if (thread_.joinable()) thread_.join();
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (mosq_) {
            if (session_up_) {
                mosquitto_disconnect_v5(mosq_, 0, nullptr);
                mosquitto_loop_write(mosq_, 1);
            }
            mosquitto_destroy(mosq_);
            mosq_ = nullptr;
        }
    }
    if (wake_fd_ >= 0) close(wake_fd_);
}

void MqttClient::log(const std::string& line) const {
    if (opts_.log) {
        opts_.log(line);
    } else {
        std::fprintf(stderr, "jiffy mqtt [%s]: %s\n", opts_.client_id.c_str(), line.c_str());
    }
}

void MqttClient::wake() {
    uint64_t one = 1;
    if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
}

// ---- connection management (network thread) ----------------------------------------------------

void MqttClient::start_connect_locked(int64_t now) {
    attempt_started_us_ = now;
    mosq_ = mosquitto_new(opts_.client_id.c_str(), true, this);
    if (!mosq_) {
        drop_connection_locked("mosquitto_new failed", MOSQ_ERR_NOMEM);
        return;
    }
    mosquitto_int_option(mosq_, MOSQ_OPT_PROTOCOL_VERSION,
                         opts_.protocol == 5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311);
    mosquitto_int_option(mosq_, MOSQ_OPT_TCP_NODELAY, 1);
    mosquitto_connect_v5_callback_set(mosq_, &MqttClient::on_connect);
    mosquitto_disconnect_v5_callback_set(mosq_, &MqttClient::on_disconnect);
    mosquitto_publish_v5_callback_set(mosq_, &MqttClient::on_publish);
    mosquitto_message_v5_callback_set(mosq_, &MqttClient::on_message);
    mosquitto_subscribe_v5_callback_set(mosq_, &MqttClient::on_subscribe);
    errno = 0;
    int rc = mosquitto_connect_async(mosq_, opts_.host.c_str(), opts_.port, opts_.keepalive_s);
    if (rc != MOSQ_ERR_SUCCESS) drop_connection_locked("connect", rc);
}

// Destroys the current libmosquitto instance (its socket and its queues: our outbox is the only
// copy that matters) and schedules the next attempt with capped exponential backoff.
void MqttClient::drop_connection_locked(const char* why, int rc) {
    int saved_errno = errno;
    int64_t now = mqtt_now_us();
    bool was_up = session_up_;
    if (mosq_) {
        mosquitto_destroy(mosq_);
        mosq_ = nullptr;
    }
    session_up_ = false;
    connected_.store(false, std::memory_order_release);
    mid_seq_.clear();
    sub_mids_.clear();
    std::fill(sub_acked_.begin(), sub_acked_.end(), false);
    for (Out& o : outbox_) o.mid = -1;
    lost_ = false;
    std::string detail = rc ? str_cat(why, ": ", describe_rc(rc, saved_errno)) : std::string(why);
    size_t pending = pending_;
    if (was_up) {
        n_.disconnects.fetch_add(1);
        backoff_ms_ = opts_.reconnect_min_ms;
        log(str_cat("lost connection to ", opts_.host, ":", opts_.port, " (", detail, "); ",
                    pending, " un-acked QoS 1 message(s) kept; reconnecting"));
        logged_down_ = true;
    } else if (!logged_down_) {
        log(str_cat("cannot connect to ", opts_.host, ":", opts_.port, " (", detail,
                    "); retrying every ", opts_.reconnect_min_ms, "..", opts_.reconnect_max_ms,
                    " ms; QoS 1 publishes are kept in the outbox"));
        logged_down_ = true;
    }
    next_attempt_us_ = now + int64_t(backoff_ms_) * 1000;
    backoff_ms_ = std::min(backoff_ms_ * 2, opts_.reconnect_max_ms);
}

void MqttClient::run() {
    while (!stop_.load()) {
        // Hand one message to the handler (outside mu_: it may publish), then read again, so
        // that under a flood the inbox drops the oldest between two handler calls.
        bool more = has_handler_.load(std::memory_order_acquire) && run_handler_once();
        pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {-1, 0, 0}};
        int nfds = 1;
        int timeout_ms = 1000;
        int polled_fd = -1;
        {
            std::lock_guard<std::mutex> lk(mu_);
            int64_t now = mqtt_now_us();
            if (!mosq_ && now >= next_attempt_us_) start_connect_locked(now);
            if (mosq_ && !session_up_ &&
                now - attempt_started_us_ > int64_t(opts_.connect_timeout_ms) * 1000)
                drop_connection_locked("no CONNACK within connect_timeout_ms", 0);
            if (mosq_) {
                polled_fd = mosquitto_socket(mosq_);
                if (polled_fd >= 0) {
                    fds[1] = {polled_fd, short(POLLIN | (mosquitto_want_write(mosq_) ? POLLOUT : 0)), 0};
                    nfds = 2;
                }
                if (!session_up_) timeout_ms = 20;
                if (has_unsent_) timeout_ms = std::min(timeout_ms, 20);
            } else {
                timeout_ms = int(std::max<int64_t>(0, (next_attempt_us_ - now + 999) / 1000));
            }
            if (more) timeout_ms = 0;
        }
        int pr = poll(fds, nfds, timeout_ms);
        if (fds[0].revents & POLLIN) {
            uint64_t v;
            (void)!read(wake_fd_, &v, sizeof(v));
        }
        if (stop_.load()) break;
        std::lock_guard<std::mutex> lk(mu_);
        if (!mosq_) continue;
        int rc = MOSQ_ERR_SUCCESS;
        if (pr > 0 && nfds == 2 && mosquitto_socket(mosq_) == polled_fd) {
            if (fds[1].revents & (POLLIN | POLLERR | POLLHUP)) {
                errno = 0;
                rc = mosquitto_loop_read(mosq_, 1);  // one packet (QoS 0: libmosquitto reads 1)
                // With a handler, read on while more is there (up to 64 packets), so the inbox
                // drops the oldest rather than the socket holding a backlog; one poll per event.
                for (int k = 1; k < 64 && rc == MOSQ_ERR_SUCCESS && !lost_ && has_handler_.load(std::memory_order_relaxed); ++k) {
                    pollfd p{polled_fd, POLLIN, 0};
                    if (poll(&p, 1, 0) <= 0 || !(p.revents & (POLLIN | POLLERR | POLLHUP))) break;
                    errno = 0;
                    rc = mosquitto_loop_read(mosq_, 1);
                }
                if (rc != MOSQ_ERR_SUCCESS || lost_) {
                    drop_connection_locked("read", rc);
                    continue;
                }
            }
        }
        if (mosquitto_want_write(mosq_)) {
            errno = 0;
            rc = mosquitto_loop_write(mosq_, 1);
            if (rc != MOSQ_ERR_SUCCESS || lost_) {
                drop_connection_locked("write", rc);
                continue;
            }
        }
        rc = mosquitto_loop_misc(mosq_);  // keepalive PINGREQ, ping timeout
        if (rc != MOSQ_ERR_SUCCESS || lost_ || mosquitto_socket(mosq_) < 0) {
            drop_connection_locked(rc ? "keepalive" : "connection closed", rc);
            continue;
        }
        if (session_up_ && has_unsent_) {
            send_unsent_locked(mqtt_now_us());
            if (mosquitto_want_write(mosq_)) {
                errno = 0;
                rc = mosquitto_loop_write(mosq_, 1);
                if (rc != MOSQ_ERR_SUCCESS) drop_connection_locked("write", rc);
            }
        }
    }
}

// ---- outbox ------------------------------------------------------------------------------------

// Hands one outbox entry to libmosquitto on the current connection. Returns the libmosquitto rc.
int MqttClient::send_locked(Out& o) {
    mosquitto_property* props = nullptr;
    if (opts_.protocol == 5) {
        char buf[24];
        std::snprintf(buf, sizeof(buf), "%llu", (unsigned long long)o.seq);
        mosquitto_property_add_string_pair(&props, MQTT_PROP_USER_PROPERTY, "seq", buf);
        mosquitto_property_add_string_pair(&props, MQTT_PROP_USER_PROPERTY, "src", src_.c_str());
        if (o.sent_before)
            mosquitto_property_add_string_pair(&props, MQTT_PROP_USER_PROPERTY, "dup", "1");
    }
    int mid = 0;
    int rc = mosquitto_publish_v5(mosq_, &mid, o.topic.c_str(), int(o.payload.size()),
                                  o.payload.data(), 1, false, props);
    mosquitto_property_free_all(&props);
    if (rc == MOSQ_ERR_SUCCESS) {
        if (o.sent_before) n_.out_resent.fetch_add(1, std::memory_order_relaxed);
        o.mid = mid;
        o.sent_before = true;
        mid_seq_[mid] = o.seq;
    }
    return rc;
}

// Sends every un-acked entry that is not on the wire and whose retry time has come.
void MqttClient::send_unsent_locked(int64_t now) {
    bool left = false;
    for (Out& o : outbox_) {
        if (o.acked || o.mid >= 0) continue;
        if (o.retry_at_us > now) {
            left = true;
            continue;
        }
        int rc = send_locked(o);
        if (rc != MOSQ_ERR_SUCCESS) {
            o.retry_at_us = now + 100000;
            left = true;
        }
    }
    has_unsent_ = left;
}

MqttClient::Out* MqttClient::find_locked(uint64_t seq) {
    auto it = std::lower_bound(outbox_.begin(), outbox_.end(), seq,
                               [](const Out& o, uint64_t s) { return o.seq < s; });
    return (it != outbox_.end() && it->seq == seq) ? &*it : nullptr;
}

void MqttClient::settle_locked(Out& o) {
    o.acked = true;
    o.payload = {};
    --pending_;
    while (!outbox_.empty() && outbox_.front().acked) outbox_.pop_front();
}

Status MqttClient::publish(const std::string& topic, const void* data, size_t n, int qos,
                           uint64_t* seq_out, uint64_t want_seq) {
    JIFFY_CHECK(qos == 0 || qos == 1, "mqtt: publish QoS ", qos, " is not supported (0 or 1)");
    JIFFY_CHECK(valid_pub_topic(topic), "mqtt: publish topic '", topic,
                "' is empty or contains a wildcard");
    JIFFY_CHECK(n <= 256u * 1024 * 1024, "mqtt: payload of ", n, " bytes exceeds MQTT's limit");
    JIFFY_CHECK(n == 0 || data, "mqtt: payload pointer is null");
    const uint8_t* p = static_cast<const uint8_t*>(data);
    bool need_wake = false;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (want_seq > 0) {
            JIFFY_CHECK(want_seq >= next_seq_, "mqtt: publish seq ", want_seq,
                        " is not above the last one (", next_seq_ - 1, ")");
            next_seq_ = want_seq;
        }
        if (qos == 1) {
            if (pending_ >= opts_.outbox_capacity) {
                n_.out_rejected_full.fetch_add(1, std::memory_order_relaxed);
                return invalid("mqtt: outbox full: ", pending_, " QoS 1 message(s) to ",
                               opts_.host, ":", opts_.port, " are not acknowledged yet (",
                               session_up_ ? "broker is slow" : "broker unreachable",
                               "); publish to '", topic, "' rejected");
            }
            uint64_t seq = next_seq_++;
            if (seq_out) *seq_out = seq;
            outbox_.push_back(Out{seq, topic, std::vector<uint8_t>(p, p + n)});
            ++pending_;
            n_.out_accepted.fetch_add(1, std::memory_order_relaxed);
            if (session_up_ && !has_unsent_) {
                errno = 0;
                int rc = send_locked(outbox_.back());
                if (rc == MOSQ_ERR_OVERSIZE_PACKET || rc == MOSQ_ERR_PAYLOAD_SIZE ||
                    rc == MOSQ_ERR_MALFORMED_UTF8 || rc == MOSQ_ERR_INVAL ||
                    rc == MOSQ_ERR_QOS_NOT_SUPPORTED) {
                    outbox_.pop_back();
                    --pending_;
                    n_.out_accepted.fetch_sub(1, std::memory_order_relaxed);
                    return invalid("mqtt: publish to '", topic, "' refused: ",
                                   mosquitto_strerror(rc));
                }
                if (rc != MOSQ_ERR_SUCCESS) {
                    has_unsent_ = true;  // the network thread notices the lost connection
                    need_wake = true;
                }
            } else if (session_up_) {
                need_wake = true;  // keep order: the network thread sends the backlog first
            }
        } else {
            uint64_t seq = next_seq_++;
            if (seq_out) *seq_out = seq;
            if (!session_up_) {
                n_.out_dropped_offline.fetch_add(1, std::memory_order_relaxed);
                return Status();
            }
            mosquitto_property* props = nullptr;
            if (opts_.protocol == 5) {
                char buf[24];
                std::snprintf(buf, sizeof(buf), "%llu", (unsigned long long)seq);
                mosquitto_property_add_string_pair(&props, MQTT_PROP_USER_PROPERTY, "seq", buf);
                mosquitto_property_add_string_pair(&props, MQTT_PROP_USER_PROPERTY, "src",
                                                   src_.c_str());
            }
            int rc = mosquitto_publish_v5(mosq_, nullptr, topic.c_str(), int(n), p, 0, false,
                                          props);
            mosquitto_property_free_all(&props);
            if (rc == MOSQ_ERR_SUCCESS) {
                n_.out_qos0.fetch_add(1, std::memory_order_relaxed);
            } else if (rc == MOSQ_ERR_OVERSIZE_PACKET || rc == MOSQ_ERR_PAYLOAD_SIZE ||
                       rc == MOSQ_ERR_MALFORMED_UTF8 || rc == MOSQ_ERR_INVAL) {
                return invalid("mqtt: publish to '", topic, "' refused: ", mosquitto_strerror(rc));
            } else {
                n_.out_dropped_offline.fetch_add(1, std::memory_order_relaxed);
                need_wake = true;
            }
        }
        if (mosq_ && mosquitto_want_write(mosq_)) need_wake = true;  // partial write: poll POLLOUT
    }
    if (need_wake) wake();
    return Status();
}

// ---- subscriptions -----------------------------------------------------------------------------

Status MqttClient::subscribe(const std::string& topic, int qos) {
    JIFFY_CHECK(qos >= 0 && qos <= 2, "mqtt: subscribe QoS ", qos, " is out of range (0..2)");
    JIFFY_CHECK(!topic.empty() && topic.find('\0') == std::string::npos,
                "mqtt: subscribe topic is empty");
    if (mosquitto_sub_topic_check(topic.c_str()) != MOSQ_ERR_SUCCESS)
        return invalid("mqtt: subscribe topic '", topic, "' is not a valid topic filter");
    std::string full =
        opts_.shared_group.empty() ? topic : str_cat("$share/", opts_.shared_group, "/", topic);
    {
        std::lock_guard<std::mutex> lk(mu_);
        size_t i = 0;
        while (i < subs_.size() && subs_[i].topic != full) ++i;
        if (i == subs_.size()) {
            subs_.push_back(Sub{full, qos});
            sub_acked_.push_back(false);
        } else {
            subs_[i].qos = qos;
            sub_acked_[i] = false;
        }
        if (session_up_) {
            int mid = 0;
            if (mosquitto_subscribe_v5(mosq_, &mid, full.c_str(), qos, 0, nullptr) ==
                MOSQ_ERR_SUCCESS)
                sub_mids_[mid] = i;
        }
    }
    wake();
    return Status();
}

bool MqttClient::ready() const {
    std::lock_guard<std::mutex> lk(mu_);
    return ready_locked();
}

bool MqttClient::ready_locked() const {
    return session_up_ && std::all_of(sub_acked_.begin(), sub_acked_.end(), [](bool b) { return b; });
}

bool MqttClient::wait_ready(int timeout_ms) const {
    std::unique_lock<std::mutex> lk(mu_);
    return ready_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms),
                              [&] { return ready_locked(); });
}

// ---- inbox -------------------------------------------------------------------------------------

bool MqttClient::pop(MqttMessage* out, int timeout_us) {
    if (opts_.pop_spin_us > 0 && timeout_us != 0 && inbox_size_.load(std::memory_order_acquire) == 0) {
        int64_t end = mqtt_now_us() + std::min(opts_.pop_spin_us, timeout_us < 0 ? opts_.pop_spin_us : timeout_us);
        while (inbox_size_.load(std::memory_order_acquire) == 0 && mqtt_now_us() < end) {
        }
    }
    std::unique_lock<std::mutex> lk(in_mu_);
    if (inbox_.empty()) {
        if (timeout_us == 0) return false;
        if (timeout_us < 0) {
            in_cv_.wait(lk, [&] { return !inbox_.empty(); });
        } else if (!in_cv_.wait_for(lk, std::chrono::microseconds(timeout_us),
                                    [&] { return !inbox_.empty(); })) {
            return false;
        }
    }
    *out = std::move(inbox_.front());
    inbox_.pop_front();
    inbox_size_.store(inbox_.size(), std::memory_order_release);
    return true;
}

void MqttClient::set_handler(Handler h) {
    std::lock_guard<std::mutex> g(h_mu_);  // waits for a running handler call
    handler_ = std::move(h);
    has_handler_.store(bool(handler_), std::memory_order_release);
    if (handler_) wake();  // messages already in the inbox
}

// Network thread: hands the oldest inbox message to the handler. True if more are waiting.
bool MqttClient::run_handler_once() {
    std::lock_guard<std::mutex> g(h_mu_);
    if (!handler_ || inbox_size_.load(std::memory_order_acquire) == 0) return false;
    {
        std::lock_guard<std::mutex> lk(in_mu_);
        if (inbox_.empty()) return false;
        h_msg_ = std::move(inbox_.front());
        inbox_.pop_front();
        inbox_size_.store(inbox_.size(), std::memory_order_release);
    }
    handler_(h_msg_);
    return inbox_size_.load(std::memory_order_acquire) > 0;
}

MqttClient::Stats MqttClient::stats() const {
    Stats s{};
    s.connects = n_.connects.load();
    s.disconnects = n_.disconnects.load();
    s.in_msgs = n_.in_msgs.load();
    s.in_dropped = n_.in_dropped.load();
    s.out_accepted = n_.out_accepted.load();
    s.out_delivered = n_.out_delivered.load();
    {
        std::lock_guard<std::mutex> lk(mu_);
        s.out_pending = pending_;
    }
    s.out_rejected_full = n_.out_rejected_full.load();
    s.duplicates_in = n_.duplicates_in.load();
    s.out_resent = n_.out_resent.load();
    s.out_unrouted = n_.out_unrouted.load();
    s.out_failed = n_.out_failed.load();
    s.out_dropped_offline = n_.out_dropped_offline.load();
    s.out_qos0 = n_.out_qos0.load();
    return s;
}

// ---- libmosquitto callbacks (mu_ is held) ------------------------------------------------------

void MqttClient::on_connect(mosquitto*, void* obj, int rc, int, const mosquitto_property*) {
    auto* c = static_cast<MqttClient*>(obj);
    if (rc != 0) {
        c->log(str_cat("broker ", c->opts_.host, ":", c->opts_.port, " refused the connection: ",
                       c->opts_.protocol == 5 ? mosquitto_reason_string(rc)
                                              : mosquitto_connack_string(rc)));
        c->lost_ = true;
        return;
    }
    int64_t now = mqtt_now_us();
    c->session_up_ = true;
    c->connected_.store(true, std::memory_order_release);
    c->n_.connects.fetch_add(1);
    if (c->logged_down_) {
        c->log(str_cat("connected to ", c->opts_.host, ":", c->opts_.port,
                       c->n_.connects.load() > 1 ? " again" : "", "; re-subscribing ",
                       c->subs_.size(), " topic(s), re-sending ", c->pending_, " message(s)"));
        c->logged_down_ = false;
    }
    c->backoff_ms_ = c->opts_.reconnect_min_ms;
    // A restarted broker has lost every subscription: subscribe again, every time.
    for (size_t i = 0; i < c->subs_.size(); ++i) {
        c->sub_acked_[i] = false;
        int mid = 0;
        if (mosquitto_subscribe_v5(c->mosq_, &mid, c->subs_[i].topic.c_str(), c->subs_[i].qos, 0,
                                   nullptr) == MOSQ_ERR_SUCCESS)
            c->sub_mids_[mid] = i;
    }
    // Every un-acked message goes out again, in seq order.
    for (Out& o : c->outbox_) {
        o.mid = -1;
        o.retry_at_us = 0;
    }
    c->has_unsent_ = c->pending_ > 0;
    if (c->has_unsent_) c->send_unsent_locked(now);
    c->ready_cv_.notify_all();
}

void MqttClient::on_disconnect(mosquitto*, void* obj, int, const mosquitto_property*) {
    static_cast<MqttClient*>(obj)->lost_ = true;
}

void MqttClient::on_publish(mosquitto*, void* obj, int mid, int rc, const mosquitto_property*) {
    auto* c = static_cast<MqttClient*>(obj);
    auto it = c->mid_seq_.find(mid);
    if (it == c->mid_seq_.end()) return;  // QoS 0, or an older connection's mid
    uint64_t seq = it->second;
    c->mid_seq_.erase(it);
    Out* o = c->find_locked(seq);
    if (!o || o->acked) return;
    o->mid = -1;
    if (rc == MQTT_RC_NO_MATCHING_SUBSCRIBERS) {
        // After a broker restart the subscribers may not have re-subscribed yet: hold and retry.
        int64_t now = mqtt_now_us();
        if (o->unrouted_since_us == 0) o->unrouted_since_us = now;
        if (now - o->unrouted_since_us < int64_t(c->opts_.unrouted_hold_ms) * 1000) {
            o->retry_at_us = now + 50000;
            c->has_unsent_ = true;
            return;
        }
        c->n_.out_unrouted.fetch_add(1, std::memory_order_relaxed);
    } else if (rc >= 0x80) {
        c->n_.out_failed.fetch_add(1, std::memory_order_relaxed);
        if (c->n_.out_failed.load() == 1 || c->n_.out_failed.load() % 1000 == 0)
            c->log(str_cat("broker refused publish to '", o->topic, "' (seq ", seq,
                           "): ", mosquitto_reason_string(rc), " [", c->n_.out_failed.load(),
                           " refused so far]"));
    } else {
        c->n_.out_delivered.fetch_add(1, std::memory_order_relaxed);
    }
    c->settle_locked(*o);
}

void MqttClient::on_subscribe(mosquitto*, void* obj, int mid, int n, const int* granted,
                              const mosquitto_property*) {
    auto* c = static_cast<MqttClient*>(obj);
    auto it = c->sub_mids_.find(mid);
    if (it == c->sub_mids_.end()) return;
    size_t i = it->second;
    c->sub_mids_.erase(it);
    if (n >= 1 && granted[0] >= 0x80)
        c->log(str_cat("broker refused subscription to '", c->subs_[i].topic, "': ",
                       c->opts_.protocol == 5 ? mosquitto_reason_string(granted[0])
                                              : "failure"));
    c->sub_acked_[i] = true;
    c->ready_cv_.notify_all();
}

void MqttClient::on_message(mosquitto*, void* obj, const mosquitto_message* m,
                            const mosquitto_property* props) {
    auto* c = static_cast<MqttClient*>(obj);
    MqttMessage msg;
    msg.recv_us = mqtt_now_us();
    const mosquitto_property* p = props;
    bool first = true;
    while (p) {
        char* name = nullptr;
        char* value = nullptr;
        p = mosquitto_property_read_string_pair(p, MQTT_PROP_USER_PROPERTY, &name, &value, !first);
        first = false;
        if (!p) break;
        if (name && value) {
            if (std::strcmp(name, "seq") == 0) {
                msg.seq = std::strtoull(value, nullptr, 10);
            } else if (std::strcmp(name, "src") == 0) {
                msg.src = value;
            } else if (std::strcmp(name, "dup") == 0) {
                msg.possible_dup = true;
            }
        }
        std::free(name);
        std::free(value);
    }
    if (msg.seq != 0 && c->dedupe_.seen(msg.src.empty() ? std::string(m->topic) : msg.src, msg.seq)) {
        c->n_.duplicates_in.fetch_add(1, std::memory_order_relaxed);
        if (c->opts_.drop_duplicates) return;
    }
    msg.topic = m->topic;
    const uint8_t* b = static_cast<const uint8_t*>(m->payload);
    msg.payload.assign(b, b + m->payloadlen);
    {
        std::lock_guard<std::mutex> lk(c->in_mu_);
        if (c->inbox_.size() >= c->opts_.inbox_capacity) {
            c->inbox_.pop_front();  // drop the oldest: fresh sensor data beats stale
            c->n_.in_dropped.fetch_add(1, std::memory_order_relaxed);
        }
        c->inbox_.push_back(std::move(msg));
        c->inbox_size_.store(c->inbox_.size(), std::memory_order_release);
        c->n_.in_msgs.fetch_add(1, std::memory_order_relaxed);
    }
    c->in_cv_.notify_one();
}

}  // namespace jiffy::agent
