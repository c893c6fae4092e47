// Status: the error type of the engine. An ok Status is a null pointer (free to return on the run
// path); an error carries a code and one human-readable message naming what is wrong.
#pragma once
#include <memory>
#include <sstream>
#include <string>
#include <utility>

namespace jiffy {

enum class Code : int {
    kOk = 0,
    kInternal = 1,     // a bug in Jiffy
    kInvalid = 2,      // bad model or bad input (user error)
    kUnsupported = 3,  // valid ONNX that Jiffy does not implement (reported as a bad model)
    kNeedValue = 4,    // compile needs the value (not only the shape) of a graph input
};

class Status {
public:
    Status() = default;
    Status(Code c, std::string msg) : err_(std::make_unique<Err>(Err{c, std::move(msg), {}})) {}
    Status(const Status& o) : err_(o.err_ ? std::make_unique<Err>(*o.err_) : nullptr) {}
    Status& operator=(const Status& o) {
        err_ = o.err_ ? std::make_unique<Err>(*o.err_) : nullptr;
        return *this;
    }
    Status(Status&&) noexcept = default;
    Status& operator=(Status&&) noexcept = default;

    bool ok() const { return !err_; }
    Code code() const { return err_ ? err_->code : Code::kOk; }
    const std::string& message() const {
        static const std::string empty;
        return err_ ? err_->msg : empty;
    }
    // Extra payload (e.g. the value name for kNeedValue).
    const std::string& detail() const {
        static const std::string empty;
        return err_ ? err_->detail : empty;
    }
    Status& with_detail(std::string d) {
        if (err_) err_->detail = std::move(d);
        return *this;
    }
    // Prefix the message with context ("model.onnx: ").
    Status& prefix(const std::string& p) {
        if (err_) err_->msg = p + err_->msg;
        return *this;
    }

private:
    struct Err {
        Code code;
        std::string msg;
        std::string detail;
    };
    std::unique_ptr<Err> err_;
};

template <typename... Args>
std::string str_cat(Args&&... args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}

template <typename... Args>
Status invalid(Args&&... args) {
    return Status(Code::kInvalid, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
Status unsupported(Args&&... args) {
    return Status(Code::kUnsupported, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
Status internal_error(Args&&... args) {
    return Status(Code::kInternal, str_cat(std::forward<Args>(args)...));
}

#define JIFFY_RETURN_IF_ERROR(expr)            \
    do {                                       \
        ::jiffy::Status _st = (expr);          \
        if (!_st.ok()) return _st;             \
    } while (0)

#define JIFFY_CHECK(cond, ...)                                   \
    do {                                                         \
        if (!(cond)) return ::jiffy::invalid(__VA_ARGS__);       \
    } while (0)

}  // namespace jiffy
