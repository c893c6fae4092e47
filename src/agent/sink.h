// Sinks: where an agent's actions go. Every action carries the agent's name, a sequence number
// (per agent, so a receiver can drop duplicates), the event time, the action time, the values the
// config asks for, and `stale` when its deadline had already passed (a stale action is never
// published as fresh: it is marked, or dropped where the sink says drop_stale).
//
// emit() runs on the agent thread: sinks that block on I/O (webhook, MQTT) hand the line to
// their own thread through a bounded outbox (AsyncSink) and count what they drop.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace jiffy::agent {

class Source;

struct Action {
    const char* agent = "";
    uint64_t seq = 0;
    int64_t event_unix_us = 0, action_unix_us = 0;  // wall clock
    int64_t latency_us = 0;                          // event -> action, steady clock
    double media_s = -1;                             // position in a replayed file (-1: none)
    const char* media = nullptr;                     // the replayed stream's name (file stem), if any
    bool stale = false;
    const char* rule = nullptr;                      // the rule that fired, if any
    const std::vector<std::string>* names = nullptr;  // value names ...
    const double* values = nullptr;                   // ... and their values (same count)
};

// Formats `a` as one JSON line (no trailing newline) into out, reusing its capacity.
void format_action_json(const Action& a, std::string* out);

class Sink {
public:
    virtual ~Sink() = default;
    // Called once when the agent is created, with its sources: a sink may share a source's
    // connection (the MQTT sink publishes on the agent's MQTT source's client).
    virtual void share_with(const std::vector<std::unique_ptr<Source>>& sources) {}
    virtual Status start() { return {}; }
    // `json` is format_action_json(a). Must not throw or block for long.
    virtual void emit(const Action& a, const std::string& json) = 0;
    virtual void stop() {}
    // One line about the sink's own state for the exit table (e.g. the MQTT outbox); may be empty.
    virtual std::string report() const { return ""; }
    std::string name, type;
    bool drop_stale = false;
    std::atomic<uint64_t> sent{0}, errors{0}, dropped{0};
};

}  // namespace jiffy::agent
