// CPU features and the ISA the kernels use, chosen once at start-up. JIFFY_ISA=scalar|avx2|avx512
// forces a lower ISA (never a higher one than the CPU has) so every path is testable here.
#pragma once

namespace jiffy::kernels {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

Isa cpu_isa();     // best the CPU supports
Isa active_isa();  // cpu_isa() capped by JIFFY_ISA (read once)
const char* isa_name(Isa isa);

}  // namespace jiffy::kernels
