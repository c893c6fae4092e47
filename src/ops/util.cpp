#include "ops/util.h"

namespace jiffy {

bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out) {
    size_t r = std::max(a.size(), b.size());
    Shape o(r);
    for (size_t i = 0; i < r; ++i) {
        int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
        int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
        if (da == db || db == 1) o[i] = da;
        else if (da == 1) o[i] = db;
        else return false;
    }
    *out = std::move(o);
    return true;
}

bool normalize_axis(int64_t axis, int64_t rank, int64_t* out) {
    if (axis < -rank || axis >= rank) return false;
    *out = axis < 0 ? axis + rank : axis;
    return true;
}

Shape strides_of(const Shape& s) {
    Shape st(s.size());
    int64_t acc = 1;
    for (size_t i = s.size(); i-- > 0;) {
        st[i] = acc;
        acc *= s[i];
    }
    return st;
}

Shape broadcast_strides(const Shape& in, const Shape& out) {
    Shape st(out.size(), 0);
    Shape is = strides_of(in);
    size_t off = out.size() - in.size();
    for (size_t i = 0; i < in.size(); ++i) st[off + i] = in[i] == 1 ? 0 : is[i];
    return st;
}

}  // namespace jiffy
