// util/utf8.h — reading one UTF-8 character from bytes: the tokenizer's pre-tokenisation
// (tokenizer.h) classifies characters with it, and the JSON writer and reader (util/json.h) check
// strings with it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

// One decoded UTF-8 character: its code point and how many bytes it takes.
struct Utf8Char {
    uint32_t code_point;
    size_t length;
};

// A code point no valid UTF-8 sequence decodes to: marks a byte that is not valid UTF-8.
constexpr uint32_t kInvalidByte = 0xFFFFFFFF;

// Decodes the UTF-8 character starting at text[pos]. A byte that does not start a valid,
// shortest-form sequence (stray continuation byte, overlong form, surrogate, beyond U+10FFFF,
// truncated sequence) decodes as {kInvalidByte, 1}.
inline Utf8Char decode_utf8(const std::string& text, size_t pos) {
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
    const uint8_t lead = byte(pos);
    if (lead < 0x80) return {lead, 1};
    size_t length;
    uint32_t code_point, smallest;
    if (lead >= 0xC2 && lead <= 0xDF) { length = 2; code_point = lead & 0x1F; smallest = 0x80; }
    else if (lead >= 0xE0 && lead <= 0xEF) { length = 3; code_point = lead & 0x0F; smallest = 0x800; }
    else if (lead >= 0xF0 && lead <= 0xF4) { length = 4; code_point = lead & 0x07; smallest = 0x10000; }
    else return {kInvalidByte, 1};
    if (pos + length > text.size()) return {kInvalidByte, 1};
    for (size_t i = 1; i < length; i++) {
        const uint8_t continuation = byte(pos + i);
        if ((continuation & 0xC0) != 0x80) return {kInvalidByte, 1};
        code_point = (code_point << 6) | (continuation & 0x3F);
    }
    const bool surrogate = code_point >= 0xD800 && code_point <= 0xDFFF;
    if (code_point < smallest || code_point > 0x10FFFF || surrogate) return {kInvalidByte, 1};
    return {code_point, length};
}
