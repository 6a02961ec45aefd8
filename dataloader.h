// dataloader.h — serves training batches from token shards (docs/formats.md §1: llm.c's format).
//
// A shard is int32 header[256] = {20240520, 1, token count, tokenizer, 0...} followed by that
// many uint16 tokens; header[3] is the fingerprint of the tokenizer that made it (tokenizer.h's
// vocabulary_fingerprint; 0 = not recorded, as in llm.c's shards and older ones of ours). All the
// shards of one loader must come from one tokenizer: two that record different ones are refused.
// A batch is a window of B*T+1 consecutive tokens of one shard: inputs are its first
// B*T tokens, targets the same shifted by one. A shard of n tokens holds floor((n-1)/(B*T))
// windows, starting at tokens 0, B*T, 2*B*T, ... (consecutive windows share one token: the last
// target of one is the first input of the next). A shard shorter than B*T+1 tokens holds none.
//
// One epoch visits every window of every shard once:
//   shuffle off: the shards in sorted file-name order, each one's windows from its start
//                (docs/formats.md §1), and after the last shard back to the first;
//   shuffle on:  the shards in a random order, each one's windows in a random order, both drawn
//                afresh for every epoch from (seed, epoch), so a run is reproducible.
// With data parallelism the epochs form one stream of windows dealt out in turn: rank r of
// world_size W reads stream positions r, r+W, r+2W, ... so the ranks together read every window
// of an epoch exactly once. The position in the stream, {epoch, cursor}, is all there is to save
// for resuming: the order is recomputed from the seed.
//
// The shards are read with stdio; tokens are assumed little-endian like the machine (x86, ARM).
#pragma once
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "util/errors.h"
#include "util/paths.h"
#include "util/rng.h"

// The shard header's words (docs/formats.md §1): magic, version, and which word records the tokenizer.
constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr int kShardTokenizerWord = 3;

// A tokenizer fingerprint as messages write it: 0x and eight hex digits.
inline std::string tokenizer_name(uint32_t fingerprint) {
    char text[11];
    std::snprintf(text, sizeof text, "0x%08x", fingerprint);
    return text;
}

// Everything needed to resume reading where a DataLoader was.
struct LoaderState {
    uint64_t epoch;   // how many full passes over the windows came before
    uint64_t cursor;  // position of the next window in this epoch's order (0 .. num_windows()-1)
};

class DataLoader {
 public:
    // Opens every shard matching `pattern` (a glob; sorted by name) and validates it: magic
    // 20240520, version 1, token count > 0, file size 1024 + 2*count, every token < vocab_size.
    // Throws InputError naming the file and the problem, when two shards record different
    // tokenizers, and when no shard holds one window.
    DataLoader(const std::string& pattern, int B, int T, int vocab_size, bool shuffle, uint64_t seed,
               int rank = 0, int world_size = 1)
        : pattern_(pattern), batch_tokens_(uint64_t(B) * uint64_t(T)), shuffle_(shuffle), seed_(seed),
          rank_(rank), world_size_(world_size) {
        if (B < 1 || T < 1) throw InputError(pattern + ": batch size B and sequence length T must be positive");
        if (vocab_size < 1) throw InputError(pattern + ": vocabulary size must be positive");
        if (world_size < 1 || rank < 0 || rank >= world_size)
            throw InputError("rank " + std::to_string(rank) + " is not within world size " + std::to_string(world_size));
        files_ = matching_files(pattern);
        for (const std::string& path : files_) shards_.push_back(open_shard(path, vocab_size));
        tokenizer_ = common_tokenizer(shards_);
        for (const Shard& shard : shards_) num_windows_ += shard.windows;
        if (num_windows_ == 0) throw InputError(pattern + ": no shard holds one batch of B*T+1 = " +
                                                std::to_string(batch_tokens_ + 1) + " tokens");
        window_.resize(batch_tokens_ + 1);
        inputs_.resize(batch_tokens_);
        targets_.resize(batch_tokens_);
        order_.resize(num_windows_);
        reset();
    }

    // Reads the next window of this rank into inputs() and targets().
    void next_batch() {
        const uint64_t epoch = stream_position_ / num_windows_;
        if (epoch != order_epoch_) compute_order(epoch);
        read_window(order_[stream_position_ % num_windows_]);
        stream_position_ += world_size_;
    }

    // The B*T input token ids of the current batch.
    const int32_t* inputs() const { return inputs_.data(); }

    // The B*T target token ids of the current batch (each input's next token).
    const int32_t* targets() const { return targets_.data(); }

    // Where the next batch comes from, to save for resuming.
    LoaderState state() const { return {stream_position_ / num_windows_, stream_position_ % num_windows_}; }

    // Continues from a saved state() of the same rank, world size and data.
    void restore(const LoaderState& state) {
        if (state.cursor >= num_windows_ || (state.epoch * num_windows_ + state.cursor) % world_size_ != uint64_t(rank_))
            throw InputError(pattern_ + ": saved data position (epoch " + std::to_string(state.epoch) + ", cursor " +
                             std::to_string(state.cursor) + ") does not fit " + std::to_string(num_windows_) +
                             " windows for rank " + std::to_string(rank_) + " of " + std::to_string(world_size_));
        stream_position_ = state.epoch * num_windows_ + state.cursor;
    }

    // Back to this rank's first window of epoch 0 (every evaluation then reads the same batches).
    void reset() { stream_position_ = rank_; }

    // The glob the shards were found with.
    const std::string& pattern() const { return pattern_; }

    // The shard files, in sorted order.
    const std::vector<std::string>& files() const { return files_; }

    // Number of tokens in all shards together.
    uint64_t total_tokens() const {
        uint64_t total = 0;
        for (const Shard& shard : shards_) total += shard.tokens;
        return total;
    }

    // Number of windows in one epoch, over all ranks.
    uint64_t num_windows() const { return num_windows_; }

    // The fingerprint of the tokenizer the shards record (0 when none records one).
    uint32_t tokenizer() const { return tokenizer_; }

    // The token counts in the headers of the shards matching `pattern`, read without validating
    // anything else (none for a file whose header does not read): enough to choose a batch size
    // that fits before the loader itself checks every file.
    static std::vector<uint64_t> shard_header_tokens(const std::string& pattern) {
        std::vector<uint64_t> counts;
        for (const std::string& path : glob_files(pattern)) {
            int32_t header[3];
            if (read_header(path, header, sizeof header) && header[0] == kShardMagic && header[2] > 0)
                counts.push_back(uint64_t(header[2]));
        }
        return counts;
    }

    // The tokenizer the shards matching `pattern` record, read from their headers alone (0 when
    // none records one); an InputError when two record different ones, as the loader refuses.
    static uint32_t recorded_tokenizer(const std::string& pattern) {
        std::vector<Shard> shards;
        for (const std::string& path : glob_files(pattern)) {
            int32_t header[kShardTokenizerWord + 1];
            if (read_header(path, header, sizeof header) && header[0] == kShardMagic)
                shards.push_back({path, 0, 0, uint32_t(header[kShardTokenizerWord])});
        }
        return common_tokenizer(shards);
    }

    // The longest shard's token count (shard_header_tokens; 0 when none reads).
    static uint64_t longest_shard_tokens(const std::string& pattern) {
        const std::vector<uint64_t> counts = shard_header_tokens(pattern);
        return counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
    }

    // All the shards' tokens together (shard_header_tokens; 0 when none reads).
    static uint64_t all_shard_tokens(const std::string& pattern) {
        uint64_t total = 0;
        for (uint64_t count : shard_header_tokens(pattern)) total += count;
        return total;
    }

    // The files matching the glob `pattern`, in byte-wise sorted order (none: an empty list).
    static std::vector<std::string> glob_files(const std::string& pattern) {
        glob_t matches{};
        const int status = glob(pattern.c_str(), 0, nullptr, &matches);
        std::vector<std::string> files(matches.gl_pathv, matches.gl_pathv + (status == 0 ? matches.gl_pathc : 0));
        globfree(&matches);
        std::sort(files.begin(), files.end());
        return files;
    }

 private:
    static constexpr uint64_t kHeaderBytes = 256 * sizeof(int32_t);

    // One validated shard file.
    struct Shard {
        std::string path;
        uint64_t tokens;     // from the header
        uint64_t windows;    // how many B*T+1 windows it holds
        uint32_t tokenizer;  // the fingerprint of the tokenizer that made it (0: not recorded)
    };

    // One window: which shard, and which of its windows (starting at token index * B*T).
    struct Window {
        uint32_t shard;
        uint32_t index;
    };

    // True when the first `bytes` bytes of the shard at `path`, a regular file (open_input), were
    // read into `header`; false for any file that does not read (the loader says why).
    static bool read_header(const std::string& path, int32_t* header, size_t bytes) {
        try {
            const InputFile file = open_input(path, "token shard");
            return std::fread(header, bytes, 1, file.get()) == 1;
        } catch (const InputError&) {
            return false;
        }
    }

    // glob_files, but throws when no file matches.
    static std::vector<std::string> matching_files(const std::string& pattern) {
        std::vector<std::string> files = glob_files(pattern);
        if (files.empty()) throw InputError(pattern + ": no file matches");
        return files;
    }

    // Opens the shard `path` for reading (a regular file: util/paths.h), or throws InputError.
    static InputFile open_file(const std::string& path) { return open_input(path, "token shard"); }

    // Reads and validates the header, size and tokens of one shard file.
    Shard open_shard(const std::string& path, int vocab_size) const {
        const InputFile file = open_file(path);
        struct stat st;
        if (fstat(fileno(file.get()), &st) != 0) throw InputError(path + ": cannot read the token shard");
        const uint64_t file_bytes = uint64_t(st.st_size);
        if (file_bytes < kHeaderBytes)
            throw InputError(path + ": " + std::to_string(file_bytes) + " bytes, too short for the 1024-byte shard header");
        int32_t header[256];
        if (std::fread(header, sizeof(header), 1, file.get()) != 1) throw InputError(path + ": cannot read the header");
        if (header[0] != kShardMagic)
            throw InputError(path + ": bad magic " + std::to_string(header[0]) + " (expected " + std::to_string(kShardMagic) +
                             "): not a token shard");
        if (header[1] != kShardVersion)
            throw InputError(path + ": unsupported shard version " + std::to_string(header[1]) + " (expected 1)");
        if (header[2] <= 0) throw InputError(path + ": header says " + std::to_string(header[2]) + " tokens (must be > 0)");
        const uint64_t tokens = header[2];
        if (file_bytes != kHeaderBytes + 2 * tokens)
            throw InputError(path + ": file is " + std::to_string(file_bytes) + " bytes but its header's " +
                             std::to_string(tokens) + " tokens need " + std::to_string(kHeaderBytes + 2 * tokens) +
                             " (truncated or not a shard)");
        check_token_ids(file.get(), path, tokens, vocab_size);
        return {path, tokens, tokens > batch_tokens_ ? (tokens - 1) / batch_tokens_ : 0, uint32_t(header[kShardTokenizerWord])};
    }

    // The tokenizer the shards record (0 when none does); throws InputError when two record
    // different ones.
    static uint32_t common_tokenizer(const std::vector<Shard>& shards) {
        const Shard* first = nullptr;  // the first shard that records a tokenizer
        for (const Shard& shard : shards) {
            if (shard.tokenizer == 0) continue;
            if (!first) first = &shard;
            if (shard.tokenizer != first->tokenizer)
                throw InputError(shard.path + ": made by tokenizer " + tokenizer_name(shard.tokenizer) + ", but " +
                                 first->path + " by tokenizer " + tokenizer_name(first->tokenizer) +
                                 ": shards of different tokenizers cannot be read together");
        }
        return first ? first->tokenizer : 0;
    }

    // Where shards of a `vocab_size`-id vocabulary are, said after a refusal of the shard at
    // `path`: "; shards of that vocabulary: ..." for prepare_data.py's NAME_v{V}_{train,val}_*.bin
    // beside it, "" when there are none.
    static std::string shards_of_vocabulary(const std::string& path, int vocab_size) {
        const size_t slash = path.find_last_of('/');
        const std::string folder = slash == std::string::npos ? "" : path.substr(0, slash + 1);
        const std::string tag = "_v" + std::to_string(vocab_size) + "_train_";
        const std::vector<std::string> found = glob_files(folder + "*" + tag + "*.bin");
        if (found.empty()) return "";
        const std::string prefix = found[0].substr(0, found[0].rfind(tag) + tag.size() - 7);  // ".../NAME_vV"
        return "; shards of that vocabulary: -train_data \"" + prefix + "_train_*.bin\" -val_data \"" + prefix +
               "_val_*.bin\"";
    }

    // Reads all `tokens` tokens that follow the header and throws InputError at the first that
    // is not below vocab_size.
    static void check_token_ids(FILE* file, const std::string& path, uint64_t tokens, int vocab_size) {
        std::vector<uint16_t> block(std::min<uint64_t>(tokens, 1 << 20));
        for (uint64_t done = 0; done < tokens;) {
            const size_t count = std::min<uint64_t>(block.size(), tokens - done);
            if (std::fread(block.data(), sizeof(uint16_t), count, file) != count)
                throw InputError(path + ": read error in the tokens");
            for (size_t i = 0; i < count; i++)
                if (block[i] >= vocab_size)
                    throw InputError(path + ": token " + std::to_string(done + i) + " is " + std::to_string(block[i]) +
                                     ", outside the vocabulary of " + std::to_string(vocab_size) +
                                     shards_of_vocabulary(path, vocab_size));
            done += count;
        }
    }

    // A random number generator for the shuffle of one epoch, determined by (seed, epoch).
    Rng epoch_rng(uint64_t epoch) const { return Rng(seed_ ^ (0x9E3779B97F4A7C15ull * (epoch + 1))); }

    // Fills order_ with the windows of `epoch`: shard by shard, in order or shuffled.
    void compute_order(uint64_t epoch) {
        Rng rng = epoch_rng(epoch);
        std::vector<uint32_t> shard_order(shards_.size());
        for (uint32_t s = 0; s < shard_order.size(); s++) shard_order[s] = s;
        if (shuffle_) shuffle_in_place(shard_order.begin(), shard_order.end(), rng);
        auto next = order_.begin();
        for (uint32_t s : shard_order) {
            const auto first = next;
            for (uint32_t w = 0; w < shards_[s].windows; w++) *next++ = {s, w};
            if (shuffle_) shuffle_in_place(first, next, rng);
        }
        order_epoch_ = epoch;
    }

    // Fisher–Yates shuffle of [first, last) with `rng`.
    template <typename Iterator>
    static void shuffle_in_place(Iterator first, Iterator last, Rng& rng) {
        for (auto n = last - first; n > 1; n--) std::iter_swap(first + (n - 1), first + rng.below(n));
    }

    // Reads one window from its shard into inputs_ and targets_.
    void read_window(const Window& window) {
        if (!open_file_ || open_shard_ != window.shard) {
            open_file_ = open_file(shards_[window.shard].path);
            open_shard_ = window.shard;
        }
        const long offset = long(kHeaderBytes + 2 * uint64_t(window.index) * batch_tokens_);
        if (std::fseek(open_file_.get(), offset, SEEK_SET) != 0 ||
            std::fread(window_.data(), sizeof(uint16_t), window_.size(), open_file_.get()) != window_.size())
            throw InputError(shards_[window.shard].path + ": read error at byte " + std::to_string(offset));
        std::copy(window_.begin(), window_.end() - 1, inputs_.begin());
        std::copy(window_.begin() + 1, window_.end(), targets_.begin());
    }

    std::string pattern_;
    uint64_t batch_tokens_;  // B*T
    bool shuffle_;
    uint64_t seed_;
    int rank_, world_size_;
    std::vector<std::string> files_;
    std::vector<Shard> shards_;
    uint64_t num_windows_ = 0;
    uint32_t tokenizer_ = 0;             // common_tokenizer(shards_)
    std::vector<Window> order_;          // this epoch's windows, in reading order
    uint64_t order_epoch_ = UINT64_MAX;  // the epoch order_ was computed for
    uint64_t stream_position_ = 0;       // epoch * num_windows_ + cursor of the next window to read
    InputFile open_file_{nullptr, &std::fclose};
    uint32_t open_shard_ = 0;
    std::vector<uint16_t> window_;  // the B*T+1 tokens just read
    std::vector<int32_t> inputs_, targets_;
};

// Throws InputError when the shards of `a` and `b` (say the training and the validation data)
// record different tokenizers; shards that record none pass.
inline void check_same_tokenizer(const std::string& a_pattern, uint32_t a, const std::string& b_pattern, uint32_t b) {
    if (a != 0 && b != 0 && a != b)
        throw InputError(b_pattern + ": made by tokenizer " + tokenizer_name(b) + ", but " + a_pattern +
                         " by tokenizer " + tokenizer_name(a) + ": shards of different tokenizers cannot be used in one run");
}
inline void check_same_tokenizer(const DataLoader& a, const DataLoader& b) {
    check_same_tokenizer(a.pattern(), a.tokenizer(), b.pattern(), b.tokenizer());
}

// The first shard file of `b` that is also a shard of `a` (the same file, however it is named),
// or "" when they share none: validation data that is also training data measures memorisation,
// which deserves a warning.
inline std::string shared_shard(const DataLoader& a, const DataLoader& b) {
    for (const std::string& path : b.files()) {
        const std::optional<FileId> id = file_id(path);
        for (const std::string& other : a.files())
            if (id && id == file_id(other)) return path;
    }
    return "";
}

// Refuses (an InputError naming `flag`) reading `batches` batches, the first ones in order, of
// validation shards `pattern` that hold `distinct` ones, unless `allow_repeats` (-allow_repeats
// 1): batches after the distinct ones would repeat the first. ./train and ./eval share the rule.
inline void check_distinct_batches(const std::string& flag, uint64_t batches, const std::string& pattern,
                                   uint64_t distinct, bool allow_repeats) {
    if (batches > distinct && !allow_repeats)
        throw InputError("flag " + flag + ": " + std::to_string(batches) + " batches but " + pattern + " holds " +
                         std::to_string(distinct) + " distinct batches of B*T+1 tokens; lower " + flag +
                         " or give -allow_repeats 1 to read some twice");
}
