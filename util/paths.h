// util/paths.h — checks on the files a program will write, made before any work starts, so that a bad
// output path is refused with one line (InputError, exit status 2) instead of failing after the
// work or destroying a file the program reads:
//   file_id():            a regular file's identity (device and inode, as stat() gives them), so
//                         that two spellings of one file (relative and absolute, a link, a hard
//                         link) compare equal;
//   check_not_an_input(): an output must not be a file the same command reads;
//   check_can_create():   an output can be written whole (docs/formats.md §4): a file is created
//                         beside it, under the name the whole-file writers use (PATH.tmp), and
//                         removed again. Creating is the test, not access(), which root passes
//                         for folders no one can write into (/sys, a read-only mount);
//   write_file_atomically(): a file written whole or not at all (docs/formats.md §4);
// and the file names both programs know: the default data and tokenizer, and which model files
// are safetensors.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "util/errors.h"

// Which file a path or descriptor leads to.
struct FileId {
    uint64_t device, inode;
    bool operator==(const FileId& other) const { return device == other.device && inode == other.inode; }
    bool operator!=(const FileId& other) const { return !(*this == other); }
};

// The identity of `st` when it describes a regular file; none otherwise (a terminal or pipe can be
// both standard input and standard output without any file at risk).
inline std::optional<FileId> regular_file_id(const struct stat& st) {
    if (!S_ISREG(st.st_mode)) return std::nullopt;
    return FileId{uint64_t(st.st_dev), uint64_t(st.st_ino)};
}

// The identity of the regular file at `path` (links followed); none when there is none.
inline std::optional<FileId> file_id(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return std::nullopt;
    return regular_file_id(st);
}

// The identity of the regular file open as descriptor `fd` (0: standard input, 1: output).
inline std::optional<FileId> descriptor_id(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return std::nullopt;
    return regular_file_id(st);
}

// The folder part of a file path or glob ("data/x_*.bin" -> "data", "x.bin" -> ".").
inline std::string folder_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// The name part of a file path ("data/x.bin" -> "x.bin"; "" for a path ending in "/").
inline std::string file_name_of(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

// A file a command reads: how messages name it ("the -tokenizer file data/gpt2_tokenizer.bin",
// "standard input") and which file it is.
struct CommandInput {
    std::string name;
    std::optional<FileId> id;
};

// Throws InputError when the output named `output_name`, with identity `output`, is one of
// `inputs`: writing it would replace what the command reads.
inline void check_not_an_input(const std::string& output_name, const std::optional<FileId>& output,
                               const std::vector<CommandInput>& inputs) {
    if (!output) return;
    for (const CommandInput& input : inputs)
        if (input.id && *input.id == *output)
            throw InputError(output_name + " is " + input.name + ": an output cannot replace an input");
}

// Throws InputError (starting with `name`, e.g. "-shard out/x.bin") unless a file can be written
// whole at `path`: it is not a folder, and PATH.tmp can be created (it is removed again; one that
// was already there is only opened for writing and left as it was).
inline void check_can_create(const std::string& path, const std::string& name) {
    if (path.empty()) throw InputError(name + ": the path is empty");
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw InputError(name + " is a folder");
    const std::string tmp = path + ".tmp";
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    const bool created = fd >= 0;
    if (!created && errno == EEXIST) fd = open(tmp.c_str(), O_WRONLY);
    if (fd < 0) throw InputError(name + ": cannot create a file there (" + std::strerror(errno) + ")");
    close(fd);
    if (created) unlink(tmp.c_str());
}

// ---------------------------------------------------------------------------------------------
// Whole-or-nothing writes (docs/formats.md §4)

// Writes `bytes` pieces to `path` so the file appears whole or not at all: everything goes to
// path.tmp, which is flushed and renamed over path only when complete.
struct FilePiece { const void* data; size_t bytes; };
inline void write_file_atomically(const std::string& path, const std::vector<FilePiece>& pieces) {
    std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw InputError(tmp + ": cannot open for writing");
    bool ok = true;
    for (const FilePiece& p : pieces)  // (an empty piece may have no data pointer: fwrite must not see it)
        ok = ok && (p.bytes == 0 || std::fwrite(p.data, 1, p.bytes, f) == p.bytes);
    ok = (std::fflush(f) == 0) && ok;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw InputError(path + ": write failed (disk full or not writable?)");
    }
}

// Writes `text` to `path` the same way: whole or not at all.
inline void write_text_atomically(const std::string& path, const std::string& text) {
    write_file_atomically(path, {{text.data(), text.size()}});
}

// ---------------------------------------------------------------------------------------------
// File names both programs know

// The bundled corpus (prepare_data.py default) and GPT-2's tokenizer: what ./train and ./eval
// read when no -train_data / -val_data / -tokenizer is given (flags/train_flags.h, flags/eval_flags.h).
constexpr const char* DEFAULT_TRAIN_DATA = "data/mobydick_train_*.bin";
constexpr const char* DEFAULT_VAL_DATA = "data/mobydick_val_*.bin";
constexpr const char* DEFAULT_TOKENIZER = "data/gpt2_tokenizer.bin";

// True for a file name ending in ".safetensors": GPT-2 weights in Hugging Face's layout
// (run/safetensors.h), else a checkpoint (run/checkpoint.h).
inline bool is_safetensors_name(const std::string& path) {
    const std::string end = ".safetensors";
    return path.size() > end.size() && path.compare(path.size() - end.size(), end.size(), end) == 0;
}
