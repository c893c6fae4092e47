// Sources: where an agent's events come from. A source delivers frames of float32 samples.
//
// Two ways to drive one:
// - pull(): the source can produce its next frame on demand, with a due time (file replay,
//   timers). The agent calls it on its own thread when it is the agent's only source, so an
//   event costs no thread handoff; otherwise a source thread calls it and feeds the queue.
// - run(): the source blocks on I/O (stdin, MQTT) on its own thread and pushes each frame into
//   the agent's bounded queue (sink.push(...)).
// An MQTT source is a push source: its message callback decodes the payload with
// decode_payload (payload.h) into a frame and calls FrameSink::push.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "agent/queue.h"
#include "core/status.h"

namespace jiffy::agent {

// Where a push source delivers frames (the agent's queue).
class FrameSink {
public:
    virtual ~FrameSink() = default;
    virtual void push(const float* data, const FrameMeta& m) = 0;
    // Counts a payload the source could not decode (it is reported, never fatal).
    virtual void bad_input(const std::string& what) = 0;
};

class Source {
public:
    virtual ~Source() = default;

    // Floats per frame (the largest frame; the agent's input buffer has this size) and its shape.
    virtual size_t frame_size() const = 0;
    virtual std::vector<int64_t> frame_shape() const { return {1, int64_t(frame_size())}; }
    // Channel names for values "<source>.<channel>" (the newest row's column); may be empty.
    virtual std::vector<std::string> channels() const { return {}; }
    // Samples per second of the stream (a WAV file's rate, a raw file's or MQTT source's
    // `rate`); 0 when unknown. A resample stage takes it as its default `from`.
    virtual double sample_rate() const { return 0; }

    virtual bool can_pull() const { return false; }
    // True if running the agent's stages on the thread that calls FrameSink::push keeps this
    // source's guarantees (`execution: auto` then runs inline): MQTT, whose bounded drop-oldest
    // inbox sits before that thread and is read between two events.
    virtual bool inline_ok() const { return false; }
    enum Pull { kFrame, kEnd };
    // Writes the next frame into out (frame_size() floats) and its meta (n, media time, and
    // event_us = its due time on the steady clock, 0 = now). `start_us` is the replay origin.
    virtual Pull pull(float* out, FrameMeta* m, int64_t start_us) { return kEnd; }

    // Push sources: runs until `stop` (or end of input), delivering to `sink`.
    virtual void run(FrameSink* sink, const std::atomic<bool>& stop) {}

    // Frames the source itself dropped (e.g. a full MQTT inbox; counted in the agent's drops) and
    // one line about its own state for the exit table (e.g. the MQTT connection); may be empty.
    virtual uint64_t dropped() const { return 0; }
    virtual std::string report() const { return ""; }

    std::string name, type;
};

}  // namespace jiffy::agent
