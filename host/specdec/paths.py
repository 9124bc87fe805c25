"""Where specdec's data lives, found from the installed package: the models, the built overlays, the build folder.

::

    DATA                        specdec/data/ inside the package (host/specdec/data/ in a checkout)
    data_dir()                  $SPECDEC_DATA when set, else DATA
      models/<name>/            a committed model (the demo draft, the EAGLE head): model_dir(name)
      overlays/<board>/         a board's built overlay: specdec.bit, specdec.hwh, build.json, reports
    build_dir()                 $SPECDEC_BUILD when set (the Makefile and the tests: the checkout's build/),
                                else ~/.cache/specdec/build (under $XDG_CACHE_HOME when set)

The data folder is package data: ``pip install .`` copies it into site-packages beside the code, and an editable
install reads it from the checkout. ``SPECDEC_DATA`` points the runtime at another copy (a folder holding
``models/`` and ``overlays/``), e.g. overlays built on another machine.

:func:`bitstream` picks the board's overlay: the board given, else the one the board's OS reports. Kria-PYNQ
exports ``$BOARD`` (``KV260``) from /etc/profile.d/pynq_venv.sh; a PYNQ-Z2 image sets ``$BOARD`` (``Pynq-Z2``)
from the device tree's ``/proc/device-tree/chosen/pynq_board``, which is read when ``$BOARD`` is unset.
``$SPECDEC_BITSTREAM`` names a bitstream outright.
"""
from __future__ import annotations

import os
from pathlib import Path

from hwcontract.board import BOARDS

from .errors import SpecdecError

#: The package's own data folder.
DATA = Path(__file__).resolve().parent / "data"
#: The environment variable that points the runtime at another data folder (holding models/ and overlays/).
DATA_ENV = "SPECDEC_DATA"
#: The environment variable that names the build folder (simulation builds, compiled kernels, their logs).
BUILD_ENV = "SPECDEC_BUILD"
#: The environment variable that names a bitstream outright (its .hwh beside it).
BITSTREAM_ENV = "SPECDEC_BITSTREAM"
#: The environment variable a PYNQ image sets to its board's name (``KV260``, ``Pynq-Z2``).
BOARD_ENV = "BOARD"
#: Where a PYNQ image's device tree names its board (what PYNQ's own boardname.sh reads into ``$BOARD``).
DEVICE_TREE_BOARD = Path("/proc/device-tree/chosen/pynq_board")
#: The bitstream's file name in a board's overlay folder (the .hwh beside it: specdec.hwh).
BITFILE = "specdec.bit"
#: The environment variable that runs ``--backend pynq`` on an emulated board (:mod:`specdec.app.runner`).
EMULATE_ENV = "SPECDEC_EMULATE"


class BoardNotFound(SpecdecError, LookupError):
    """The board could not be told: nothing reports one, or what is reported is none of specdec's boards."""


class OverlayNotFound(SpecdecError, FileNotFoundError):
    """No built overlay for the board: the message says where it looked, which board and why, and what to do."""


def data_dir() -> Path:
    """The data folder: ``$SPECDEC_DATA`` when set, else :data:`DATA`."""
    given = os.environ.get(DATA_ENV)
    return Path(given).expanduser() if given else DATA


def model_dir(name: str) -> Path:
    """The folder of the committed model ``name`` (``models/<name>`` of :func:`data_dir`); it need not exist."""
    _check_name(name, "model")
    return data_dir() / "models" / name


def overlays_dir() -> Path:
    """The folder of every board's built overlay (``overlays/`` of :func:`data_dir`)."""
    return data_dir() / "overlays"


def overlay_dir(board: str) -> Path:
    """The folder of ``board``'s built overlay (one of :data:`hwcontract.board.BOARDS`); it need not exist.

    Raises
    ------
    BoardNotFound
        ``board`` is none of the boards.
    """
    if board not in BOARDS:
        raise BoardNotFound(f"board {board!r} is none of specdec's boards: {', '.join(BOARDS)}")
    return overlays_dir() / board


def build_dir() -> Path:
    """The build folder: ``$SPECDEC_BUILD`` when set, else ``specdec/build`` in the user's cache folder
    (``$XDG_CACHE_HOME``, default ``~/.cache``). Never inside the installed package."""
    given = os.environ.get(BUILD_ENV)
    if given:
        return Path(given).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "specdec" / "build"


def reported_board() -> tuple[str | None, str]:
    """The board name this machine's OS reports, raw, and where it was read: ``$BOARD``, else the device tree's
    ``chosen/pynq_board``. ``(None, what was looked at)`` when neither names one."""
    name = os.environ.get(BOARD_ENV, "").strip()
    if name:
        return name, f"${BOARD_ENV}"
    try:
        name = DEVICE_TREE_BOARD.read_bytes().decode("ascii", "replace").strip("\0\n ")
    except OSError:
        name = ""
    if name:
        return name, str(DEVICE_TREE_BOARD)
    return None, f"${BOARD_ENV} (unset) and {DEVICE_TREE_BOARD} (absent)"


def board() -> tuple[str, str]:
    """This machine's board as one of :data:`hwcontract.board.BOARDS`, and why: what the OS reports
    (:func:`reported_board`), matched to the boards' names whatever its case (``KV260`` -> ``kv260``,
    ``Pynq-Z2`` -> ``pynq-z2``).

    Raises
    ------
    BoardNotFound
        Nothing reports a board, or the report names none of the boards; the message names what was read.
    """
    name, source = reported_board()
    if name is None:
        raise BoardNotFound(f"no board reported: read {source}; boards: {', '.join(BOARDS)}")
    known = {b.lower(): b for b in BOARDS}
    if name.lower() not in known:
        raise BoardNotFound(f"{source} reports board {name!r}, none of specdec's boards: {', '.join(BOARDS)}")
    return known[name.lower()], f"{source}={name!r}"


def bitstream(board_name: str | None = None) -> Path:
    """The built overlay's bitstream (its ``.hwh`` beside it) for ``board_name``, else the file
    ``$SPECDEC_BITSTREAM`` names when set, else the overlay of the board this machine reports (:func:`board`).

    Raises
    ------
    OverlayNotFound
        The file is not there, or no board could be told; the message says where it looked, which board it took
        and why, and how to build one (``make bitstream BOARD=...``) or emulate the board instead.
    BoardNotFound
        ``board_name`` is none of the boards.
    """
    if board_name is not None:
        path, why = overlay_dir(board_name) / BITFILE, f"the {board_name} overlay (board given)"
    elif os.environ.get(BITSTREAM_ENV):
        path, why = Path(os.environ[BITSTREAM_ENV]).expanduser(), f"named by ${BITSTREAM_ENV}"
    else:
        try:
            board_name, source = board()
        except BoardNotFound as err:
            raise OverlayNotFound(f"no bitstream: {err}; name the board ({BOARD_ENV}=<board>, or "
                                  f"bitstream('<board>')){_advice(None)}") from None
        path, why = overlay_dir(board_name) / BITFILE, f"the {board_name} overlay ({source})"
    if not path.is_file():
        raise OverlayNotFound(f"no bitstream at {path}: {why}{_advice(board_name)}")
    return path


def _advice(board_name: str | None) -> str:
    """How to get an overlay for ``board_name`` (None: any board) or run without one."""
    build = f"BOARD={board_name}" if board_name else f"BOARD=<{' | '.join(BOARDS)}>"
    where = overlays_dir() / (board_name or "<board>")
    emulate = " or ".join(f"{EMULATE_ENV}={b}" for b in ([board_name] if board_name else sorted(BOARDS)))
    return (f"; build one with `make bitstream {build}` (Vivado, in a checkout) and install specdec again, or put "
            f"{BITFILE} and its .hwh into {where}/, or name them with ${BITSTREAM_ENV}; off a board, emulate it: "
            f"{emulate}")


def _check_name(name: str, what: str) -> None:
    """ValueError unless ``name`` is one folder's name (not empty, no path separator, not ``.`` or ``..``)."""
    if not name or Path(name).name != name or name in (".", ".."):
        raise ValueError(f"{what} name {name!r}: the name of one folder under {data_dir() / 'models'} (no path "
                         f"separators)")
