// util/json.h — the JSON ./train and ./eval write and read: numbers, arrays of numbers and strings,
// each as JSON text, and objects built one member at a time (over several lines, or on one line
// for a log record); and Json, a value read from text and written back (config.json, the log's
// records read on -resume 1).
//
// The reader and writer are the project's own, about 150 lines, rather than a library (Debian's
// nlohmann-json3-dev would do): the files are small and of one known shape, a number read and
// written again must keep its exact text (a resumed run compares settings as written), and
// the build then needs nothing beyond the C++ standard library.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "util/errors.h"
#include "util/paths.h"
#include "util/utf8.h"

// A number: %.9g round-trips a float; non-finite values become null.
inline std::string json_number(double x) {
    if (!std::isfinite(x)) return "null";
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9g", x);
    return buf;
}

// A float32 value as the shortest number that reads back as the same float (0.1f is 0.1, not
// 0.100000001); non-finite values become null.
inline std::string json_float(float x) {
    if (!std::isfinite(x)) return "null";
    char buf[40];
    for (int digits = 6; digits <= 9; digits++) {
        std::snprintf(buf, sizeof buf, "%.*g", digits, x);
        if (std::strtof(buf, nullptr) == x) break;
    }
    return buf;
}

// The array [v[offset], v[offset + stride], ...] of numbers.
inline std::string json_array(const std::vector<double>& v, size_t offset = 0, size_t stride = 1) {
    std::string s = "[";
    for (size_t i = offset; i < v.size(); i += stride) s += (i == offset ? "" : ", ") + json_number(v[i]);
    return s + "]";
}

// A string literal of UTF-8 bytes; bytes that are not valid UTF-8 (a token can end in the
// middle of a character) become U+FFFD, so the output is always valid JSON and UTF-8.
inline std::string json_string(const std::string& bytes) {
    std::string s = "\"";
    for (size_t i = 0; i < bytes.size();) {
        const Utf8Char ch = decode_utf8(bytes, i);
        if (ch.code_point == kInvalidByte) {
            s += "\xEF\xBF\xBD";
        } else if (ch.code_point == '"' || ch.code_point == '\\') {
            s += '\\';
            s += (char)ch.code_point;
        } else if (ch.code_point == '\n') {
            s += "\\n";
        } else if (ch.code_point == '\t') {
            s += "\\t";
        } else if (ch.code_point == '\r') {
            s += "\\r";
        } else if (ch.code_point < 0x20 || ch.code_point == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", ch.code_point);
            s += buf;
        } else {
            s.append(bytes, i, ch.length);
        }
        i += ch.length;
    }
    return s + "\"";
}

// A JSON object written one member per line, in the order added.
class JsonObject {
public:
    // Adds "name": value, where value is JSON text already (json_number, json_string, ...).
    void add(const std::string& name, const std::string& value) {
        text_ += (text_.empty() ? "{\n  " : ",\n  ") + json_string(name) + ": " + value;
    }

    // The closed object, with a final newline.
    std::string str() const { return (text_.empty() ? "{" : text_) + "\n}\n"; }

private:
    std::string text_;
};

// A JSON object on one line, {"a": 1, "b": [2, 3]}, members in the order added: one record of
// log.jsonl (docs/logs.md).
class JsonRecord {
public:
    // Adds "name": value, where value is JSON text already (json_number, json_string, ...).
    JsonRecord& add(const std::string& name, const std::string& value) {
        text_ += (text_.empty() ? "{" : ", ") + json_string(name) + ": " + value;
        return *this;
    }

    // The closed object, without a newline.
    std::string str() const { return text_.empty() ? "{}" : text_ + "}"; }

private:
    std::string text_;
};

// A JSON value: null, true or false, a number, a string, an array or an object (its members in
// the order read or added). A number keeps the text it was read or built from, so that a value
// read and written again is the same bytes and two values compare as written.
class Json {
public:
    enum class Kind { Null, Bool, Number, String, Array, Object };

    Json() = default;  // null
    static Json boolean(bool b) { return Json(Kind::Bool, b ? "true" : "false"); }
    static Json number(const std::string& text) { return Json(Kind::Number, text); }  // JSON number text
    static Json number(double x) { return std::isfinite(x) ? number(json_number(x)) : Json(); }
    static Json integer(long long n) { return number(std::to_string(n)); }
    static Json string(const std::string& s) { return Json(Kind::String, s); }
    static Json array() { return Json(Kind::Array, ""); }
    static Json object() { return Json(Kind::Object, ""); }
    static Json array_of(const std::vector<std::string>& strings) {
        Json a = array();
        for (const std::string& s : strings) a.push(string(s));
        return a;
    }

    Kind kind() const { return kind_; }
    // A number's text, a string's bytes, "true" or "false"; empty for the others.
    const std::string& text() const { return text_; }
    double as_number() const { return std::strtod(text_.c_str(), nullptr); }  // of a Number

    // An array's items; an object's members.
    const std::vector<Json>& items() const { return items_; }
    const std::vector<std::pair<std::string, Json>>& members() const { return members_; }
    void push(Json item) { items_.push_back(std::move(item)); }

    // The member `name` of an object, or nullptr.
    const Json* get(const std::string& name) const {
        for (const auto& m : members_)
            if (m.first == name) return &m.second;
        return nullptr;
    }
    // Sets member `name`: in its place when present, else added last.
    Json& set(const std::string& name, Json value) {
        for (auto& m : members_)
            if (m.first == name) return m.second = std::move(value);
        members_.emplace_back(name, std::move(value));
        return members_.back().second;
    }
    void remove(const std::string& name) {
        for (size_t i = 0; i < members_.size(); i++)
            if (members_[i].first == name) members_.erase(members_.begin() + i--);
    }

    // The value on one line: {"a": 1, "b": [2, 3]}.
    std::string str() const {
        switch (kind_) {
            case Kind::Null: return "null";
            case Kind::Bool:
            case Kind::Number: return text_;
            case Kind::String: return json_string(text_);
            case Kind::Array: {
                std::string s = "[";
                for (size_t i = 0; i < items_.size(); i++) s += (i ? ", " : "") + items_[i].str();
                return s + "]";
            }
            case Kind::Object: {
                std::string s = "{";
                for (size_t i = 0; i < members_.size(); i++)
                    s += (i ? ", " : "") + json_string(members_[i].first) + ": " + members_[i].second.str();
                return s + "}";
            }
        }
        return "null";
    }

    // An object with one member per line, each value on its line (as JsonObject writes it), and
    // a final newline: the layout of config.json.
    std::string lines() const {
        std::string s;
        for (const auto& [name, value] : members_) s += (s.empty() ? "{\n  " : ",\n  ") + json_string(name) + ": " + value.str();
        return (s.empty() ? "{" : s) + "\n}\n";
    }

    bool operator==(const Json& other) const { return str() == other.str(); }
    bool operator!=(const Json& other) const { return !(*this == other); }

private:
    Kind kind_ = Kind::Null;
    std::string text_;
    std::vector<Json> items_;
    std::vector<std::pair<std::string, Json>> members_;

    Json(Kind kind, std::string text) : kind_(kind), text_(std::move(text)) {}
    friend class JsonReader;
};

// Reads one JSON value (RFC 8259) from text; anything else, or anything after it but white
// space, is an InputError "WHAT: not JSON (...) at byte N".
class JsonReader {
public:
    static Json read(const std::string& text, const std::string& what) {
        JsonReader r(text, what);
        Json value = r.value(0);
        r.skip_space();
        if (r.pos_ != text.size()) r.fail("text after the value");
        return value;
    }

private:
    static constexpr int kMaxDepth = 64;  // nesting deeper than any file here: refused, not a stack overflow
    const std::string& text_;
    const std::string& what_;
    size_t pos_ = 0;

    JsonReader(const std::string& text, const std::string& what) : text_(text), what_(what) {}

    [[noreturn]] void fail(const std::string& problem) const {
        throw InputError(what_ + ": not JSON (" + problem + ") at byte " + std::to_string(pos_));
    }
    void skip_space() {
        while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
            pos_++;
    }
    bool next_is(char c) {
        skip_space();
        return pos_ < text_.size() && text_[pos_] == c;
    }
    void expect(char c) {
        if (!next_is(c)) fail(std::string("expected '") + c + "'");
        pos_++;
    }
    bool take_word(const char* word) {
        const size_t n = std::char_traits<char>::length(word);
        if (text_.compare(pos_, n, word) != 0) return false;
        pos_ += n;
        return true;
    }

    Json value(int depth) {
        if (depth > kMaxDepth) fail("nested too deeply");
        skip_space();
        if (pos_ >= text_.size()) fail("expected a value");
        const char c = text_[pos_];
        if (c == '{') return object(depth);
        if (c == '[') return array(depth);
        if (c == '"') return Json::string(string());
        if (take_word("true")) return Json::boolean(true);
        if (take_word("false")) return Json::boolean(false);
        if (take_word("null")) return Json();
        return Json::number(number());
    }

    Json object(int depth) {
        Json o = Json::object();
        expect('{');
        if (!next_is('}')) {
            while (true) {
                if (!next_is('"')) fail("expected a member name");
                const std::string name = string();
                expect(':');
                o.members_.emplace_back(name, value(depth + 1));
                if (!next_is(',')) break;
                pos_++;
            }
        }
        expect('}');
        return o;
    }

    Json array(int depth) {
        Json a = Json::array();
        expect('[');
        if (!next_is(']')) {
            while (true) {
                a.items_.push_back(value(depth + 1));
                if (!next_is(',')) break;
                pos_++;
            }
        }
        expect(']');
        return a;
    }

    // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, returned as written.
    std::string number() {
        const size_t start = pos_;
        auto digits = [&] {
            const size_t from = pos_;
            while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') pos_++;
            if (pos_ == from) fail("expected a value");
        };
        if (text_[pos_] == '-') pos_++;
        if (pos_ < text_.size() && text_[pos_] == '0') pos_++;
        else digits();
        if (pos_ < text_.size() && text_[pos_] == '.') {
            pos_++;
            digits();
        }
        if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
            pos_++;
            if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) pos_++;
            digits();
        }
        return text_.substr(start, pos_ - start);
    }

    // A string literal's bytes: escapes decoded (\uXXXX, surrogate pairs too, as UTF-8); the
    // text must be UTF-8, as RFC 8259 asks (what json_string writes).
    std::string string() {
        std::string s;
        pos_++;  // the opening quote
        while (true) {
            if (pos_ >= text_.size()) fail("unterminated string");
            const unsigned char c = (unsigned char)text_[pos_++];
            if (c == '"') return s;
            if (c < 0x20) fail("control character in a string");
            if (c >= 0x80) {  // the bytes of one UTF-8 character
                const Utf8Char ch = decode_utf8(text_, pos_ - 1);
                if (ch.code_point == kInvalidByte) fail("invalid UTF-8 in a string");
                s.append(text_, pos_ - 1, ch.length);
                pos_ += ch.length - 1;
                continue;
            }
            if (c != '\\') {
                s += (char)c;
                continue;
            }
            if (pos_ >= text_.size()) fail("unterminated string");
            const char e = text_[pos_++];
            switch (e) {
                case '"': case '\\': case '/': s += e; break;
                case 'b': s += '\b'; break;
                case 'f': s += '\f'; break;
                case 'n': s += '\n'; break;
                case 'r': s += '\r'; break;
                case 't': s += '\t'; break;
                case 'u': append_utf8(s, code_point()); break;
                default: fail("bad escape in a string");
            }
        }
    }

    // The code point of \uXXXX (after "\u"), joining a surrogate pair.
    uint32_t code_point() {
        uint32_t u = hex4();
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (!take_word("\\u")) fail("unpaired surrogate");
            const uint32_t low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("unpaired surrogate");
            u = 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
        } else if (u >= 0xDC00 && u <= 0xDFFF) {
            fail("unpaired surrogate");
        }
        return u;
    }
    uint32_t hex4() {
        uint32_t u = 0;
        for (int i = 0; i < 4; i++, pos_++) {
            const char h = pos_ < text_.size() ? text_[pos_] : 0;
            const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) fail("bad \\u escape");
            u = u * 16 + (uint32_t)d;
        }
        return u;
    }
    static void append_utf8(std::string& s, uint32_t u) {
        if (u < 0x80) {
            s += (char)u;
        } else if (u < 0x800) {
            s += (char)(0xC0 | (u >> 6));
            s += (char)(0x80 | (u & 0x3F));
        } else if (u < 0x10000) {
            s += (char)(0xE0 | (u >> 12));
            s += (char)(0x80 | ((u >> 6) & 0x3F));
            s += (char)(0x80 | (u & 0x3F));
        } else {
            s += (char)(0xF0 | (u >> 18));
            s += (char)(0x80 | ((u >> 12) & 0x3F));
            s += (char)(0x80 | ((u >> 6) & 0x3F));
            s += (char)(0x80 | (u & 0x3F));
        }
    }
};

// The JSON value in `text`; `what` (a file name) begins the InputError for anything else.
inline Json read_json(const std::string& text, const std::string& what) { return JsonReader::read(text, what); }

// The most a JSON file read whole may hold: a run's config.json is a few kilobytes, so anything
// near this is not one (and reading /dev/zero or a huge file stops here, not at the end of memory).
constexpr uint64_t MAX_JSON_FILE_BYTES = 16 << 20;

// The JSON value of the file at `path`, a regular file of at most MAX_JSON_FILE_BYTES
// (util/paths.h, read_input); anything else, or a file that is not JSON, is an InputError
// "PATH: ..." led by `flag` when given ("flag -config: PATH: ...").
inline Json read_json_file(const std::string& path, const std::string& flag = "") {
    const std::string lead = flag.empty() ? "" : flag + ": ";
    std::string text;
    try {
        text = read_input(path, "JSON file", MAX_JSON_FILE_BYTES);
    } catch (const InputError& e) {
        throw InputError(lead + e.what());
    }
    return read_json(text, lead + path);
}
