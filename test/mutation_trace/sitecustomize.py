"""The Python half of the mutation audit's trace pass (test/mutate_generated.py, docs/mutation.md):
on PYTHONPATH there, Python loads this in every process it starts (sweep.py, prepare_data.py,
plot.py, the unittest modules). With GPT2_MUTANT_TRACE=FILE it appends to FILE, once per
process each, every line that runs of the files named in GPT2_MUTANT_FILES (absolute paths,
separated by commas), as RELATIVE_PATH:LINE (relative to GPT2_MUTANT_ROOT): the lines a test
reaches, so that a mutant on a line no test reaches is not run at all, and one on a line is run
only with the tests that reach it. Without GPT2_MUTANT_TRACE it does nothing."""
import os
import sys
import threading

TRACE = os.environ.get("GPT2_MUTANT_TRACE")

if TRACE:
    ROOT = os.environ.get("GPT2_MUTANT_ROOT", "")
    WATCHED = {os.path.realpath(p) for p in os.environ.get("GPT2_MUTANT_FILES", "").split(",") if p}
    seen = set()
    names = {}  # a code object's file name -> its path relative to ROOT when watched, else None

    def watched_name(filename):
        if filename not in names:
            real = os.path.realpath(filename)
            names[filename] = os.path.relpath(real, ROOT) if real in WATCHED else None
        return names[filename]

    def on_line(frame, event, arg):
        if event == "line":
            key = (watched_name(frame.f_code.co_filename), frame.f_lineno)
            if key not in seen:
                seen.add(key)
                with open(TRACE, "a", encoding="utf-8") as f:
                    f.write(f"{key[0]}:{key[1]}\n")
        return on_line

    def on_call(frame, event, arg):
        return on_line if watched_name(frame.f_code.co_filename) else None

    sys.settrace(on_call)
    threading.settrace(on_call)
