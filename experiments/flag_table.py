"""./train's and ./eval's own tables of flags, as the programs print them (`./train -flags_json 1`,
docs/cli.md §1): each flag's name, values (kind, range or choices), default and help. The sweep's
settings (settings.py) take every flag's range, choices and default from here, so that nothing
the programs declare is typed again in Python. A table is read once per binary (its path and
modification time), in memory only."""
import json
import os
import subprocess

from .grid import InputError, fmt_num

_tables = {}  # (path, mtime) -> {name: row}


def flag_table(binary):
    """{flag name: row} of `binary -flags_json 1`, each row as docs/cli.md §1 describes it. A
    binary that is missing, fails, or is older than -flags_json is an InputError (one line)."""
    path = os.path.abspath(binary)
    try:
        key = (path, os.stat(path).st_mtime_ns)
    except OSError:
        raise InputError(f"{binary} not found: build it first (make train eval)")
    if key not in _tables:
        _tables[key] = read_table(path)
    return _tables[key]


def read_table(path):
    try:
        done = subprocess.run([path, "-flags_json", "1"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InputError(f"{path}: cannot run it to read its flags ({e})")
    try:
        rows = json.loads(done.stdout)["flags"] if done.returncode == 0 else None
        return {row["name"]: row for row in rows}
    except (ValueError, KeyError, TypeError):
        said = (done.stderr.strip().splitlines() or ["no table"])[-1]
        raise InputError(f"{path} -flags_json 1 printed no table of flags ({said}): built before -flags_json? "
                         "rebuild it (make train eval)")


def flag_row(binary, flag):
    """The row of `flag` ("-lr") in the table of `binary`; an InputError when it has no such flag."""
    table = flag_table(binary)
    if flag[1:] not in table:
        raise InputError(f"{binary} has no flag {flag}: an older or newer build than this sweep.py? "
                         "rebuild it (make train eval)")
    return table[flag[1:]]


def default_of(row):
    """The default of a flag as a value: a number for an integer or real flag, else its text;
    None when the program works it out at start-up (or has none)."""
    if row["default_value"] is None:
        return None
    return row["default_number"] if row["default_number"] is not None else row["default_value"]


def in_values(row, value):
    """True when `value` (a number, or a word for a choice or text flag) is one the flag takes."""
    v = row["values"]
    if v["kind"] == "integer":
        return float(value).is_integer() and v["min"] <= value <= v["max"]
    if v["kind"] == "real":
        above = value > v["lo"] if v["lo_open"] else value >= v["lo"]
        below = value < v["hi"] if v["hi_open"] else value <= v["hi"]
        return above and below
    if v["kind"] == "choice":
        return value in v["choices"]
    return True


def check_value(binary, flag, value, where):
    """Refuses `value`, given to the sweep as `where` ("--lr"), when `binary`'s `flag` does not
    take it: one line naming the setting, the flag and the values it takes."""
    row = flag_row(binary, flag)
    if not in_values(row, value):
        shown = fmt_num(value) if isinstance(value, float) else str(value)
        raise InputError(f"{where}: {shown} is not a value of {os.path.basename(binary)} {flag} "
                         f"(it takes {row['syntax']})")
