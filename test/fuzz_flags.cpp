// Fuzz target: the flag parser (flags/flags.h) through ./train's and ./eval's tables of flags
// (flags/train_flags.h, flags/eval_flags.h). The input is split at NUL bytes into arguments; every argument
// list must either parse into settings within their ranges or be refused with an InputError
// (never a crash, a hang or another exception).
#include <string>
#include <vector>

#include "flags/eval_flags.h"
#include "model.h"  // ModelConfig, model_size
#include "run/run_counts.h"
#include "flags/train_flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<std::string> words = {"./train"};
    std::string word;
    for (size_t i = 0; i < size; i++) {
        if (data[i] == 0) {
            words.push_back(word);
            word.clear();
        } else {
            word += (char)data[i];
        }
    }
    if (!word.empty()) words.push_back(word);
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    help_requested((int)words.size(), argv.data());
    try {
        const TrainOptions o = parse_train_options((int)words.size(), argv.data());
        if (o.steps < 1 || o.warmup > o.steps || o.beta1 >= 1 || o.beta2 >= 1 || !(o.dt > 0) || !(o.eps > 0)) std::abort();
        ModelConfig cfg;
        if (!o.init.empty()) model_size(o.init, &cfg);
        // The counts of the sizes given (run/run_counts.h): exact or refused, never wrapped.
        const StepCounts c = step_counts(o.B ? o.B : 8, o.T ? o.T : 256, 1, o.total_batch ? o.total_batch : 2048, o.steps);
        if (c.positions < 1 || c.grad_accum < 1 || (long long)c.grad_accum * c.micro_tokens != (o.total_batch ? o.total_batch : 2048) ||
            c.run_tokens / o.steps != (o.total_batch ? o.total_batch : 2048))
            std::abort();
    } catch (const InputError&) {
    }
    try {
        const EvalOptions o = parse_eval_options((int)words.size(), argv.data());
        if ((o.model_path.empty() && o.run_dir.empty()) || o.eval_batches < 1 || (o.given.count("sigma") && !(o.sigma > 0))) std::abort();
    } catch (const InputError&) {
    }
    return 0;
}
