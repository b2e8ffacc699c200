"""Line templates: the two hot line forms of a training log, read at fixed offsets, one line or a whole chunk at once.

A long log repeats two line forms hundreds of thousands of times: the standard Megatron iteration record and the
Megatron-Bridge ``Step Time`` line (:mod:`bridgebench.logs.formats`).  Two lines that differ only in their digits --
the same *digit skeleton* (digits 1-9 mapped to ``0``) -- are read identically by the parser's fast path
(:meth:`bridgebench.logs.routing.LineRouting._record_fast`, ``_step_time_fast``): every string it looks for with
``bytes.find`` (``/``, ``|``, ``elapsed time per iteration (ms):``, ``s GPU utilization:`` ...) is free of digits,
so it lands on the same offset in both, and the slices it converts have the same shape.  So once the fast path has
accepted a line, its offsets make a :class:`LineTemplate`; any later line with the same skeleton is read at those
offsets (:meth:`LineTemplate.tuple` for one line, :func:`read_rows` for all candidate lines of a chunk with numpy).

Numbers are converted as Python's ``int()`` / ``float()`` convert the slice: a vectorised conversion is used only
for slices of the plain shape ``[sign] digits [. digits] [e|E [sign] digits]`` (spaces around) with at most 18
digits, and a float value only where the decimal mantissa M <= 2**53 and the power of ten |k| <= 22 -- then
``M * 10**k`` (or ``M / 10**-k``) is one correctly rounded IEEE operation on exact operands, i.e. exactly the
correctly rounded value ``float()`` returns (Clinger, "How to read floating point numbers accurately", PLDI 1990,
the "fast path").  Rows outside that are left to the per-line path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from bridgebench.logs import formats as F

__all__ = ["DIGITS0", "LineTemplate", "read_rows", "rec_template", "st_template"]

#: ``bytes.translate`` table: digits 1-9 -> '0' (the digit skeleton of a line).
DIGITS0 = bytes.maketrans(b"123456789", b"000000000")
_STEP_TIME = b"Step Time"
_NUMBER_RE = re.compile(rb"([ \t]*)([+-]?)(0*)(?:(\.)(0*))?(?:([eE])([+-]?)(0+))?([ \t]*)")
_MAX_DIGITS = 18  # int64 holds any 18-digit mantissa
_P10 = np.array([10.0**k for k in range(23)])  # exact doubles
_TWO53 = 2**53
_LO4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_SIX = np.uint64(0x0606060606060606)


@dataclass(slots=True, kw_only=True)
class _Number:
    """How to read one numeric slice ``[a, b)`` of a line (offsets relative to the line start)."""

    name: str
    a: int
    b: int
    is_int: bool
    digits: tuple[int, ...] = ()  # mantissa digit columns, most significant first
    frac: int = 0  # digits after the decimal point
    negative: bool = False
    exp_digits: tuple[int, ...] = ()
    exp_negative: bool = False
    vector: bool = False  # the shape is plain: read_rows converts it

    @classmethod
    def of(cls, name: str, skel: bytes, a: int, b: int, is_int: bool) -> _Number:
        num = cls(name=name, a=a, b=b, is_int=is_int)
        m = _NUMBER_RE.fullmatch(skel, a, b)
        if m is None:
            return num
        intd, dot, fracd, e = m.group(3), m.group(4), m.group(5) or b"", m.group(6)
        if not intd and not fracd:
            return num
        if is_int and (dot or e):
            return num
        start = m.start(3)
        num.digits = tuple(range(start, start + len(intd))) + tuple(range(m.start(5), m.start(5) + len(fracd)))
        num.frac = len(fracd)
        num.negative = m.group(2) == b"-"
        if e:
            num.exp_digits = tuple(range(m.start(8), m.end(8)))
            num.exp_negative = m.group(7) == b"-"
        num.vector = len(num.digits) <= _MAX_DIGITS and len(num.exp_digits) <= 3
        return num

    def read(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values, ok) for the gathered ``rows`` (uint8, one line per row); ``ok`` False where the fast path's
        conversion cannot be reproduced exactly."""
        d = rows[:, list(self.digits + self.exp_digits)].astype(np.int64)
        d -= 48
        return self.from_digits(d[:, : len(self.digits)], d[:, len(self.digits) :])

    def from_digits(self, d: np.ndarray, ed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values, ok) from the digit values of the mantissa (``d``) and exponent (``ed``), one row per line."""
        mant = d @ (10 ** np.arange(len(self.digits) - 1, -1, -1, dtype=np.int64))
        if self.is_int:
            return (-mant if self.negative else mant), np.ones(len(d), bool)
        m = mant.astype(np.float64)
        if not self.exp_digits:  # k = -frac for every row: one division (or none)
            ok = mant <= _TWO53 if len(self.digits) > 15 else np.ones(len(d), bool)
            vals = m / _P10[self.frac] if self.frac else m
            return (-vals if self.negative else vals), ok
        ex = ed @ (10 ** np.arange(len(self.exp_digits) - 1, -1, -1, dtype=np.int64))
        k = (-ex if self.exp_negative else ex) - self.frac
        ok = (mant <= _TWO53) & (np.abs(k) <= 22)
        kk = np.clip(k, -22, 22)
        vals = np.where(kk >= 0, m * _P10[np.maximum(kk, 0)], m / _P10[np.maximum(-kk, 0)])
        return (-vals if self.negative else vals), ok


@dataclass(slots=True, kw_only=True)
class LineTemplate:
    """Offsets (relative to the line start) of one line form with one digit skeleton.

    ``skel``: the line with its newline, digits 1-9 -> '0'; ``n``: its length; ``rs``: offset of the line's first
    candidate string (``iteration`` / ``Step Time``); ``pe``: end of the rank prefix; ``tuple``: the offsets in the
    order the parser's per-line path unpacks them; ``numbers``: the numeric slices; ``zero``: the two zero
    counters of a record line, which must match byte for byte.
    """

    kind: str  # 'rec' | 'st'
    skel: bytes
    n: int
    rs: int
    pe: int
    tuple: tuple
    numbers: list[_Number]
    zero: tuple[int, int] | None = None
    tail: tuple[int, int] = (0, 0)
    vector: bool = False
    _masks: tuple | None = field(default=None, repr=False)

    def masks(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """(padded length, fixed-byte mask, fixed-byte values, digit flags) as uint64 words, for :func:`read_rows`:
        a word w of a row matches when ``w & fix == val`` (every non-digit byte equal, every digit byte 0x3_) and
        ``((w & 0x0F..) + 0x06..) & dig == 0`` (the low nibble of every digit byte <= 9)."""
        if self._masks is None:
            n8 = -(-self.n // 8) * 8
            fix = np.zeros(n8, np.uint8)
            val = np.zeros(n8, np.uint8)
            dig = np.zeros(n8, np.uint8)
            sk = np.frombuffer(self.skel, np.uint8)
            is_digit = sk == ord("0")
            fix[: self.n] = np.where(is_digit, 0xF0, 0xFF)
            val[: self.n] = np.where(is_digit, 0x30, sk)
            dig[: self.n] = np.where(is_digit, 0x10, 0)
            if self.zero is not None:  # the counters: exactly ZERO_COUNTS_B
                za, zb = self.zero
                fix[za:zb] = 0xFF
                val[za:zb] = np.frombuffer(F.ZERO_COUNTS_B, np.uint8)
                dig[za:zb] = 0
            self._masks = (n8, fix.view(np.uint64), val.view(np.uint64), dig.view(np.uint64))
        return self._masks


def _finish(kind: str, buf: bytes, ls: int, le: int, rs: int, pe: int, tup: tuple, specs, **kw) -> LineTemplate:
    skel = buf[ls : le + 1].translate(DIGITS0)
    numbers = [_Number.of(name, skel, a, b, is_int) for name, a, b, is_int in specs if a is not None]
    tpl = LineTemplate(
        kind=kind, skel=skel, n=le + 1 - ls, rs=rs, pe=pe, tuple=(skel, le + 1 - ls, *tup), numbers=numbers, **kw
    )
    tpl.vector = all(x.vector for x in numbers)
    if tpl.vector:  # self-check on the line it was made from: the vectorised reading equals int()/float()
        row = np.frombuffer(buf, np.uint8, tpl.n, ls)[None, :]
        for x in numbers:
            v, ok = x.read(row)
            want = (int if x.is_int else float)(buf[ls + x.a : ls + x.b])
            if not ok[0] or v[0] != want or (not x.is_int and np.signbit(v[0]) != np.signbit(want)):
                tpl.vector = False
    return tpl


def rec_template(buf: bytes, ls: int, s: int, le: int) -> LineTemplate:
    """Template of the standard record line ``buf[ls:le]`` (newline at ``le``) whose ``iteration`` starts at ``s``,
    a line :meth:`~bridgebench.logs.routing.LineRouting._record_fast` has just accepted; the ``find`` calls are its own.
    ``tuple``: line start-relative ``s``, prefix end, iteration, total, step time (ms), TFLOP/s and loss slices
    (None, None when absent), tail start, line end, the zero counters."""
    pe = F.PREFIX_RE_B.match(buf, ls, s).end()
    tail_end = le
    while tail_end > s and buf[tail_end - 1] in b" \t\r":
        tail_end -= 1
    lim = tail_end - len(F.ZERO_COUNTS_B)
    j = buf.find(b"/", s + 10, s + 40)
    bar = buf.find(b"|", j, j + 40)
    i = buf.find(F.ELAPSED_MS_B, bar, lim)
    k = buf.find(b"|", i, lim)
    ms = (i + 32 - ls, k - ls)
    tf = loss = (None, None)
    i = buf.find(F.THROUGHPUT_B, k, lim)
    if i >= 0:
        k = buf.find(b"|", i, lim)
        tf = (i + 33 - ls, k - ls)
    i = buf.find(F.LM_LOSS_B, k, lim)
    if i >= 0:
        loss = (i + 9 - ls, buf.find(b"|", i, lim) - ls)
    it, tot = (s + 10 - ls, j - ls), (j + 1 - ls, bar - ls)
    zero = (lim - ls, tail_end - ls)
    tup = (s - ls, pe - ls, *it, *tot, *ms, *tf, *loss, bar + 1 - ls, le - ls, *zero)
    specs = [("it", *it, True), ("tot", *tot, True), ("ms", *ms, False), ("tf", *tf, False), ("loss", *loss, False)]
    return _finish("rec", buf, ls, le, s - ls, pe - ls, tup, specs, zero=zero, tail=(bar + 1 - ls, le - ls))


def st_template(buf: bytes, ls: int, s: int, le: int) -> LineTemplate:
    """Template of the Step Time line ``buf[ls:le]`` (``Step Time`` at ``s``), a line
    :meth:`~bridgebench.logs.routing.LineRouting._step_time_fast` has just accepted.  ``tuple``: ``s``, prefix end, the
    seconds and TFLOP/s slices it converts after stripping ``' :'`` / ``'MODEL_ '`` (characters that are no
    digits, so the strip is the same in every line of the skeleton)."""
    e = s + len(_STEP_TIME)
    j = buf.find(b"s GPU utilization:", e, le)
    k = buf.find(b"TFLOP/s/GPU", j, le)
    secs, tf = buf[e:j], buf[j + 18 : k]
    a = e + len(secs) - len(secs.lstrip(b" :"))
    b = k - (len(tf) - len(tf.rstrip(b"MODEL_ ")))
    pe = F.PREFIX_RE_B.match(buf, ls, s).end()
    tup = (s - ls, pe - ls, a - ls, j - ls, j + 18 - ls, b - ls)
    specs = [("secs", a - ls, j - ls, False), ("tf", j + 18 - ls, b - ls, False)]
    return _finish("st", buf, ls, le, s - ls, pe - ls, tup, specs)


def read_rows(arr: np.ndarray, starts: np.ndarray, tpl: LineTemplate) -> tuple[np.ndarray, dict, np.ndarray]:
    """Check and read the lines of ``tpl``'s form that would start at ``starts`` (offsets into ``arr``, the chunk
    as uint8).  Returns (ok mask over ``starts``, {number name: values of the ok rows}, the ok rows' prefix bytes as
    a uint8 matrix).  A row is ok when its line has exactly the template's skeleton (so its newline is at
    ``start + n - 1``), a newline (or the chunk start) precedes it, and its numbers convert exactly."""
    n8, fix, val, dig = tpl.masks()
    ok = (starts >= 0) & (starts + n8 <= len(arr))
    prev = arr[np.maximum(starts - 1, 0)]
    ok &= (starts == 0) | (prev == 10)
    cand = np.flatnonzero(ok)
    if not len(cand):
        return ok, {x.name: np.zeros(0) for x in tpl.numbers}, np.zeros((0, tpl.pe), np.uint8)
    rows = sliding_window_view(arr, n8)[starts[cand]]
    w = rows.view(np.uint64)
    bad = w & fix
    bad ^= val
    dig_bad = w & _LO4
    dig_bad += _SIX
    dig_bad &= dig
    bad |= dig_bad
    good = ~bad.any(axis=1)
    values: dict[str, np.ndarray] = {}
    cols = [c for x in tpl.numbers for c in x.digits + x.exp_digits]
    d = rows[:, cols].astype(np.int64)  # every number's digits, on every candidate row (cheaper than copying
    d -= 48  # the good rows first)
    at = 0
    for x in tpl.numbers:
        nd, ne = len(x.digits), len(x.exp_digits)
        v, vok = x.from_digits(d[:, at : at + nd], d[:, at + nd : at + nd + ne])
        at += nd + ne
        good &= vok
        values[x.name] = v
    ok[cand[~good]] = False
    values = {k: v[good] for k, v in values.items()}
    if tpl.kind == "rec":  # the tails as bytes objects, made by numpy (an 'S' item drops trailing NULs: none here)
        ta, tb = tpl.tail
        tails = np.ascontiguousarray(rows[good, ta:tb])
        if tb > ta and tpl.skel[tb - 1] != 0:
            values["tail"] = tails.view(f"S{tb - ta}").ravel().tolist()
        else:
            values["tail"] = [r.tobytes() for r in tails]
        values["content"] = rows[good, tpl.pe : tb]  # the line after its rank prefix
    return ok, values, rows[good, : tpl.pe]
