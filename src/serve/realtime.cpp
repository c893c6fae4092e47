#include "serve/realtime.h"

#include <pthread.h>
#include <sched.h>

#include <cstring>

namespace jiffy::serve {

bool set_thread_fifo(int priority, std::string* why) {
    sched_param sp{};
    sp.sched_priority = priority;
    int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
    if (rc != 0) {
        *why = std::strerror(rc);
        return false;
    }
    return true;
}

void drop_realtime() {
    int policy = 0;
    sched_param sp{};
    if (pthread_getschedparam(pthread_self(), &policy, &sp) != 0 || (policy != SCHED_FIFO && policy != SCHED_RR)) return;
    sp.sched_priority = 0;
    pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
}

}  // namespace jiffy::serve
