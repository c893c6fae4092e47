#!/usr/bin/python3
# The medians of several `jiffy_vs_ort --json` runs as the Markdown table of docs/benchmarks.md:
#   scripts/median_table.py run1.json run2.json run3.json
# p50 / p99 / ORT p50 / floor: medians over the runs; ratio: each run's, then their median; met: the
# median ratio (and p50, where the target has an absolute bound) against the target.
import json, sys, statistics as st
runs = [json.load(open(f)) for f in sys.argv[1:]]
peak = st.median(r['fma_peak_gflops'] for r in runs)
names = [m['model'] for m in runs[0]['models']]
def fmt(x):
    if x >= 1000: return f"{x:,.0f}"
    if x >= 100: return f"{x:.0f}"
    return f"{x:.2f}"
# spin p99: the spin control's (jiffy_vs_ort, models under 100 us; "-" where not run).
print("| model | class | Jiffy p50 µs | Jiffy p99 µs | spin p99 µs | GFLOP/s | % peak | floor µs | Jiffy / floor | ORT p50 µs | ORT / floor | ratio per run | median ratio | target | met |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|")
met = 0
for n in names:
    ms = [[m for m in r['models'] if m['model'] == n][0] for r in runs]
    jp = st.median(m['jiffy_p50_us'] for m in ms); j99 = st.median(m['jiffy_p99_us'] for m in ms)
    op = st.median(m['ort_p50_us'] for m in ms); fl = st.median(m['floor_us'] for m in ms)
    rat = [m['ratio'] for m in ms]; mr = st.median(rat)
    t = ms[0]['target_ratio']; ta = ms[0]['target_abs_us']
    ok = mr <= t and (ta == 0 or jp <= ta); met += ok
    g = ms[0]['flops'] / jp / 1e3
    tgt = f"≤ {t:.2f}" + (f" and ≤ {ta:g} µs" if ta else "")
    flo = fmt(fl) if fl > 0 else "-"
    sp = [m.get('spin_p99_us', 0) for m in ms]
    spin = fmt(st.median(sp)) if all(x > 0 for x in sp) else "-"
    print(f"| {n} | {ms[0]['class']} | {fmt(jp)} | {fmt(j99)} | {spin} | {g:.1f} | {100*g/peak:.0f} | {flo} | {jp/fl if fl>0 else 0:.2f} | {fmt(op)} | {op/fl if fl>0 else 0:.2f} | {' / '.join(f'{x:.2f}' for x in rat)} | **{mr:.2f}** | {tgt} | {'yes' if ok else 'no'} |")
print(f"\nFMA peak {peak:.0f} GFLOP/s (median of the runs' probes). {met} of {len(names)} targets met by the medians.")
