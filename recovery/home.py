"""Where the tool keeps local state, kept private: the home folder (``RECOVERY_HOME``, else
``.recovery/`` in the current folder) and the folders and files made in it.

The home holds the embedded Redis's append-only file (every tuple value in flight and all
keyed state), the spill files, Spark's log and the web view's logs, so every folder made here
is 0700 and every file 0600 whatever the umask: looser ones of ours are tightened, ones owned
by another user are refused (a RecoveryError naming them).
"""
from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from recovery.environment import environment
from recovery.errors import RecoveryError

PRIVATE_DIR_MODE = 0o700

PRIVATE_FILE_MODE = 0o600


def state_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The folder that holds local state: ``home``, else ``$RECOVERY_HOME``, else ``./.recovery``.

    Only names it; :func:`ensure_home` creates it, private.
    """
    chosen = home if home not in (None, "") else environment().home
    return Path(chosen).expanduser().absolute()


def ensure_home(home: str | os.PathLike[str] | None = None) -> Path:
    """:func:`state_home`, created as a private folder (see :func:`private_dir`)."""
    return private_dir(state_home(home), "state folder")


def not_ours(what: str, path: Path, uid: int) -> RecoveryError:
    """The refusal of a state folder or file another user owns."""
    return RecoveryError(
        f"{what} {path} is owned by uid {uid}, not by this user (uid {os.geteuid()}): "
        f"refusing to keep state there; use a folder of your own (RECOVERY_HOME)")


def private_dir(path: str | os.PathLike[str], what: str = "folder") -> Path:
    """``path`` as a folder only its owner can enter (0700), whatever the umask.

    Missing parents are made with the umask's mode (they are the user's folders); ``path``
    itself is made 0700, or tightened to 0700 when it exists and is ours. One owned by another
    user, or not a folder, is refused with a RecoveryError naming it. A symlink is followed:
    a home may be one.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, PRIVATE_DIR_MODE)
        st = os.stat(path)
    except OSError as err:
        raise RecoveryError(f"cannot create {what} {path}: {err.strerror or err}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RecoveryError(f"{what} {path} exists and is not a folder")
    if st.st_uid != os.geteuid():
        raise not_ours(what, path, st.st_uid)
    if stat.S_IMODE(st.st_mode) != PRIVATE_DIR_MODE:
        os.chmod(path, PRIVATE_DIR_MODE)
    return path


def private_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` as a file only its owner can read (0600), created empty when missing, tightened
    when it exists and is ours, refused when another user owns it. Appending to it later keeps
    the mode (e.g. a log another program opens)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
                     PRIVATE_FILE_MODE)
    except OSError as err:
        raise RecoveryError(f"cannot create {what} {path}: {err.strerror or err}") from None
    try:
        tighten_fd(fd, path, what, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)
    return path


def tighten_fd(fd: int, path: Path, what: str, mode: int) -> None:
    """The open file `fd` (`path`) set to `mode` when it is ours; refused (RecoveryError) when
    another user owns it."""
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        raise not_ours(what, path, st.st_uid)
    if stat.S_IMODE(st.st_mode) != mode:
        os.fchmod(fd, mode)


def write_private(path: Path, text: str) -> None:
    """Replace ``path``'s content with ``text``, the file being 0600 (see :func:`private_file`)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    try:
        tighten_fd(fd, path, "file", PRIVATE_FILE_MODE)
        with os.fdopen(fd, "w", closefd=False) as fh:
            fh.write(text)
    finally:
        os.close(fd)


def read_private(path: str | os.PathLike[str], what: str, limit: int = 1 << 20) -> str:
    """The text of a file holding a secret (a token, a password, Spark properties with keys),
    which its owner alone may read or change, as ssh wants of a key (mode 0600 or stricter).
    RecoveryError in one line starting with `what` (e.g. "--token-file FILE"), never quoting
    the file's content: not a regular file, unreadable, looser than 0600, not UTF-8, over
    `limit` bytes."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):   # (a pipe would block the open)
            raise RecoveryError(f"{what}: not a regular file")
        with open(path, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if mode & 0o077:     # checked before reading: a loose file's secret is not even read
                raise RecoveryError(f"{what}: mode {stat.S_IMODE(mode):04o} lets other accounts read or "
                                    f"change it; `chmod 600 {os.fspath(path)}`")
            data = fh.read(limit + 1)
    except OSError as err:
        raise RecoveryError(f"{what}: cannot read it: {err.strerror or err}") from None
    if len(data) > limit:
        raise RecoveryError(f"{what}: more than {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RecoveryError(f"{what}: not UTF-8 text") from None
