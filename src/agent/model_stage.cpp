// The `model` stage: any ONNX file through the engine's API, compiled once at start. The input
// fed by the previous stage is bound to that stage's output buffer (zero copy), extra inputs to
// earlier stages' buffers, `const` inputs are frozen into the plan, and `carry` feeds an output
// back as the next call's input (a recurrent state: one memcpy of the state per call, cheaper here
// than re-binding, which re-resolves every step's pointers).
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "agent/agent.h"
#include "agent/registry.h"
#include "jiffy/jiffy.hpp"
#include "serve/repository.h"

namespace jiffy::agent {

namespace {

namespace ja = jiffy::api;

class ModelStage : public SimpleStage {
public:
    std::string file, input, output;
    std::vector<std::pair<std::string, std::string>> inputs, carry, values;
    std::map<std::string, std::vector<int64_t>> shapes;
    std::map<std::string, std::vector<double>> consts;

    bool is_model() const override { return true; }

    Status prepare(const Port& in, Pipeline& pipe) override {
        ja::Error err;
        model_ = ja::Model::load(file, &err);
        if (err) return invalid(err.message);
        auto mins = model_.inputs();
        auto mouts = model_.outputs();
        auto find = [](const std::vector<ja::TensorInfo>& v, const std::string& n) -> int {
            for (size_t i = 0; i < v.size(); ++i)
                if (v[i].name == n) return int(i);
            return -1;
        };
        auto names = [](const std::vector<ja::TensorInfo>& v) {
            std::string s;
            for (const auto& t : v) s += (s.empty() ? "" : ", ") + t.name;
            return s;
        };
        // Which model input each source feeds.
        std::vector<std::string> feed(mins.size());  // "" = previous stage, "=const", "<carry", else stage name
        std::vector<bool> fed(mins.size(), false);
        for (const auto& [iname, v] : consts) {
            int k = find(mins, iname);
            if (k < 0) return invalid("'const' names input '", iname, "', which the model does not have (inputs: ", names(mins), ")");
            fed[size_t(k)] = true, feed[size_t(k)] = "=";
        }
        for (const auto& [oname, iname] : carry) {
            int k = find(mins, iname), o = find(mouts, oname);
            if (k < 0) return invalid("'carry' feeds input '", iname, "', which the model does not have (inputs: ", names(mins), ")");
            if (o < 0) return invalid("'carry' reads output '", oname, "', which the model does not have (outputs: ", names(mouts), ")");
            fed[size_t(k)] = true, feed[size_t(k)] = "<";
        }
        for (const auto& [iname, sname] : inputs) {
            int k = find(mins, iname);
            if (k < 0) return invalid("'inputs' names input '", iname, "', which the model does not have (inputs: ", names(mins), ")");
            if (!pipe.find(sname) && sname != "input") return invalid("'inputs': '", sname, "' is not an earlier stage");
            fed[size_t(k)] = true, feed[size_t(k)] = sname;
        }
        int main_in = -1;
        if (!input.empty()) {
            main_in = find(mins, input);
            if (main_in < 0) return invalid("'input' names '", input, "', which the model does not have (inputs: ", names(mins), ")");
            if (fed[size_t(main_in)]) return invalid("input '", input, "' is fed twice");
        } else {
            for (size_t k = 0; k < mins.size() && main_in < 0; ++k)
                if (!fed[k]) main_in = int(k);
        }
        if (main_in >= 0) fed[size_t(main_in)] = true;
        for (size_t k = 0; k < mins.size(); ++k)
            if (!fed[k]) return invalid("model input '", mins[k].name, "' is not fed: map it in 'inputs', 'carry' or 'const'");

        // Compile shapes: given ones; the main input takes the previous stage's shape unless its
        // declared shape is static with the same element count; extra inputs take their stage's.
        std::map<std::string, std::vector<int64_t>> cshapes = shapes;
        auto is_static = [](const std::vector<int64_t>& s) {
            for (int64_t d : s)
                if (d < 0) return false;
            return true;
        };
        auto numel = [](const std::vector<int64_t>& s) {
            int64_t n = 1;
            for (int64_t d : s) n *= d;
            return n;
        };
        auto shape_for = [&](int k, const Port& p) {
            const auto& decl = mins[size_t(k)].shape;
            if (cshapes.count(mins[size_t(k)].name)) return;
            if (is_static(decl) && numel(decl) == p.numel) cshapes[mins[size_t(k)].name] = decl;
            else cshapes[mins[size_t(k)].name] = p.shape;
        };
        if (main_in >= 0) shape_for(main_in, in);
        for (const auto& [iname, sname] : inputs) shape_for(find(mins, iname), sname == "input" ? pipe.input() : pipe.find(sname)->out());
        ja::FrozenInputs frozen;
        for (const auto& [iname, vals] : consts) {
            const auto& info = mins[size_t(find(mins, iname))];
            std::vector<uint8_t> bytes;
            auto put = [&](const void* p, size_t n) { bytes.insert(bytes.end(), (const uint8_t*)p, (const uint8_t*)p + n); };
            for (double d : vals) {
                if (info.dtype == "float32") { float x = float(d); put(&x, 4); }
                else if (info.dtype == "int64") { int64_t x = int64_t(d); put(&x, 8); }
                else if (info.dtype == "int32") { int32_t x = int32_t(d); put(&x, 4); }
                else return invalid("'const' input '", iname, "' is ", info.dtype, "; only float32, int64, int32 are supported");
            }
            frozen[iname] = bytes;
            if (!cshapes.count(iname)) {
                if (is_static(info.shape) && numel(info.shape) == int64_t(vals.size())) cshapes[iname] = info.shape;
                else if (vals.size() == 1 && info.shape.empty()) cshapes[iname] = {};
                else cshapes[iname] = {int64_t(vals.size())};
            }
        }
        plan_ = model_.compile(cshapes, &err, frozen);
        if (err) return invalid(err.message);
        runner_ = std::make_unique<ja::Runner>(plan_.runner());
        const auto& pin = plan_.inputs();
        const auto& pout = plan_.outputs();
        for (const auto& t : pin)
            if (t.dtype != "float32" && !consts.count(t.name))
                return invalid("model input '", t.name, "' is ", t.dtype, "; stages pass float32 (feed it with 'const')");

        auto pidx = [&](const std::string& n) { return find(pin, n); };
        auto check_bytes = [&](int k, const Port& p, const std::string& from) -> Status {
            if (int64_t(pin[size_t(k)].nbytes) != p.numel * 4)
                return invalid("model input '", pin[size_t(k)].name, "' takes ", pin[size_t(k)].nbytes / 4, " floats but ", from,
                               " gives ", p.numel);
            return {};
        };
        if (main_in >= 0) {
            int k = pidx(mins[size_t(main_in)].name);
            if (k < 0) return invalid("internal: input '", mins[size_t(main_in)].name, "' not in the compiled plan");
            JIFFY_RETURN_IF_ERROR(check_bytes(k, in, "the previous stage"));
            runner_->bind_input(size_t(k), in.data);  // zero copy
        }
        for (const auto& [iname, sname] : inputs) {
            int k = pidx(iname);
            const Port& p = sname == "input" ? pipe.input() : pipe.find(sname)->out();
            JIFFY_RETURN_IF_ERROR(check_bytes(k, p, "stage '" + sname + "'"));
            runner_->bind_input(size_t(k), p.data);
        }
        for (const auto& [oname, iname] : carry) {
            int k = pidx(iname), o = find(pout, oname);
            if (k < 0 || o < 0) return invalid("internal: carry '", oname, "' -> '", iname, "' not in the compiled plan");
            if (pin[size_t(k)].nbytes != pout[size_t(o)].nbytes)
                return invalid("'carry': output '", oname, "' has ", pout[size_t(o)].nbytes, " bytes but input '", iname, "' takes ",
                               pin[size_t(k)].nbytes, " (set its shape in 'shapes')");
            std::memset(runner_->input(size_t(k)), 0, pin[size_t(k)].nbytes);  // the state starts at zero
            carry_idx_.push_back({size_t(o), size_t(k), pin[size_t(k)].nbytes});
        }
        // The stage's output.
        out_idx_ = 0;
        if (!output.empty()) {
            out_idx_ = find(pout, output);
            if (out_idx_ < 0) return invalid("'output' names '", output, "', which the model does not have (outputs: ", names(pout), ")");
        }
        if (pout.empty()) return invalid("the model has no outputs");
        for (const auto& t : pout)
            if (t.dtype != "float32") return invalid("model output '", t.name, "' is ", t.dtype, "; stages pass float32");
        const auto& ot = pout[size_t(out_idx_)];
        out_.data = static_cast<float*>(const_cast<void*>(runner_->output(size_t(out_idx_))));
        out_.shape = ot.shape;
        out_.numel = int64_t(ot.nbytes / 4);
        // Named values: "OUT" or "OUT[i]".
        for (const auto& [alias, spec] : values) {
            std::string on = spec;
            int64_t idx = 0;
            size_t b = spec.find('[');
            if (b != std::string::npos) {
                if (spec.back() != ']' || !Fields::parse_int(spec.substr(b + 1, spec.size() - b - 2), &idx) || idx < 0)
                    return invalid("'values': '", spec, "' must be OUTPUT or OUTPUT[i]");
                on = spec.substr(0, b);
            }
            int o = find(pout, on);
            if (o < 0) return invalid("'values': output '", on, "' does not exist (outputs: ", names(pout), ")");
            if (idx * 4 >= int64_t(pout[size_t(o)].nbytes))
                return invalid("'values': index ", idx, " is out of range: output '", on, "' has ", pout[size_t(o)].nbytes / 4, " values");
            alias_.push_back({alias, static_cast<const float*>(runner_->output(size_t(o))) + idx});
        }
        return {};
    }

    Status value(const std::string& sub, int index, const float** p) const override {
        for (const auto& [a, ptr] : alias_)
            if (a == sub) {
                if (index > 0) return invalid("'", name, ".", sub, "' is one value; it takes no index");
                *p = ptr;
                return {};
            }
        if (sub.empty()) return Stage::value(sub, index, p);
        const auto& pout = plan_.outputs();
        for (size_t o = 0; o < pout.size(); ++o)
            if (pout[o].name == sub) {
                int i = index < 0 ? 0 : index;
                if (int64_t(i) * 4 >= int64_t(pout[o].nbytes))
                    return invalid("index ", i, " is out of range: output '", sub, "' has ", pout[o].nbytes / 4, " values");
                *p = static_cast<const float*>(runner_->output(o)) + i;
                return {};
            }
        std::string list;
        for (const auto& [a, ptr] : alias_) list += (list.empty() ? "" : ", ") + a;
        for (const auto& t : pout) list += (list.empty() ? "" : ", ") + t.name;
        return invalid("model stage '", name, "' has no value '", sub, "' (values and outputs: ", list, ")");
    }

protected:
    Status run(bool*) override {
        if (ja::Error e = runner_->run()) return invalid(e.message);
        for (const auto& c : carry_idx_) std::memcpy(runner_->input(c.in), runner_->output(c.out), c.bytes);
        return {};
    }

private:
    struct Carry {
        size_t out, in, bytes;
    };
    ja::Model model_;
    ja::Compiled plan_;
    std::unique_ptr<ja::Runner> runner_;  // (a plain member would need Session complete here)
    int out_idx_ = 0;
    std::vector<Carry> carry_idx_;
    std::vector<std::pair<std::string, const float*>> alias_;
};

namespace fs = std::filesystem;

// `repository: DIR, model: NAME[, version: N]`: the model.onnx `jiffy serve` would load from its
// repository (Triton layout DIR/NAME/N/model.onnx, docs/serving.md). Without a version, the
// highest one that NAME/config.yaml's version_policy selects (by default the highest on disk).
// config.yaml's fixed input shapes become the stage's default `shapes`.
Status resolve_repository_model(Fields& f, const BuildEnv& env, std::string* file, std::map<std::string, std::vector<int64_t>>* shapes) {
    std::string root, name;
    int64_t version = -1;
    JIFFY_RETURN_IF_ERROR(f.get_string("repository", &root, true));
    JIFFY_RETURN_IF_ERROR(f.get_string("model", &name, true));
    JIFFY_RETURN_IF_ERROR(f.get_int("version", &version, false, 0));
    const YAML::Node rn = f.node()["repository"], mn = f.node()["model"], vn = f.node()["version"];
    root = env.path(root);
    std::error_code ec;
    if (!fs::is_directory(root, ec)) return f.error(rn, "field 'repository': repository '" + root + "' is not a folder");
    fs::path dir = fs::path(root) / name;
    if (!serve::Repository::valid_name(name) || !fs::is_directory(dir, ec)) {
        std::vector<std::string> names;
        for (const auto& d : fs::directory_iterator(root, ec))
            if (d.is_directory(ec)) names.push_back(d.path().filename().string());
        std::sort(names.begin(), names.end());
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
        return f.error(mn, "field 'model': model '" + name + "' is not in repository '" + root + "' (models: " + (list.empty() ? "none" : list) + ")");
    }
    serve::ModelConfig cfg;
    fs::path cfg_path = dir / "config.yaml";
    if (fs::exists(cfg_path, ec)) {
        Status st = serve::parse_model_config(cfg_path.string(), &cfg);
        if (!st.ok()) return f.error(mn, "field 'model': model '" + name + "': " + st.message());
    }
    std::vector<int64_t> found = serve::Repository::versions_on_disk(dir.string());
    std::string list;
    for (int64_t v : found) list += (list.empty() ? "" : ", ") + std::to_string(v);
    if (version >= 0) {
        if (!std::binary_search(found.begin(), found.end(), version)) {
            fs::path vd = dir / std::to_string(version);
            if (fs::is_directory(vd, ec)) return f.error(vn, "field 'version': model '" + name + "' version " + std::to_string(version) + ": no model.onnx in " + vd.string());
            return f.error(vn, "field 'version': model '" + name + "' has no version " + std::to_string(version) + " (versions with a model.onnx: " +
                                   (list.empty() ? "none" : list) + ")");
        }
    } else {
        std::vector<int64_t> want = serve::Repository::wanted_versions(cfg, found);
        if (want.empty())
            return f.error(mn, "field 'model': model '" + name + "' has no version folder with a model.onnx (expected " + (dir / "1" / "model.onnx").string() +
                                   (found.empty() ? "" : "; config.yaml's version_policy selects none of " + list) + ")");
        version = want.back();
    }
    *file = (dir / std::to_string(version) / "model.onnx").string();
    for (const auto& [in, shape] : cfg.inputs) (*shapes)[in] = shape;
    return {};
}

}  // namespace

Status make_model_stage(Fields& f, const BuildEnv& env, std::unique_ptr<Stage>* out) {
    auto s = std::make_unique<ModelStage>();
    std::string file;
    std::map<std::string, std::vector<int64_t>> repo_shapes;
    if (f.has("repository") || f.has("model") || f.has("version")) {
        if (f.has("file")) return f.error(f.node()["file"], "give 'file' or 'repository' + 'model', not both");
        JIFFY_RETURN_IF_ERROR(resolve_repository_model(f, env, &file, &repo_shapes));
    } else {
        if (!f.has("file")) return invalid(f.at(), "missing required field 'file' (or 'repository' + 'model')");
        JIFFY_RETURN_IF_ERROR(f.get_string("file", &file, true));
        file = env.path(file);
    }
    s->file = file;
    JIFFY_RETURN_IF_ERROR(f.get_string("input", &s->input));
    JIFFY_RETURN_IF_ERROR(f.get_string("output", &s->output));
    JIFFY_RETURN_IF_ERROR(f.get_string_map("inputs", &s->inputs));
    JIFFY_RETURN_IF_ERROR(f.get_string_map("carry", &s->carry));
    JIFFY_RETURN_IF_ERROR(f.get_string_map("values", &s->values));
    for (const char* key : {"shapes", "const"}) {
        YAML::Node n = f.get(key);
        if (!n.IsDefined() || n.IsNull()) continue;
        if (!n.IsMap()) return f.error(n, std::string("field '") + key + "' must map input names to lists of numbers");
        for (auto it = n.begin(); it != n.end(); ++it) {
            Fields sub(n, f.file(), f.what() + " " + key);
            std::vector<double> v;
            std::vector<int64_t> iv;
            std::string in = it->first.Scalar();
            if (std::string(key) == "shapes") {
                JIFFY_RETURN_IF_ERROR(sub.get_ints(in, &iv));
                for (int64_t d : iv)
                    if (d < 0 || d > (1 << 30)) return f.error(it->second, "shape of '" + in + "' must hold non-negative dims");
                s->shapes[in] = iv;
            } else {
                JIFFY_RETURN_IF_ERROR(sub.get_doubles(in, &v));
                s->consts[in] = v;
            }
        }
    }
    for (auto& [in, shape] : repo_shapes) s->shapes.emplace(in, shape);  // the stage's own 'shapes' win
    *out = std::move(s);
    return {};
}

}  // namespace jiffy::agent
