"""How the tools write files, and which files they may not replace.

Every file sweep.py and plot.py write is written whole or not at all (write_whole): into a new
temporary file of its own beside the target, created exclusively (so a link or a stale file of
that name is never written through), which then replaces the target's name. An existing target
is never opened for writing, so a target that is a link leaves the file it points to alone.

Before any work, check_outputs refuses an output that is one of the inputs (compared as files:
every spelling of a file, links and hard links included, has one identity) or one of ./train's
files in a run folder (README, "Run folders"); check_folder refuses an output folder in which no
file can be created, by creating one."""
import os
import re
import shutil
import stat
import tempfile

from .grid import InputError

# ./train's own files in a run folder (README, "Run folders"); only ./train writes them.
RUN_FILE = re.compile(r"(log\.jsonl|config\.json|(model|state)_\d{8}\.bin)(\.tmp)?")


def identity(path):
    """(device, inode) of the regular file at `path` (links followed), or None."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISREG(info.st_mode) else None


def is_run_folder(folder):
    """True when `folder` holds ./train's config.json or log.jsonl."""
    return any(os.path.isfile(os.path.join(folder, name)) for name in ("config.json", "log.jsonl"))


def run_folder_of(path):
    """The ./train run folder when `path` (or the file a link at it points to) is one of
    ./train's files in it, else None."""
    for spelling in (path, os.path.realpath(path)):
        folder = os.path.dirname(spelling) or "."
        if RUN_FILE.fullmatch(os.path.basename(spelling)) and is_run_folder(folder):
            return folder
    return None


def check_outputs(outputs, inputs):
    """Refuses (InputError) an output that would replace an input or a run folder's file.
    `outputs`: (flag, path) pairs of the files a command may write; `inputs`: paths it reads."""
    by_identity = {identity(p): p for p in inputs if identity(p)}
    for flag, path in outputs:
        folder = run_folder_of(path)
        if folder is not None:
            raise InputError(f"{flag} {path}: is a file of the ./train run folder {folder}; choose another name")
        same = by_identity.get(identity(path))
        if same is not None:
            raise InputError(f"{flag} {path}: is the input {same}; choose another name")


def check_folder(folder, flag):
    """Refuses (InputError) an output folder in which no file can be created (read-only, full,
    a path through a file, a name too long), by creating it and a file in it; what this check
    created is removed again."""
    created, path = [], os.path.abspath(folder)
    while not os.path.lexists(path):
        created.append(path)  # the deepest first
        path = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
        probe, probe_path = tempfile.mkstemp(prefix=".probe_", suffix=".tmp", dir=folder)
        os.close(probe)
        os.remove(probe_path)
    except OSError as e:
        raise InputError(f"{flag} {folder}: cannot create files there ({e.strerror})")
    finally:
        for path in created:
            try:
                os.rmdir(path)
            except OSError:
                pass


def write_whole(path, write, mode=0o666):
    """Writes `path` whole or not at all: write(tmp) fills a new temporary file beside it (named
    .NAME.XXXX.tmp.EXT, so that matplotlib and pandas see the extension), which then replaces
    `path`. The new file gets `mode` less the umask (0666: the usual permissions)."""
    folder, name = os.path.split(path)
    root, ext = os.path.splitext(name)
    handle, tmp = tempfile.mkstemp(prefix=f".{root}.", suffix=".tmp" + ext, dir=folder or ".")
    os.close(handle)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, mode & ~umask)
        os.replace(tmp, path)
    except OSError as e:  # named by the file it was for, not by the temporary one
        raise OSError(e.errno, e.strerror, path) from e
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)


def write_text(path, text, mode=0o666):
    """Writes the text (UTF-8) to `path` whole or not at all."""
    def fill(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    write_whole(path, fill, mode)


def copy_whole(src, dst, mode=0o666):
    """Copies the file `src` to `dst` whole or not at all (a link at dst is replaced, not
    written through)."""
    write_whole(dst, lambda tmp: shutil.copyfile(src, tmp), mode)


def os_error_text(e):
    """One line for an OSError: the file(s) it names and the system's reason."""
    names = " → ".join(str(n) for n in (e.filename, e.filename2) if n is not None)
    return f"{names}: {e.strerror}" if names and e.strerror else str(e)
