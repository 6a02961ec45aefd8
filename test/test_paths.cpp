// Tests of util/paths.h: a file's identity is the same however it is spelled (relative or absolute,
// a symbolic or hard link) and differs between files; an output that is an input is refused
// naming both; an output path is checked by creating a file beside it, which root's access()
// would not do for a folder no one can write into.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

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
