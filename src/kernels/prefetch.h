// A cache line prefetched for writing (the kernels' output lines whose first store would otherwise
// wait for its read-for-ownership): prefetchw on x86-64, a write prefetch elsewhere.
#pragma once

namespace jiffy::kernels {

inline __attribute__((always_inline)) void pf_write(float* p) {
#if defined(__x86_64__)
    asm volatile("prefetchw %0" : : "m"(*p));  // every x86-64 CPU with AVX2 has it
#else
    __builtin_prefetch(p, 1, 3);
#endif
}

}  // namespace jiffy::kernels
