// flags/flag_docs.h — where the documentation holds the programs' tables of flags: docs/cli.md,
// each between the marker comments "<!-- BEGIN name -->" and "<!-- END name -->".
// `make docs` (flags/flag_docs.cpp) writes them there; test_flags fails when one differs.
#pragma once
#include <string>
#include <vector>

#include "flags/eval_flags.h"
#include "flags/flags.h"
#include "flags/train_flags.h"

struct FlagDoc {
    std::string path;     // relative to the repository root
    std::string marker;   // the name in the marker comments
    std::string content;  // the markdown table
};

inline std::vector<FlagDoc> flag_docs() {
    const std::string train = markdown_table(train_flags()), eval = markdown_table(eval_flags());
    return {{"docs/cli.md", "train flags", train}, {"docs/cli.md", "eval flags", eval}};
}
