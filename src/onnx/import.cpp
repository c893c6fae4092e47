#include "onnx/import.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "onnx/jiffy_onnx.pb.h"

namespace jiffy {
namespace {

namespace fs = std::filesystem;

// Opsets 1-6 load too: ops whose semantics changed at 7 (legacy `broadcast`/`axis` on binary ops)
// implement the old rules; the conformance suite checks them.
constexpr int64_t kMinOpset = 1;
constexpr int64_t kMaxOpset = 21;
constexpr int kMaxRank = 16;

struct Ctx {
    std::string dir;  // model folder for external data; empty = none allowed
    uint64_t max_bytes;
    uint64_t used_bytes = 0;
    int64_t opset = 0;
    std::map<std::string, const onnx::FunctionProto*> functions;  // "domain:name"
    int depth = 0;
    std::vector<const Graph*> scopes;  // enclosing graphs, innermost last
};

bool valid_dtype(int32_t t) {
    return t >= 1 && t <= 16 && t != 14 && t != 15;
}

Status read_external(Ctx& c, const onnx::TensorProto& tp, size_t nbytes, uint8_t* dst) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : tp.external_data()) {
        if (kv.key() == "location") location = kv.value();
        else if (kv.key() == "offset") offset = std::atoll(kv.value().c_str());
        else if (kv.key() == "length") length = std::atoll(kv.value().c_str());
    }
    if (c.dir.empty())
        return invalid("tensor '", tp.name(), "': external data is not allowed here");
    if (location.empty()) return invalid("tensor '", tp.name(), "': external data has no location");
    fs::path rel(location);
    if (rel.is_absolute())
        return invalid("tensor '", tp.name(), "': external data path '", location,
                       "' is absolute; it must stay inside the model's folder");
    std::error_code ec;
    fs::path base = fs::weakly_canonical(fs::path(c.dir), ec);
    fs::path full = fs::weakly_canonical(base / rel, ec);
    if (ec) return invalid("tensor '", tp.name(), "': bad external data path '", location, "'");
    auto [bi, fi] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
    if (bi != base.end())
        return invalid("tensor '", tp.name(), "': external data path '", location,
                       "' escapes the model's folder");
    if (offset < 0) return invalid("tensor '", tp.name(), "': negative external data offset");
    if (length >= 0 && uint64_t(length) != nbytes)
        return invalid("tensor '", tp.name(), "': external data length ", length, " but dims need ",
                       nbytes, " bytes");
    std::ifstream f(full, std::ios::binary);
    if (!f) return invalid("tensor '", tp.name(), "': cannot open external data file '", location, "'");
    f.seekg(0, std::ios::end);
    uint64_t fsize = uint64_t(f.tellg());
    if (uint64_t(offset) > fsize || fsize - uint64_t(offset) < nbytes)
        return invalid("tensor '", tp.name(), "': external data file '", location, "' is too short");
    f.seekg(offset);
    f.read(reinterpret_cast<char*>(dst), std::streamsize(nbytes));
    if (!f) return invalid("tensor '", tp.name(), "': cannot read external data '", location, "'");
    return {};
}

template <typename Src, typename Dst>
void copy_cast(const Src& src, Dst* dst) {
    for (int i = 0; i < src.size(); ++i) dst[i] = static_cast<Dst>(src.Get(i));
}

Status convert_tensor(Ctx& c, const onnx::TensorProto& tp, std::shared_ptr<const Tensor>* out) {
    const std::string& nm = tp.name();
    if (!valid_dtype(tp.data_type()))
        return invalid("tensor '", nm, "': unsupported data type ", tp.data_type());
    DType dt = DType(tp.data_type());
    if (dt == DType::kString) return unsupported("tensor '", nm, "': string tensors are not supported");
    if (tp.dims_size() > kMaxRank) return invalid("tensor '", nm, "': rank ", tp.dims_size(), " too large");
    Shape shape;
    for (int64_t d : tp.dims()) {
        if (d < 0) return invalid("tensor '", nm, "': negative dim ", d);
        shape.push_back(d);
    }
    int64_t n = shape_numel(shape);
    if (n < 0) return invalid("tensor '", nm, "': dims ", shape_str(shape), " overflow");
    size_t es = dtype_size(dt);
    uint64_t nbytes = uint64_t(n) * es;
    if (nbytes / es != uint64_t(n) || c.used_bytes + nbytes > c.max_bytes)
        return invalid("tensor '", nm, "': ", shape_str(shape), " needs ", nbytes,
                       " bytes, over the memory limit of ", c.max_bytes);
    c.used_bytes += nbytes;
    auto t = std::make_shared<Tensor>(dt, shape);
    uint8_t* dst = static_cast<uint8_t*>(t->data());
    if (tp.has_data_location() && tp.data_location() == onnx::TensorProto::EXTERNAL) {
        JIFFY_RETURN_IF_ERROR(read_external(c, tp, nbytes, dst));
    } else if (tp.has_raw_data()) {
        if (tp.raw_data().size() != nbytes)
            return invalid("tensor '", nm, "': raw_data has ", tp.raw_data().size(),
                           " bytes but dims ", shape_str(shape), " of ", dtype_name(dt), " need ", nbytes);
        std::memcpy(dst, tp.raw_data().data(), nbytes);
    } else {
        int64_t have = 0;
        switch (dt) {
            case DType::kF32: have = tp.float_data_size(); break;
            case DType::kF64: have = tp.double_data_size(); break;
            case DType::kI64: have = tp.int64_data_size(); break;
            case DType::kU32: case DType::kU64: have = tp.uint64_data_size(); break;
            default: have = tp.int32_data_size(); break;
        }
        if (have != n)
            return invalid("tensor '", nm, "': has ", have, " values but dims ", shape_str(shape),
                           " need ", n);
        switch (dt) {
            case DType::kF32: copy_cast(tp.float_data(), t->as<float>()); break;
            case DType::kF64: copy_cast(tp.double_data(), t->as<double>()); break;
            case DType::kI64: copy_cast(tp.int64_data(), t->as<int64_t>()); break;
            case DType::kU32: copy_cast(tp.uint64_data(), t->as<uint32_t>()); break;
            case DType::kU64: copy_cast(tp.uint64_data(), t->as<uint64_t>()); break;
            case DType::kI32: copy_cast(tp.int32_data(), t->as<int32_t>()); break;
            case DType::kI16: copy_cast(tp.int32_data(), t->as<int16_t>()); break;
            case DType::kU16: case DType::kF16: case DType::kBF16:
                copy_cast(tp.int32_data(), t->as<uint16_t>()); break;
            case DType::kI8: copy_cast(tp.int32_data(), t->as<int8_t>()); break;
            case DType::kU8: copy_cast(tp.int32_data(), t->as<uint8_t>()); break;
            case DType::kBool:
                for (int i = 0; i < tp.int32_data_size(); ++i) dst[i] = tp.int32_data(i) != 0;
                break;
            default: return unsupported("tensor '", nm, "': data type not supported");
        }
    }
    *out = std::move(t);
    return {};
}

Status convert_value_info(const onnx::ValueInfoProto& vi, Value* v) {
    if (!vi.has_type()) return {};
    const auto& tp = vi.type();
    if (!tp.has_tensor_type()) {
        if (tp.value_case() == onnx::TypeProto::VALUE_NOT_SET) return {};
        return unsupported("value '", vi.name(), "': only tensor types are supported");
    }
    const auto& tt = tp.tensor_type();
    if (tt.has_elem_type() && tt.elem_type() != 0) {
        if (!valid_dtype(tt.elem_type()))
            return invalid("value '", vi.name(), "': unsupported element type ", tt.elem_type());
        v->dtype = DType(tt.elem_type());
    }
    if (tt.has_shape()) {
        if (tt.shape().dim_size() > kMaxRank)
            return invalid("value '", vi.name(), "': rank ", tt.shape().dim_size(), " too large");
        v->has_shape = true;
        v->dims.clear();
        for (const auto& d : tt.shape().dim()) {
            Dim dim;
            if (d.has_dim_value()) {
                if (d.dim_value() < 0)
                    return invalid("value '", vi.name(), "': negative dim ", d.dim_value());
                dim.value = d.dim_value();
            } else if (d.has_dim_param()) {
                dim.param = d.dim_param();
            }
            v->dims.push_back(dim);
        }
    }
    return {};
}

Status convert_graph(Ctx& c, const onnx::GraphProto& gp, const Graph* outer,
                     std::shared_ptr<Graph>* out);

Status convert_attr(Ctx& c, const onnx::AttributeProto& ap, const Graph* scope, Attr* a) {
    using AP = onnx::AttributeProto;
    AP::AttributeType type = ap.type();
    if (type == AP::UNDEFINED) {  // very old files: infer from the populated field
        if (ap.has_f()) type = AP::FLOAT;
        else if (ap.has_i()) type = AP::INT;
        else if (ap.has_s()) type = AP::STRING;
        else if (ap.has_t()) type = AP::TENSOR;
        else if (ap.has_g()) type = AP::GRAPH;
        else if (ap.floats_size()) type = AP::FLOATS;
        else if (ap.ints_size()) type = AP::INTS;
        else if (ap.strings_size()) type = AP::STRINGS;
        else if (ap.graphs_size()) type = AP::GRAPHS;
    }
    switch (type) {
        case AP::FLOAT: a->kind = Attr::kFloat; a->f = ap.f(); break;
        case AP::INT: a->kind = Attr::kInt; a->i = ap.i(); break;
        case AP::STRING: a->kind = Attr::kString; a->s = ap.s(); break;
        case AP::TENSOR:
            a->kind = Attr::kTensor;
            JIFFY_RETURN_IF_ERROR(convert_tensor(c, ap.t(), &a->t));
            break;
        case AP::GRAPH: {
            a->kind = Attr::kGraph;
            std::shared_ptr<Graph> g;
            JIFFY_RETURN_IF_ERROR(convert_graph(c, ap.g(), scope, &g));
            a->g = g;
            break;
        }
        case AP::FLOATS: a->kind = Attr::kFloats; a->floats.assign(ap.floats().begin(), ap.floats().end()); break;
        case AP::INTS: a->kind = Attr::kInts; a->ints.assign(ap.ints().begin(), ap.ints().end()); break;
        case AP::STRINGS: a->kind = Attr::kStrings; a->strings.assign(ap.strings().begin(), ap.strings().end()); break;
        case AP::GRAPHS:
            a->kind = Attr::kGraphs;
            for (const auto& gp : ap.graphs()) {
                std::shared_ptr<Graph> g;
                JIFFY_RETURN_IF_ERROR(convert_graph(c, gp, scope, &g));
                a->graphs.push_back(g);
            }
            break;
        default:
            return unsupported("attribute '", ap.name(), "': type ", int(type), " is not supported");
    }
    return {};
}

// A name defined in an enclosing scope (for subgraph captures).
bool defined_in_outer(const Ctx& c, const std::string& name) {
    for (const Graph* s : c.scopes)
        if (s->find(name) >= 0) return true;
    return false;
}

// Expands calls of model-local functions into their bodies, renaming internal values.
Status inline_functions(Ctx& c, const onnx::GraphProto& gp, std::vector<onnx::NodeProto>* nodes) {
    int counter = 0;
    std::vector<onnx::NodeProto> work(gp.node().begin(), gp.node().end());
    for (int guard = 0; guard < 64; ++guard) {
        bool changed = false;
        std::vector<onnx::NodeProto> next;
        for (auto& n : work) {
            std::string dom = n.domain() == "ai.onnx" ? "" : n.domain();
            auto it = c.functions.find(dom + ":" + n.op_type());
            if (it == c.functions.end()) {
                next.push_back(std::move(n));
                continue;
            }
            changed = true;
            const onnx::FunctionProto& f = *it->second;
            std::map<std::string, std::string> rename;
            for (int i = 0; i < f.input_size(); ++i)
                rename[f.input(i)] = i < n.input_size() ? n.input(i) : "";
            for (int i = 0; i < f.output_size(); ++i)
                rename[f.output(i)] = i < n.output_size() ? n.output(i) : "";
            std::string pre = "__fn" + std::to_string(counter++) + "_";
            auto map_name = [&](const std::string& s) -> std::string {
                if (s.empty()) return s;
                auto r = rename.find(s);
                return r != rename.end() ? r->second : pre + s;
            };
            std::map<std::string, const onnx::AttributeProto*> call_attrs;
            for (const auto& a : n.attribute()) call_attrs[a.name()] = &a;
            for (const auto& fn : f.node()) {
                onnx::NodeProto m = fn;
                for (auto& s : *m.mutable_input()) s = map_name(s);
                for (auto& s : *m.mutable_output()) s = map_name(s);
                m.clear_attribute();
                for (const auto& a : fn.attribute()) {
                    if (!a.ref_attr_name().empty()) {
                        auto ca = call_attrs.find(a.ref_attr_name());
                        if (ca == call_attrs.end()) continue;  // default applies
                        auto* na = m.add_attribute();
                        *na = *ca->second;
                        na->set_name(a.name());
                    } else {
                        *m.add_attribute() = a;
                    }
                }
                next.push_back(std::move(m));
            }
        }
        work = std::move(next);
        if (!changed) {
            *nodes = std::move(work);
            return {};
        }
    }
    return invalid("model-local functions nest more than 64 levels (recursive?)");
}

Status convert_graph(Ctx& c, const onnx::GraphProto& gp, const Graph* outer,
                     std::shared_ptr<Graph>* out) {
    if (++c.depth > 32) return invalid("graph '", gp.name(), "': subgraphs nest too deeply");
    auto g = std::make_shared<Graph>();
    g->name = gp.name();
    g->opset = c.opset;
    if (gp.sparse_initializer_size())
        return unsupported("graph '", gp.name(), "': sparse initializers are not supported");

    std::set<std::string> init_names;
    for (const auto& tp : gp.initializer()) {
        if (tp.name().empty()) return invalid("graph '", gp.name(), "': initializer without a name");
        if (g->find(tp.name()) >= 0) return invalid("initializer '", tp.name(), "' is defined twice");
        int id = g->add_value(tp.name());
        std::shared_ptr<const Tensor> t;
        JIFFY_RETURN_IF_ERROR(convert_tensor(c, tp, &t));
        Value& v = g->values[size_t(id)];
        v.dtype = t->dtype();
        v.has_shape = true;
        for (int64_t d : t->shape()) v.dims.push_back(Dim{d, {}});
        v.constant = std::move(t);
        init_names.insert(tp.name());
    }
    for (const auto& vi : gp.input()) {
        if (init_names.count(vi.name())) continue;  // IR < 4 lists initializers as inputs
        if (vi.name().empty()) return invalid("graph '", gp.name(), "': input without a name");
        if (g->find(vi.name()) >= 0) return invalid("input '", vi.name(), "' is defined twice");
        int id = g->add_value(vi.name());
        JIFFY_RETURN_IF_ERROR(convert_value_info(vi, &g->values[size_t(id)]));
        g->inputs.push_back(id);
    }

    std::vector<onnx::NodeProto> nodes;
    JIFFY_RETURN_IF_ERROR(inline_functions(c, gp, &nodes));

    // Outputs of nodes get values first so that (possibly unsorted) node order resolves.
    for (size_t ni = 0; ni < nodes.size(); ++ni) {
        for (const auto& o : nodes[ni].output()) {
            if (o.empty()) continue;
            if (g->find(o) >= 0)
                return invalid("value '", o, "' is produced twice (node '",
                               nodes[ni].name().empty() ? "#" + std::to_string(ni) : nodes[ni].name(), "')");
            int id = g->add_value(o);
            g->values[size_t(id)].producer = int(ni);
        }
    }
    // A value read here but defined in an enclosing scope becomes a capture.
    auto resolve = [&](const std::string& name, const std::string& where, int* id) -> Status {
        *id = g->find(name);
        if (*id >= 0) return {};
        if (defined_in_outer(c, name)) {
            *id = g->add_value(name);
            g->captures.push_back(*id);
            return {};
        }
        return invalid(where, ": input '", name, "' is not defined by any node, input or initializer");
    };
    for (size_t ni = 0; ni < nodes.size(); ++ni) {
        const auto& np = nodes[ni];
        Node n;
        n.name = np.name();
        n.op = np.op_type();
        n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
        std::string where = "node '" + (n.name.empty() ? "#" + std::to_string(ni) : n.name) +
                            "' (" + n.op + ")";
        if (n.op.empty()) return invalid(where, ": empty op_type");
        for (const auto& in : np.input()) {
            if (in.empty()) {
                n.inputs.push_back(-1);
                continue;
            }
            int id;
            JIFFY_RETURN_IF_ERROR(resolve(in, where, &id));
            n.inputs.push_back(id);
        }
        n.num_explicit_inputs = int(n.inputs.size());
        for (const auto& o : np.output()) n.outputs.push_back(o.empty() ? -1 : g->find(o));
        for (const auto& ap : np.attribute()) {
            if (ap.name().empty()) return invalid(where, ": attribute without a name");
            Attr a;
            c.scopes.push_back(g.get());
            Status st = convert_attr(c, ap, g.get(), &a);
            c.scopes.pop_back();
            if (!st.ok()) return st.prefix(where + ": ");
            n.attrs[ap.name()] = std::move(a);
        }
        // Subgraph captures become implicit inputs of the node (so liveness and folding see them).
        for (auto& [an, a] : n.attrs) {
            std::vector<std::shared_ptr<const Graph>> gs = a.graphs;
            if (a.g) gs.push_back(a.g);
            for (const auto& sg : gs)
                for (int cap : sg->captures) {
                    const std::string& cn = sg->values[size_t(cap)].name;
                    int id;
                    JIFFY_RETURN_IF_ERROR(resolve(cn, where, &id));
                    if (std::find(n.inputs.begin() + n.num_explicit_inputs, n.inputs.end(), id) ==
                        n.inputs.end())
                        n.inputs.push_back(id);
                }
        }
        g->nodes.push_back(std::move(n));
    }
    for (const auto& vi : gp.value_info()) {
        int id = g->find(vi.name());
        if (id >= 0 && !g->values[size_t(id)].constant) {
            Value tmp;
            if (convert_value_info(vi, &tmp).ok() && g->values[size_t(id)].dtype == DType::kUndefined)
                g->values[size_t(id)].dtype = tmp.dtype;
        }
    }
    for (const auto& vi : gp.output()) {
        int id;
        JIFFY_RETURN_IF_ERROR(resolve(vi.name(), "graph output", &id));
        Value& v = g->values[size_t(id)];
        Value decl;
        JIFFY_RETURN_IF_ERROR(convert_value_info(vi, &decl));
        if (v.dtype == DType::kUndefined) v.dtype = decl.dtype;
        if (!v.has_shape && decl.has_shape && !v.constant && v.producer < 0) {
            v.has_shape = true;
            v.dims = decl.dims;
        }
        g->outputs.push_back(id);
    }
    if (g->outputs.empty()) return invalid("graph '", gp.name(), "' has no outputs");
    --c.depth;
    *out = std::move(g);
    return {};
}

}  // namespace

Status import_onnx_bytes(const void* data, size_t size, const std::string& dir,
                         const ImportOptions& opt, ImportedModel* out) {
    if (size == 0) return invalid("empty file");
    if (size > (size_t(1) << 31) - 1) return invalid("file larger than 2 GiB (protobuf limit)");
    onnx::ModelProto mp;
    if (!mp.ParseFromArray(data, int(size)))
        return invalid("not a valid ONNX protobuf (truncated or corrupt)");
    if (!mp.has_graph()) return invalid("model has no graph");
    Ctx c;
    c.dir = dir;
    c.max_bytes = opt.max_bytes;
    bool have_onnx = false;
    for (const auto& os : mp.opset_import()) {
        if (os.domain().empty() || os.domain() == "ai.onnx") {
            c.opset = os.version();
            have_onnx = true;
        }
    }
    if (!have_onnx) c.opset = mp.ir_version() >= 3 ? 0 : 1;
    if (!have_onnx && mp.opset_import_size() == 0)
        return invalid("model declares no opset_import");
    if (have_onnx && (c.opset < kMinOpset || c.opset > kMaxOpset))
        return unsupported("opset ", c.opset, " is not supported (Jiffy supports ai.onnx opsets ",
                           kMinOpset, "-", kMaxOpset, ")");
    for (const auto& f : mp.functions()) {
        std::string dom = f.domain() == "ai.onnx" ? "" : f.domain();
        c.functions[dom + ":" + f.name()] = &f;
    }
    std::shared_ptr<Graph> g;
    JIFFY_RETURN_IF_ERROR(convert_graph(c, mp.graph(), nullptr, &g));
    out->graph = std::move(g);
    out->ir_version = mp.ir_version();
    out->producer = mp.producer_name();
    return {};
}

Status read_tensor_pb(const std::string& path, const ImportOptions& opt, Tensor* out, std::string* name) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return invalid(path, ": cannot open");
    std::string buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    onnx::TensorProto tp;
    if (!tp.ParseFromString(buf)) return invalid(path, ": not a TensorProto");
    Ctx c;
    c.max_bytes = opt.max_bytes;
    std::shared_ptr<const Tensor> t;
    Status st = convert_tensor(c, tp, &t);
    if (!st.ok()) return st.prefix(path + ": ");
    *out = *t;
    if (name) *name = tp.name();
    return {};
}

Status import_onnx_file(const std::string& path, const ImportOptions& opt, ImportedModel* out) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return invalid(path, ": file not found");
    if (fs::is_directory(path, ec)) return invalid(path, ": is a directory, not a model file");
    std::ifstream f(path, std::ios::binary);
    if (!f) return invalid(path, ": cannot open");
    f.seekg(0, std::ios::end);
    std::streamoff n = f.tellg();
    if (n < 0) return invalid(path, ": cannot read");
    if (uint64_t(n) > opt.max_bytes) return invalid(path, ": file larger than the memory limit");
    std::string buf(size_t(n), '\0');
    f.seekg(0);
    f.read(buf.data(), n);
    if (!f) return invalid(path, ": read failed");
    std::string dir = fs::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    Status st = import_onnx_bytes(buf.data(), buf.size(), dir, opt, out);
    if (!st.ok()) st.prefix(path + ": ");
    return st;
}

}  // namespace jiffy
