// CPU features and the ISA the kernels use, chosen once at start-up. JIFFY_ISA=scalar|avx2|avx512
// (x86-64) or scalar|neon (aarch64) forces a lower ISA (never a higher one than the CPU has, nor
// another architecture's) so every path is testable here.
#pragma once

namespace jiffy::kernels {

// Ordered within an architecture: kScalar < kNeon (aarch64), kScalar < kAvx2 < kAvx512 (x86-64),
// so `int(cpu_isa()) >= int(Isa::kAvx2)` is false on ARM.
enum class Isa { kScalar = 0, kNeon = 1, kAvx2 = 2, kAvx512 = 3 };

Isa cpu_isa();     // best the CPU supports
Isa active_isa();  // cpu_isa() capped by JIFFY_ISA (read once)
const char* isa_name(Isa isa);

}  // namespace jiffy::kernels
