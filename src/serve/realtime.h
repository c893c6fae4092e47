// `jiffy serve --realtime`: the I/O thread and the ring thread run SCHED_FIFO (when permitted),
// so that on a busy machine a woken request is not left waiting for a core behind batch jobs.
// Worker threads (serve/batcher.h) compute for long stretches and stay SCHED_OTHER: a real-time
// thread that computes all the time runs into the kernel's RT throttling (long stalls).
#pragma once
#include <string>

namespace jiffy::serve {

// Puts the calling thread under SCHED_FIFO at `priority` (1..99). false with *why when not
// permitted (no CAP_SYS_NICE / RLIMIT_RTPRIO) or invalid.
bool set_thread_fifo(int priority, std::string* why);
// Returns the calling thread to SCHED_OTHER if it inherited a real-time policy from its creator.
void drop_realtime();

}  // namespace jiffy::serve
