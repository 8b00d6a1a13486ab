"""Code-Depth: nesting depth of real Python source, token by token (paper A).

The paper used CodeSearchNet Python. **Ours**: the default corpus is the running
interpreter's own standard library (``sysconfig.get_paths()["stdlib"]``, without test
folders and site-packages): real code no one here wrote, available offline. Any folder of
``.py`` files (a CodeSearchNet dump written out as files, say) can be given as
``corpus_dir``. Because the default corpus is whatever standard library is installed, two
Python versions give different windows for the same seed: record the Python version with
any result (or pass an explicit ``corpus_dir``).

Tokens are *token kinds*, not identifiers: Python's :mod:`tokenize` output mapped onto the
42 kinds of :data:`KINDS` (``NAME``, ``NUMBER``, ``STRING``, ``COMMENT``, ``NEWLINE``,
``NL``, ``INDENT``, ``DEDENT``, each bracket character, ``: , . ; = -> @ ... :=``, operator
classes, the keywords ``def class lambda return yield`` and nine keyword classes,
``OTHER``). ``ENCODING`` and ``ENDMARKER`` are dropped; an f-string, which Python >= 3.12
splits into parts, is one ``STRING`` as in Python 3.11, so windows do not depend on the
tokenizer's version.

Labels, read *after* the token at position t:

- ``bracket_depth``: open ``( [ {`` minus closed ``) ] }``, clipped to
  ``max_bracket_depth`` (15). **The training target.**
- ``indent_depth``: ``INDENT`` minus ``DEDENT`` tokens since the window began, clipped to
  ``max_indent_depth`` (15).

Worked example: the two lines ``if a:`` and ``    return f(x[0])``, then a dedent::

    position  token   kind (id)      bracket_depth  indent_depth
    0         if      KW_COND (35)   0              0
    1         a       NAME (0)       0              0
    2         :       : (14)         0              0
    3         \\n      NEWLINE (4)    0              0
    4         4 sp.   INDENT (6)     0              1
    5         return  return (30)    0              1
    6         f       NAME (0)       0              1
    7         (       ( (8)          1              1
    8         x       NAME (0)       1              1
    9         [       [ (10)         2              1
    10        0       NUMBER (1)     2              1
    11        ]       ] (11)         1              1
    12        )       ) (9)          0              1
    13        \\n      NEWLINE (4)    0              1
    14                DEDENT (7)     0              0

Sampling (**ours**): files are split into train and eval by a hash of their path relative
to the corpus folder (SHA-256; a file is ``eval`` when the hash's first 8 bytes, read as a
fraction of 2**64, fall below ``eval_fraction``), so the split is deterministic and disjoint
by file. Each window draws a file uniformly from its split, then a start uniformly among the
file's valid starts. A valid start begins a line outside any bracket (the file's first
token, or one right after a ``NEWLINE`` or a bracket-free ``NL``), so bracket depth starts
at 0, and the window never dedents below the level it started at, so both labels are
determined by the window's own tokens. Files that fail to tokenize, or are too short for the
length, are skipped. Files are tokenized lazily, once per process (cached), so a batch
costs only the files it draws.

Counterfactual (**ours**): a non-bracket token at position c becomes an unmatched ``(``,
which raises the bracket depth by one from c on (where not clipped); the label position t
is drawn uniformly among positions >= c whose clean depth is below the clip. The corrupted
window is a token-kind sequence, not valid Python; its ``indent_depth`` is the clean one.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import sysconfig
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple

import numpy as np
from pydantic import Field, field_validator

from capture.tasks.base import (
    CounterfactualBatch,
    TaskBatch,
    TaskConfig,
    batch,
    check_request,
    random_position_from,
)
from store.errors import InvalidArgumentError

MIN_LENGTH = 1

_KEYWORD_KINDS = {
    **dict.fromkeys(["False", "None", "True"], "KW_CONST"),
    **dict.fromkeys(["and", "or", "not", "is", "in"], "KW_LOGIC"),
    **dict.fromkeys(["import", "from", "as"], "KW_IMPORT"),
    **dict.fromkeys(["if", "elif", "else"], "KW_COND"),
    **dict.fromkeys(["for", "while", "break", "continue"], "KW_LOOP"),
    **dict.fromkeys(["try", "except", "finally", "raise", "assert"], "KW_TRY"),
    "with": "KW_WITH",
    **dict.fromkeys(["async", "await"], "KW_ASYNC"),
    **dict.fromkeys(["global", "nonlocal", "del", "pass"], "KW_SCOPE"),
    **{kw: kw for kw in ["def", "class", "lambda", "return", "yield"]},
}
_OPERATOR_KINDS = {
    **{op: op for op in ["(", ")", "[", "]", "{", "}", ":", ",", ".", ";", "=", "->", "@",
                         "...", ":="]},
    **dict.fromkeys(["+", "-", "*", "/", "//", "%", "**"], "ARITH"),
    **dict.fromkeys(["&", "|", "^", "~", "<<", ">>"], "BITWISE"),
    **dict.fromkeys(["==", "!=", "<", ">", "<=", ">="], "COMPARE"),
    **dict.fromkeys(["+=", "-=", "*=", "/=", "//=", "%=", "**=", "@=", "&=", "|=", "^=",
                     "<<=", ">>="], "AUGASSIGN"),
}
KINDS: tuple[str, ...] = (
    "NAME", "NUMBER", "STRING", "COMMENT", "NEWLINE", "NL", "INDENT", "DEDENT",
    "(", ")", "[", "]", "{", "}", ":", ",", ".", ";", "=", "->", "@", "...", ":=",
    "ARITH", "BITWISE", "COMPARE", "AUGASSIGN",
    "def", "class", "lambda", "return", "yield",
    "KW_CONST", "KW_LOGIC", "KW_IMPORT", "KW_COND", "KW_LOOP", "KW_TRY", "KW_WITH",
    "KW_ASYNC", "KW_SCOPE",
    "OTHER",
)
"""Token-kind vocabulary: token id i is ``KINDS[i]``."""
KIND_ID = {kind: i for i, kind in enumerate(KINDS)}
_OPEN = np.array([KIND_ID[b] for b in "([{"])
_CLOSE = np.array([KIND_ID[b] for b in ")]}"])
_BY_TYPE = {tokenize.NUMBER: "NUMBER", tokenize.STRING: "STRING", tokenize.COMMENT: "COMMENT",
            tokenize.NEWLINE: "NEWLINE", tokenize.NL: "NL", tokenize.INDENT: "INDENT",
            tokenize.DEDENT: "DEDENT"}
# Python >= 3.12 splits f-strings (3.14: t-strings) into parts; we keep them whole.
_STRING_START = {getattr(tokenize, n) for n in ("FSTRING_START", "TSTRING_START")
                 if hasattr(tokenize, n)}
_STRING_END = {getattr(tokenize, n) for n in ("FSTRING_END", "TSTRING_END")
               if hasattr(tokenize, n)}
_SKIP = {tokenize.ENCODING, tokenize.ENDMARKER}
_EXCLUDED_STDLIB_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages"}


class CodeDepthConfig(TaskConfig):
    """Windows of real Python token kinds; labels ``bracket_depth`` (target) and
    ``indent_depth``."""

    name: ClassVar[str] = "code_depth"
    corpus_dir: str | None = Field(
        default=None, description="Folder of .py files; None = this interpreter's standard library."
    )
    split: Literal["train", "eval"] = Field(
        default="train", description="Which file split to draw."
    )
    eval_fraction: float = Field(
        default=0.2, gt=0.0, lt=1.0, description="Share of files (by path hash) in the eval split."
    )
    max_bracket_depth: int = Field(default=15, ge=1, le=255, description="Clip for bracket_depth.")
    max_indent_depth: int = Field(default=15, ge=1, le=255, description="Clip for indent_depth.")

    @field_validator("corpus_dir")
    @classmethod
    def _folder_exists(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_dir():
            raise ValueError(f"corpus_dir {value!r} is not a folder; give a folder of .py files")
        return value

    @property
    def vocab_size(self) -> int:
        """Number of token kinds."""
        return len(KINDS)

    @property
    def n_classes(self) -> dict[str, int]:
        """Each depth label has ``max + 1`` classes."""
        return {"bracket_depth": self.max_bracket_depth + 1,
                "indent_depth": self.max_indent_depth + 1}

    @property
    def target(self) -> str:
        """The training label."""
        return "bracket_depth"

    def token_names(self) -> list[str]:
        """The token kinds, in id order."""
        return list(KINDS)


@dataclass(frozen=True)
class Window:
    """Where one sampled window came from.

    Attributes
    ----------
    path : str
        File path relative to the corpus folder, with ``/`` separators.
    start_token : int
        Index of the window's first token among the file's kept tokens.
    start, end : tuple of int
        ``(row, col)`` of the first and last token, as :mod:`tokenize` reports them.
    """

    path: str
    start_token: int
    start: tuple[int, int]
    end: tuple[int, int]


class _FileTokens(NamedTuple):
    """One tokenized file; every array is ``(n_tokens,)``."""

    kinds: np.ndarray  # token-kind ids
    bracket: np.ndarray  # bracket depth after each token
    level: np.ndarray  # indentation level after each token
    starts: np.ndarray  # ``(n_starts,)``: candidate window starts (line starts, depth 0)
    rows: np.ndarray
    cols: np.ndarray


def stdlib_dir() -> str:
    """The running interpreter's standard-library folder (the default corpus)."""
    return sysconfig.get_paths()["stdlib"]


def _list_py_files(root: str, is_stdlib: bool) -> tuple[str, ...]:
    # Keyed on the folder's mtime so that adding or removing files at its top re-lists it.
    return _list_py_files_cached(root, is_stdlib, os.stat(root).st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _list_py_files_cached(root: str, is_stdlib: bool, mtime_ns: int) -> tuple[str, ...]:
    skip = _EXCLUDED_STDLIB_DIRS if is_stdlib else set()
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs
                         if d not in skip and d != "__pycache__" and not d.startswith("."))
        rel = Path(folder).relative_to(root)
        found += [(rel / f).as_posix() for f in files if f.endswith(".py")]
    return tuple(sorted(found))


def in_eval_split(relative_path: str, eval_fraction: float) -> bool:
    """Whether a file (by its path relative to the corpus folder) is in the eval split."""
    digest = hashlib.sha256(relative_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < eval_fraction


def corpus_files(
    corpus_dir: str | None = None, split: str = "train", eval_fraction: float = 0.2
) -> list[str]:
    """The ``.py`` files of one split, relative to the corpus folder, sorted.

    Raises
    ------
    ValueError
        If the folder holds no ``.py`` file in that split.
    """
    root = corpus_dir if corpus_dir is not None else stdlib_dir()
    files = _list_py_files(str(Path(root).resolve()), corpus_dir is None)
    chosen = [f for f in files if in_eval_split(f, eval_fraction) == (split == "eval")]
    if not chosen:
        raise InvalidArgumentError(
            f"code_depth: no .py files in {root!r} for split {split!r} "
            f"({len(files)} .py files in all, eval_fraction={eval_fraction}); "
            "give a corpus_dir with more Python files"
        )
    return chosen


def _read_tokens(path: str) -> list[tokenize.TokenInfo] | None:
    try:
        with open(path, "rb") as fh:
            source = fh.read()
        return list(tokenize.tokenize(io.BytesIO(source).readline))
    except (OSError, SyntaxError, tokenize.TokenError, UnicodeError, LookupError):
        return None


def _kind(tok: tokenize.TokenInfo) -> str:
    if tok.type == tokenize.NAME:
        return _KEYWORD_KINDS.get(tok.string, "NAME")
    if tok.type == tokenize.OP:
        return _OPERATOR_KINDS.get(tok.string, "OTHER")
    return _BY_TYPE.get(tok.type, "OTHER")


def _kinds_and_places(tokens: list[tokenize.TokenInfo]) -> tuple[list[int], list[tuple]]:
    kinds, places, fstring_depth = [], [], 0
    for tok in tokens:
        if tok.type in _STRING_START:
            fstring_depth += 1
            if fstring_depth == 1:
                kinds.append(KIND_ID["STRING"])
                places.append(tok.start)
        elif tok.type in _STRING_END:
            fstring_depth -= 1
        elif fstring_depth == 0 and tok.type not in _SKIP:
            kinds.append(KIND_ID[_kind(tok)])
            places.append(tok.start)
    return kinds, places


def _scan(path: str) -> _FileTokens | None:
    """Tokenize one file into kinds and depths; ``None`` if it does not tokenize."""
    stat = os.stat(path)
    return _scan_cached(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _scan_cached(path: str, mtime_ns: int, size: int) -> _FileTokens | None:
    # Keyed on mtime and size, so an edited file is tokenized again.
    tokens = _read_tokens(path)
    if tokens is None:
        return None
    kinds_list, places = _kinds_and_places(tokens)
    if not kinds_list:
        return None
    # Small dtypes: the whole standard library stays cached in about 30 MB.
    kinds = np.array(kinds_list, dtype=np.uint8)
    bracket = np.cumsum(np.isin(kinds, _OPEN).astype(np.int32) - np.isin(kinds, _CLOSE))
    level = np.cumsum((kinds == KIND_ID["INDENT"]).astype(np.int32)
                      - (kinds == KIND_ID["DEDENT"]))
    if bracket.min() < 0 or level.min() < 0:
        return None
    line_end = np.isin(kinds, [KIND_ID["NEWLINE"], KIND_ID["NL"]]) & (bracket == 0)
    starts = np.concatenate([[0], np.flatnonzero(line_end[:-1]) + 1])
    rows, cols = (np.array(x, dtype=np.int32) for x in zip(*places, strict=True))
    return _FileTokens(kinds, bracket.astype(np.int32), level.astype(np.int32), starts,
                       rows, cols)


def _valid_starts(path: str, length: int) -> np.ndarray:
    """Window starts of a file that fit ``length`` and never dedent below their level."""
    stat = os.stat(path)
    return _valid_starts_cached(path, length, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8192)
def _valid_starts_cached(path: str, length: int, mtime_ns: int, size: int) -> np.ndarray:
    scanned = _scan_cached(path, mtime_ns, size)
    if scanned is None or len(scanned.kinds) < length:
        return np.empty(0, dtype=np.int64)
    starts = scanned.starts[scanned.starts + length <= len(scanned.kinds)]
    lowest = np.lib.stride_tricks.sliding_window_view(scanned.level, length).min(axis=1)
    before = np.where(starts > 0, scanned.level[np.maximum(starts - 1, 0)], 0)
    return starts[lowest[starts] >= before]


def _draw_windows(
    rng: np.random.Generator, n: int, length: int, cfg: CodeDepthConfig
) -> list[tuple[str, str, int]]:
    """``n`` (absolute path, relative path, start token) triples."""
    root = Path(cfg.corpus_dir if cfg.corpus_dir is not None else stdlib_dir()).resolve()
    files = corpus_files(cfg.corpus_dir, cfg.split, cfg.eval_fraction)
    unusable: set[int] = set()
    drawn: list[tuple[str, str, int]] = []
    while len(drawn) < n:
        if len(unusable) == len(files):
            raise InvalidArgumentError(
                f"code_depth: none of the {len(files)} {cfg.split!r} files in {str(root)!r} "
                f"tokenizes into a window of {length} tokens; use a shorter length or a "
                "corpus with longer Python files"
            )
        i = int(rng.integers(len(files)))
        if i in unusable:
            continue
        starts = _valid_starts(str(root / files[i]), length)
        if len(starts) == 0:
            unusable.add(i)
            continue
        drawn.append((str(root / files[i]), files[i], int(starts[rng.integers(len(starts))])))
    return drawn


def generate_with_sources(
    rng: np.random.Generator, n: int, length: int, **params: Any
) -> tuple[TaskBatch, list[Window]]:
    """:func:`generate`, plus where each window came from.

    Returns
    -------
    batch : TaskBatch
        As :func:`generate`.
    windows : list of Window
        One per sequence, in batch order.
    """
    cfg = CodeDepthConfig(**params)
    check_request(CodeDepthConfig.name, rng, n, length, MIN_LENGTH)
    tokens = np.empty((n, length), dtype=np.int64)
    bracket = np.empty((n, length), dtype=np.int64)
    indent = np.empty((n, length), dtype=np.int64)
    windows = []
    for row, (path, rel, s) in enumerate(_draw_windows(rng, n, length, cfg)):
        scanned = _scan(path)
        assert scanned is not None  # _draw_windows only returns files that tokenized
        span = slice(s, s + length)
        before = scanned.level[s - 1] if s > 0 else 0
        tokens[row] = scanned.kinds[span]
        bracket[row] = np.minimum(scanned.bracket[span], cfg.max_bracket_depth)
        indent[row] = np.minimum(scanned.level[span] - before, cfg.max_indent_depth)
        windows.append(Window(rel, s, (int(scanned.rows[s]), int(scanned.cols[s])),
                              (int(scanned.rows[s + length - 1]),
                               int(scanned.cols[s + length - 1]))))
    labels = {"bracket_depth": bracket, "indent_depth": indent}
    return batch(tokens, labels, "bracket_depth"), windows


def generate(rng: np.random.Generator, n: int, length: int, **params: Any) -> TaskBatch:
    """Windows of ``length`` token kinds from real Python files, with depth labels.

    ``tokens`` ``(n, length)`` kind ids; labels ``bracket_depth`` and ``indent_depth`` ``(n,
    length)``, defined everywhere; target ``bracket_depth``. Needs ``length >= 1`` (and no
    longer than the corpus's longest usable file); ``params``: fields of
    :class:`CodeDepthConfig`. Arguments as every task's
    (:class:`~capture.tasks.base.TaskConfig`).

    Raises
    ------
    ValueError
        If the corpus has no file in the split, or none long enough for ``length``.
    """
    return generate_with_sources(rng, n, length, **params)[0]


def counterfactual(
    rng: np.random.Generator, n: int, length: int, **params: Any
) -> CounterfactualBatch:
    """Clean windows and copies with one non-bracket token turned into an unmatched ``(``:
    ``corrupt_position`` c uniform among non-bracket positions that have a later (or equal)
    position below the depth clip; ``label_position`` uniform among those; ``sites`` empty."""
    cfg = CodeDepthConfig(**params)
    clean = generate(rng, n, length, **params)
    depth = clean.labels["bracket_depth"]
    below_clip = depth < cfg.max_bracket_depth
    # A position can be corrupted if some position at or after it can still show the change.
    reachable = np.flip(np.logical_or.accumulate(np.flip(below_clip, axis=1), axis=1), axis=1)
    is_bracket = np.isin(clean.tokens, np.concatenate([_OPEN, _CLOSE]))
    corruptible = reachable & ~is_bracket
    if not corruptible.any(axis=1).all():
        raise InvalidArgumentError("code_depth: a window has no non-bracket token below the depth clip; "
                         "raise max_bracket_depth")
    corrupt = random_position_from(rng, corruptible)
    positions = np.arange(length)
    after = positions[None, :] >= corrupt[:, None]
    label_pos = random_position_from(rng, after & below_clip)
    tokens = clean.tokens.copy()
    tokens[np.arange(n), corrupt] = KIND_ID["("]
    raised = np.minimum(depth + after, cfg.max_bracket_depth)
    corrupted = batch(tokens, {"bracket_depth": raised,
                               "indent_depth": clean.labels["indent_depth"]}, "bracket_depth")
    return CounterfactualBatch(clean, corrupted, corrupt, label_pos, {})
