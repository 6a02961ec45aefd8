// util/paths.h — the one place where every program decides what a path it reads or writes may be
// (docs/cli.md §6, "Paths that are not plain files"), and the checks on the files a program will
// write, made before any work starts, so that a bad path is refused with one line (InputError,
// exit status 2) instead of failing after the work or destroying a file the program reads:
//   file_id():            a regular file's identity (device and inode, as stat() gives them), so
//                         that two spellings of one file (relative and absolute, a link, a hard
//                         link) compare equal;
//   open_input(), read_input(): an input is a regular file (links followed) and nothing else: a
//                         folder, FIFO, device or socket is refused before anything is read, and
//                         without waiting for a FIFO's writer; a whole-file read is bounded;
//   output_target():      where an output goes: a regular file (or a new one) is replaced whole,
//                         a link's target is, the link kept; a character device or a FIFO
//                         (/dev/stdout, a pipe) is written through as a stream; a folder, a
//                         dangling link or a link loop is refused;
//   check_not_an_input(): an output must not be a file the same command reads;
//   check_can_create():   an output can be written (docs/formats.md §4): for a file, one is
//                         created beside it, under the name the whole-file writers use (PATH.tmp),
//                         and removed again. Creating is the test, not access(), which root passes
//                         for folders no one can write into (/sys, a read-only mount);
//   check_distinct_outputs(): two outputs of one command never lead to one file;
//   write_file_atomically(): an output written whole or not at all (docs/formats.md §4), or
//                         through as a stream;
// and the file names both programs know: the default data and tokenizer, and which model files
// are safetensors.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
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

// What a file of mode `mode` is, as messages name it: "a folder", "a FIFO (named pipe)", ...
inline std::string kind_of_file(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a file";
}

// ---------------------------------------------------------------------------------------------
// Inputs: regular files, bounded

using InputFile = std::unique_ptr<FILE, int (*)(FILE*)>;

// `noun` with its article: "a checkpoint", "an optimiser state file".
inline std::string with_article(const std::string& noun) {
    return (noun.find_first_of("aeiou") == 0 ? "an " : "a ") + noun;
}

// Opens the file at `path` (links followed) for reading as `what` ("checkpoint", "token shard").
// Anything but a regular file is refused before a byte is read: "PATH: is a FIFO (named pipe),
// not a checkpoint"; a path that does not open: "PATH: cannot open the checkpoint (No such file
// or directory)". The file is opened with O_NONBLOCK, so that a FIFO without a writer is refused
// at once instead of holding the program in open() (signals included).
inline InputFile open_input(const std::string& path, const std::string& what) {
    const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw InputError(path + ": cannot open the " + what + " (" + std::strerror(errno) + ")");
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int error = errno;
        close(fd);
        throw InputError(path + ": cannot read the " + what + " (" + std::strerror(error) + ")");
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        throw InputError(path + ": is " + kind_of_file(st.st_mode) + ", not " + with_article(what));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE* file = fdopen(fd, "rb");
    if (!file) {
        close(fd);
        throw InputError(path + ": cannot open the " + what + " (" + std::strerror(errno) + ")");
    }
    return InputFile(file, &std::fclose);
}

// The whole content of the regular file at `path`, read as `what` (open_input); a file larger
// than `max_bytes` is refused before it is read: "PATH: N bytes, more than the M a WHAT may have".
inline std::string read_input(const std::string& path, const std::string& what, uint64_t max_bytes) {
    const InputFile file = open_input(path, what);
    struct stat st;
    if (fstat(fileno(file.get()), &st) == 0 && uint64_t(st.st_size) > max_bytes)
        throw InputError(path + ": " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
                         " " + with_article(what) + " may have");
    std::string content;
    char block[1 << 16];
    for (size_t got; (got = std::fread(block, 1, sizeof block, file.get())) > 0;) {
        content.append(block, got);
        if (content.size() > max_bytes)  // it grew while being read
            throw InputError(path + ": more than the " + std::to_string(max_bytes) + " bytes " + with_article(what) +
                             " may have");
    }
    if (std::ferror(file.get())) throw InputError(path + ": cannot read the " + what + " (" + std::strerror(errno) + ")");
    return content;
}

// True when something is at `path` (links followed): a file, folder, FIFO or device.
inline bool path_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// ---------------------------------------------------------------------------------------------
// Outputs: where each one goes

// Where an output path leads (output_target), decided before any work and again when it is
// written:
//   a file:   a regular file, or none yet: written whole to PATH.tmp beside it and renamed over
//             it; a link to a regular file: the target is replaced so, the link kept;
//   a stream: a character device or a FIFO (a link to one too: /dev/stdout is a link to the
//             terminal or pipe of standard output): written through, no temporary, no rename;
//             the program's own standard output or error (/dev/stdout, /dev/stderr, or the
//             file either is redirected to) is written through that descriptor, after what the
//             program printed there.
struct OutputTarget {
    bool stream = false;
    std::string path;     // the file replaced (a link's target), or the stream's path
    int descriptor = -1;  // a stream that is standard output (1) or error (2); -1 otherwise
    FileId place{0, 0};   // a file: the identity of its folder; a stream: its own
    std::string name;     // a file: its name in that folder; a stream: ""

    // True when both lead to one file: the same folder and name, or the same stream.
    bool same_as(const OutputTarget& other) const {
        return stream == other.stream && place == other.place && name == other.name;
    }
};

// The identity of any file `st` describes (regular or not).
inline FileId any_file_id(const struct stat& st) { return FileId{uint64_t(st.st_dev), uint64_t(st.st_ino)}; }

// Where the output `path` goes (OutputTarget); throws InputError (starting with `name`, e.g.
// "flag -json out/x.json") for a path that cannot be an output: empty, a folder, a dangling
// link, a link loop, a block device or a socket, or a path through something that is not a
// folder.
inline OutputTarget output_target(const std::string& path, const std::string& name) {
    if (path.empty()) throw InputError(name + ": the path is empty");
    OutputTarget t;
    t.path = path;
    struct stat link, st;
    const bool is_link = lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
    if (stat(path.c_str(), &st) == 0) {  // something is there (links followed)
        for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
            struct stat own;
            if (fstat(fd, &own) == 0 && any_file_id(own) == any_file_id(st)) {
                t.stream = true;
                t.descriptor = fd;
                t.place = any_file_id(st);
                return t;
            }
        }
        if (S_ISDIR(st.st_mode)) throw InputError(name + " is a folder");
        if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {  // written through at `path` (/proc/self/fd/N opens too)
            t.stream = true;
            t.place = any_file_id(st);
            return t;
        }
        if (!S_ISREG(st.st_mode))
            throw InputError(name + " is " + kind_of_file(st.st_mode) + ": an output is a file, a FIFO or a character device");
        if (is_link) {  // the target is replaced, the link kept
            char* real = realpath(path.c_str(), nullptr);
            if (!real) throw InputError(name + ": " + std::strerror(errno));
            t.path = real;
            std::free(real);
        }
    } else if (errno == ELOOP) {
        throw InputError(name + " is a symbolic link in a loop (" + std::strerror(ELOOP) + ")");
    } else if (is_link) {
        char to[4096];
        const ssize_t n = readlink(path.c_str(), to, sizeof to - 1);
        throw InputError(name + " is a symbolic link to " + std::string(to, n > 0 ? size_t(n) : 0) +
                         ", which does not exist: give the file itself, or remove the link");
    } else if (errno != ENOENT) {
        throw InputError(name + ": " + std::strerror(errno));  // a path through a file, no permission, ...
    }
    struct stat folder;
    if (stat(folder_of(t.path).c_str(), &folder) == 0) t.place = any_file_id(folder);
    t.name = file_name_of(t.path);
    return t;
}

// Throws InputError when the output named `output_name`, with identity `output`, is one of
// `inputs`: writing it would replace what the command reads.
inline void check_not_an_input(const std::string& output_name, const std::optional<FileId>& output,
                               const std::vector<CommandInput>& inputs) {
    if (!output) return;
    for (const CommandInput& input : inputs)
        if (input.id && *input.id == *output)
            throw InputError(output_name + " is " + input.name + ": an output cannot replace an input");
}

// Checks that the output `path` (named `name` in messages, e.g. "-shard out/x.bin") can be
// written, and returns where it goes (output_target). A file: PATH.tmp (of a link's target) can
// be created: it is, and removed again (one that was already there is only opened for writing
// and left as it was). A stream: it can be opened for writing (access(); a FIFO is not opened,
// which would wait for its reader). Throws InputError otherwise.
inline OutputTarget check_can_create(const std::string& path, const std::string& name) {
    const OutputTarget t = output_target(path, name);
    if (t.stream) {
        if (t.descriptor < 0 && access(t.path.c_str(), W_OK) != 0)
            throw InputError(name + ": cannot write there (" + std::strerror(errno) + ")");
        return t;
    }
    const std::string tmp = t.path + ".tmp";
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NONBLOCK, 0644);
    const bool created = fd >= 0;
    if (!created && errno == EEXIST) fd = open(tmp.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd < 0) throw InputError(name + ": cannot create a file there (" + std::strerror(errno) + ")");
    close(fd);
    if (created) unlink(tmp.c_str());
    return t;
}

// An output of one command: how messages name it ("-json out/a.json") and where it goes.
struct CommandOutput {
    std::string name;
    OutputTarget target;
};

// Refuses (InputError) two outputs of one command that lead to one file, whether or not it
// exists yet: the same folder (however spelled: "D/./a.json", a link to D) and name, or the same
// stream (/dev/stdout twice).
inline void check_distinct_outputs(const std::vector<CommandOutput>& outputs) {
    for (size_t i = 0; i < outputs.size(); i++)
        for (size_t j = 0; j < i; j++)
            if (outputs[i].target.same_as(outputs[j].target))
                throw InputError(outputs[i].name + " and " + outputs[j].name +
                                 " lead to one file: give each output a file of its own");
}

// ---------------------------------------------------------------------------------------------
// Whole-or-nothing writes (docs/formats.md §4)

// Writes `bytes` pieces to `path` where output_target says it goes. A file appears whole or not
// at all: everything goes to PATH.tmp (of a link's target), which is flushed and renamed over it
// only when complete, and removed when anything fails. A stream is written through. Throws
// InputError naming the path when that fails (the callers turn it into an OutputError, exit 4,
// once the work has started).
struct FilePiece { const void* data; size_t bytes; };
inline void write_file_atomically(const std::string& path, const std::vector<FilePiece>& pieces) {
    const OutputTarget t = output_target(path, path);
    if (t.stream) {
        if (t.descriptor >= 0) std::fflush(t.descriptor == STDOUT_FILENO ? stdout : stderr);  // what was printed first
        const int fd = t.descriptor >= 0 ? t.descriptor : open(t.path.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) throw InputError(path + ": cannot open for writing (" + std::strerror(errno) + ")");
        int error = 0;
        for (const FilePiece& p : pieces)
            for (size_t done = 0; done < p.bytes && !error;) {
                const ssize_t n = ::write(fd, (const char*)p.data + done, p.bytes - done);
                if (n > 0) done += size_t(n);
                else if (n < 0 && errno != EINTR) error = errno;
            }
        if (t.descriptor < 0 && close(fd) != 0 && !error) error = errno;
        if (error) throw InputError(path + ": write failed (" + std::strerror(error) + ")");
        return;
    }
    const std::string tmp = t.path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw InputError(tmp + ": cannot open for writing");
    bool ok = true;
    for (const FilePiece& p : pieces)  // (an empty piece may have no data pointer: fwrite must not see it)
        ok = ok && (p.bytes == 0 || std::fwrite(p.data, 1, p.bytes, f) == p.bytes);
    ok = (std::fflush(f) == 0) && ok;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok || std::rename(tmp.c_str(), t.path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw InputError(path + ": write failed (disk full or not writable?)");
    }
}

// Writes `text` to `path` the same way: whole or not at all, or through as a stream.
inline void write_text_atomically(const std::string& path, const std::string& text) {
    write_file_atomically(path, {{text.data(), text.size()}});
}

// Makes a write past the file-size limit (ulimit -f) fail as a full disk does (write() returns
// EFBIG, the program says so in one line, exit status 4, no temporary left) instead of the
// kernel's SIGXFSZ ending the process silently. Every program calls it first.
inline void fail_writes_past_the_file_size_limit() { std::signal(SIGXFSZ, SIG_IGN); }

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
