// Built-in sources: file replay (WAV 16-bit PCM mono, raw f32/i16, CSV) in real time or as fast as
// possible, timers, and stdin (one payload per line, decoded like an MQTT payload).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "agent/agent.h"
#include "agent/payload.h"
#include "agent/registry.h"
#include "agent/wav.h"

namespace jiffy::agent {

namespace {

// All samples in memory as rows of `cols` floats; replayed in chunks of `chunk` rows every `hop`.
class FileSource : public Source {
public:
    std::vector<float> data;
    std::vector<std::string> names;
    size_t cols = 1;
    int64_t chunk = 1, hop = 0;
    double rate = 0;     // rows per second; 0 = no pacing
    bool realtime = true;
    int64_t loops = 1;

    size_t rows() const { return data.size() / cols; }
    size_t frame_size() const override { return size_t(chunk) * cols; }
    std::vector<int64_t> frame_shape() const override {
        if (chunk == 1) return {1, int64_t(cols)};
        if (cols == 1) return {1, chunk};
        return {1, chunk, int64_t(cols)};
    }
    std::vector<std::string> channels() const override { return names; }
    double sample_rate() const override { return cols == 1 ? rate : 0; }
    bool can_pull() const override { return true; }
    // Several WAV files (`files:`) replay one after the other, each a stream of its own: frames
    // never straddle two files (a file's last partial chunk is dropped), media_s restarts at 0,
    // and FrameMeta::stream changes so that stateful stages start over.
    struct Stream {
        std::string name;
        size_t begin = 0, end = 0;  // rows
    };
    std::vector<Stream> streams;

    Pull pull(float* out, FrameMeta* m, int64_t start_us) override {
        if (streams.empty()) streams.push_back({"", 0, rows()});
        for (;;) {
            const Stream& s = streams[cur_];
            if (s.begin + pos_ + size_t(chunk) <= s.end) break;
            pos_ = 0;
            if (++cur_ < streams.size()) continue;
            cur_ = 0;
            if (++loop_ >= loops) return kEnd;
            base_rows_ += rows();
            if (size_t(chunk) > rows()) return kEnd;
        }
        const Stream& s = streams[cur_];
        size_t at = s.begin + pos_;
        std::memcpy(out, &data[at * cols], frame_size() * sizeof(float));
        size_t end = pos_ + size_t(chunk);
        m->n = frame_size();
        m->media_s = rate > 0 ? double(end) / rate : -1;
        m->media = s.name.empty() ? nullptr : s.name.c_str();
        m->stream = uint32_t(size_t(loop_) * streams.size() + cur_);
        m->event_us = (realtime && rate > 0) ? start_us + int64_t(double(base_rows_ + at + size_t(chunk)) * 1e6 / rate) : 0;
        pos_ += size_t(hop > 0 ? hop : chunk);
        return kFrame;
    }

private:
    size_t pos_ = 0, base_rows_ = 0, cur_ = 0;
    int64_t loop_ = 0;
};

Status read_file(const std::string& path, std::string* out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return invalid(path, ": cannot open: ", std::strerror(errno));
    std::ostringstream ss;
    ss << f.rdbuf();
    *out = ss.str();
    return {};
}

Status parse_csv(const std::string& path, const std::string& text, const std::vector<std::string>& want, FileSource* s) {
    std::vector<std::string> header;
    std::vector<int> pick;
    size_t line_no = 0, pos = 0, ncols = 0;
    bool first = true;
    while (pos < text.size()) {
        size_t e = text.find('\n', pos);
        if (e == std::string::npos) e = text.size();
        std::string line = text.substr(pos, e - pos);
        pos = e + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || line[0] == '#') continue;
        std::vector<std::string> cells;
        size_t b = 0;
        for (;;) {
            size_t c = line.find(',', b);
            std::string cell = line.substr(b, c == std::string::npos ? std::string::npos : c - b);
            while (!cell.empty() && cell.front() == ' ') cell.erase(cell.begin());
            while (!cell.empty() && cell.back() == ' ') cell.pop_back();
            cells.push_back(cell);
            if (c == std::string::npos) break;
            b = c + 1;
        }
        double v;
        if (first) {
            first = false;
            ncols = cells.size();
            if (!Fields::parse_double(cells[0], &v)) {  // a header
                header = cells;
                continue;
            }
            for (size_t i = 0; i < ncols; ++i) header.push_back("c" + std::to_string(i));
        }
        if (pick.empty()) {
            if (want.empty()) {
                for (size_t i = 0; i < header.size(); ++i) pick.push_back(int(i));
            } else {
                for (const auto& w : want) {
                    int k = -1;
                    for (size_t i = 0; i < header.size(); ++i)
                        if (header[i] == w) k = int(i);
                    if (k < 0) {
                        std::string list;
                        for (const auto& h : header) list += (list.empty() ? "" : ", ") + h;
                        return invalid(path, ": no column '", w, "' (columns: ", list, ")");
                    }
                    pick.push_back(k);
                }
            }
            for (int k : pick) s->names.push_back(header[size_t(k)]);
        }
        if (cells.size() != ncols) return invalid(path, ":", line_no, ": has ", cells.size(), " cells, the first row has ", ncols);
        for (int k : pick) {
            if (!Fields::parse_double(cells[size_t(k)], &v))
                return invalid(path, ":", line_no, ": column '", header[size_t(k)], "': '", cells[size_t(k)], "' is not a number");
            s->data.push_back(float(v));
        }
    }
    s->cols = pick.empty() ? 1 : pick.size();
    if (s->data.empty()) return invalid(path, ": no data rows");
    return {};
}

class TimerSource : public Source {
public:
    double period_ms = 1000;
    int64_t count = 0;  // 0 = forever
    size_t frame_size() const override { return 1; }
    bool can_pull() const override { return true; }
    Pull pull(float* out, FrameMeta* m, int64_t start_us) override {
        if (count > 0 && k_ >= count) return kEnd;
        ++k_;
        out[0] = float(k_);
        m->n = 1;
        m->event_us = start_us + int64_t(double(k_) * period_ms * 1000.0);
        return kFrame;
    }

private:
    int64_t k_ = 0;
};

class StdinSource : public Source {
public:
    PayloadFormat fmt;
    int64_t size = 1;
    size_t frame_size() const override { return size_t(size); }
    void run(FrameSink* sink, const std::atomic<bool>& stop) override {
        std::vector<float> buf(static_cast<size_t>(size));
        std::string line;
        char tmp[65536];
        while (!stop.load()) {
            // poll so that stop is seen even when stdin is quiet
            fd_set rs;
            FD_ZERO(&rs);
            FD_SET(0, &rs);
            timeval tv{0, 100000};
            int r = select(1, &rs, nullptr, nullptr, &tv);
            if (r < 0) break;
            if (r == 0) continue;
            ssize_t n = read(0, tmp, sizeof tmp);
            if (n <= 0) break;
            line.append(tmp, size_t(n));
            size_t e;
            while ((e = line.find('\n')) != std::string::npos) {
                int64_t t = now_ns() / 1000;
                handle(line.data(), e, buf.data(), sink, t);
                line.erase(0, e + 1);
            }
            if (line.size() > (1u << 20)) {
                sink->bad_input("stdin: a line longer than 1 MiB; dropped");
                line.clear();
            }
        }
        if (!line.empty()) handle(line.data(), line.size(), buf.data(), sink, now_ns() / 1000);
    }

private:
    void handle(const char* p, size_t n, float* buf, FrameSink* sink, int64_t t) {
        while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == ' ')) --n;
        if (n == 0) return;
        size_t count = 0;
        Status st = decode_payload(fmt, reinterpret_cast<const uint8_t*>(p), n, buf, size_t(size), &count);
        if (st.ok() && count != size_t(size)) st = invalid("has ", count, " values, the source's frames hold ", size);
        if (!st.ok()) {
            sink->bad_input("stdin line " + std::to_string(line_no_ + 1) + ": " + st.message());
        } else {
            FrameMeta m;
            m.event_us = t;
            m.n = count;
            sink->push(buf, m);
        }
        ++line_no_;
    }
    uint64_t line_no_ = 0;
};

}  // namespace

Status make_file_source(Fields& f, const BuildEnv& env, std::unique_ptr<Source>* out) {
    auto s = std::make_unique<FileSource>();
    std::string type = f.node()["type"].Scalar(), file;
    std::vector<std::string> files;
    if (type == "wav") JIFFY_RETURN_IF_ERROR(f.get_strings("files", &files));
    if (files.empty() || f.has("file")) JIFFY_RETURN_IF_ERROR(f.get_string("file", &file, true));
    if (!files.empty() && !file.empty()) return f.error(f.node()["files"], "give 'file' or 'files', not both");
    std::string path = env.path(file);
    JIFFY_RETURN_IF_ERROR(f.get_int("chunk", &s->chunk, false, 1, 1 << 24));
    JIFFY_RETURN_IF_ERROR(f.get_int("hop", &s->hop, false, 1, 1 << 24));
    JIFFY_RETURN_IF_ERROR(f.get_int("loops", &s->loops, false, 1, 1 << 30));
    JIFFY_RETURN_IF_ERROR(f.get_bool("realtime", &s->realtime));
    if (env.fast) s->realtime = false;
    YAML::Node file_node = f.node()["file"];
    if (type == "wav") {
        const bool many = !files.empty();
        if (!many) files.push_back(file);
        const YAML::Node wav_node = many ? f.node()["files"] : f.node()["file"];
        if (!f.has("chunk")) s->chunk = 1280;
        for (const auto& one : files) {
            WavData w;
            Status st = read_wav(env.path(one), &w);
            if (!st.ok()) return f.error(wav_node, st.message());
            if (s->rate != 0 && w.sample_rate != int(s->rate))
                return f.error(wav_node, str_cat(env.path(one), ": sample rate ", w.sample_rate, " differs from the first file's ", s->rate));
            if (w.samples.size() < size_t(s->chunk))
                return f.error(wav_node, str_cat(env.path(one), ": shorter (", w.samples.size(), " samples) than one chunk (", s->chunk, ")"));
            s->rate = w.sample_rate;
            std::string stem = one.substr(one.rfind('/') == std::string::npos ? 0 : one.rfind('/') + 1);
            if (stem.size() > 4 && stem.compare(stem.size() - 4, 4, ".wav") == 0) stem.resize(stem.size() - 4);
            s->streams.push_back({stem, s->data.size(), s->data.size() + w.samples.size()});
            s->data.insert(s->data.end(), w.samples.begin(), w.samples.end());
        }
    } else if (type == "raw") {
        std::string fmt = "f32";
        JIFFY_RETURN_IF_ERROR(f.get_enum("format", &fmt, {"f32", "i16"}));
        JIFFY_RETURN_IF_ERROR(f.get_double("rate", &s->rate));
        std::string bytes;
        Status st = read_file(path, &bytes);
        if (!st.ok()) return f.error(file_node, st.message());
        PayloadFormat pf;
        PayloadFormat::parse(fmt, &pf.kind);
        s->data.resize(bytes.size() / (fmt == "f32" ? 4 : 2));
        size_t n = 0;
        st = decode_payload(pf, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), s->data.data(), s->data.size(), &n);
        if (!st.ok()) return f.error(file_node, path + ": " + st.message());
        if (n == 0) return f.error(file_node, path + ": empty");
    } else {  // csv
        std::vector<std::string> cols;
        JIFFY_RETURN_IF_ERROR(f.get_strings("columns", &cols));
        JIFFY_RETURN_IF_ERROR(f.get_double("rate", &s->rate));
        std::string text;
        Status st = read_file(path, &text);
        if (st.ok()) st = parse_csv(path, text, cols, s.get());
        if (!st.ok()) return f.error(file_node, st.message());
    }
    if (s->rate < 0) return f.error(f.node()["rate"], "'rate' must be >= 0");
    if (size_t(s->chunk) > s->rows()) return f.error(f.node(), str_cat("'chunk' (", s->chunk, ") is longer than the file (", s->rows(), " rows)"));
    *out = std::move(s);
    return {};
}

Status make_timer_source(Fields& f, const BuildEnv&, std::unique_ptr<Source>* out) {
    auto s = std::make_unique<TimerSource>();
    JIFFY_RETURN_IF_ERROR(f.get_double("period_ms", &s->period_ms, true));
    if (s->period_ms <= 0) return f.error(f.node()["period_ms"], "'period_ms' must be > 0");
    JIFFY_RETURN_IF_ERROR(f.get_int("count", &s->count, false, 0));
    *out = std::move(s);
    return {};
}

Status make_stdin_source(Fields& f, const BuildEnv&, std::unique_ptr<Source>* out) {
    auto s = std::make_unique<StdinSource>();
    std::string fmt = "json_array";
    JIFFY_RETURN_IF_ERROR(f.get_enum("format", &fmt, {"json", "json_array", "json_field"}));
    PayloadFormat::parse(fmt, &s->fmt.kind);
    JIFFY_RETURN_IF_ERROR(f.get_string("field", &s->fmt.field, s->fmt.kind == PayloadFormat::kJsonField));
    JIFFY_RETURN_IF_ERROR(f.get_int("size", &s->size, false, 1, 1 << 24));
    *out = std::move(s);
    return {};
}

}  // namespace jiffy::agent
