// The Python tests of the experiment tooling (experiments/, sweep.py, plot.py), one GoogleTest
// per module of test/py/, so that they count in `make test`'s summary line. Each module is a
// unittest script run as `python3 test/py/NAME.py` from the repository root (it restarts under
// /usr/bin/python3 when python3 lacks numpy, scipy or pandas); its output is shown when it fails.
//   test_stats    the statistics against R, hand counts and intervals, synthetic laws, the law
//                 selection's recovery of known laws at the noise of the published profiles
//   test_reports  E1, E2, E3 and results.md on hand-made runs, every number worked out by hand
//   test_results  results.load and the collection of run folders into a sweep's tables
//   test_claims   README's claims table and docs/claims.md against what `sweep.py --claims` writes;
//                 the primary tests and verdicts on synthetic experiments with known answers
//   test_intervene  claim 4's intervention tool on tiny checkpoints (needs ./train and ./eval)
//   test_settings experiments/settings.py against ./train's and ./eval's tables of flags (-flags_json 1):
//                 every flag it passes exists, every default and preset value in range (needs ./train, ./eval)
//   test_input    every bad input to sweep.py and plot.py: one line, exit status 2, nothing written
//   test_file_kinds  prepare_data.py, sweep.py and plot.py given outputs and inputs that are not
//                 plain files (/dev/stdout, FIFOs, links, /dev/zero) and a file-size limit
//   test_sweep_runs  signals to a running sweep (checkpoints, the rerun alike), ./eval -run of a sweep run
//   test_safetensors_torch  ./eval -export against Python writers; imported GPT-2 safetensors
//                 against PyTorch models (skips those without torch; needs ./eval)
//   test_layout   the layout of the sources: includes from the root, one way, no cycle; the code map
//   test_docs     every code name README and docs/ put in backticks names something of the tree,
//                 every link a file (docs/README.md, *Names in backticks*)
//   test_torch_bench  scripts/torch_gpt2_bench.py's table from fake programs, without torch (and a
//                 tiny CPU run where torch is installed)
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "test_files.h"

namespace {

class PythonModule : public ::testing::TestWithParam<const char*> {};

TEST_P(PythonModule, Passes) {
    const std::string folder = fresh_folder("py_");
    const std::string out = folder + "out.txt";
    const int raw = std::system(("python3 test/py/" + std::string(GetParam()) + ".py > " + out + " 2>&1").c_str());
    const std::string text = read_file(out);
    EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 0) << text;
    EXPECT_NE(text.find("\nOK"), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(Experiments, PythonModule,
                         ::testing::Values("test_stats", "test_reports", "test_results", "test_claims", "test_intervene",
                                           "test_settings", "test_input", "test_file_kinds", "test_sweep_runs", "test_safetensors_torch", "test_layout",
                                           "test_docs", "test_torch_bench"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
