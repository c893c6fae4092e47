#include "core/npy.h"

#include <fstream>

namespace jiffy {
namespace {

// Finds the value text after 'key': in a Python dict literal header.
bool dict_value(const std::string& h, const std::string& key, std::string* out) {
    size_t k = h.find("'" + key + "'");
    if (k == std::string::npos) return false;
    size_t c = h.find(':', k);
    if (c == std::string::npos) return false;
    size_t s = h.find_first_not_of(" ", c + 1);
    if (s == std::string::npos) return false;
    size_t e;
    if (h[s] == '(') e = h.find(')', s) + 1;
    else if (h[s] == '\'') e = h.find('\'', s + 1) + 1;
    else e = h.find_first_of(",}", s);
    if (e == std::string::npos || e == 0) return false;
    *out = h.substr(s, e - s);
    return true;
}

}  // namespace

Status read_npy(const std::string& path, Tensor* out, uint64_t max_bytes) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return invalid(path, ": cannot open");
    char magic[8];
    if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
        return invalid(path, ": not a .npy file (bad magic)");
    uint32_t hlen = 0;
    if (magic[6] == 1) {
        unsigned char b[2];
        if (!f.read(reinterpret_cast<char*>(b), 2)) return invalid(path, ": truncated header");
        hlen = b[0] | (uint32_t(b[1]) << 8);
    } else if (magic[6] == 2 || magic[6] == 3) {
        unsigned char b[4];
        if (!f.read(reinterpret_cast<char*>(b), 4)) return invalid(path, ": truncated header");
        hlen = b[0] | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24);
    } else {
        return invalid(path, ": unsupported .npy version ", int(magic[6]));
    }
    if (hlen > (1u << 20)) return invalid(path, ": header too large");
    std::string h(hlen, '\0');
    if (!f.read(h.data(), hlen)) return invalid(path, ": truncated header");
    std::string descr, order, shape_s;
    if (!dict_value(h, "descr", &descr) || !dict_value(h, "fortran_order", &order) ||
        !dict_value(h, "shape", &shape_s))
        return invalid(path, ": malformed .npy header");
    if (descr.size() < 2) return invalid(path, ": bad descr");
    descr = descr.substr(1, descr.size() - 2);
    DType t;
    if (!dtype_from_npy_descr(descr, &t)) return invalid(path, ": unsupported dtype '", descr, "'");
    if (order != "False") return invalid(path, ": Fortran-order arrays are not supported");
    Shape shape;
    std::string inner = shape_s.substr(1, shape_s.size() - 2);
    size_t p = 0;
    while (p < inner.size()) {
        size_t q = inner.find(',', p);
        std::string tok = inner.substr(p, q == std::string::npos ? std::string::npos : q - p);
        size_t a = tok.find_first_not_of(" "), b = tok.find_last_not_of(" L");
        if (a != std::string::npos) {
            tok = tok.substr(a, b - a + 1);
            char* end = nullptr;
            long long d = std::strtoll(tok.c_str(), &end, 10);
            if (*end || d < 0) return invalid(path, ": bad shape ", shape_s);
            shape.push_back(d);
        }
        if (q == std::string::npos) break;
        p = q + 1;
    }
    if (shape.size() > 16) return invalid(path, ": rank too large");
    int64_t n = shape_numel(shape);
    if (n < 0 || uint64_t(n) * dtype_size(t) > max_bytes) return invalid(path, ": array too large");
    Tensor tensor(t, shape);
    if (!f.read(static_cast<char*>(tensor.data()), std::streamsize(tensor.nbytes())))
        return invalid(path, ": file is shorter than its header says (", shape_str(shape), " ",
                       dtype_name(t), ")");
    if (t == DType::kBool) {  // normalize to 0/1
        uint8_t* b = tensor.as<uint8_t>();
        for (int64_t i = 0; i < n; ++i) b[i] = b[i] != 0;
    }
    *out = std::move(tensor);
    return {};
}

Status write_npy(const std::string& path, DType t, const Shape& shape, const void* data) {
    const char* descr = dtype_npy_descr(t);
    if (!descr) return invalid(path, ": cannot write dtype ", dtype_name(t), " as .npy");
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    s += shape.size() == 1 ? ",)" : ")";
    std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + s + ", }";
    size_t total = 10 + h.size() + 1;
    h.append((64 - total % 64) % 64, ' ');
    h += '\n';
    std::ofstream f(path, std::ios::binary);
    if (!f) return invalid(path, ": cannot create");
    f.write("\x93NUMPY\x01\x00", 8);
    unsigned char hl[2] = {uint8_t(h.size() & 0xff), uint8_t(h.size() >> 8)};
    f.write(reinterpret_cast<char*>(hl), 2);
    f.write(h.data(), std::streamsize(h.size()));
    int64_t n = shape_numel(shape);
    f.write(static_cast<const char*>(data), std::streamsize(size_t(n) * dtype_size(t)));
    if (!f) return invalid(path, ": write failed");
    return {};
}

}  // namespace jiffy
