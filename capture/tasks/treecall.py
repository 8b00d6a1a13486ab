"""Associative treecall (ATR): recall a terminal's parent head in a random PCFG sentence.

Paper B's hierarchical retrieval task, generated as in Arora et al.'s tinylang
(``PCFG`` with right heads, parent queries only, unambiguous queries).

**Grammar** (fixed by ``grammar_seed`` alone, never by the sampling Generator): each of
``n_nonterminals`` nonterminals gets a max depth uniform in 1..``max_depth`` and 1..
``max_rules_per_nt`` rules. A rule's right-hand side has 1..``max_rhs_len`` symbols, each
uniform over the terminals and the nonterminals of *larger* max depth (so expansions go
deeper and trees stay finite). Rule probabilities and each nonterminal's distribution over
its head terminal are drawn from Dirichlet(1). The start symbol is uniform over the
nonterminals.

**Sentence**: a constituent expands by a rule, emits its children left to right, then its
own head terminal to the right of them (post-order). Every terminal in the sentence is a
tree node; its parent is the head terminal of the constituent above it.

**Query**: a terminal q of the sentence whose answer is unambiguous: q's *rightmost*
occurrence must have a parent, and that parent's head terminal is the answer a. As in
tinylang (``sample_first="target"``), a parent position is drawn uniformly among those
with eligible children, then the query uniformly among its eligible children. Sentences
shorter than 3 terminals or with no eligible query are redrawn.

Layout: ``[BOS] + sentence + [EOS, q, a, EOS] + [PAD] * rest``. Token ids: 0 ``PAD``,
1 ``BOS``, 2 ``EOS``, terminal j is ``3 + j``. The one label, ``answer`` (``n_terminals``
classes), is a's terminal index at the query position only (a causal model predicts a
from there); -1 elsewhere.

Worked example: the tree ``nt0 -> [nt3 -> [t1] head t0, t4] head t2`` gives the sentence
``t1 t0 t4 t2`` (parents: t1 -> t0, t0 -> t2, t4 -> t2, t2 is the root). With query t1 and
``length = 11``::

    position  0    1   2   3   4   5    6   7   8    9    10
    token     BOS  t1  t0  t4  t2  EOS  t1  t0  EOS  PAD  PAD
    answer    -1   -1  -1  -1  -1  -1   0   -1  -1   -1   -1

Choices that are **ours**:

- Defaults sized for a CPU: 20 nonterminals, 20 terminals, RHS up to 3 symbols, up to 3
  rules per nonterminal, max depth 10, ``grammar_seed=0``. :meth:`TreecallConfig.paper`
  gives the paper's 40 nonterminals, 20 terminals, max depth 10, 5 rules per nonterminal,
  and RHS "5" (easy) or "10" (medium): tinylang draws RHS lengths with numpy's
  upper-exclusive ``randint(1, n)``, so these are ``max_rhs_len`` 4 and 9 here, where the
  bound is inclusive.
- Sentences are drawn until one fits: at most ``length - 5`` terminals (a draw stops as
  soon as it outgrows that), padded with PAD at the end. So the sentence-length
  distribution is the grammar's, truncated at the length. After 1000 failed draws for one
  sequence, a ValueError says the length is too short for the grammar.
- Counterfactual: the parent head (at site ``value``) becomes a uniformly drawn terminal
  other than a and q, so the answer changes and q's rightmost occurrence does not; the
  answer token after the query is edited to match (after the label position, unseen by a
  causal model there). ``sites``: ``key`` (q's rightmost occurrence in the sentence),
  ``value`` (its parent head), ``divider`` (the EOS before the query), ``query``.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
from pydantic import Field

from capture.tasks.base import (
    IGNORE,
    CounterfactualBatch,
    TaskBatch,
    TaskConfig,
    batch,
    check_request,
)
from store.errors import InvalidArgumentError

PAD, BOS, EOS = 0, 1, 2
N_SPECIAL = 3
MIN_LENGTH = 8  # three terminals plus BOS, EOS, query, answer, EOS
MAX_DRAWS = 1000


class TreecallConfig(TaskConfig):
    """Random-PCFG sentences with a parent-head query; label ``answer`` at the query."""

    name: ClassVar[str] = "treecall"
    interchange_sites: ClassVar[tuple[str, ...]] = ("key", "value", "divider", "query")
    n_nonterminals: int = Field(
        default=20, ge=1, le=1000, description="Nonterminals in the grammar."
    )
    n_terminals: int = Field(default=20, ge=3, le=10000, description="Terminals in the grammar.")
    max_rhs_len: int = Field(default=3, ge=1, le=50, description="Most symbols in a rule's RHS.")
    max_rules_per_nt: int = Field(default=3, ge=1, le=50, description="Most rules per nonterminal.")
    max_depth: int = Field(default=10, ge=1, le=50, description="Largest nonterminal max depth.")
    grammar_seed: int = Field(default=0, ge=0, description="Seed of the grammar (not of sampling).")

    @classmethod
    def paper(cls, difficulty: str = "easy") -> TreecallConfig:
        """Arora et al.'s grammar sizes; ``difficulty`` is ``"easy"`` or ``"medium"``."""
        rhs = {"easy": 4, "medium": 9}
        if difficulty not in rhs:
            raise InvalidArgumentError(f"difficulty must be one of {sorted(rhs)}, got {difficulty!r}")
        return cls(n_nonterminals=40, n_terminals=20, max_rhs_len=rhs[difficulty],
                   max_rules_per_nt=5, max_depth=10)

    @property
    def vocab_size(self) -> int:
        """PAD, BOS, EOS, then the terminals."""
        return N_SPECIAL + self.n_terminals

    @property
    def n_classes(self) -> dict[str, int]:
        """``answer`` has one class per terminal."""
        return {"answer": self.n_terminals}

    @property
    def target(self) -> str:
        """The training label."""
        return "answer"

    def token_names(self) -> list[str]:
        """``PAD BOS EOS t0 t1 ..``."""
        return ["PAD", "BOS", "EOS"] + [f"t{j}" for j in range(self.n_terminals)]

    def grammar(self) -> Grammar:
        """The grammar this config samples from."""
        return build_grammar(self.grammar_seed, self.n_nonterminals, self.n_terminals,
                             self.max_rhs_len, self.max_rules_per_nt, self.max_depth)


@dataclass(frozen=True, eq=False)
class Grammar:
    """A random PCFG. Symbols in a rule: ``0..n_terminals-1`` are terminals, and
    ``n_terminals + j`` is nonterminal j.

    Attributes
    ----------
    depth : tuple of int
        Max depth of each nonterminal.
    rules : tuple of tuple of tuple of int
        ``rules[j]``: the right-hand sides of nonterminal j.
    rule_probs, head_probs : tuple of numpy.ndarray
        Per nonterminal, probabilities of its rules and of its head terminals.
    """

    n_terminals: int
    depth: tuple[int, ...]
    rules: tuple[tuple[tuple[int, ...], ...], ...]
    rule_probs: tuple[np.ndarray, ...]
    head_probs: tuple[np.ndarray, ...]

    @functools.cached_property
    def _cdfs(self) -> tuple[list[list[float]], list[list[float]]]:
        return ([np.cumsum(p).tolist() for p in self.rule_probs],
                [np.cumsum(p).tolist() for p in self.head_probs])


@functools.lru_cache(maxsize=32)
def build_grammar(seed: int, n_nonterminals: int, n_terminals: int, max_rhs_len: int,
                  max_rules_per_nt: int, max_depth: int) -> Grammar:
    """Draw a grammar from its own seed (see the module docstring for the recipe)."""
    rng = np.random.default_rng(seed)
    depth = rng.integers(1, max_depth + 1, size=n_nonterminals)
    rules = []
    for j in range(n_nonterminals):
        deeper = [n_terminals + i for i in range(n_nonterminals) if depth[i] > depth[j]]
        pool = np.array(list(range(n_terminals)) + deeper)
        n_rules = int(rng.integers(1, max_rules_per_nt + 1))
        rules.append(tuple(
            tuple(pool[rng.integers(len(pool), size=int(rng.integers(1, max_rhs_len + 1)))]
                  .tolist())
            for _ in range(n_rules)
        ))
    rule_probs = tuple(rng.dirichlet(np.ones(len(r))) for r in rules)
    head_probs = tuple(rng.dirichlet(np.ones(n_terminals)) for _ in range(n_nonterminals))
    return Grammar(n_terminals, tuple(depth.tolist()), tuple(rules), rule_probs, head_probs)


class Constituent(NamedTuple):
    """A tree node: a nonterminal, its head terminal, and its children in order (a child is
    a nested constituent or a bare terminal index)."""

    nonterminal: int
    head: int
    children: tuple[Constituent | int, ...]


class _TooLong(Exception):
    """A draw outgrew the room left in the sequence."""


class _Uniforms:
    """Uniform draws from a Generator, fetched in blocks (one call per draw is slow)."""

    def __init__(self, rng: np.random.Generator, block: int = 512) -> None:
        self._rng, self._block = rng, block
        self._buffer: list[float] = []

    def _next(self) -> float:
        if not self._buffer:
            self._buffer = self._rng.random(self._block).tolist()[::-1]
        return self._buffer.pop()

    def pick(self, cdf: list[float]) -> int:
        """Index drawn with the probabilities whose cumulative sums are ``cdf``."""
        return min(bisect.bisect_right(cdf, self._next() * cdf[-1]), len(cdf) - 1)

    def index(self, size: int) -> int:
        """Index drawn uniformly from ``range(size)``."""
        return min(int(self._next() * size), size - 1)


def _expand(nt: int, grammar: Grammar, draws: _Uniforms, room: list[int]) -> Constituent:
    """Expand nonterminal ``nt``; ``room[0]`` counts the terminals still allowed."""
    rule_cdf, head_cdf = grammar._cdfs
    rhs = grammar.rules[nt][draws.pick(rule_cdf[nt])]
    children: list[Constituent | int] = []
    for symbol in rhs:
        if symbol < grammar.n_terminals:
            room[0] -= 1
            children.append(symbol)
        else:
            children.append(_expand(symbol - grammar.n_terminals, grammar, draws, room))
        if room[0] < 0:
            raise _TooLong
    room[0] -= 1
    if room[0] < 0:
        raise _TooLong
    return Constituent(nt, draws.pick(head_cdf[nt]), tuple(children))


def flatten(tree: Constituent) -> tuple[list[int], list[int]]:
    """The sentence of a tree and each terminal's parent position (-1 for the root head).

    Returns
    -------
    terminals, parents : list of int
        Both of the sentence's length.
    """
    terminals: list[int] = []
    parents: list[int] = []

    def visit(node: Constituent) -> int:
        child_positions = []
        for child in node.children:
            if isinstance(child, Constituent):
                child_positions.append(visit(child))
            else:
                child_positions.append(len(terminals))
                terminals.append(child)
                parents.append(-1)
        head = len(terminals)
        terminals.append(node.head)
        parents.append(-1)
        for pos in child_positions:
            parents[pos] = head
        return head

    visit(tree)
    return terminals, parents


def _choose_query(terminals: list[int], parents: list[int], draws: _Uniforms
                  ) -> tuple[int, int] | None:
    """``(query position, parent position)`` in the sentence, or None if none is eligible."""
    rightmost = {t: i for i, t in enumerate(terminals)}
    eligible = [i for i, t in enumerate(terminals) if rightmost[t] == i and parents[i] >= 0]
    if not eligible:
        return None
    targets = sorted({parents[i] for i in eligible})
    target = targets[draws.index(len(targets))]
    children = [i for i in eligible if parents[i] == target]
    return children[draws.index(len(children))], target


class _Draw(NamedTuple):
    tree: Constituent
    terminals: list[int]
    query: int  # position in the sentence of the query's rightmost occurrence
    parent: int  # position in the sentence of its parent head


def _draw_sentence(grammar: Grammar, draws: _Uniforms, most: int, cfg: TreecallConfig) -> _Draw:
    for _ in range(MAX_DRAWS):
        try:
            tree = _expand(draws.index(len(grammar.depth)), grammar, draws, [most])
        except _TooLong:
            continue
        terminals, parents = flatten(tree)
        chosen = _choose_query(terminals, parents, draws) if len(terminals) >= 3 else None
        if chosen is not None:
            return _Draw(tree, terminals, *chosen)
    raise InvalidArgumentError(
        f"treecall: no sentence of at most {most} terminals with an unambiguous query in "
        f"{MAX_DRAWS} draws (grammar_seed={cfg.grammar_seed}, max_rhs_len={cfg.max_rhs_len}, "
        f"max_depth={cfg.max_depth}); use a longer length or a smaller grammar"
    )


def _sample(rng: np.random.Generator, n: int, length: int, cfg: TreecallConfig
            ) -> list[_Draw]:
    check_request(TreecallConfig.name, rng, n, length, MIN_LENGTH)
    grammar = cfg.grammar()
    draws = _Uniforms(rng)
    return [_draw_sentence(grammar, draws, length - 5, cfg) for _ in range(n)]


def _layout(drawn: list[_Draw], length: int) -> tuple[np.ndarray, np.ndarray, dict]:
    n = len(drawn)
    tokens = np.full((n, length), PAD, dtype=np.int64)
    answer = np.full((n, length), IGNORE, dtype=np.int64)
    sites = {name: np.empty(n, dtype=np.int64) for name in ("key", "value", "divider", "query")}
    for row, d in enumerate(drawn):
        s = len(d.terminals)
        q, a = d.terminals[d.query], d.terminals[d.parent]
        tokens[row, : s + 5] = [BOS, *(N_SPECIAL + t for t in d.terminals),
                                EOS, N_SPECIAL + q, N_SPECIAL + a, EOS]
        answer[row, s + 2] = a
        for name, pos in zip(sites, (1 + d.query, 1 + d.parent, s + 1, s + 2), strict=True):
            sites[name][row] = pos
    return tokens, answer, sites


def generate_with_trees(
    rng: np.random.Generator, n: int, length: int, **params: Any
) -> tuple[TaskBatch, list[Constituent]]:
    """:func:`generate`, plus the tree behind each sentence (in batch order)."""
    cfg = TreecallConfig(**params)
    drawn = _sample(rng, n, length, cfg)
    tokens, answer, _ = _layout(drawn, length)
    return batch(tokens, {"answer": answer}, "answer"), [d.tree for d in drawn]


def generate(rng: np.random.Generator, n: int, length: int, **params: Any) -> TaskBatch:
    """Random-PCFG sentences, a query terminal and its parent's head.

    ``tokens`` ``(n, length)``; label ``answer`` ``(n, length)``, defined only at the query
    position (``len(sentence) + 2``). Needs ``length >= 8``; ``params``: fields of
    :class:`TreecallConfig`. ``rng`` is the only source of sampling randomness (the grammar
    comes from ``grammar_seed``). Arguments as every task's
    (:class:`~capture.tasks.base.TaskConfig`).

    Raises
    ------
    ValueError
        If no sentence of the grammar fits the length after 1000 draws.
    """
    return generate_with_trees(rng, n, length, **params)[0]


def counterfactual(
    rng: np.random.Generator, n: int, length: int, **params: Any
) -> CounterfactualBatch:
    """Clean sequences and copies whose queried parent head is another terminal:
    ``corrupt_position``: site ``value``; ``label_position``: site ``query``; ``sites``:
    ``key``, ``value``, ``divider``, ``query``."""
    cfg = TreecallConfig(**params)
    drawn = _sample(rng, n, length, cfg)
    tokens, answer, sites = _layout(drawn, length)
    rows = np.arange(n)
    query = tokens[rows, sites["query"]] - N_SPECIAL
    old = answer[rows, sites["query"]]
    # Uniform over the terminals other than the old answer and the query.
    banned = np.stack([np.minimum(old, query), np.maximum(old, query)], axis=1)
    new = rng.integers(0, cfg.n_terminals - 2, size=n)
    new = new + (new >= banned[:, 0])
    new = new + (new >= banned[:, 1])
    corrupted_tokens = tokens.copy()
    corrupted_tokens[rows, sites["value"]] = N_SPECIAL + new
    corrupted_tokens[rows, sites["query"] + 1] = N_SPECIAL + new
    corrupted_answer = answer.copy()
    corrupted_answer[rows, sites["query"]] = new
    return CounterfactualBatch(
        batch(tokens, {"answer": answer}, "answer"),
        batch(corrupted_tokens, {"answer": corrupted_answer}, "answer"),
        sites["value"], sites["query"], sites,
    )
