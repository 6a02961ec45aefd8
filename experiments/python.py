"""The interpreter the tools need: one with numpy, scipy and pandas (Debian's python3-numpy,
python3-scipy, python3-pandas; matplotlib only for figures).

`python3 sweep.py` may start under an interpreter without them (a pyenv or venv python3 first
on PATH). require() then runs the same command again under /usr/bin/python3, where Debian's
packages are, and when that one lacks them too it says which package to install, in one line,
and exits with status 2. Standard library only: it runs before those packages are imported.
"""
import importlib.util
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
DEBIAN_PACKAGE = {"numpy": "python3-numpy", "scipy": "python3-scipy", "pandas": "python3-pandas",
                  "matplotlib": "python3-matplotlib"}
# Set in the environment of the second start, so that it never starts a third.
RESTARTED = "GPT2_LN_SYSTEM_PYTHON"


def missing(modules):
    """The modules of `modules` this interpreter cannot import."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def install_hint(modules):
    """"apt-get install python3-numpy ..." for the modules."""
    return "apt-get install " + " ".join(DEBIAN_PACKAGE.get(m, m) for m in modules)


def require(modules, tool):
    """Returns when this interpreter has every module; else restarts the command under
    /usr/bin/python3 once, or exits 2 with one line naming what to install."""
    lacking = missing(modules)
    if not lacking:
        return
    here = os.path.realpath(sys.executable)
    if os.environ.get(RESTARTED) is None and os.path.exists(SYSTEM_PYTHON) and here != os.path.realpath(SYSTEM_PYTHON):
        os.environ[RESTARTED] = here
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
    tried = os.environ.get(RESTARTED)
    where = sys.executable + (f" (started as {tried})" if tried else "")
    print(f"{tool}: needs {', '.join(lacking)}, not installed for {where} (Debian: {install_hint(lacking)})",
          file=sys.stderr)
    sys.exit(2)
