// json.h — the few JSON pieces ./train and ./eval write by hand (log.jsonl records, config.json,
// eval -json and -pairs): numbers, arrays of numbers and strings, each as JSON text, and objects
// built one member at a time (over several lines, or on one line for a log record).
#pragma once
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tokenizer.h"  // decode_utf8

// A number: %.9g round-trips a float; non-finite values become null.
inline std::string json_number(double x) {
    if (!std::isfinite(x)) return "null";
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9g", x);
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
        const gpt2_bpe::Utf8Char ch = gpt2_bpe::decode_utf8(bytes, i);
        if (ch.code_point == gpt2_bpe::kInvalidByte) {
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
