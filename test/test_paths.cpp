// Tests of util/paths.h: a file's identity is the same however it is spelled (relative or absolute,
// a symbolic or hard link) and differs between files; an output that is an input is refused
// naming both; an output path is checked by creating a file beside it, which root's access()
// would not do for a folder no one can write into; inputs are regular files, read whole up to a
// bound (at it accepted, one byte beyond refused); outputs go where output_target says for each
// kind of path (docs/cli.md §6), and two outputs that lead to one file are refused.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "util/paths.h"
#include "test_files.h"

namespace {

// Writes `content` to `path`.
void write_file(const std::string& path, const std::string& content) {
    std::ofstream(path, std::ios::binary) << content;
}

// The message of the InputError that `check` throws ("no error" when none).
template <typename Check>
std::string error_of(Check check) {
    try {
        check();
    } catch (const InputError& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST(Paths, OneFileHasOneIdentityHoweverItIsNamed) {
    const std::string folder = fresh_folder("paths_");
    write_file(folder + "a.bin", "a");
    write_file(folder + "b.bin", "a");  // same content, another file
    std::filesystem::create_symlink(folder + "a.bin", folder + "symlink.bin");
    std::filesystem::create_hard_link(folder + "a.bin", folder + "hardlink.bin");
    std::filesystem::create_directory(folder + "sub");
    const std::optional<FileId> a = file_id(folder + "a.bin");
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(file_id(folder + "symlink.bin"), a);
    EXPECT_EQ(file_id(folder + "hardlink.bin"), a);
    EXPECT_EQ(file_id(folder + "sub/../a.bin"), a);
    EXPECT_EQ(file_id(std::filesystem::relative(folder + "a.bin").string()), a);
    EXPECT_NE(file_id(folder + "b.bin"), a);
    EXPECT_FALSE(file_id(folder + "missing.bin").has_value());
    EXPECT_FALSE(file_id(folder + "sub").has_value()) << "only regular files have an identity here";
    const int fd = open((folder + "hardlink.bin").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(descriptor_id(fd), a);
    close(fd);
}

TEST(Paths, RefusesAnOutputThatIsAnInput) {
    const std::string folder = fresh_folder("paths_");
    write_file(folder + "model.bin", "m");
    write_file(folder + "other.bin", "o");
    std::filesystem::create_symlink(folder + "model.bin", folder + "link.json");
    const std::vector<CommandInput> inputs = {{"the -tokenizer file t.bin", file_id(folder + "missing.bin")},
                                           {"the -model file " + folder + "model.bin", file_id(folder + "model.bin")}};
    EXPECT_EQ(error_of([&] { check_not_an_input("-json " + folder + "link.json", file_id(folder + "link.json"), inputs); }),
              "-json " + folder + "link.json is the -model file " + folder + "model.bin: an output cannot replace an input");
    EXPECT_EQ(error_of([&] { check_not_an_input("-json x", file_id(folder + "other.bin"), inputs); }), "no error");
    EXPECT_EQ(error_of([&] { check_not_an_input("-json x", file_id(folder + "new.json"), inputs); }), "no error")
        << "a file that does not exist yet is no input";
}

TEST(Paths, ChecksAnOutputByCreatingIt) {
    const std::string folder = fresh_folder("paths_");
    EXPECT_EQ(error_of([&] { check_can_create(folder + "out.json", "-json out.json"); }), "no error");
    EXPECT_EQ(listing(folder), "") << "the file created to check is removed";
    write_file(folder + "kept.json.tmp", "someone's");
    EXPECT_EQ(error_of([&] { check_can_create(folder + "kept.json", "-json kept.json"); }), "no error");
    EXPECT_EQ(read_file(folder + "kept.json.tmp"), "someone's") << "a .tmp file that was there is left alone";
    EXPECT_EQ(error_of([&] { check_can_create(folder + "no/such/folder/x.json", "-json x"); }),
              "-json x: cannot create a file there (No such file or directory)");
    EXPECT_EQ(error_of([&] { check_can_create(folder, "-json F"); }), "-json F is a folder");
    EXPECT_EQ(error_of([&] { check_can_create("", "-json ''"); }), "-json '': the path is empty");
}

TEST(Paths, RefusesAFolderNoOneCanWriteIntoEvenAsRoot) {
    // sysfs takes no new files from anyone, root included, though access(W_OK) says yes to root.
    if (!std::filesystem::is_directory("/sys/kernel")) GTEST_SKIP() << "no /sys";
    EXPECT_NE(error_of([&] { check_can_create("/sys/kernel/x.json", "-json /sys/kernel/x.json"); })
                  .find("-json /sys/kernel/x.json: cannot create a file there ("),
              std::string::npos);
}

TEST(Paths, ReadsRegularFilesWholeUpToTheirBound) {
    const std::string folder = fresh_folder("paths_");
    write_file(folder + "ten.txt", "0123456789");
    EXPECT_EQ(read_input(folder + "ten.txt", "thing", 10), "0123456789") << "a file of exactly the bound";
    EXPECT_EQ(error_of([&] { read_input(folder + "ten.txt", "thing", 9); }),
              folder + "ten.txt: 10 bytes, more than the 9 a thing may have");
    // A file whose size says 0 but that holds more (as /proc's do) is stopped by what it reads.
    EXPECT_EQ(error_of([&] { read_input("/proc/self/status", "status", 10); }),
              "/proc/self/status: more than the 10 bytes a status may have");
    EXPECT_EQ(error_of([&] { read_input(folder + "missing", "checkpoint", 10); }),
              folder + "missing: cannot open the checkpoint (No such file or directory)");
    ASSERT_EQ(mkfifo((folder + "fifo").c_str(), 0644), 0);
    EXPECT_EQ(error_of([&] { read_input(folder + "fifo", "optimiser state file", 10); }),
              folder + "fifo: is a FIFO (named pipe), not an optimiser state file") << "refused, not waited for";
    EXPECT_EQ(error_of([&] { open_input(folder, "token shard"); }), folder + ": is a folder, not a token shard");
    EXPECT_EQ(error_of([&] { open_input("/dev/zero", "token shard"); }), "/dev/zero: is a character device, not a token shard");
}

TEST(Paths, EachKindOfOutputPathGoesWhereTheDocsSay) {
    const std::string folder = fresh_folder("paths_");
    write_file(folder + "file", "x");
    std::filesystem::create_directory(folder + "sub");
    std::filesystem::create_symlink(folder + "sub/target", folder + "dangling");
    write_file(folder + "sub/real", "r");
    std::filesystem::create_symlink(folder + "sub/real", folder + "link");
    std::filesystem::create_symlink(folder + "loop", folder + "loop");
    ASSERT_EQ(mkfifo((folder + "fifo").c_str(), 0644), 0);
    // A new file and a regular one: replaced whole in place; a link: its target.
    OutputTarget t = output_target(folder + "new.json", "-json");
    EXPECT_FALSE(t.stream);
    EXPECT_EQ(t.path, folder + "new.json");
    EXPECT_EQ(t.name, "new.json");
    t = output_target(folder + "link", "-json");
    EXPECT_FALSE(t.stream);
    EXPECT_EQ(t.path, std::filesystem::canonical(folder + "sub/real").string());
    // A FIFO and a device: streams at their own path; this process's standard error: its descriptor.
    t = output_target(folder + "fifo", "-json");
    EXPECT_TRUE(t.stream);
    EXPECT_EQ(t.descriptor, -1);
    EXPECT_EQ(t.path, folder + "fifo");
    struct stat out, err;
    if (fstat(STDOUT_FILENO, &out) == 0 && fstat(STDERR_FILENO, &err) == 0) {
        const bool same = out.st_dev == err.st_dev && out.st_ino == err.st_ino;  // (one terminal, or 2>&1)
        t = output_target("/dev/stderr", "-json");
        EXPECT_TRUE(t.stream);
        EXPECT_EQ(t.descriptor, same ? STDOUT_FILENO : STDERR_FILENO);
    }
    // Refused: empty, a folder, a dangling link, a loop, a socket, a path through a file.
    EXPECT_EQ(error_of([&] { output_target("", "-json"); }), "-json: the path is empty");
    EXPECT_EQ(error_of([&] { output_target(folder + "sub", "-json"); }), "-json is a folder");
    EXPECT_EQ(error_of([&] { output_target(folder + "dangling", "-json"); }),
              "-json is a symbolic link to " + folder + "sub/target, which does not exist: give the file itself, or remove the link");
    EXPECT_EQ(error_of([&] { output_target(folder + "loop", "-json"); }),
              "-json is a symbolic link in a loop (Too many levels of symbolic links)");
    EXPECT_EQ(error_of([&] { output_target(folder + "file/x.json", "-json"); }), "-json: Not a directory");
    const int sock = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address = {};
    address.sun_family = AF_UNIX;
    const std::string socket_path = folder + "socket";
    ASSERT_LT(socket_path.size(), sizeof address.sun_path);
    std::strcpy(address.sun_path, socket_path.c_str());
    ASSERT_EQ(bind(sock, (sockaddr*)&address, sizeof address), 0);
    EXPECT_EQ(error_of([&] { output_target(socket_path, "-json"); }),
              "-json is a socket: an output is a file, a FIFO or a character device");
    close(sock);
    EXPECT_FALSE(exists(folder + "sub/target"));
}

TEST(Paths, WritesAStreamThroughAndAFileWhole) {
    const std::string folder = fresh_folder("paths_");
    write_file(folder + "sub_real", "old");
    std::filesystem::create_symlink(folder + "sub_real", folder + "link");
    const char a[] = "abc", b[] = "de";
    write_file_atomically(folder + "link", {{a, 3}, {b, 2}});
    EXPECT_TRUE(std::filesystem::is_symlink(folder + "link"));
    EXPECT_EQ(read_file(folder + "sub_real"), "abcde");
    EXPECT_EQ(listing(folder), "link sub_real") << "no temporary left";
    // A FIFO: written through to its reader, which gets every piece.
    ASSERT_EQ(mkfifo((folder + "fifo").c_str(), 0644), 0);
    std::string got;
    std::thread reader([&] { got = read_file(folder + "fifo"); });
    write_file_atomically(folder + "fifo", {{a, 3}, {b, 2}});
    reader.join();
    EXPECT_EQ(got, "abcde");
    EXPECT_EQ(listing(folder), "fifo link sub_real");
    // A FIFO whose reader has gone: the write fails (EPIPE, with SIGPIPE ignored) in one InputError.
    signal(SIGPIPE, SIG_IGN);
    std::thread quitter([&] {
        const int fd = open((folder + "fifo").c_str(), O_RDONLY);
        close(fd);
    });
    std::string big(1 << 20, 'x');
    EXPECT_EQ(error_of([&] { write_file_atomically(folder + "fifo", {{big.data(), big.size()}}); }),
              folder + "fifo: write failed (Broken pipe)");
    quitter.join();
    signal(SIGPIPE, SIG_DFL);
}

TEST(Paths, TwoOutputsThatLeadToOneFileAreRefused) {
    const std::string folder = fresh_folder("paths_");
    std::filesystem::create_directory(folder + "d");
    std::filesystem::create_symlink(folder + "d", folder + "to_d");
    const auto out = [&](const std::string& name, const std::string& path) { return CommandOutput{name, output_target(path, name)}; };
    EXPECT_EQ(error_of([&] { check_distinct_outputs({out("-json", folder + "d/a.json"), out("-pairs", folder + "d/./a.json")}); }),
              "-pairs and -json lead to one file: give each output a file of its own");
    EXPECT_EQ(error_of([&] { check_distinct_outputs({out("-json", folder + "d/a.json"), out("-pairs", folder + "to_d/a.json")}); }),
              "-pairs and -json lead to one file: give each output a file of its own");
    EXPECT_EQ(error_of([&] { check_distinct_outputs({out("-json", folder + "d/a.json"), out("-pairs", folder + "d/b.json"),
                                                     out("-export", folder + "d/../d/b.json")}); }),
              "-export and -pairs lead to one file: give each output a file of its own");
    EXPECT_EQ(error_of([&] { check_distinct_outputs({out("-json", folder + "d/a.json"), out("-pairs", folder + "a.json")}); }),
              "no error") << "one name in two folders";
    EXPECT_EQ(listing(folder + "d"), "") << "compared without being created";
}
