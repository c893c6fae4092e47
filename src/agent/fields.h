// Line-numbered access to one YAML mapping of the agent config: every getter names the file, the
// line and the field on a bad value, and finish() rejects keys nobody asked for.
//
//   Fields f(node, ctx, "stage 'vad'");
//   JIFFY_RETURN_IF_ERROR(f.get_double("threshold", &thr, /*required=*/true));
//   JIFFY_RETURN_IF_ERROR(f.finish());
#pragma once
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace jiffy::agent {

class Fields {
public:
    // `file` is the config path; `what` names the mapping in messages ("agent 'kws' stage 'vad'").
    Fields(const YAML::Node& node, std::string file, std::string what);

    // "FILE:LINE: WHAT: " for node n (or the mapping itself).
    std::string at(const YAML::Node& n) const;
    std::string at() const { return at(node_); }
    const std::string& file() const { return file_; }
    const std::string& what() const { return what_; }
    const YAML::Node& node() const { return node_; }

    bool has(const std::string& key) const;
    // The raw node (marks the key as known); an undefined node when absent.
    YAML::Node get(const std::string& key);

    Status get_string(const std::string& key, std::string* out, bool required = false);
    Status get_int(const std::string& key, int64_t* out, bool required = false, int64_t lo = INT64_MIN,
                   int64_t hi = INT64_MAX);
    Status get_double(const std::string& key, double* out, bool required = false);
    Status get_bool(const std::string& key, bool* out);
    // One of `choices`.
    Status get_enum(const std::string& key, std::string* out, const std::vector<std::string>& choices,
                    bool required = false);
    // A number or a list of numbers.
    Status get_doubles(const std::string& key, std::vector<double>* out, bool required = false);
    Status get_ints(const std::string& key, std::vector<int64_t>* out, bool required = false);
    Status get_strings(const std::string& key, std::vector<std::string>* out, bool required = false);
    // A mapping of string -> string.
    Status get_string_map(const std::string& key, std::vector<std::pair<std::string, std::string>>* out);

    // Error for unknown keys (lists the known ones); call after all getters.
    Status finish() const;
    // An error at node n.
    Status error(const YAML::Node& n, const std::string& msg) const { return invalid(at(n), msg); }

    static bool parse_int(const std::string& s, int64_t* v);
    static bool parse_double(const std::string& s, double* v);

private:
    YAML::Node node_;
    std::string file_, what_;
    std::set<std::string> known_;
};

}  // namespace jiffy::agent
