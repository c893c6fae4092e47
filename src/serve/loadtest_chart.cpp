// The loadtest chart, drawn by hand as SVG: two panels against offered load — latency
// percentiles of the 2xx responses (and of the 503s) on a log axis, and goodput with the
// offered-load diagonal for reference. The x axis is logarithmic when the rates span 10x or more.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "serve/loadtest.h"

namespace jiffy::serve {

namespace {

std::string esc(const std::string& s) {
    std::string r;
    for (char c : s) {
        if (c == '&') r += "&amp;";
        else if (c == '<') r += "&lt;";
        else if (c == '>') r += "&gt;";
        else if (c == '"') r += "&quot;";
        else if (static_cast<unsigned char>(c) < 0x20) r += ' ';
        else r += c;
    }
    return r;
}

std::string num(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f", v);
    return b;
}

std::string rate_label(double v) {
    char b[32];
    if (v >= 1e6) std::snprintf(b, sizeof b, "%gM", v / 1e6);
    else if (v >= 1e3) std::snprintf(b, sizeof b, "%gk", v / 1e3);
    else std::snprintf(b, sizeof b, "%g", v);
    return b;
}

std::string us_label(double us) {
    char b[32];
    if (us >= 1e6) std::snprintf(b, sizeof b, "%g s", us / 1e6);
    else if (us >= 1e3) std::snprintf(b, sizeof b, "%g ms", us / 1e3);
    else std::snprintf(b, sizeof b, "%g µs", us);
    return b;
}

// A linear or log10 axis mapping [lo, hi] onto [p0, p1] pixels.
struct Axis {
    double lo = 0, hi = 1, p0 = 0, p1 = 1;
    bool log = false;
    double map(double v) const {
        double a = log ? std::log10(std::max(v, 1e-12)) : v, l = log ? std::log10(lo) : lo, h = log ? std::log10(hi) : hi;
        return p0 + (a - l) / (h - l) * (p1 - p0);
    }
    std::vector<double> ticks() const {
        std::vector<double> t;
        if (log) {
            for (double d = std::pow(10, std::floor(std::log10(lo))); d <= hi * 1.0001; d *= 10)
                if (d >= lo * 0.9999) t.push_back(d);
            return t;
        }
        double raw = (hi - lo) / 5, mag = std::pow(10, std::floor(std::log10(raw)));
        double step = raw / mag < 1.5 ? mag : raw / mag < 3.5 ? 2 * mag : raw / mag < 7.5 ? 5 * mag : 10 * mag;
        for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-6; v += step) t.push_back(v);
        return t;
    }
};

Axis log_axis(double mn, double mx, double p0, double p1) {
    Axis a;
    a.log = true;
    a.lo = std::pow(10, std::floor(std::log10(std::max(mn, 1e-3))));
    a.hi = std::pow(10, std::ceil(std::log10(std::max(mx, a.lo * 10))));
    if (a.hi <= a.lo) a.hi = a.lo * 10;
    a.p0 = p0;
    a.p1 = p1;
    return a;
}

Axis lin_axis(double mx, double p0, double p1) {
    Axis a;
    a.lo = 0;
    double raw = std::max(mx, 1e-9) * 1.05, mag = std::pow(10, std::floor(std::log10(raw)));
    a.hi = std::ceil(raw / mag * 2) / 2 * mag;  // round up to a half step
    a.p0 = p0;
    a.p1 = p1;
    return a;
}

struct Series {
    std::string name, color;
    bool dashed;
    std::vector<std::pair<double, double>> pts;  // (x, y), y > 0 for log axes
};

// One panel: frame, grid, ticks, labels, series and legend.
void panel(std::string& s, double x0, double y0, double w, double h, const Axis& xa, const Axis& ya,
           const std::string& title, const std::string& xlabel, const std::string& ylabel, const std::vector<Series>& ser,
           bool y_us) {
    s += "<g>\n";
    s += "<rect x=\"" + num(x0) + "\" y=\"" + num(y0) + "\" width=\"" + num(w) + "\" height=\"" + num(h) +
         "\" fill=\"#ffffff\" stroke=\"#333333\"/>\n";
    s += "<text x=\"" + num(x0 + w / 2) + "\" y=\"" + num(y0 - 10) + "\" text-anchor=\"middle\" font-size=\"14\">" + esc(title) + "</text>\n";
    for (double t : xa.ticks()) {
        double px = xa.map(t);
        s += "<line x1=\"" + num(px) + "\" y1=\"" + num(y0) + "\" x2=\"" + num(px) + "\" y2=\"" + num(y0 + h) +
             "\" stroke=\"#dddddd\"/>\n";
        s += "<text x=\"" + num(px) + "\" y=\"" + num(y0 + h + 16) + "\" text-anchor=\"middle\" font-size=\"11\">" +
             esc(rate_label(t)) + "</text>\n";
    }
    for (double t : ya.ticks()) {
        double py = ya.map(t);
        s += "<line x1=\"" + num(x0) + "\" y1=\"" + num(py) + "\" x2=\"" + num(x0 + w) + "\" y2=\"" + num(py) +
             "\" stroke=\"#dddddd\"/>\n";
        s += "<text x=\"" + num(x0 - 6) + "\" y=\"" + num(py + 4) + "\" text-anchor=\"end\" font-size=\"11\">" +
             esc(y_us ? us_label(t) : rate_label(t)) + "</text>\n";
    }
    s += "<text x=\"" + num(x0 + w / 2) + "\" y=\"" + num(y0 + h + 36) + "\" text-anchor=\"middle\" font-size=\"12\">" +
         esc(xlabel) + "</text>\n";
    s += "<text transform=\"translate(" + num(x0 - 58) + "," + num(y0 + h / 2) +
         ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" + esc(ylabel) + "</text>\n";
    int li = 0;
    for (const Series& se : ser) {
        std::string pts;
        for (const auto& [x, y] : se.pts) {
            double cy = std::clamp(ya.map(y), y0, y0 + h);
            pts += num(xa.map(x)) + "," + num(cy) + " ";
        }
        std::string dash = se.dashed ? " stroke-dasharray=\"6,4\"" : "";
        if (!se.pts.empty()) {
            s += "<polyline fill=\"none\" stroke=\"" + se.color + "\" stroke-width=\"2\"" + dash + " points=\"" + pts + "\"/>\n";
            for (const auto& [x, y] : se.pts)
                s += "<circle cx=\"" + num(xa.map(x)) + "\" cy=\"" + num(std::clamp(ya.map(y), y0, y0 + h)) +
                     "\" r=\"3\" fill=\"" + se.color + "\"/>\n";
        }
        double ly = y0 + 14 + 16 * li++, lx = x0 + 10;
        s += "<line x1=\"" + num(lx) + "\" y1=\"" + num(ly - 4) + "\" x2=\"" + num(lx + 24) + "\" y2=\"" + num(ly - 4) +
             "\" stroke=\"" + se.color + "\" stroke-width=\"2\"" + dash + "/>\n";
        s += "<text x=\"" + num(lx + 30) + "\" y=\"" + num(ly) + "\" font-size=\"11\">" + esc(se.name) + "</text>\n";
    }
    s += "</g>\n";
}

}  // namespace

std::string loadtest_svg(const std::string& title, const std::vector<LoadStep>& steps) {
    const double W = 1000, H = 440, pw = 380, ph = 300, top = 70;
    std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(W) +
                    "\" height=\"" + num(H) + "\" viewBox=\"0 0 " + num(W) + " " + num(H) +
                    "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"#fafafa\"/>\n";
    s += "<text x=\"" + num(W / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">" + esc(title) + "</text>\n";
    if (steps.empty()) return s + "</svg>\n";
    double xmin = 1e300, xmax = 0, lmin = 1e300, lmax = 0, gmax = 0;
    for (const LoadStep& x : steps) {
        xmin = std::min(xmin, x.offered_rps);
        xmax = std::max(xmax, x.offered_rps);
        gmax = std::max({gmax, x.goodput_rps, x.offered_rps, double(x.rejections) / std::max(x.duration_s, 1e-9)});
        for (double v : {x.p50_us, x.p99_us, x.p999_us, x.rejected_p99_us})
            if (v > 0) {
                lmin = std::min(lmin, v);
                lmax = std::max(lmax, v);
            }
    }
    if (lmax <= 0) lmin = 1, lmax = 10;
    auto xaxis = [&](double p0) {
        if (xmax >= xmin * 10) return log_axis(xmin, xmax, p0, p0 + pw);
        Axis a = lin_axis(xmax, p0, p0 + pw);
        return a;
    };
    const double x1 = 90, x2 = 90 + pw + 130;
    Axis lx = xaxis(x1), ly = log_axis(lmin, lmax, top + ph, top);
    std::vector<Series> lat = {{"p50", "#1f77b4", false, {}}, {"p99", "#ff7f0e", false, {}}, {"p99.9", "#d62728", false, {}},
                               {"503 p99 (rejected)", "#7f7f7f", true, {}}};
    for (const LoadStep& x : steps) {
        if (x.p50_us > 0) lat[0].pts.emplace_back(x.offered_rps, x.p50_us);
        if (x.p99_us > 0) lat[1].pts.emplace_back(x.offered_rps, x.p99_us);
        if (x.p999_us > 0) lat[2].pts.emplace_back(x.offered_rps, x.p999_us);
        if (x.rejected_p99_us > 0) lat[3].pts.emplace_back(x.offered_rps, x.rejected_p99_us);
    }
    if (lat[3].pts.empty()) lat.pop_back();
    panel(s, x1, top, pw, ph, lx, ly, "Latency (from scheduled send time)", "offered load (requests/s)", "latency", lat, true);
    Axis gx = xaxis(x2), gy = lin_axis(gmax, top + ph, top);
    std::vector<Series> gp = {{"goodput (2xx/s)", "#2ca02c", false, {}}, {"offered", "#999999", true, {}},
                              {"rejected (503/s)", "#9467bd", false, {}}};
    bool any_rej = false;
    for (const LoadStep& x : steps) {
        gp[0].pts.emplace_back(x.offered_rps, x.goodput_rps);
        gp[1].pts.emplace_back(x.offered_rps, x.offered_rps);
        gp[2].pts.emplace_back(x.offered_rps, double(x.rejections) / std::max(x.duration_s, 1e-9));
        any_rej = any_rej || x.rejections > 0;
    }
    if (!any_rej) gp.pop_back();
    panel(s, x2, top, pw, ph, gx, gy, "Goodput", "offered load (requests/s)", "responses/s", gp, false);
    return s + "</svg>\n";
}

}  // namespace jiffy::serve
