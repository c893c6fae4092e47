// MqttClient against a real mosquitto broker that each test starts on its own free port.
#include "agent/mqtt.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "mosquitto_fixture.h"

using jiffy::agent::MqttClient;
using jiffy::agent::MqttMessage;
using jiffy::agent::MqttOptions;
using jiffy::agent::SeqDedupe;
using jiffy::testing::MosquittoBroker;
using Clock = std::chrono::steady_clock;

namespace {

MqttOptions opts_for(const MosquittoBroker& b, const std::string& id) {
    MqttOptions o;
    o.port = b.port();
    o.client_id = id;
    o.log = [id](const std::string& line) { std::fprintf(stderr, "[%s] %s\n", id.c_str(), line.c_str()); };
    return o;
}

std::unique_ptr<MqttClient> make(const MqttOptions& o) {
    std::unique_ptr<MqttClient> c;
    jiffy::Status st = MqttClient::create(o, &c);
    EXPECT_TRUE(st.ok()) << st.message();
    return c;
}

template <typename F>
bool wait_until(F f, int timeout_ms) {
    auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < end) {
        if (f()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return f();
}

std::string as_string(const MqttMessage& m) { return std::string(m.payload.begin(), m.payload.end()); }

}  // namespace

TEST(Mqtt, RejectsMalformedOptions) {
    std::unique_ptr<MqttClient> c;
    MqttOptions o;
    o.host = "";
    jiffy::Status st = MqttClient::create(o, &c);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("host is empty"), std::string::npos) << st.message();
    for (int port : {0, -1, 65536}) {
        o = MqttOptions();
        o.port = port;
        st = MqttClient::create(o, &c);
        EXPECT_FALSE(st.ok());
        EXPECT_NE(st.message().find("port"), std::string::npos) << st.message();
    }
    o = MqttOptions();
    o.protocol = 3;
    EXPECT_FALSE(MqttClient::create(o, &c).ok());
    o = MqttOptions();
    o.reconnect_min_ms = 500;
    o.reconnect_max_ms = 100;
    EXPECT_FALSE(MqttClient::create(o, &c).ok());
    o = MqttOptions();
    o.shared_group = "a/b";
    EXPECT_FALSE(MqttClient::create(o, &c).ok());
    EXPECT_EQ(c, nullptr);
}

TEST(Mqtt, RoundTripQos0AndQos1) {
    MosquittoBroker broker;
    ASSERT_TRUE(broker.start()) << broker.log_text();
    auto sub = make(opts_for(broker, "rt-sub"));
    auto pub = make(opts_for(broker, "rt-pub"));
    ASSERT_TRUE(sub->subscribe("rt/#", 1).ok());
    ASSERT_TRUE(sub->wait_ready(3000));
    ASSERT_TRUE(pub->wait_ready(3000));
    EXPECT_TRUE(pub->connected());

    uint64_t s0 = 0, s1 = 0;
    ASSERT_TRUE(pub->publish("rt/q0", "hello0", 6, 0, &s0).ok());
    ASSERT_TRUE(pub->publish("rt/q1", "hello1", 6, 1, &s1).ok());
    EXPECT_EQ(s0, 1u);
    EXPECT_EQ(s1, 2u);
    std::map<std::string, MqttMessage> got;
    MqttMessage m;
    while (got.size() < 2 && sub->pop(&m, 2000000)) got[m.topic] = m;
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(as_string(got["rt/q0"]), "hello0");
    EXPECT_EQ(got["rt/q0"].seq, 1u);
    EXPECT_EQ(as_string(got["rt/q1"]), "hello1");
    EXPECT_EQ(got["rt/q1"].seq, 2u);
    EXPECT_EQ(got["rt/q1"].src, pub->source_id());
    EXPECT_FALSE(got["rt/q1"].possible_dup);
    EXPECT_GT(got["rt/q1"].recv_us, 0);

    // A 2560-byte binary payload arrives byte for byte.
    std::vector<uint8_t> big(2560);
    for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 7 + 3);
    ASSERT_TRUE(pub->publish("rt/big", big.data(), big.size(), 1, nullptr).ok());
    ASSERT_TRUE(sub->pop(&m, 2000000));
    EXPECT_EQ(m.payload, big);

    ASSERT_TRUE(wait_until([&] { return pub->stats().out_delivered == 2; }, 2000));
    auto ps = pub->stats();
    EXPECT_EQ(ps.out_accepted, 2u);
    EXPECT_EQ(ps.out_pending, 0u);
    EXPECT_EQ(ps.out_qos0, 1u);
    EXPECT_EQ(ps.connects, 1u);
    EXPECT_EQ(sub->stats().in_msgs, 3u);

    // Bad publish arguments are errors, not crashes.
    EXPECT_FALSE(pub->publish("rt/+", "x", 1, 1, nullptr).ok());
    EXPECT_FALSE(pub->publish("", "x", 1, 1, nullptr).ok());
    EXPECT_FALSE(pub->publish("rt/x", "x", 1, 2, nullptr).ok());
    EXPECT_FALSE(sub->subscribe("a/#/b", 0).ok());
}

TEST(Mqtt, Mqtt311RoundTrip) {
    MosquittoBroker broker;
    ASSERT_TRUE(broker.start()) << broker.log_text();
    auto o = opts_for(broker, "v4-sub");
    o.protocol = 4;
    auto sub = make(o);
    o.client_id = "v4-pub";
    auto pub = make(o);
    ASSERT_TRUE(sub->subscribe("v4/t", 1).ok());
    ASSERT_TRUE(sub->wait_ready(3000));
    ASSERT_TRUE(pub->wait_ready(3000));
    ASSERT_TRUE(pub->publish("v4/t", "abc", 3, 1, nullptr).ok());
    MqttMessage m;
    ASSERT_TRUE(sub->pop(&m, 2000000));
    EXPECT_EQ(as_string(m), "abc");
    EXPECT_EQ(m.seq, 0u);  // no user properties in MQTT 3.1.1
    EXPECT_TRUE(wait_until([&] { return pub->stats().out_delivered == 1; }, 2000));
}

TEST(Mqtt, ResubscribesAfterBrokerRestart) {
    MosquittoBroker broker;
    ASSERT_TRUE(broker.start()) << broker.log_text();
    auto sub = make(opts_for(broker, "rs-sub"));
    auto pub = make(opts_for(broker, "rs-pub"));
    ASSERT_TRUE(sub->subscribe("rs/t", 0).ok());
    ASSERT_TRUE(sub->wait_ready(3000));
    ASSERT_TRUE(pub->wait_ready(3000));

    broker.kill9();
    ASSERT_TRUE(wait_until([&] { return !sub->connected() && !pub->connected(); }, 2000));
    ASSERT_TRUE(broker.start()) << broker.log_text();
    // The restarted broker knows no subscriptions: only our re-subscribe makes this arrive.
    ASSERT_TRUE(sub->wait_ready(3000));
    ASSERT_TRUE(pub->wait_ready(3000));
    ASSERT_TRUE(pub->publish("rs/t", "after", 5, 0, nullptr).ok());
    MqttMessage m;
    ASSERT_TRUE(sub->pop(&m, 2000000));
    EXPECT_EQ(as_string(m), "after");
    EXPECT_EQ(sub->stats().connects, 2u);
    EXPECT_EQ(sub->stats().disconnects, 1u);
}

// 500 QoS 1 messages at a steady rate; the broker is killed with -9 and restarted mid-stream.
// Every seq must reach the subscriber at least once, and both clients must be back within 2 s
// of the broker's return.
TEST(Mqtt, NoAcceptedMessageLostAcrossBrokerKill) {
    MosquittoBroker broker;
    ASSERT_TRUE(broker.start()) << broker.log_text();
    auto so = opts_for(broker, "kill-sub");
    so.drop_duplicates = false;  // count duplicates ourselves too
    so.inbox_capacity = 4096;
    auto sub = make(so);
    auto pub = make(opts_for(broker, "kill-pub"));
    ASSERT_TRUE(sub->subscribe("kill/t", 1).ok());
    ASSERT_TRUE(sub->wait_ready(3000));
    ASSERT_TRUE(pub->wait_ready(3000));

    std::atomic<bool> done{false};
    std::map<uint64_t, int> seen;
    std::thread reader([&] {
        MqttMessage m;
        while (!done.load()) {
            if (sub->pop(&m, 20000)) {
                EXPECT_EQ(m.src, pub->source_id());
                EXPECT_EQ(as_string(m), std::to_string(m.seq));  // payload = seq it was sent with
                ++seen[m.seq];
            }
        }
    });

    // Watch both clients: when did each come back after the kill?
    std::atomic<bool> killed{false};
    Clock::time_point pub_back{}, sub_back{};
    std::thread watcher([&] {
        while (!done.load()) {
            if (killed.load()) {
                auto now = Clock::now();
                if (pub_back == Clock::time_point{} && pub->connected()) pub_back = now;
                if (sub_back == Clock::time_point{} && sub->connected()) sub_back = now;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    });

    const int kN = 500, kKillAt = 150, kRestartAt = 300;  // 4 ms apart: down for ~600 ms
    Clock::time_point back;
    for (int i = 1; i <= kN; ++i) {
        if (i == kKillAt) {
            broker.kill9();
            ASSERT_TRUE(wait_until([&] { return !pub->connected() && !sub->connected(); }, 2000));
            killed = true;
        }
        if (i == kRestartAt) {
            ASSERT_TRUE(broker.start()) << broker.log_text();
            back = broker.started_at();
        }
        std::string body = std::to_string(i);
        uint64_t seq = 0;
        jiffy::Status st = pub->publish("kill/t", body.data(), body.size(), 1, &seq);
        ASSERT_TRUE(st.ok()) << st.message();  // accepted while the broker is down too
        ASSERT_EQ(seq, uint64_t(i));
        std::this_thread::sleep_for(std::chrono::milliseconds(4));
    }
    ASSERT_TRUE(wait_until([&] { return pub->connected() && sub->connected(); }, 2500));
    ASSERT_TRUE(wait_until([&] { return pub->stats().out_pending == 0; }, 5000))
        << "pending " << pub->stats().out_pending;
    ASSERT_TRUE(wait_until([&] { return sub->stats().in_msgs >= uint64_t(kN); }, 3000));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    done = true;
    reader.join();
    watcher.join();
    ASSERT_NE(pub_back, Clock::time_point{});
    ASSERT_NE(sub_back, Clock::time_point{});
    double pub_ms = std::chrono::duration<double, std::milli>(pub_back - back).count();
    double sub_ms = std::chrono::duration<double, std::milli>(sub_back - back).count();
    std::fprintf(stderr, "back after broker restart: publisher %.0f ms, subscriber %.0f ms\n",
                 pub_ms, sub_ms);
    EXPECT_LT(pub_ms, 2000.0);
    EXPECT_LT(sub_ms, 2000.0);

    int missing = 0, dups = 0;
    for (int i = 1; i <= kN; ++i) {
        auto it = seen.find(i);
        if (it == seen.end()) ++missing;
        else dups += it->second - 1;
    }
    auto ps = pub->stats();
    auto ss = sub->stats();
    std::fprintf(stderr, "kill test: missing %d, duplicates %d, resent %llu, unrouted %llu\n",
                 missing, dups, (unsigned long long)ps.out_resent,
                 (unsigned long long)ps.out_unrouted);
    EXPECT_EQ(missing, 0);
    EXPECT_EQ(ps.out_accepted, uint64_t(kN));
    EXPECT_EQ(ps.out_delivered, uint64_t(kN));
    EXPECT_EQ(ps.out_unrouted, 0u);
    EXPECT_EQ(ps.disconnects, 1u);
    EXPECT_EQ(ps.connects, 2u);
    EXPECT_EQ(ss.connects, 2u);
    EXPECT_EQ(ss.duplicates_in, uint64_t(dups));
}

// Messages already on the wire when the broker dies (sent, never PUBACKed) go out again after the
// reconnect, marked as possible duplicates.
TEST(Mqtt, InFlightMessagesAreResentAfterBrokerCrash) {
    MosquittoBroker broker;
    ASSERT_TRUE(broker.start()) << broker.log_text();
    auto sub = make(opts_for(broker, "if-sub"));
    auto pub = make(opts_for(broker, "if-pub"));
    ASSERT_TRUE(sub->subscribe("if/t", 1).ok());
    ASSERT_TRUE(sub->wait_ready(3000));
    ASSERT_TRUE(pub->wait_ready(3000));
    broker.pause();  // hung: connections stay open, nothing is acknowledged
    for (int i = 1; i <= 10; ++i) {
        std::string body = std::to_string(i);
        ASSERT_TRUE(pub->publish("if/t", body.data(), body.size(), 1, nullptr).ok());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(pub->stats().out_pending, 10u);
    EXPECT_TRUE(pub->connected());  // the socket is still up: the messages went out on it
    broker.kill9();
    ASSERT_TRUE(broker.start()) << broker.log_text();
    std::set<uint64_t> seqs;
    int dups = 0;
    MqttMessage m;
    while (seqs.size() < 10 && sub->pop(&m, 4000000)) {
        seqs.insert(m.seq);
        dups += m.possible_dup;
    }
    EXPECT_EQ(seqs.size(), 10u);
    EXPECT_EQ(dups, 10);  // every one of them is a re-send
    EXPECT_TRUE(wait_until([&] { return pub->stats().out_pending == 0; }, 3000));
    EXPECT_GE(pub->stats().out_resent, 10u);  // more if the publisher was back before the subscriber
    EXPECT_EQ(pub->stats().out_delivered, 10u);
}

// MQTT 5 "no matching subscribers": held and retried for unrouted_hold_ms (a subscriber that is
// late after a broker restart still gets it), then given up and counted.
TEST(Mqtt, UnroutedMessagesAreHeldThenCounted) {
    MosquittoBroker broker;
    ASSERT_TRUE(broker.start()) << broker.log_text();
    auto po = opts_for(broker, "ur-pub");
    po.unrouted_hold_ms = 1500;
    auto pub = make(po);
    ASSERT_TRUE(pub->wait_ready(3000));
    ASSERT_TRUE(pub->publish("ur/late", "1", 1, 1, nullptr).ok());
    ASSERT_TRUE(pub->publish("ur/nobody", "2", 1, 1, nullptr).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(pub->stats().out_pending, 2u);
    auto sub = make(opts_for(broker, "ur-sub"));
    ASSERT_TRUE(sub->subscribe("ur/late", 1).ok());
    MqttMessage m;
    ASSERT_TRUE(sub->pop(&m, 2000000));
    EXPECT_EQ(as_string(m), "1");
    EXPECT_EQ(m.seq, 1u);
    ASSERT_TRUE(wait_until([&] { return pub->stats().out_pending == 0; }, 3000));
    auto s = pub->stats();
    EXPECT_EQ(s.out_delivered, 1u);
    EXPECT_EQ(s.out_unrouted, 1u);
}

TEST(Mqtt, ReconnectsWithinTwoSecondsOfBrokerReturn) {
    MosquittoBroker broker;
    ASSERT_TRUE(broker.start()) << broker.log_text();
    auto c = make(opts_for(broker, "rc"));
    ASSERT_TRUE(c->wait_ready(3000));
    broker.kill9();
    ASSERT_TRUE(wait_until([&] { return !c->connected(); }, 2000));
    // Down long enough for the backoff to reach its cap (100+200+400+800+1600 ms > 2 s).
    std::this_thread::sleep_for(std::chrono::milliseconds(2200));
    ASSERT_TRUE(broker.start()) << broker.log_text();
    Clock::time_point back = broker.started_at();
    ASSERT_TRUE(wait_until([&] { return c->connected(); }, 3000));
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - back).count();
    std::fprintf(stderr, "reconnected %.0f ms after the broker accepted again\n", ms);
    EXPECT_LT(ms, 2000.0);
}

TEST(Mqtt, InboxFloodDropsOldestAndCounts) {
    MosquittoBroker broker;
    ASSERT_TRUE(broker.start()) << broker.log_text();
    auto so = opts_for(broker, "fl-sub");
    so.inbox_capacity = 16;
    auto sub = make(so);
    auto pub = make(opts_for(broker, "fl-pub"));
    ASSERT_TRUE(sub->subscribe("fl/t", 1).ok());
    ASSERT_TRUE(sub->wait_ready(3000));
    ASSERT_TRUE(pub->wait_ready(3000));
    const int kN = 300;
    for (int i = 1; i <= kN; ++i) {
        std::string body = std::to_string(i);
        ASSERT_TRUE(pub->publish("fl/t", body.data(), body.size(), 1, nullptr).ok());
    }
    ASSERT_TRUE(wait_until([&] { return sub->stats().in_msgs == uint64_t(kN); }, 5000))
        << sub->stats().in_msgs;
    auto ss = sub->stats();
    EXPECT_EQ(ss.in_dropped, uint64_t(kN - 16));
    MqttMessage m;
    std::vector<uint64_t> seqs;
    while (sub->pop(&m, 0)) seqs.push_back(m.seq);
    ASSERT_EQ(seqs.size(), 16u);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(seqs[i], uint64_t(kN - 16 + 1 + i));  // the newest, in order
}

TEST(Mqtt, MissingBrokerNeverCrashesAndOutboxIsBounded) {
    int port = MosquittoBroker::free_port();
    MqttOptions o;
    o.port = port;
    o.client_id = "nobroker";
    o.outbox_capacity = 5;
    std::vector<std::string> lines;
    std::mutex lines_mu;
    o.log = [&](const std::string& l) {
        std::lock_guard<std::mutex> lk(lines_mu);
        lines.push_back(l);
    };
    std::unique_ptr<MqttClient> c;
    ASSERT_TRUE(MqttClient::create(o, &c).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    EXPECT_FALSE(c->connected());
    EXPECT_FALSE(c->wait_ready(50));
    {
        std::lock_guard<std::mutex> lk(lines_mu);
        ASSERT_FALSE(lines.empty());
        EXPECT_NE(lines[0].find("cannot connect to 127.0.0.1:" + std::to_string(port)),
                  std::string::npos)
            << lines[0];
        EXPECT_EQ(lines.size(), 1u);  // one line for the outage, not one per retry
    }
    ASSERT_TRUE(c->subscribe("nb/t", 1).ok());  // remembered for when a broker appears
    MqttMessage m;
    EXPECT_FALSE(c->pop(&m, 1000));
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(c->publish("nb/t", "x", 1, 1, nullptr).ok());
    jiffy::Status st = c->publish("nb/t", "y", 1, 1, nullptr);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("outbox full"), std::string::npos) << st.message();
    EXPECT_TRUE(c->publish("nb/t", "z", 1, 0, nullptr).ok());  // QoS 0 offline: dropped, counted
    auto s = c->stats();
    EXPECT_EQ(s.out_accepted, 5u);
    EXPECT_EQ(s.out_pending, 5u);
    EXPECT_EQ(s.out_rejected_full, 1u);
    EXPECT_EQ(s.out_dropped_offline, 1u);
    EXPECT_EQ(s.connects, 0u);
}

TEST(Mqtt, OutboxAcceptedBeforeBrokerStartsIsDelivered) {
    MosquittoBroker broker;  // picks the port, not started yet
    auto so = opts_for(broker, "late-sub");
    auto sub = make(so);
    auto pub = make(opts_for(broker, "late-pub"));
    ASSERT_TRUE(sub->subscribe("late/t", 1).ok());
    for (int i = 0; i < 20; ++i) {
        std::string body = std::to_string(i);
        ASSERT_TRUE(pub->publish("late/t", body.data(), body.size(), 1, nullptr).ok());
    }
    EXPECT_EQ(pub->stats().out_pending, 20u);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_TRUE(broker.start()) << broker.log_text();
    std::set<uint64_t> seqs;
    MqttMessage m;
    while (seqs.size() < 20 && sub->pop(&m, 4000000)) seqs.insert(m.seq);
    EXPECT_EQ(seqs.size(), 20u);
    EXPECT_TRUE(wait_until([&] { return pub->stats().out_pending == 0; }, 3000));
    EXPECT_EQ(pub->stats().out_delivered, 20u);
}

TEST(Mqtt, SharedSubscriptionSplitsMessages) {
    MosquittoBroker broker;
    ASSERT_TRUE(broker.start()) << broker.log_text();
    auto o = opts_for(broker, "sh-a");
    o.shared_group = "workers";
    auto a = make(o);
    o.client_id = "sh-b";
    auto b = make(o);
    auto pub = make(opts_for(broker, "sh-pub"));
    ASSERT_TRUE(a->subscribe("sh/t", 1).ok());
    ASSERT_TRUE(b->subscribe("sh/t", 1).ok());
    ASSERT_TRUE(a->wait_ready(3000));
    ASSERT_TRUE(b->wait_ready(3000));
    ASSERT_TRUE(pub->wait_ready(3000));
    const int kN = 200;
    for (int i = 1; i <= kN; ++i) {
        std::string body = std::to_string(i);
        ASSERT_TRUE(pub->publish("sh/t", body.data(), body.size(), 1, nullptr).ok());
    }
    ASSERT_TRUE(wait_until(
        [&] { return a->stats().in_msgs + b->stats().in_msgs >= uint64_t(kN); }, 5000));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::map<uint64_t, int> count;
    size_t na = 0, nb = 0;
    MqttMessage m;
    while (a->pop(&m, 0)) ++count[m.seq], ++na;
    while (b->pop(&m, 0)) ++count[m.seq], ++nb;
    EXPECT_EQ(na + nb, size_t(kN));
    EXPECT_GT(na, 0u);
    EXPECT_GT(nb, 0u);
    ASSERT_EQ(count.size(), size_t(kN));
    for (auto& [seq, n] : count) EXPECT_EQ(n, 1) << "seq " << seq;
}

TEST(Mqtt, SeqDedupeWindow) {
    SeqDedupe d;
    EXPECT_FALSE(d.seen("a", 1));
    EXPECT_TRUE(d.seen("a", 1));
    EXPECT_FALSE(d.seen("b", 1));  // another source
    EXPECT_FALSE(d.seen("a", 5));
    EXPECT_FALSE(d.seen("a", 3));  // late but new
    EXPECT_TRUE(d.seen("a", 3));
    EXPECT_FALSE(d.seen("a", 2));
    EXPECT_FALSE(d.seen("a", 0));  // no seq: never a duplicate
    EXPECT_FALSE(d.seen("a", 0));
    EXPECT_FALSE(d.seen("a", 5 + SeqDedupe::kWindow + 10));  // a jump clears the window
    EXPECT_FALSE(d.seen("a", 5 + SeqDedupe::kWindow + 9));
    EXPECT_TRUE(d.seen("a", 5 + SeqDedupe::kWindow + 10));
    EXPECT_FALSE(d.seen("a", 4));  // older than the window: delivered (at least once)
}
