// `jiffy loadtest`: argument parsing, request construction from the model's metadata, the
// open-loop load engine (one epoll loop driving many keep-alive connections) and the reports.
#include "serve/loadtest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "core/npy.h"
#include "core/tensor.h"
#include "serve/repository.h"

namespace jiffy::serve {

using json = nlohmann::json;

namespace {

const char* kUsage =
    "usage: jiffy loadtest --url http://HOST:PORT --model M [options] (--rps R1,R2,.. | --step FROM:TO:xF|+D) --duration S\n"
    "  --version V            model version (default: the server's latest)\n"
    "  --input NAME=FILE.npy  input tensor (repeatable; inputs not given are random, shaped from the metadata)\n"
    "  --shape NAME=DxD..     shape for a random input whose metadata has dynamic (-1) dims (default 1)\n"
    "  --binary               send tensors with the binary data extension (and ask for binary outputs)\n"
    "  --rps LIST             offered request rates, one step each (e.g. 10,100,1000)\n"
    "  --step FROM:TO:xF      rates FROM, FROM*F, ... up to TO (or FROM:TO:+D for a linear step)\n"
    "  --duration S           seconds per step (default 10)\n"
    "  --arrival constant|poisson   arrival process (default constant)\n"
    "  --connections N        cap on open connections (default 256); more are opened while all are busy\n"
    "  --timeout-ms N         a request unanswered this long counts as a timeout (default 5000)\n"
    "  --late-us N            a request sent later than this after its scheduled time is a late start (default 1000)\n"
    "  --pause-ms N           pause between steps (default 500)\n"
    "  --json FILE            write the results as JSON\n"
    "  --svg FILE             write a chart of latency and goodput against offered load\n"
    "  --seed N               random inputs and Poisson arrivals (default 1)\n";

struct ArgError {
    std::string msg;
};

struct Options {
    std::string host = "127.0.0.1", model, version, json_out, svg_out;
    int port = 8000;
    std::vector<std::pair<std::string, std::string>> inputs, shapes;
    bool binary = false, poisson = false;
    std::vector<double> rates;
    double duration = 10;
    int connections = 256;
    int64_t timeout_ms = 5000, late_us = 1000, pause_ms = 500;
    uint64_t seed = 1;
};

double parse_double(const std::string& flag, const std::string& s) {
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end || errno || !std::isfinite(v)) throw ArgError{"bad number for " + flag + ": '" + s + "'"};
    return v;
}

int64_t parse_int(const std::string& flag, const std::string& s, int64_t lo, int64_t hi) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end || errno || v < lo || v > hi)
        throw ArgError{"bad value for " + flag + ": '" + s + "' (expected an integer in " + std::to_string(lo) + ".." +
                       std::to_string(hi) + ")"};
    return v;
}

std::pair<std::string, std::string> split_eq(const std::string& flag, const std::string& s) {
    size_t p = s.rfind('=');
    if (p == std::string::npos || p == 0) throw ArgError{flag + " expects NAME=VALUE, got '" + s + "'"};
    return {s.substr(0, p), s.substr(p + 1)};
}

void parse_url(const std::string& u, Options* o) {
    const std::string pre = "http://";
    if (u.compare(0, pre.size(), pre) != 0) throw ArgError{"--url must start with http:// (got '" + u + "')"};
    std::string rest = u.substr(pre.size());
    size_t slash = rest.find('/');
    if (slash != std::string::npos) {
        if (rest.find_first_not_of('/', slash) != std::string::npos)
            throw ArgError{"--url must be the server's base address, e.g. http://127.0.0.1:8000 (got '" + u + "')"};
        rest = rest.substr(0, slash);
    }
    size_t colon = rest.rfind(':');
    if (colon != std::string::npos && rest.find(']') == std::string::npos) {
        o->host = rest.substr(0, colon);
        o->port = int(parse_int("--url port", rest.substr(colon + 1), 1, 65535));
    } else {
        o->host = rest;
        o->port = 80;
    }
    if (o->host.empty()) throw ArgError{"--url has no host: '" + u + "'"};
}

Options parse_args(int argc, char** argv) {
    Options o;
    bool have_url = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) throw ArgError{"missing value after " + a};
            return argv[++i];
        };
        if (a == "--url") {
            parse_url(next(), &o);
            have_url = true;
        } else if (a == "--model") o.model = next();
        else if (a == "--version") o.version = next();
        else if (a == "--input") o.inputs.push_back(split_eq(a, next()));
        else if (a == "--shape") o.shapes.push_back(split_eq(a, next()));
        else if (a == "--binary") o.binary = true;
        else if (a == "--rps") {
            std::string s = next();
            size_t p = 0;
            while (p <= s.size()) {
                size_t q = s.find(',', p);
                if (q == std::string::npos) q = s.size();
                o.rates.push_back(parse_double(a, s.substr(p, q - p)));
                p = q + 1;
            }
        } else if (a == "--step") {
            std::string s = next();
            size_t c1 = s.find(':'), c2 = c1 == std::string::npos ? c1 : s.find(':', c1 + 1);
            if (c2 == std::string::npos || c2 + 2 > s.size() || (s[c2 + 1] != 'x' && s[c2 + 1] != '+'))
                throw ArgError{"--step expects FROM:TO:xFACTOR or FROM:TO:+DELTA, got '" + s + "'"};
            double from = parse_double(a, s.substr(0, c1)), to = parse_double(a, s.substr(c1 + 1, c2 - c1 - 1));
            double f = parse_double(a, s.substr(c2 + 2));
            bool mul = s[c2 + 1] == 'x';
            if (from <= 0 || to < from || (mul ? f <= 1 : f <= 0))
                throw ArgError{"--step '" + s + "': need 0 < FROM <= TO and a factor > 1 (or a delta > 0)"};
            for (double r = from; r <= to * (1 + 1e-9) && o.rates.size() < 1000; r = mul ? r * f : r + f) o.rates.push_back(r);
        } else if (a == "--duration") o.duration = parse_double(a, next());
        else if (a == "--arrival") {
            std::string s = next();
            if (s != "constant" && s != "poisson") throw ArgError{"--arrival must be constant or poisson"};
            o.poisson = s == "poisson";
        } else if (a == "--connections") o.connections = int(parse_int(a, next(), 1, 60000));
        else if (a == "--timeout-ms") o.timeout_ms = parse_int(a, next(), 1, 3600000);
        else if (a == "--late-us") o.late_us = parse_int(a, next(), 0, 3600000000);
        else if (a == "--pause-ms") o.pause_ms = parse_int(a, next(), 0, 3600000);
        else if (a == "--json") o.json_out = next();
        else if (a == "--svg") o.svg_out = next();
        else if (a == "--seed") o.seed = uint64_t(parse_int(a, next(), 0, INT64_MAX));
        else if (a == "-h" || a == "--help") throw ArgError{""};
        else throw ArgError{"unknown option '" + a + "' (see jiffy loadtest --help)"};
    }
    if (!have_url) throw ArgError{"missing --url http://HOST:PORT"};
    if (o.model.empty()) throw ArgError{"missing --model NAME"};
    if (o.rates.empty()) throw ArgError{"missing --rps or --step"};
    for (double r : o.rates)
        if (!(r > 0) || r > 1e7) throw ArgError{"request rates must be in (0, 1e7] per second"};
    if (!(o.duration > 0) || o.duration > 86400) throw ArgError{"--duration must be in (0, 86400] seconds"};
    return o;
}

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ------------------------------------------------------------------ one blocking request (setup)

struct Addr {
    sockaddr_storage sa{};
    socklen_t len = 0;
};

Addr resolve(const std::string& host, int port) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0 || !res) throw ArgError{"cannot resolve '" + host + "': " + gai_strerror(rc)};
    Addr a;
    std::memcpy(&a.sa, res->ai_addr, res->ai_addrlen);
    a.len = res->ai_addrlen;
    freeaddrinfo(res);
    return a;
}

// Parses a response head in buf[0..n): status and Content-Length. Returns the head's length
// (through the blank line), 0 when incomplete, -1 when malformed.
ptrdiff_t parse_head(const char* buf, size_t n, int* status, size_t* clen, bool* close) {
    std::string_view v(buf, n);
    size_t e = v.find("\r\n\r\n");
    if (e == std::string_view::npos) return n > 65536 ? -1 : 0;
    if (e < 12 || v.compare(0, 7, "HTTP/1.") != 0) return -1;
    int st = 0;
    auto r = std::from_chars(buf + 9, buf + 12, st);
    if (r.ec != std::errc() || st < 100 || st > 599) return -1;
    *status = st;
    *clen = 0;
    *close = v[7] == '0';
    bool have_len = false;
    size_t p = v.find("\r\n");
    while (p < e) {
        size_t q = v.find("\r\n", p + 2);
        std::string_view line = v.substr(p + 2, q - p - 2);
        size_t c = line.find(':');
        if (c != std::string_view::npos) {
            std::string name(line.substr(0, c));
            for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
            std::string_view val = line.substr(c + 1);
            while (!val.empty() && val.front() == ' ') val.remove_prefix(1);
            if (name == "content-length") {
                auto rr = std::from_chars(val.data(), val.data() + val.size(), *clen);
                if (rr.ec != std::errc()) return -1;
                have_len = true;
            } else if (name == "connection") {
                std::string lv(val);
                for (char& ch : lv) ch = char(std::tolower(static_cast<unsigned char>(ch)));
                if (lv.find("close") != std::string::npos) *close = true;
                if (lv.find("keep-alive") != std::string::npos) *close = false;
            }
        }
        p = q;
    }
    if (!have_len && st != 204 && st != 304 && st >= 200) return -1;  // we only speak Content-Length
    return ptrdiff_t(e + 4);
}

// A blocking GET/POST with a deadline, for the metadata and the warm-up request.
bool blocking_request(const Addr& a, const std::string& req, int* status, std::string* body, std::string* err) {
    int fd = socket(a.sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = std::strerror(errno);
        return false;
    }
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    auto fail = [&](const std::string& m) {
        *err = m;
        close(fd);
        return false;
    };
    if (connect(fd, reinterpret_cast<const sockaddr*>(&a.sa), a.len) != 0) return fail(std::strerror(errno));
    for (size_t off = 0; off < req.size();) {
        ssize_t n = send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
        if (n <= 0) return fail("send failed");
        off += size_t(n);
    }
    std::string in;
    char b[65536];
    while (true) {
        int st;
        size_t clen;
        bool cl;
        ptrdiff_t h = parse_head(in.data(), in.size(), &st, &clen, &cl);
        if (h < 0) return fail("malformed HTTP response");
        if (h > 0 && in.size() >= size_t(h) + clen) {
            *status = st;
            *body = in.substr(size_t(h), clen);
            close(fd);
            return true;
        }
        ssize_t n = recv(fd, b, sizeof b, 0);
        if (n <= 0) return fail(n == 0 ? "connection closed" : std::strerror(errno));
        in.append(b, size_t(n));
    }
}

// ------------------------------------------------------------------ the request

void put_number(std::string& s, DType t, const uint8_t* p) {
    char b[40];
    std::to_chars_result r{};
    switch (t) {
        case DType::kF32: { float v; std::memcpy(&v, p, 4); r = std::to_chars(b, b + 40, v); break; }
        case DType::kF64: { double v; std::memcpy(&v, p, 8); r = std::to_chars(b, b + 40, v); break; }
        case DType::kF16: { uint16_t v; std::memcpy(&v, p, 2); r = std::to_chars(b, b + 40, f16_to_f32(v)); break; }
        case DType::kBF16: { uint16_t v; std::memcpy(&v, p, 2); r = std::to_chars(b, b + 40, bf16_to_f32(v)); break; }
        case DType::kBool: s += *p ? "true" : "false"; return;
        case DType::kU8: r = std::to_chars(b, b + 40, unsigned(*p)); break;
        case DType::kI8: r = std::to_chars(b, b + 40, int(int8_t(*p))); break;
        case DType::kU16: { uint16_t v; std::memcpy(&v, p, 2); r = std::to_chars(b, b + 40, v); break; }
        case DType::kI16: { int16_t v; std::memcpy(&v, p, 2); r = std::to_chars(b, b + 40, v); break; }
        case DType::kU32: { uint32_t v; std::memcpy(&v, p, 4); r = std::to_chars(b, b + 40, v); break; }
        case DType::kI32: { int32_t v; std::memcpy(&v, p, 4); r = std::to_chars(b, b + 40, v); break; }
        case DType::kU64: { uint64_t v; std::memcpy(&v, p, 8); r = std::to_chars(b, b + 40, v); break; }
        case DType::kI64: { int64_t v; std::memcpy(&v, p, 8); r = std::to_chars(b, b + 40, v); break; }
        default: return;
    }
    if (!std::isfinite(std::strtod(std::string(b, r.ptr).c_str(), nullptr))) s += "0";  // JSON has no NaN/Inf
    else s.append(b, r.ptr);
}

void fill_random(Tensor& t, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    auto* p = static_cast<uint8_t*>(t.data());
    size_t es = dtype_size(t.dtype());
    for (int64_t i = 0; i < t.numel(); ++i, p += es) {
        double v = u(rng);
        switch (t.dtype()) {
            case DType::kF32: { float f = float(v); std::memcpy(p, &f, 4); break; }
            case DType::kF64: std::memcpy(p, &v, 8); break;
            case DType::kF16: { uint16_t h = f32_to_f16(float(v)); std::memcpy(p, &h, 2); break; }
            case DType::kBF16: { uint16_t h = f32_to_bf16(float(v)); std::memcpy(p, &h, 2); break; }
            case DType::kBool: *p = v > 0; break;
            default: {
                int64_t iv = int64_t((v + 1) * 5);  // 0..9: valid for every integer type
                std::memcpy(p, &iv, es);
            }
        }
    }
}

struct Request {
    std::string bytes;  // the whole HTTP request
    std::string description;
};

Request build_request(const Options& o, const Addr& addr) {
    std::string path = "/v2/models/" + o.model + (o.version.empty() ? "" : "/versions/" + o.version);
    int st = 0;
    std::string body, err;
    if (!blocking_request(addr, "GET " + path + " HTTP/1.1\r\nHost: " + o.host + "\r\n\r\n", &st, &body, &err))
        throw ArgError{"cannot reach " + o.host + ":" + std::to_string(o.port) + ": " + err};
    if (st != 200) throw ArgError{"GET " + path + ": HTTP " + std::to_string(st) + " " + body};
    json meta = json::parse(body, nullptr, false);
    if (meta.is_discarded() || !meta.is_object() || !meta.contains("inputs") || !meta["inputs"].is_array())
        throw ArgError{"GET " + path + ": metadata without an 'inputs' list"};
    std::mt19937_64 rng(o.seed);
    json head = {{"inputs", json::array()}};
    std::string data_json, bin;
    std::vector<std::string> used;
    std::string desc;
    for (const json& in : meta["inputs"]) {
        if (!in.is_object() || !in.contains("name") || !in["name"].is_string() || !in.contains("datatype") ||
            !in["datatype"].is_string() || !in.contains("shape") || !in["shape"].is_array())
            throw ArgError{"GET " + path + ": malformed input in the metadata: " + in.dump()};
        std::string name = in["name"], dt = in["datatype"];
        DType t;
        if (!dtype_from_kserve(dt, &t) || dtype_size(t) == 0)
            throw ArgError{"input '" + name + "': datatype " + dt + " is not supported by loadtest"};
        Tensor x;
        auto given = std::find_if(o.inputs.begin(), o.inputs.end(), [&](const auto& p) { return p.first == name; });
        if (given != o.inputs.end()) {
            Status s = read_npy(given->second, &x);
            if (!s.ok()) throw ArgError{"--input " + name + ": " + s.message()};
            if (x.dtype() != t)
                throw ArgError{"--input " + name + " (" + given->second + "): dtype " + dtype_name(x.dtype()) +
                               " but the model expects " + dt};
            used.push_back(name);
        } else {
            Shape sh;
            auto sg = std::find_if(o.shapes.begin(), o.shapes.end(), [&](const auto& p) { return p.first == name; });
            if (sg != o.shapes.end()) {
                std::string s = sg->second;
                for (size_t p = 0; p <= s.size();) {
                    size_t q = s.find_first_of("x,", p);
                    if (q == std::string::npos) q = s.size();
                    sh.push_back(parse_int("--shape " + name, s.substr(p, q - p), 0, int64_t(1) << 32));
                    p = q + 1;
                }
            } else {
                for (const json& d : in["shape"]) {
                    if (!d.is_number_integer()) throw ArgError{"input '" + name + "': non-integer dim in the metadata"};
                    sh.push_back(std::max<int64_t>(1, d.get<int64_t>()));  // dynamic dims: 1
                }
            }
            x = Tensor(t, sh);
            fill_random(x, rng);
        }
        json ij = {{"name", name}, {"datatype", dt}, {"shape", x.shape()}};
        desc += (desc.empty() ? "" : ", ") + name + " " + dt + " " + shape_str(x.shape());
        if (o.binary) {
            ij["parameters"] = {{"binary_data_size", x.nbytes()}};
            bin.append(static_cast<const char*>(x.data()), x.nbytes());
        } else {
            // "data" is written by hand (json would print floats with 17 digits): placeholder.
            ij["data"] = "\x01" + std::to_string(head["inputs"].size());
            std::string d = "[";
            const auto* p = static_cast<const uint8_t*>(x.data());
            for (int64_t i = 0; i < x.numel(); ++i) {
                if (i) d += ',';
                put_number(d, t, p + size_t(i) * dtype_size(t));
            }
            data_json += d + "]";
            data_json += '\0';
        }
        head["inputs"].push_back(ij);
    }
    for (const auto& [n, f] : o.inputs)
        if (std::find(used.begin(), used.end(), n) == used.end()) throw ArgError{"--input " + n + ": the model has no input of that name"};
    if (o.binary) head["parameters"] = {{"binary_data_output", true}};
    std::string h = head.dump();
    if (!o.binary) {  // splice the data arrays into the placeholders
        size_t off = 0;
        for (size_t i = 0; i < head["inputs"].size(); ++i) {
            std::string ph = "\"\\u0001" + std::to_string(i) + "\"";
            size_t at = h.find(ph);
            size_t e = data_json.find('\0', off);
            h.replace(at, ph.size(), data_json.substr(off, e - off));
            off = e + 1;
        }
    }
    Request r;
    r.bytes = "POST " + path + "/infer HTTP/1.1\r\nHost: " + o.host + "\r\nContent-Type: " +
              (o.binary ? "application/octet-stream" : "application/json") + "\r\n";
    if (o.binary) r.bytes += "Inference-Header-Content-Length: " + std::to_string(h.size()) + "\r\n";
    r.bytes += "Content-Length: " + std::to_string(h.size() + bin.size()) + "\r\n\r\n" + h + bin;
    r.description = desc + (o.binary ? " (binary)" : " (JSON)") + ", " + std::to_string(h.size() + bin.size()) + " B body";
    // One request first: fail early and clearly when the model refuses it.
    int rst = 0;
    std::string rbody;
    if (!blocking_request(addr, r.bytes, &rst, &rbody, &err)) throw ArgError{"first infer request failed: " + err};
    if (rst != 200 && rst != 503) throw ArgError{"first infer request: HTTP " + std::to_string(rst) + " " + rbody.substr(0, 300)};
    return r;
}

// ------------------------------------------------------------------ the load engine

struct Conn {
    int fd = -1;
    size_t slot = 0;     // index in Engine::conns_
    bool connecting = true, busy = false, want_out = false;
    int64_t sched = 0;   // scheduled send time of the request in flight
    int64_t sent_at = 0; // when its first byte was written
    size_t sent = 0;     // bytes of it written
    std::string in;
};

class Engine {
public:
    Engine(const Options& o, const Addr& a, const std::string& req) : o_(o), addr_(a), req_(req) {
        ep_ = epoll_create1(EPOLL_CLOEXEC);
        tfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = ~uint64_t(0);
        epoll_ctl(ep_, EPOLL_CTL_ADD, tfd_, &ev);
    }
    ~Engine() {
        close_all();
        close(tfd_);
        close(ep_);
    }

    LoadStep run(double rate, std::mt19937_64& rng) {
        LoadStep s;
        s.offered_rps = rate;
        s.duration_s = o_.duration;
        // The schedule, fixed before the first request (ns from the start).
        sched_.clear();
        const double dur_ns = o_.duration * 1e9;
        std::exponential_distribution<double> ex(rate);
        for (double t = 0;;) {
            if (o_.poisson) t += ex(rng) * 1e9;
            if (t >= dur_ns) break;
            sched_.push_back(int64_t(t));
            if (!o_.poisson) t = double(sched_.size()) * 1e9 / rate;
        }
        s.scheduled = int64_t(sched_.size());
        ok_lat_.clear();
        rej_lat_.clear();
        ok_sent_.clear();
        rej_sent_.clear();
        ok_lat_.reserve(sched_.size());
        step_ = &s;
        opened_ = 0;
        for (int i = 0; i < std::min(o_.connections, 4); ++i) open_conn();  // warm start; more on demand
        t0_ = now_ns() + 20000000;  // 20 ms for the first connections
        next_ = 0;
        inflight_ = 0;
        const int64_t timeout_ns = o_.timeout_ms * 1000000;
        const int64_t hard_end = t0_ + int64_t(dur_ns) + timeout_ns + 1000000000;
        int64_t last_sweep = 0;
        epoll_event evs[256];
        while (true) {
            int64_t now = now_ns();
            dispatch(now);
            if (next_ == sched_.size() && inflight_ == 0) break;
            if (now > hard_end) break;
            if (now - last_sweep > 10000000) {  // every 10 ms: requests past --timeout-ms
                last_sweep = now;
                for (auto& c : conns_)
                    if (c && c->busy && now - (t0_ + c->sched) > timeout_ns) {
                        ++s.timeouts;
                        drop(c, false);
                    }
            }
            // Sleep until the next scheduled send (timerfd: ns precision) or an event.
            int timeout = 10;
            if (next_ < sched_.size() && have_idle()) {
                itimerspec its{};
                int64_t at = t0_ + sched_[next_];
                if (at <= now_ns()) {
                    timeout = 0;
                } else {
                    its.it_value.tv_sec = at / 1000000000;
                    its.it_value.tv_nsec = at % 1000000000;
                    timerfd_settime(tfd_, TFD_TIMER_ABSTIME, &its, nullptr);
                }
            }
            int n = epoll_wait(ep_, evs, 256, timeout);
            for (int i = 0; i < n; ++i) {
                if (evs[i].data.u64 == ~uint64_t(0)) {
                    uint64_t x;
                    while (read(tfd_, &x, sizeof x) > 0) {
                    }
                    continue;
                }
                size_t slot = size_t(evs[i].data.u64);
                if (slot >= conns_.size() || !conns_[slot]) continue;
                on_event(slot, evs[i].events);
            }
        }
        for (auto& c : conns_)  // unanswered at the hard end
            if (c && c->busy) ++s.timeouts;
        close_all();
        s.connections = opened_;
        s.ok = int64_t(ok_lat_.size());
        s.goodput_rps = double(s.ok) / o_.duration;
        s.rejections = int64_t(rej_lat_.size());
        summarize(ok_lat_, &s.p50_us, &s.p99_us, &s.p999_us, &s.max_us, &s.mean_us);
        double d1, d2, d3, d4;
        summarize(rej_lat_, &s.rejected_p50_us, &s.rejected_p99_us, &d1, &s.rejected_max_us, &d2);
        summarize(ok_sent_, &d1, &s.p99_sent_us, &d2, &d3, &d4);
        summarize(rej_sent_, &d1, &s.rejected_p99_sent_us, &d2, &d3, &d4);
        step_ = nullptr;
        return s;
    }

private:
    static void summarize(std::vector<int64_t>& v, double* p50, double* p99, double* p999, double* mx, double* mean) {
        if (v.empty()) return;
        std::sort(v.begin(), v.end());
        auto pct = [&](double p) { return double(v[std::min(v.size() - 1, size_t(std::ceil(p * double(v.size()))) - 1)]) / 1e3; };
        *p50 = pct(0.5);
        *p99 = pct(0.99);
        *p999 = pct(0.999);
        *mx = double(v.back()) / 1e3;
        double sum = 0;
        for (int64_t x : v) sum += double(x);
        *mean = sum / double(v.size()) / 1e3;
    }

    bool have_idle() const { return !idle_.empty(); }

    // Sends every request that is due, on idle connections; opens connections when none is idle.
    void dispatch(int64_t now) {
        while (next_ < sched_.size() && t0_ + sched_[next_] <= now) {
            if (idle_.empty()) {
                size_t due = 0;
                for (size_t k = next_; k < sched_.size() && t0_ + sched_[k] <= now; ++k) ++due;
                int64_t want = int64_t(due) - connecting_;
                while (want-- > 0 && open_ < o_.connections) open_conn();
                return;
            }
            Conn* c = idle_.back();
            idle_.pop_back();
            c->busy = true;
            c->sched = sched_[next_++];
            c->sent = 0;
            c->sent_at = now;
            c->in.clear();
            ++inflight_;
            if (now - (t0_ + c->sched) > o_.late_us * 1000) ++step_->late_starts;
            write_some(c);
            now = now_ns();
        }
    }

    void open_conn() {
        int fd = socket(addr_.sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            if (step_) ++step_->errors;
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr_.sa), addr_.len);
        if (rc != 0 && errno != EINPROGRESS) {
            close(fd);
            if (step_) ++step_->errors;
            return;
        }
        size_t slot = 0;
        while (slot < conns_.size() && conns_[slot]) ++slot;
        if (slot == conns_.size()) conns_.emplace_back();
        auto c = std::make_unique<Conn>();
        c->fd = fd;
        c->connecting = true;
        c->want_out = true;
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLOUT;
        ev.data.u64 = slot;
        epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
        c->slot = slot;
        conns_[slot] = std::move(c);
        ++open_;
        ++opened_;
        ++connecting_;
    }

    void set_out(Conn* c, bool on) {
        if (c->want_out == on) return;
        c->want_out = on;
        epoll_event ev{};
        ev.events = EPOLLIN | (on ? EPOLLOUT : 0u);
        ev.data.u64 = c->slot;
        epoll_ctl(ep_, EPOLL_CTL_MOD, c->fd, &ev);
    }

    void write_some(Conn* c) {
        while (c->sent < req_.size()) {
            ssize_t n = send(c->fd, req_.data() + c->sent, req_.size() - c->sent, MSG_NOSIGNAL);
            if (n > 0) {
                c->sent += size_t(n);
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                set_out(c, true);
                return;
            }
            if (n < 0 && errno == EINTR) continue;
            ++step_->errors;
            drop_ptr(c, true);
            return;
        }
        set_out(c, false);
    }

    // Note: dispatch() may open connections (conns_ grows), so slots are re-indexed after it.
    void on_event(size_t slot, uint32_t evs) {
        Conn* c = conns_[slot].get();
        if (c->connecting) {
            if (!(evs & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
            int err = 0;
            socklen_t l = sizeof err;
            getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
            --connecting_;
            c->connecting = false;
            if (err != 0) {
                ++step_->errors;
                close_slot(conns_[slot]);
                return;
            }
            set_out(c, false);
            idle_.push_back(c);
            dispatch(now_ns());
            return;
        }
        if ((evs & EPOLLOUT) && c->busy && c->sent < req_.size()) write_some(c);
        if (!conns_[slot]) return;
        if (evs & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(conns_[slot]);
    }

    void on_readable(std::unique_ptr<Conn>& cp) {
        Conn* c = cp.get();
        char b[65536];
        while (true) {
            ssize_t n = recv(c->fd, b, sizeof b, 0);
            if (n > 0) {
                c->in.append(b, size_t(n));
                if (size_t(n) < sizeof b) break;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            if (n < 0 && errno == EINTR) continue;
            // closed or reset
            if (c->busy) ++step_->errors;
            close_slot(cp);
            return;
        }
        if (!c->busy) {  // bytes nobody asked for
            ++step_->errors;
            close_slot(cp);
            return;
        }
        int st;
        size_t clen;
        bool cl;
        ptrdiff_t h = parse_head(c->in.data(), c->in.size(), &st, &clen, &cl);
        if (h == 0) return;
        if (h < 0) {
            ++step_->errors;
            drop(cp, false);
            return;
        }
        if (st == 100) {  // 100 Continue: drop it and wait for the real answer
            c->in.erase(0, size_t(h));
            return;
        }
        if (c->in.size() < size_t(h) + clen) return;
        int64_t t = now_ns(), lat = t - (t0_ + c->sched);
        if (st >= 200 && st < 300) {
            ok_lat_.push_back(lat);
            ok_sent_.push_back(t - c->sent_at);
        } else if (st == 503) {
            rej_lat_.push_back(lat);
            rej_sent_.push_back(t - c->sent_at);
        }
        else if (st == 504 || st == 408) ++step_->timeouts;
        else ++step_->errors;
        bool extra = c->in.size() > size_t(h) + clen;
        c->busy = false;
        --inflight_;
        if (cl || extra) {
            if (extra) ++step_->errors;
            close_slot(cp);
            return;
        }
        idle_.push_back(c);
        dispatch(now_ns());
    }

    // Closes a connection whose request failed or expired (already counted by the caller).
    void drop(std::unique_ptr<Conn>& cp, bool) {
        if (cp->busy) {
            cp->busy = false;
            --inflight_;
        }
        close_slot(cp);
    }
    void drop_ptr(Conn* c, bool b) { drop(conns_[c->slot], b); }

    void close_slot(std::unique_ptr<Conn>& cp) {
        Conn* c = cp.get();
        if (c->busy) {
            c->busy = false;
            --inflight_;
        }
        if (c->connecting) --connecting_;
        idle_.erase(std::remove(idle_.begin(), idle_.end(), c), idle_.end());
        epoll_ctl(ep_, EPOLL_CTL_DEL, c->fd, nullptr);
        close(c->fd);
        cp.reset();
        --open_;
    }

    void close_all() {
        for (auto& c : conns_)
            if (c) close_slot(c);
        conns_.clear();
        idle_.clear();
        connecting_ = 0;
    }

    const Options& o_;
    Addr addr_;
    const std::string& req_;
    int ep_ = -1, tfd_ = -1;
    std::vector<std::unique_ptr<Conn>> conns_;
    std::vector<Conn*> idle_;
    int64_t open_ = 0, opened_ = 0, connecting_ = 0, inflight_ = 0;
    std::vector<int64_t> sched_, ok_lat_, rej_lat_, ok_sent_, rej_sent_;
    size_t next_ = 0;
    int64_t t0_ = 0;
    LoadStep* step_ = nullptr;
};

// ------------------------------------------------------------------ reports

std::string fmt_us(double us) {
    if (us < 0) return "-";
    char b[32];
    if (us >= 10000) std::snprintf(b, sizeof b, "%.1f ms", us / 1000);
    else if (us >= 1000) std::snprintf(b, sizeof b, "%.2f ms", us / 1000);
    else std::snprintf(b, sizeof b, "%.0f µs", us);
    return b;
}

std::string markdown(const std::vector<LoadStep>& steps) {
    std::string s =
        "| offered rps | goodput (2xx/s) | p50 | p99 | p99.9 | 503s | 503 p50 | 503 p99 | timeouts | errors | late starts | conns |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    char b[512];
    for (const LoadStep& x : steps) {
        std::snprintf(b, sizeof b, "| %.0f | %.1f | %s | %s | %s | %lld | %s | %s | %lld | %lld | %lld | %lld |\n",
                      x.offered_rps, x.goodput_rps, fmt_us(x.p50_us).c_str(), fmt_us(x.p99_us).c_str(),
                      fmt_us(x.p999_us).c_str(), (long long)x.rejections, fmt_us(x.rejected_p50_us).c_str(),
                      fmt_us(x.rejected_p99_us).c_str(), (long long)x.timeouts, (long long)x.errors,
                      (long long)x.late_starts, (long long)x.connections);
        s += b;
    }
    return s;
}

json step_json(const LoadStep& x) {
    auto num = [](double v) { return v < 0 ? json(nullptr) : json(std::round(v * 10) / 10); };
    return json{{"offered_rps", x.offered_rps},     {"duration_s", x.duration_s},   {"scheduled", x.scheduled},
                {"ok", x.ok},                       {"goodput_rps", x.goodput_rps}, {"p50_us", num(x.p50_us)},
                {"p99_us", num(x.p99_us)},          {"p999_us", num(x.p999_us)},    {"max_us", num(x.max_us)},
                {"mean_us", num(x.mean_us)},        {"rejections", x.rejections},   {"rejected_p50_us", num(x.rejected_p50_us)},
                {"rejected_p99_us", num(x.rejected_p99_us)}, {"rejected_max_us", num(x.rejected_max_us)},
                {"p99_from_send_us", num(x.p99_sent_us)}, {"rejected_p99_from_send_us", num(x.rejected_p99_sent_us)},
                {"timeouts", x.timeouts},           {"errors", x.errors},           {"late_starts", x.late_starts},
                {"connections", x.connections}};
}

bool write_file(const std::string& path, const std::string& s) {
    std::ofstream f(path, std::ios::binary);
    f << s;
    return bool(f);
}

}  // namespace

int loadtest_main(int argc, char** argv) {
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // wake at the scheduled send time, not 50 us later
    try {
        Options o = parse_args(argc, argv);
        Addr addr = resolve(o.host, o.port);
        Request r = build_request(o, addr);
        std::fprintf(stderr, "jiffy loadtest: %s:%d model '%s'%s: %s; %zu step(s) of %.3g s, %s arrivals, up to %d connections\n",
                     o.host.c_str(), o.port, o.model.c_str(), o.version.empty() ? "" : (" version " + o.version).c_str(),
                     r.description.c_str(), o.rates.size(), o.duration, o.poisson ? "Poisson" : "constant-rate",
                     o.connections);
        Engine eng(o, addr, r.bytes);
        std::mt19937_64 rng(o.seed);
        std::vector<LoadStep> steps;
        for (size_t i = 0; i < o.rates.size(); ++i) {
            if (i && o.pause_ms) usleep(useconds_t(o.pause_ms * 1000));
            steps.push_back(eng.run(o.rates[i], rng));
            const LoadStep& x = steps.back();
            std::fprintf(stderr, "jiffy loadtest: %.0f rps offered: goodput %.1f/s, p99 %s, %lld rejected, %lld timeouts, %lld errors\n",
                         x.offered_rps, x.goodput_rps, fmt_us(x.p99_us).c_str(), (long long)x.rejections,
                         (long long)x.timeouts, (long long)x.errors);
        }
        std::printf("%s", markdown(steps).c_str());
        std::string title = "jiffy loadtest: " + o.model + (o.version.empty() ? "" : " v" + o.version) + " (" +
                            (o.binary ? "binary" : "JSON") + ", " + (o.poisson ? "Poisson" : "constant") + " arrivals, " +
                            std::to_string(int(o.duration)) + " s/step)";
        if (!o.json_out.empty()) {
            json j{{"url", "http://" + o.host + ":" + std::to_string(o.port)},
                   {"model", o.model},
                   {"version", o.version},
                   {"binary", o.binary},
                   {"arrival", o.poisson ? "poisson" : "constant"},
                   {"request", r.description},
                   {"steps", json::array()}};
            for (const LoadStep& x : steps) j["steps"].push_back(step_json(x));
            if (!write_file(o.json_out, j.dump(2) + "\n")) throw ArgError{"cannot write --json " + o.json_out};
        }
        if (!o.svg_out.empty() && !write_file(o.svg_out, loadtest_svg(title, steps)))
            throw ArgError{"cannot write --svg " + o.svg_out};
        return 0;
    } catch (const ArgError& e) {
        if (e.msg.empty()) {
            std::printf("%s", kUsage);
            return 0;
        }
        std::fprintf(stderr, "jiffy loadtest: error: %s\n", e.msg.c_str());
        return 2;
    }
}

}  // namespace jiffy::serve
