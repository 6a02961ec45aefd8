"""How the tools read and write files, and which files they may not replace: the Python side of
util/paths.h, with the same answers for every kind of path (docs/cli.md §6). Standard library
only, so that prepare_data.py uses it too.

Inputs are regular files (links followed): open_input refuses a folder, FIFO, device or socket
in one line before reading, and without waiting for a FIFO's writer; check_inputs does the same
for a list of paths, before any work.

Every output goes where output_target says: a regular file, or none yet, is written whole or not
at all (write_whole): into a new temporary file of its own beside it, created exclusively, which
then replaces it; a link to a regular file has its target replaced so, the link kept; a
character device or a FIFO (/dev/stdout, a pipe) is written through as a stream; a folder, a
dangling link or a link loop is refused.

Before any work, check_outputs refuses an output that is no place for one (output_target), that
is one of the inputs (compared as files: every spelling of a file, links and hard links included,
has one identity), one of ./train's files in a run folder (docs/train.md §6), or that leads
to the file another output does; check_folder refuses an output folder in which no file can be
created, by creating one."""
import errno
import os
import re
import shutil
import stat
import sys
import tempfile

from .grid import InputError

# ./train's own files in a run folder (docs/train.md §6); only ./train writes them.
RUN_FILE = re.compile(r"(log\.jsonl|config\.json|(model|state)_\d{8}\.bin)(\.tmp)?")


def kind_of(mode):
    """What a file of mode `mode` is, as messages name it: "a folder", "a FIFO (named pipe)", ..."""
    for test, kind in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a file"


def open_input(path, what):
    """The regular file at `path` (links followed), open for reading in binary; InputError "PATH:
    is a FIFO (named pipe), not WHAT" for anything else, "PATH: cannot open WHAT (REASON)" when it
    does not open. Opened with O_NONBLOCK, so a FIFO without a writer is refused, not waited for."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise InputError(f"{path}: cannot open {what} ({e.strerror})")
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(f"{path}: is {kind_of(mode)}, not {what}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def check_inputs(paths, what="a file to read"):
    """Refuses (InputError, as open_input) any of `paths` that exists but is not a regular file;
    paths that do not exist are left to the reader, which says so."""
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            continue
        if not stat.S_ISREG(mode):
            raise InputError(f"{path}: is {kind_of(mode)}, not {what}")


def output_target(path, flag):
    """Where the output `path` goes: ("file", the file replaced whole: a link's target) or
    ("stream", path) for a character device or a FIFO, written through. InputError (led by
    `flag`) for a folder, a dangling link, a link loop, a block device or a socket."""
    name = f"{flag} {path}" if flag else path
    if not path:
        raise InputError(f"{flag}: the path is empty")
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"{name}: is a symbolic link in a loop ({e.strerror})")
        if os.path.islink(path):
            raise InputError(f"{name}: is a symbolic link to {os.readlink(path)}, which does not exist: give the file "
                             "itself, or remove the link")
        if e.errno != errno.ENOENT:
            raise InputError(f"{name}: {e.strerror}")
        return "file", path
    if stat.S_ISDIR(mode):
        raise InputError(f"{name}: is a folder")
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return "stream", path
    if not stat.S_ISREG(mode):
        raise InputError(f"{name}: is {kind_of(mode)}: an output is a file, a FIFO or a character device")
    return "file", os.path.realpath(path) if os.path.islink(path) else path


def place_of(path, flag):
    """Which file an output leads to, existing or not: the identity of a stream, or of a file's
    folder with the file's name (so that D/a.json and D/./a.json are one place)."""
    kind, target = output_target(path, flag)
    try:
        info = os.stat(target if kind == "stream" else os.path.dirname(target) or ".")
    except OSError:
        return kind, target, None
    return kind, (info.st_dev, info.st_ino), None if kind == "stream" else os.path.basename(target)


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
    """Refuses (InputError) an output that is no place for one (output_target), that would replace
    an input or a run folder's file, or that leads to the file another output does.
    `outputs`: (flag, path) pairs of the files a command may write; `inputs`: paths it reads."""
    by_identity = {identity(p): p for p in inputs if identity(p)}
    places = {}
    for flag, path in outputs:
        place = place_of(path, flag)
        if place in places:
            raise InputError(f"{flag} {path} and {places[place]} lead to one file: give each output a file of its own")
        places[place] = f"{flag} {path}"
        folder = run_folder_of(path)
        if folder is not None:
            raise InputError(f"{flag} {path}: is a file of the ./train run folder {folder}; choose another name")
        same = by_identity.get(identity(path))
        if same is not None:
            raise InputError(f"{flag} {path}: is the input {same}; choose another name")


def check_is_folder(path, flag):
    """Refuses (InputError, led by `flag`) a folder path at which something other than a folder
    (or a link to one) is: a file, a FIFO, a device, a dangling link, a link loop."""
    if not os.path.lexists(path) or os.path.isdir(path):
        return
    try:
        what = f"is {kind_of(os.stat(path).st_mode)}"
    except OSError as e:
        what = (f"is a symbolic link in a loop ({e.strerror})" if e.errno == errno.ELOOP else
                f"is a symbolic link to {os.readlink(path)}, which does not exist")
    raise InputError(f"{flag} {path}: {what}, not a folder")


def check_folder(folder, flag):
    """Refuses (InputError) an output folder that is something else (check_is_folder) or in which
    no file can be created (read-only, full, a path through a file, a name too long), by creating
    it and a file in it; what this check created is removed again."""
    check_is_folder(folder, flag)
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
    """Writes `path` where output_target says: a file whole or not at all: write(tmp) fills a new
    temporary file beside it (a link's target) (named .NAME.XXXX.tmp.EXT, so that matplotlib and
    pandas see the extension), which then replaces it; the new file gets `mode` less the umask
    (0666: the usual permissions). A stream: written through (write_stream)."""
    kind, path = output_target(path, "")
    if kind == "stream":
        return write_stream(path, write)
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


def write_stream(path, write):
    """Writes what write(tmp) puts in a temporary file through to the stream at `path`: this
    program's standard output or error when `path` is that (after what it printed there),
    else the device or FIFO opened for writing (which waits for a FIFO's reader)."""
    root, ext = os.path.splitext(os.path.basename(path))
    handle, tmp = tempfile.mkstemp(prefix=".stream.", suffix=".tmp" + ext)
    os.close(handle)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            data = f.read()
        info = os.stat(path)
        own = next((s for s in (sys.stdout, sys.stderr) if identity_of_descriptor(s) == (info.st_dev, info.st_ino)), None)
        if own is not None:
            own.flush()
            view = memoryview(data)
            while view:
                view = view[os.write(own.fileno(), view):]
        else:
            with open(path, "wb") as stream:
                stream.write(data)
    except OSError as e:
        raise OSError(e.errno, e.strerror, path) from e
    finally:
        os.remove(tmp)


def identity_of_descriptor(stream):
    """(device, inode) of the file open as a Python stream (sys.stdout), or None."""
    try:
        info = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return info.st_dev, info.st_ino


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
