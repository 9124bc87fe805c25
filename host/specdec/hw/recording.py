"""Recorded rounds: what a board without the models (the PYNQ-Z2: no torch, 512 MB) verifies.

A host with the models runs a job and records every verifier round: the draft (chain or tree), the target's
rows (and the draft's, when sampling) as the Q7.8 codes the core takes (``hwcontract.formats.quantize``, what
the driver would send), the RNG seeds, and the decisions it got. The board then replays the recording through
its own verifier core and compares each decision::

    # on the host (models; any backend)
    specdec generate --prompt "..." --record rounds.npz
    # on the board (numpy and pynq only)
    from specdec.hw import recording
    rec = recording.load("rounds.npz")
    report = recording.replay(rec, verifier)       # every round again on this verifier: report["matches"]

A chain round keeps all its rows (``g + 1`` target rows and, sampling, ``g`` draft rows); a tree round keeps
the rows of the nodes its walk asked for (the root and the accepted path), since the core asks for no other:
a replay that asks for another node gets a flat row, and its decision then differs from the recorded one.

The file is a compressed ``.npz``: ``meta`` (JSON: the job, the texts generated, one event per seed and per
round) and one array per recorded row set.
"""
from __future__ import annotations

import json
import os
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from hwcontract.formats import quantize

from .drivers.verifier_errors import check_logits, draft_row, node_row, target_row

#: The format's version (``meta["version"]``).
VERSION = 1


@dataclass
class Recording:
    """The rounds of one job: ``events`` in order (``seed``, ``chain``, ``tree``), their rows in ``arrays``."""

    events: list[dict] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return sum(e["op"] != "seed" for e in self.events)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the recording (``.npz``, compressed); returns the path written."""
        path = Path(path)
        meta = json.dumps({"version": VERSION, "info": self.info, "events": self.events})
        with open(path, "wb") as f:
            np.savez_compressed(f, meta=np.frombuffer(meta.encode(), np.uint8), **self.arrays)
        return path


def load(path: str | os.PathLike) -> Recording:
    """Read a recording :meth:`Recording.save` wrote.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        The file is not a recording of this version (naming what it found).
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"recording {str(path)!r} does not exist or is not a file")
    try:
        z = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:     # numpy: "pickled data"; a cut archive
        raise ValueError(f"{path}: not a specdec recording (not an .npz archive: {e})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: not a specdec recording (one .npy array, not an .npz archive)")
    with z:
        if "meta" not in z.files:
            raise ValueError(f"{path}: not a specdec recording (no 'meta' entry; entries {z.files[:5]})")
        try:
            meta = json.loads(z["meta"].tobytes().decode())
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not a specdec recording (its 'meta' entry is not JSON: {e})") from None
        version = meta.get("version") if isinstance(meta, dict) else None
        if type(version) is not int or version != VERSION:      # not True, not 1.0
            raise ValueError(f"{path}: recording version {version!r}, this specdec reads {VERSION}")
        try:
            arrays = {k: z[k] for k in z.files if k != "meta"}
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as e:   # a damaged entry (CRC, inflate)
            raise ValueError(f"{path}: a damaged recording ({e})") from None
    events = meta.get("events")
    if not isinstance(events, list) or not all(isinstance(ev, dict) for ev in events):
        raise ValueError(f"{path}: a damaged recording (its events are not a list of records: {str(events)[:60]})")
    for i, ev in enumerate(events):
        need = _EVENT_FIELDS.get(ev.get("op"))
        if need is None:
            raise ValueError(f"{path}: event {i}: unknown op {ev.get('op')!r}")
        missing = [f for f in need if f not in ev] + [f"array {ev[a]!r}" for a in ("p", "q")
                                                       if a in ev and ev[a] not in arrays]
        if missing:
            raise ValueError(f"{path}: a damaged recording (event {i} lacks {', '.join(map(str, missing))})")
    return Recording(events, arrays, meta.get("info", {}))


#: The fields each kind of event holds (:meth:`Recording.save`), checked by :func:`load`.
_EVENT_FIELDS = {"seed": ("words",), "chain": ("draft", "p", "greedy", "temperature", "result"),
                 "tree": ("parents", "tokens", "nodes", "vocab", "p", "greedy", "temperature", "result")}


def _codes(logits, name: str, row) -> np.ndarray:
    """The Q7.8 codes the driver would send for ``logits`` (floats quantized, integer codes as they are),
    after the driver's own checks (NaN, +inf, codes outside int16: a ValueError naming the row)."""
    a = np.asarray(logits)
    check_logits(a, name, row)
    return quantize(a) if np.issubdtype(a.dtype, np.floating) else a.astype(np.int16)


def _chain_result(res) -> dict:
    return {"n_accept": res.n_accept, "next_token": res.next_token, "accept_bits": res.accept_bits}


def _tree_result(res) -> dict:
    return {"n_accept": res.n_accept, "next_token": res.next_token, "path": list(res.path)}


def _once(values):
    """An iterator (which ``verify_tree`` takes) read once, into a list: the driver reads it, and the record
    would find it spent (a tree round recorded with no parents, which its replay refuses); anything else as
    given (the driver's seed and chain draft take sequences only, and refuse an iterator before recording)."""
    return list(values) if isinstance(values, Iterator) else values


class RecordingVerifier:
    """A verifier driver that records every round it runs (and every seed) into :attr:`recording`.

    It stands wherever the decode loop takes a verifier; anything else is the wrapped driver's.
    """

    def __init__(self, verifier) -> None:
        self.inner = verifier
        self.recording = Recording()

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def _key(self, what: str) -> str:
        return f"{what}{len(self.recording.events)}"

    def seed(self, words) -> None:
        self.inner.seed(words)
        self.recording.events.append({"op": "seed", "words": [int(w) for w in words]})

    def verify(self, draft, p_logits, q_logits=None, *, greedy: bool = False, temperature: float = 1.0):
        p = _codes(p_logits, "p_logits", target_row)
        q = None if greedy or q_logits is None else _codes(q_logits, "q_logits", draft_row)
        res = self.inner.verify(draft, p, q, greedy=greedy, temperature=temperature)
        ev = {"op": "chain", "draft": [int(t) for t in draft], "greedy": greedy, "temperature": temperature,
              "p": self._key("p"), "result": _chain_result(res)}
        self.recording.arrays[ev["p"]] = p
        if q is not None:
            ev["q"] = self._key("q")
            self.recording.arrays[ev["q"]] = q
        self.recording.events.append(ev)
        return res

    def verify_tree(self, parents, tokens, p_logits, *, greedy: bool = False, temperature: float = 1.0):
        parents, tokens = _once(parents), _once(tokens)
        p = np.asarray(p_logits)
        res = self.inner.verify_tree(parents, tokens, p, greedy=greedy, temperature=temperature)
        nodes = sorted({0, *res.path})
        ev = {"op": "tree", "parents": [int(v) for v in parents], "tokens": [int(t) for t in tokens],
              "greedy": greedy, "temperature": temperature, "nodes": nodes, "vocab": int(p.shape[1]),
              "p": self._key("p"), "result": _tree_result(res)}
        self.recording.arrays[ev["p"]] = _codes(p, "p_logits", node_row)[nodes]
        self.recording.events.append(ev)
        return res




def replay(rec: Recording, verifier) -> dict:
    """Run every round of ``rec`` again on ``verifier`` (any backend's driver, in the recorded order, seeds
    included) and compare each decision with the recorded one.

    Returns
    -------
    dict
        ``rounds``, ``matches``, ``mismatches`` (the rounds that differ: index, kind, recorded and got),
        ``tokens`` (the tokens each round emitted, as replayed), ``rows`` (target rows the core took).
    """
    out = {"rounds": 0, "matches": 0, "mismatches": [], "tokens": [], "rows": 0}
    for i, ev in enumerate(rec.events):
        if ev["op"] == "seed":
            verifier.seed(ev["words"])
            continue
        if ev["op"] == "chain":
            q = rec.arrays[ev["q"]] if "q" in ev else None
            res = verifier.verify(ev["draft"], rec.arrays[ev["p"]], q, greedy=ev["greedy"],
                                  temperature=ev["temperature"])
            got = _chain_result(res)
        elif ev["op"] == "tree":
            rows = np.zeros((len(ev["parents"]), ev["vocab"]), np.int16)     # flat: a node the walk never took
            rows[ev["nodes"]] = rec.arrays[ev["p"]]
            res = verifier.verify_tree(ev["parents"], ev["tokens"], rows, greedy=ev["greedy"],
                                       temperature=ev["temperature"])
            got = _tree_result(res)
        else:
            raise ValueError(f"event {i}: unknown op {ev['op']!r}")
        out["rounds"] += 1
        out["rows"] += res.rows
        out["tokens"].append(res.tokens)
        if got == ev["result"]:
            out["matches"] += 1
        else:
            out["mismatches"].append({"event": i, "op": ev["op"], "recorded": ev["result"], "got": got})
    return out
