#include "agent/fields.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace jiffy::agent {

Fields::Fields(const YAML::Node& node, std::string file, std::string what)
    : node_(node), file_(std::move(file)), what_(std::move(what)) {}

std::string Fields::at(const YAML::Node& n) const {
    int line = n.Mark().line;
    if (line < 0) line = node_.Mark().line;
    return file_ + ":" + std::to_string(line + 1) + ": " + what_ + ": ";
}

bool Fields::has(const std::string& key) const { return node_.IsMap() && node_[key].IsDefined(); }

YAML::Node Fields::get(const std::string& key) {
    known_.insert(key);
    if (!node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    return node_[key];
}

bool Fields::parse_int(const std::string& s, int64_t* v) {
    if (s.empty() || s.size() > 19) return false;
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(s.c_str(), &end, 10);
    if (errno || end != s.c_str() + s.size()) return false;
    *v = x;
    return true;
}

bool Fields::parse_double(const std::string& s, double* v) {
    if (s.empty()) return false;
    char* end = nullptr;
    errno = 0;
    double x = std::strtod(s.c_str(), &end);
    if (errno || end != s.c_str() + s.size() || !std::isfinite(x)) return false;
    *v = x;
    return true;
}

static std::string show(const YAML::Node& n) {
    if (n.IsScalar()) return "'" + n.Scalar() + "'";
    if (n.IsSequence()) return "a list";
    if (n.IsMap()) return "a mapping";
    return "nothing";
}

Status Fields::get_string(const std::string& key, std::string* out, bool required) {
    YAML::Node n = get(key);
    if (!n.IsDefined() || n.IsNull()) {
        if (required) return invalid(at(), "missing required field '", key, "'");
        return {};
    }
    if (!n.IsScalar()) return invalid(at(n), "field '", key, "' must be a string, got ", show(n));
    *out = n.Scalar();
    return {};
}

Status Fields::get_int(const std::string& key, int64_t* out, bool required, int64_t lo, int64_t hi) {
    YAML::Node n = get(key);
    if (!n.IsDefined() || n.IsNull()) {
        if (required) return invalid(at(), "missing required field '", key, "'");
        return {};
    }
    int64_t v;
    if (!n.IsScalar() || !parse_int(n.Scalar(), &v))
        return invalid(at(n), "field '", key, "' must be an integer, got ", show(n));
    if (v < lo || v > hi) {
        std::string range = hi == INT64_MAX ? str_cat(">= ", lo) : str_cat("in [", lo, ", ", hi, "]");
        return invalid(at(n), "field '", key, "' must be ", range, ", got ", v);
    }
    *out = v;
    return {};
}

Status Fields::get_double(const std::string& key, double* out, bool required) {
    YAML::Node n = get(key);
    if (!n.IsDefined() || n.IsNull()) {
        if (required) return invalid(at(), "missing required field '", key, "'");
        return {};
    }
    double v;
    if (!n.IsScalar() || !parse_double(n.Scalar(), &v))
        return invalid(at(n), "field '", key, "' must be a number, got ", show(n));
    *out = v;
    return {};
}

Status Fields::get_bool(const std::string& key, bool* out) {
    YAML::Node n = get(key);
    if (!n.IsDefined() || n.IsNull()) return {};
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    if (s == "true" || s == "yes" || s == "on") {
        *out = true;
    } else if (s == "false" || s == "no" || s == "off") {
        *out = false;
    } else {
        return invalid(at(n), "field '", key, "' must be true or false, got ", show(n));
    }
    return {};
}

Status Fields::get_enum(const std::string& key, std::string* out, const std::vector<std::string>& choices,
                        bool required) {
    std::string s;
    JIFFY_RETURN_IF_ERROR(get_string(key, &s, required));
    if (s.empty() && !required && !has(key)) return {};
    for (const auto& c : choices)
        if (s == c) {
            *out = s;
            return {};
        }
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    return invalid(at(node_[key]), "field '", key, "' must be one of ", list, ", got '", s, "'");
}

Status Fields::get_doubles(const std::string& key, std::vector<double>* out, bool required) {
    YAML::Node n = get(key);
    if (!n.IsDefined() || n.IsNull()) {
        if (required) return invalid(at(), "missing required field '", key, "'");
        return {};
    }
    out->clear();
    double v;
    if (n.IsScalar()) {
        if (!parse_double(n.Scalar(), &v)) return invalid(at(n), "field '", key, "' must be a number or a list of numbers");
        out->push_back(v);
        return {};
    }
    if (!n.IsSequence()) return invalid(at(n), "field '", key, "' must be a number or a list of numbers");
    for (const auto& e : n) {
        if (!e.IsScalar() || !parse_double(e.Scalar(), &v))
            return invalid(at(e), "field '", key, "': element ", show(e), " is not a number");
        out->push_back(v);
    }
    return {};
}

Status Fields::get_ints(const std::string& key, std::vector<int64_t>* out, bool required) {
    YAML::Node n = get(key);
    if (!n.IsDefined() || n.IsNull()) {
        if (required) return invalid(at(), "missing required field '", key, "'");
        return {};
    }
    out->clear();
    int64_t v;
    if (n.IsScalar()) {
        if (!parse_int(n.Scalar(), &v)) return invalid(at(n), "field '", key, "' must be an integer or a list of integers");
        out->push_back(v);
        return {};
    }
    if (!n.IsSequence()) return invalid(at(n), "field '", key, "' must be an integer or a list of integers");
    for (const auto& e : n) {
        if (!e.IsScalar() || !parse_int(e.Scalar(), &v))
            return invalid(at(e), "field '", key, "': element ", show(e), " is not an integer");
        out->push_back(v);
    }
    return {};
}

Status Fields::get_strings(const std::string& key, std::vector<std::string>* out, bool required) {
    YAML::Node n = get(key);
    if (!n.IsDefined() || n.IsNull()) {
        if (required) return invalid(at(), "missing required field '", key, "'");
        return {};
    }
    out->clear();
    if (n.IsScalar()) {
        out->push_back(n.Scalar());
        return {};
    }
    if (!n.IsSequence()) return invalid(at(n), "field '", key, "' must be a string or a list of strings");
    for (const auto& e : n) {
        if (!e.IsScalar()) return invalid(at(e), "field '", key, "': elements must be strings, got ", show(e));
        out->push_back(e.Scalar());
    }
    return {};
}

Status Fields::get_string_map(const std::string& key, std::vector<std::pair<std::string, std::string>>* out) {
    YAML::Node n = get(key);
    if (!n.IsDefined() || n.IsNull()) return {};
    if (!n.IsMap()) return invalid(at(n), "field '", key, "' must be a mapping of names, e.g. {a: b}");
    out->clear();
    for (auto it = n.begin(); it != n.end(); ++it) {
        if (!it->first.IsScalar() || !it->second.IsScalar())
            return invalid(at(it->first), "field '", key, "': keys and values must be strings");
        out->emplace_back(it->first.Scalar(), it->second.Scalar());
    }
    return {};
}

Status Fields::finish() const {
    if (!node_.IsMap()) return {};
    for (auto it = node_.begin(); it != node_.end(); ++it) {
        std::string k = it->first.IsScalar() ? it->first.Scalar() : "?";
        if (!known_.count(k)) {
            std::string list;
            for (const auto& s : known_) list += (list.empty() ? "" : ", ") + s;
            return invalid(at(it->first), "unknown field '", k, "' (known here: ", list, ")");
        }
    }
    return {};
}

}  // namespace jiffy::agent
