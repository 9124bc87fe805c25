"""Exceptions the runtime raises: each carries the bad value and, for hardware, the decoded bits."""
from __future__ import annotations

#: Whether exceptions take notes (PEP 678, Python 3.11). The package runs on Python 3.10 too: a PYNQ-Z2's
#: image (PYNQ 3.0) has it, and there ``error.add_note`` raises AttributeError in place of the error.
NOTES = hasattr(BaseException, "add_note")


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``; on Python 3.10 the note goes into ``__notes__`` and, for an error whose first
    argument is its message, after that message (a 3.10 traceback does not print notes)."""
    if NOTES:
        error.add_note(note)
        return
    error.__notes__ = [*getattr(error, "__notes__", ()), note]
    if error.args and isinstance(error.args[0], str):
        error.args = (f"{error.args[0]}\n{note}", *error.args[1:])


class SpecdecError(Exception):
    """Base class of specdec's errors."""


class HardwareMismatch(SpecdecError):
    """The ID register does not carry the register-map hash this driver was built for."""


class CoreError(SpecdecError):
    """The core raised error bits in ERR; ``bits`` lists their names, ``err`` the raw value."""

    def __init__(self, core: str, err: int, bits: list[str], context: str = "") -> None:
        self.core, self.err, self.bits = core, err, bits
        super().__init__(f"core {core} reported ERR={err:#x}: {', '.join(bits) or 'unknown bits'}"
                         f"{'; ' + context if context else ''} (call soft_reset() to recover)")


class BusError(SpecdecError, OSError):
    """An AXI-Lite access answered SLVERR or DECERR."""

    def __init__(self, op: str, address: int, resp: int) -> None:
        names = {2: "SLVERR", 3: "DECERR"}
        self.op, self.address, self.resp = op, address, resp
        super().__init__(f"AXI-Lite {op} at {address:#x} answered {names.get(resp, resp)}")


class CoreTimeout(SpecdecError, TimeoutError):
    """The core did not finish within the poll budget (it never hangs the caller)."""


class OptionError(ValueError):
    """A bad option value (a job field, a generation setting): names the option, the value and what is allowed.

    ``option`` is the option's name as a job spells it (``seed``, ``max_new_tokens``, ``tree budget``); the
    command line turns it into its flag.
    """

    def __init__(self, option: str, value, allowed: str) -> None:
        if type(value).__module__ == "numpy":
            # a numpy scalar prints as a plain number: "must be an integer ..., got 4" would read as a contradiction
            allowed = f"{allowed} (a Python number, not {type(value).__module__}.{type(value).__name__})"
        self.option, self.value, self.allowed = option, value, allowed
        super().__init__(f"{option} must be {allowed}, got {value!r}")


def error_record(error: BaseException) -> dict | None:
    """A bad input a run found inside the simulation (an :class:`OptionError`, or a specdec or value error), as
    JSON for the host to raise again (:func:`raise_record`), so the command line answers it as off the simulation
    (exit 2 for a bad option, one line for a failure); None for any other error (a bug), whose traceback fails
    the simulation."""
    if isinstance(error, OptionError):
        value = error.value if isinstance(error.value, (str, int, float, bool, type(None))) else repr(error.value)
        return {"kind": "OptionError", "option": error.option, "value": value, "allowed": error.allowed}
    if isinstance(error, (SpecdecError, ValueError)):
        return {"kind": type(error).__name__, "message": str(error)}
    return None


def raise_record(record: dict, kinds: tuple[type[Exception], ...] = ()) -> None:
    """Raise the error :func:`error_record` wrote: an :class:`OptionError` as itself, one of ``kinds`` (classes
    built from a message alone) by its name, any other as a :class:`SpecdecError` naming its kind."""
    if record["kind"] == "OptionError":
        raise OptionError(record["option"], record["value"], record["allowed"])
    cls = {k.__name__: k for k in kinds}.get(record["kind"])
    if cls is not None:
        raise cls(record["message"])
    raise SpecdecError(f"{record['kind']}: {record['message']}")


def check_int(option: str, value, low: int, high: int | None = None, allowed: str | None = None) -> int:
    """``value`` if it is an integer in ``low..high`` (no upper bound when ``high`` is None), else an
    :class:`OptionError` naming ``option``, the value and ``allowed`` (default: the range in words)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise OptionError(option, value, allowed or (f"an integer >= {low}" if high is None
                                                     else f"an integer in {low}..{high}"))
    return value
