// tokenizer.h — GPT-2's byte-level BPE tokenizer: text (UTF-8 bytes) to token ids and back.
//
// Encoding has two stages, exactly as in OpenAI's GPT-2 encoder:
//   1. Pre-tokenisation splits the text into pieces with GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (contractions; letter runs, number runs and other-symbol runs, each optionally led by one
//      space; whitespace runs, which leave their last character to lead the next piece).
//   2. Each piece, as bytes, starts as one token per byte; then the adjacent pair with the lowest
//      merge rank is merged, again and again, until no adjacent pair has a merge.
// GPT-2's vocabulary files write bytes through a "byte-to-unicode" map; prepare_data.py undoes
// that map when it writes the tokenizer file, so this code works on raw bytes throughout.
// Decoding concatenates the bytes of the tokens, so decode(encode(s)) == s for any bytes s.
// Bytes that are not valid UTF-8 are treated as symbols of their own (class "other").
//
// Tokenizer file (written by prepare_data.py; llm.c's gpt2_tokenizer.bin is the same format
// without merges and is accepted for decoding). Little-endian:
//   uint32 header[256]: [0] = 20240328, [1] = 2 (version), [2] = vocabulary size V,
//                       [3] = end-of-text token id, [4] = number of merges M (0: decode only)
//   V times:  uint8 length (1..255), then that many bytes: the token's bytes, by id
//   M times:  uint32 left id, uint32 right id: the merges in rank order (rank 0 first);
//             merging them makes the token whose bytes are left's bytes followed by right's.
// A tokenizer's fingerprint (vocabulary_fingerprint) names its vocabulary in token shards
// (docs/formats.md §1), so that shards of different tokenizers are not mixed.
#pragma once
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "util/errors.h"
#include "util/paths.h"
#include "util/unicode_tables.h"
#include "util/utf8.h"

namespace gpt2_bpe {

// The four character classes that GPT-2's pre-tokenisation pattern distinguishes.
enum class CharClass { Letter, Number, Space, Other };

// True when code_point lies in one of the sorted, disjoint `ranges`.
template <size_t N>
bool in_ranges(uint32_t code_point, const CodePointRange (&ranges)[N]) {
    const CodePointRange* after = std::upper_bound(
        ranges, ranges + N, code_point, [](uint32_t cp, const CodePointRange& r) { return cp < r.first; });
    return after != ranges && code_point <= (after - 1)->last;
}

// True for the 25 characters with Unicode's White_Space property, which is what \s means in
// the regex engines of the reference encoders (Python's `regex` module and tiktoken).
inline bool is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

// The pre-tokenisation class of a code point (an invalid byte is "other").
inline CharClass char_class(uint32_t code_point) {
    if (code_point < 0x80) {  // fast path for ASCII
        if ((code_point | 0x20) >= 'a' && (code_point | 0x20) <= 'z') return CharClass::Letter;
        if (code_point >= '0' && code_point <= '9') return CharClass::Number;
        return is_white_space(code_point) ? CharClass::Space : CharClass::Other;
    }
    if (code_point == kInvalidByte) return CharClass::Other;
    if (is_white_space(code_point)) return CharClass::Space;
    if (in_ranges(code_point, kLetterRanges)) return CharClass::Letter;
    if (in_ranges(code_point, kNumberRanges)) return CharClass::Number;
    return CharClass::Other;
}

// The class of the character starting at text[pos].
inline CharClass class_at(const std::string& text, size_t pos) {
    return char_class(decode_utf8(text, pos).code_point);
}

// Length of the contraction ('s 't 're 've 'm 'll 'd, lower case only) starting at text[pos],
// or 0 when none starts there.
inline size_t contraction_length(const std::string& text, size_t pos) {
    if (text[pos] != '\'') return 0;
    for (const char* suffix : {"s", "t", "re", "ve", "m", "ll", "d"}) {
        const std::string s(suffix);
        if (text.compare(pos + 1, s.size(), s) == 0) return 1 + s.size();
    }
    return 0;
}

// End of the run of characters of class `cls` that starts at text[pos].
inline size_t end_of_run(const std::string& text, size_t pos, CharClass cls) {
    while (pos < text.size()) {
        const Utf8Char c = decode_utf8(text, pos);
        if (char_class(c.code_point) != cls) break;
        pos += c.length;
    }
    return pos;
}

// End of the whitespace piece starting at text[begin] (the pattern's \s+(?!\S)|\s+): a run that
// reaches the end of the text is taken whole; otherwise its last character is left out so that it
// can lead the next piece, unless it is the only one.
inline size_t end_of_whitespace(const std::string& text, size_t begin) {
    size_t pos = begin, last_char = begin;
    while (pos < text.size()) {
        const Utf8Char c = decode_utf8(text, pos);
        if (char_class(c.code_point) != CharClass::Space) break;
        last_char = pos;
        pos += c.length;
    }
    if (pos == text.size() || last_char == begin) return pos;
    return last_char;
}

// End of the pre-tokenisation piece that starts at text[begin]: the alternatives of GPT-2's
// pattern tried in order, the first that matches wins.
inline size_t end_of_piece(const std::string& text, size_t begin) {
    if (size_t length = contraction_length(text, begin)) return begin + length;
    if (text[begin] == ' ' && begin + 1 < text.size()) {
        const CharClass next = class_at(text, begin + 1);
        if (next != CharClass::Space) return end_of_run(text, begin + 1, next);  // " ?\p{L}+" etc.
    }
    const CharClass cls = class_at(text, begin);
    if (cls != CharClass::Space) return end_of_run(text, begin, cls);
    return end_of_whitespace(text, begin);
}

// The pre-tokenisation pieces of `text`, in order (their concatenation is `text`).
inline std::vector<std::string> split_pieces(const std::string& text) {
    std::vector<std::string> pieces;
    for (size_t begin = 0, end; begin < text.size(); begin = end) {
        end = end_of_piece(text, begin);
        pieces.push_back(text.substr(begin, end - begin));
    }
    return pieces;
}

}  // namespace gpt2_bpe

// The fingerprint of a vocabulary: 32-bit FNV-1a over its table as the tokenizer file stores it
// (for each id in order, a length byte, then the token's bytes), with 0 read as 1 because a shard
// header word of 0 means "tokenizer unknown". The merges and the end-of-text id are left out: two
// files that give every id the same bytes (GPT-2's with merges, llm.c's decode-only one) make and
// read the same shards.
inline uint32_t vocabulary_fingerprint(const std::vector<std::string>& token_bytes) {
    uint32_t hash = 2166136261u;  // FNV-1a's offset basis
    const auto add = [&](uint8_t byte) { hash = (hash ^ byte) * 16777619u; };  // FNV's 32-bit prime
    for (const std::string& token : token_bytes) {
        add(static_cast<uint8_t>(token.size()));
        for (char c : token) add(static_cast<uint8_t>(c));
    }
    return hash == 0 ? 1 : hash;
}

class Tokenizer {
 public:
    // Reads a tokenizer file (format at the top of this file); throws InputError naming the file
    // and the problem when it is missing, truncated or inconsistent.
    explicit Tokenizer(const std::string& path) : path_(path) {
        const std::string file = read_input(path, "tokenizer file", kMaxFileBytes);
        size_t offset = 0;
        const std::vector<uint32_t> header = read_u32s(file, offset, kHeaderWords);
        check_header(header);
        read_vocabulary(file, offset, header[2], header[4] > 0);
        eot_ = static_cast<int>(header[3]);
        if (eot_ >= vocab_size()) fail("end-of-text id " + std::to_string(eot_) + " is outside the vocabulary");
        read_merges(file, offset, header[4]);
        if (offset != file.size())
            fail(std::to_string(file.size() - offset) + " unexpected bytes after the merges");
    }

    // The token ids of `utf8` (any bytes; "<|endoftext|>" in the text is ordinary text, as in
    // GPT-2's encoder: the end-of-text token is only ever added explicitly).
    std::vector<int> encode(const std::string& utf8) const {
        if (merges_.empty()) fail("has no merges (a decode-only tokenizer, like llm.c's), so it cannot encode");
        std::vector<int> ids;
        ids.reserve(utf8.size() / 3 + 16);
        BpeScratch scratch;
        for (size_t begin = 0, end; begin < utf8.size(); begin = end) {
            end = gpt2_bpe::end_of_piece(utf8, begin);
            const std::string_view piece(utf8.data() + begin, end - begin);
            auto cached = scratch.piece_tokens.find(piece);
            if (cached == scratch.piece_tokens.end())
                cached = scratch.piece_tokens.emplace(piece, merge_piece(piece, scratch)).first;
            ids.insert(ids.end(), cached->second.begin(), cached->second.end());
        }
        return ids;
    }

    // The text (bytes) of a sequence of token ids; throws InputError for an id outside the vocabulary.
    std::string decode(const std::vector<int>& ids) const {
        std::string text;
        for (int id : ids) text += decode_token(id);
        return text;
    }

    // The bytes of one token; throws InputError for an id outside the vocabulary.
    std::string decode_token(int id) const {
        if (id < 0 || id >= vocab_size())
            throw InputError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(vocab_size()) + ")");
        return token_bytes_[id];
    }

    // The id of the end-of-text token <|endoftext|> (50256 for GPT-2).
    int eot() const { return eot_; }

    // Number of tokens in the vocabulary (50257 for GPT-2).
    int vocab_size() const { return static_cast<int>(token_bytes_.size()); }

    // The vocabulary's fingerprint (vocabulary_fingerprint), as token shards record it.
    uint32_t fingerprint() const { return vocabulary_fingerprint(token_bytes_); }

    // True when the file has merges, so that encode() works (false: decode only).
    bool encodes() const { return !merges_.empty(); }

 private:
    static constexpr uint32_t kMagic = 20240328;
    static constexpr uint32_t kVersion = 2;
    static constexpr size_t kHeaderWords = 256;

    // What merging one adjacent pair of tokens does: its priority (lower merges first) and result.
    struct Merge {
        int rank;
        int result;
    };

    // One token of a piece being merged, in a doubly linked list over the piece's byte positions.
    struct Symbol {
        int id, prev, next;  // prev / next: neighbouring symbol's index, -1 at either end
    };

    // A pair of adjacent symbols that has a merge, waiting in the priority queue. It is stale (and
    // skipped) when either symbol has changed since it was queued.
    struct Candidate {
        int rank, left, left_id, right_id, result;
    };

    // Buffers reused across the pieces of one encode() call, and the tokens of the pieces seen so
    // far in it (text repeats its words, so most pieces are looked up rather than merged).
    struct BpeScratch {
        std::vector<Symbol> symbols;
        std::vector<Candidate> queue;
        std::unordered_map<std::string_view, std::vector<int>> piece_tokens;
    };

    // Throws InputError "PATH: problem".
    [[noreturn]] void fail(const std::string& problem) const { throw InputError(path_ + ": " + problem); }

    // The largest tokenizer file read: GPT-2's is 1 MB; a vocabulary of 2^32 tokens could not be
    // indexed by the shards' uint16 anyway.
    static constexpr uint64_t kMaxFileBytes = uint64_t(1) << 30;

    // Reads `count` little-endian uint32 values at file[offset] and advances offset past them.
    std::vector<uint32_t> read_u32s(const std::string& file, size_t& offset, size_t count) const {
        if (file.size() - offset < 4 * count) fail("truncated (file is " + std::to_string(file.size()) + " bytes)");
        std::vector<uint32_t> values(count);
        for (size_t i = 0; i < count; i++, offset += 4)
            for (int b = 3; b >= 0; b--) values[i] = (values[i] << 8) | static_cast<uint8_t>(file[offset + b]);
        return values;
    }

    // Checks the magic number and version of the header.
    void check_header(const std::vector<uint32_t>& header) const {
        if (header[0] != kMagic)
            fail("bad magic " + std::to_string(header[0]) + " (expected " + std::to_string(kMagic) + "): not a tokenizer file");
        if (header[1] != kVersion)
            fail("unsupported version " + std::to_string(header[1]) + " (expected " + std::to_string(kVersion) + ")");
        if (header[2] < 256) fail("vocabulary of " + std::to_string(header[2]) + " tokens cannot hold the 256 bytes");
    }

    // Reads the bytes of `vocab_size` tokens, and finds the token of each single byte; every byte
    // needs one when the file can encode (`encodes`: it has merges), not in a decode-only file.
    void read_vocabulary(const std::string& file, size_t& offset, uint32_t vocab_size, bool encodes) {
        if (vocab_size > (file.size() - offset) / 2)  // every token takes at least 2 bytes
            fail("truncated: " + std::to_string(vocab_size) + " tokens cannot fit in " + std::to_string(file.size()) + " bytes");
        token_bytes_.resize(vocab_size);
        std::fill(std::begin(byte_token_), std::end(byte_token_), -1);
        for (uint32_t id = 0; id < vocab_size; id++) {
            if (offset >= file.size()) fail("truncated in the vocabulary, at token " + std::to_string(id));
            const size_t length = static_cast<uint8_t>(file[offset++]);
            if (length == 0) fail("token " + std::to_string(id) + " has length 0");
            if (file.size() - offset < length) fail("truncated in the vocabulary, at token " + std::to_string(id));
            token_bytes_[id] = file.substr(offset, length);
            offset += length;
            if (length == 1 && byte_token_[static_cast<uint8_t>(token_bytes_[id][0])] < 0)
                byte_token_[static_cast<uint8_t>(token_bytes_[id][0])] = static_cast<int>(id);
        }
        for (int b = 0; b < 256 && encodes; b++)
            if (byte_token_[b] < 0) fail("no token for the single byte " + std::to_string(b));
    }

    // Reads `count` merges. Checks what makes the queue-based merging in append_piece_tokens give
    // exactly the rank-by-rank result of GPT-2's encoder: each merge makes a new token that is in
    // the vocabulary, and uses only bytes or tokens made by earlier merges.
    void read_merges(const std::string& file, size_t& offset, uint32_t count) {
        if (count == 0) return;  // decode only
        const std::vector<uint32_t> pairs = read_u32s(file, offset, 2 * size_t(count));
        std::unordered_map<std::string, int> id_of_bytes;
        for (int id = 0; id < vocab_size(); id++) id_of_bytes.emplace(token_bytes_[id], id);
        std::vector<int> made_by_rank(vocab_size(), -2);  // -2: not made yet; -1: a single byte
        for (int b = 0; b < 256; b++) made_by_rank[byte_token_[b]] = -1;
        for (int rank = 0; rank < static_cast<int>(count); rank++) {
            const uint32_t left = pairs[2 * rank], right = pairs[2 * rank + 1];
            const std::string where = "merge " + std::to_string(rank) + " ";
            if (left >= token_bytes_.size() || right >= token_bytes_.size()) fail(where + "uses a token id outside the vocabulary");
            if (made_by_rank[left] == -2 || made_by_rank[right] == -2) fail(where + "uses a token no earlier merge made");
            const auto found = id_of_bytes.find(token_bytes_[left] + token_bytes_[right]);
            if (found == id_of_bytes.end()) fail(where + "makes a token that is not in the vocabulary");
            if (made_by_rank[found->second] != -2) fail(where + "makes a token that was already made");
            made_by_rank[found->second] = rank;
            merges_.emplace(pair_key(left, right), Merge{rank, found->second});
        }
    }

    // The key of an ordered pair of token ids in merges_.
    static uint64_t pair_key(int left, int right) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    }

    // Queues the pair (left symbol, its right neighbour) when that pair has a merge.
    void queue_pair(BpeScratch& s, int left) const {
        const int right = s.symbols[left].next;
        if (right < 0) return;
        const auto merge = merges_.find(pair_key(s.symbols[left].id, s.symbols[right].id));
        if (merge == merges_.end()) return;
        s.queue.push_back({merge->second.rank, left, s.symbols[left].id, s.symbols[right].id, merge->second.result});
        std::push_heap(s.queue.begin(), s.queue.end(), later_candidate);
    }

    // Heap order: the candidate with the lowest rank, then the leftmost, comes out first.
    static bool later_candidate(const Candidate& a, const Candidate& b) {
        return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
    }

    // True when a queued candidate still describes two adjacent symbols as they are now.
    static bool still_valid(const BpeScratch& s, const Candidate& c) {
        const Symbol& left = s.symbols[c.left];
        return left.id == c.left_id && left.next >= 0 && s.symbols[left.next].id == c.right_id;
    }

    // Merges the symbol at index `left` with its right neighbour into token `result`.
    static void merge_symbols(BpeScratch& s, int left, int result) {
        Symbol& merged = s.symbols[left];
        const int right = merged.next;
        merged.id = result;
        merged.next = s.symbols[right].next;
        if (merged.next >= 0) s.symbols[merged.next].prev = left;
        s.symbols[right].id = -1;
    }

    // The tokens of one piece: pairs are merged in order of rank, leftmost first within a rank.
    // Since every merge's result only takes part in later-ranked merges (checked in read_merges),
    // this is GPT-2's rule of merging all occurrences of the lowest-ranked pair, left to right,
    // then repeating.
    std::vector<int> merge_piece(std::string_view piece, BpeScratch& s) const {
        const int length = static_cast<int>(piece.size());
        s.symbols.resize(length);
        s.queue.clear();
        for (int i = 0; i < length; i++)
            s.symbols[i] = {byte_token_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < length ? i + 1 : -1};
        for (int i = 0; i + 1 < length; i++) queue_pair(s, i);
        while (!s.queue.empty()) {
            std::pop_heap(s.queue.begin(), s.queue.end(), later_candidate);
            const Candidate c = s.queue.back();
            s.queue.pop_back();
            if (!still_valid(s, c)) continue;
            merge_symbols(s, c.left, c.result);
            if (s.symbols[c.left].prev >= 0) queue_pair(s, s.symbols[c.left].prev);
            queue_pair(s, c.left);
        }
        std::vector<int> tokens;
        for (int i = 0; i >= 0; i = s.symbols[i].next) tokens.push_back(s.symbols[i].id);
        return tokens;
    }

    std::string path_;
    std::vector<std::string> token_bytes_;  // token id -> its bytes
    int byte_token_[256];                   // byte value -> id of the token made of that byte alone
    std::unordered_map<uint64_t, Merge> merges_;  // pair_key(left, right) -> merge
    int eot_ = 0;
};

// What to give for shards made by tokenizer `fingerprint` (the shards `shards`, a glob): "-tokenizer
// FILE" for the first "*tokenizer*.bin" file of the shards' folder or data/ that is that
// tokenizer, or words saying which file when none is.
inline std::string tokenizer_to_give(uint32_t fingerprint, const std::string& shards) {
    std::vector<std::string> candidates;
    for (const std::string& folder : {folder_of(shards), std::string("data")}) {
        DIR* d = opendir(folder.c_str());
        if (!d) continue;
        while (const dirent* e = readdir(d)) {
            const std::string name = e->d_name;
            if (name.find("tokenizer") != std::string::npos && name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0)
                candidates.push_back((folder == "." ? "" : folder + "/") + name);
        }
        closedir(d);
    }
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());  // shards in data/
    for (const std::string& path : candidates) {
        try {
            if (Tokenizer(path).fingerprint() == fingerprint) return "-tokenizer " + path;
        } catch (const InputError&) {
        }  // not a tokenizer file: not the one
    }
    return "-tokenizer with the tokenizer file those shards were made with";
}

// The ids of a compact vocabulary (docs/data.md, *Compact vocabulary*) for `full_ids`, tokens of
// the vocabulary `full` that `compact` was made from: each token whose bytes a compact id below
// `other` decodes to gets that id, every other token the catch-all id `other`. Throws
// InputError when `compact` has a token below `other` that `full` lacks: then it was not made
// from `full`.
inline std::vector<int> compact_ids(const Tokenizer& compact, const Tokenizer& full, const std::vector<int>& full_ids,
                                    int other) {
    std::unordered_map<std::string, int> full_id;
    for (int id = 0; id < full.vocab_size(); id++) full_id.emplace(full.decode_token(id), id);
    std::vector<int> to_compact(full.vocab_size(), other);
    for (int id = 0; id < other; id++) {
        const std::string bytes = compact.decode_token(id);
        const auto found = full_id.find(bytes);
        if (found == full_id.end() && bytes != compact.decode_token(other))
            throw InputError("the compact vocabulary's token " + std::to_string(id) + " is no token of the " +
                             std::to_string(full.vocab_size()) + "-token vocabulary it would be encoded with");
        if (found != full_id.end()) to_compact[found->second] = id;
    }
    std::vector<int> ids;
    for (int id : full_ids) ids.push_back(to_compact[id]);
    return ids;
}
