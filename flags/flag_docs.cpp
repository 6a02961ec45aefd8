// flags/flag_docs.cpp — `make docs`: writes the tables of flags of ./train and ./eval (flags/train_flags.h,
// flags/eval_flags.h) into docs/cli.md, between their marker comments (flags/flag_docs.h),
// and says which files changed. Run from the repository root.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "flags/flag_docs.h"
#include "flags/flags.h"
#include "util/paths.h"  // write_text_atomically

static std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(path + ": cannot read (run make docs from the repository root)");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

int main(int argc, char** argv) {
    const std::string usage = "usage: make docs (build/flag_docs, from the repository root)\n";
    return run_program("flag_docs", usage, argc, argv, [&] {
        Flags(argc, argv).finish();  // takes no flags
        for (const FlagDoc& doc : flag_docs()) {
            const std::string before = read_text(doc.path);
            const std::string after = replace_between_markers(before, doc.marker, doc.content);
            if (after == before) continue;
            write_text_atomically(doc.path, after);
            std::printf("%s: the table \"%s\" rewritten\n", doc.path.c_str(), doc.marker.c_str());
        }
        return 0;
    });
}
