"""Tasks: labels checked against independent implementations, determinism, counterfactuals."""

from __future__ import annotations

import itertools
import json
import keyword
import os
import random
import shutil
import tokenize
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capture.tasks import (
    TASKS,
    TaskBatch,
    assoc_recall,
    code_depth,
    dyck,
    get_task,
    parity,
    s3,
    treecall,
)

JSON_DIR = os.path.dirname(json.__file__)  # a small corpus of real code: 5 files
FAST = settings(max_examples=25, deadline=None)
seeds = st.integers(0, 2**32 - 1)


def config(name: str, **params):
    """The task with small test settings (code_depth reads the json package only)."""
    if name == "code_depth":
        params.setdefault("corpus_dir", JSON_DIR)
    return get_task(name, **params)


# ---------------------------------------------------------------- independent references


def parity_ref(bits):
    out, acc = [], 0
    for b in bits:
        acc ^= int(b)
        out.append(acc)
    return out


PERMS = list(itertools.permutations(range(3)))  # lexicographic, as the module documents


def s3_ref(elements):
    """Running product with (g . h)(i) = g(h(i)), composed on tuples."""
    state, out = None, []
    for e in elements:
        g = PERMS[e]
        state = g if state is None else tuple(state[g[i]] for i in range(3))
        out.append(PERMS.index(state))
    return out


def dyck_ref(tokens, k):
    """A plain stack; fails if a close does not match."""
    stack, depth, top = [], [], []
    for tok in tokens:
        if tok < k:
            stack.append(int(tok))
        else:
            assert stack and stack[-1] == tok - k, "close bracket does not match"
            stack.pop()
        depth.append(len(stack))
        top.append(stack[-1] + 1 if stack else 0)
    return depth, top


def ar_ref(tokens, n_keys):
    """Dict lookup: the query key's value index, and where the query sits."""
    divider = list(tokens[1:]).index(assoc_recall.EOS) + 1
    pairs = dict(zip(tokens[1:divider:2], tokens[2:divider:2], strict=True))
    query = divider + 1
    return pairs.get(tokens[query], None), query, n_keys + assoc_recall.N_SPECIAL


def tree_walk(node, n_terminals):
    """Post-order terminals with the position of each one's parent head (-1 at the root)."""
    terminals, parents = [], []

    def visit(c):
        kids = []
        for child in c.children:
            if isinstance(child, int):
                kids.append(len(terminals))
                terminals.append(child)
                parents.append(-1)
            else:
                kids.append(visit(child))
        terminals.append(c.head)
        parents.append(-1)
        for kid in kids:
            parents[kid] = len(terminals) - 1
        return len(terminals) - 1

    visit(node)
    return terminals, parents


def assert_derivable(node, grammar, n_terminals):
    """Every constituent uses one of its nonterminal's rules; children go deeper."""
    symbols = tuple(ch if isinstance(ch, int) else n_terminals + ch.nonterminal
                    for ch in node.children)
    assert symbols in grammar.rules[node.nonterminal]
    for ch in node.children:
        if not isinstance(ch, int):
            assert grammar.depth[ch.nonterminal] > grammar.depth[node.nonterminal]
            assert_derivable(ch, grammar, n_terminals)


def python_tokens(path):
    """tokenize's tokens without ENCODING/ENDMARKER; an f-string split by Python >= 3.12 is
    kept as its opening part only (the module documents one STRING per f-string)."""
    with open(path, "rb") as fh:
        toks = list(tokenize.tokenize(fh.readline))
    starts = {getattr(tokenize, n, None) for n in ("FSTRING_START", "TSTRING_START")} - {None}
    ends = {getattr(tokenize, n, None) for n in ("FSTRING_END", "TSTRING_END")} - {None}
    kept, inside = [], 0
    for t in toks:
        if inside == 0 and t.type not in {tokenize.ENCODING, tokenize.ENDMARKER} | ends:
            kept.append(t)
        inside += (t.type in starts) - (t.type in ends)
    return kept


# ---------------------------------------------------------------- labels vs references


@FAST
@given(seed=seeds, n=st.integers(1, 6), length=st.integers(1, 90))
def test_parity_label_is_running_xor(seed, n, length):
    b = parity.generate(np.random.default_rng(seed), n, length)
    for row in range(n):
        assert b.labels["parity"][row].tolist() == parity_ref(b.tokens[row])


@FAST
@given(seed=seeds, n=st.integers(1, 6), length=st.integers(1, 90))
def test_s3_label_is_running_permutation_product(seed, n, length):
    b = s3.generate(np.random.default_rng(seed), n, length)
    for row in range(n):
        assert b.labels["state"][row].tolist() == s3_ref(b.tokens[row].tolist())


def test_s3_composition_applies_right_factor_first():
    # [1 2 0] . [0 2 1]: 0 -> 0 -> 1, 1 -> 2 -> 0, 2 -> 1 -> 2, i.e. [1 0 2]
    assert s3.PRODUCT[3, 1] == 2
    assert s3.PRODUCT[1, 3] == 5  # and the other order differs: S3 is not commutative


@FAST
@given(seed=seeds, n=st.integers(1, 6), length=st.integers(1, 90), k=st.integers(1, 4),
       max_depth=st.integers(1, 12), p_open=st.floats(0.05, 0.95))
def test_dyck_labels_match_a_brute_force_stack(seed, n, length, k, max_depth, p_open):
    b = dyck.generate(np.random.default_rng(seed), n, length, k=k, max_depth=max_depth,
                      p_open=p_open)
    assert b.tokens.min() >= 0 and b.tokens.max() < 2 * k
    for row in range(n):
        depth, top = dyck_ref(b.tokens[row].tolist(), k)
        assert b.labels["depth"][row].tolist() == depth
        assert b.labels["top"][row].tolist() == top
        assert max(depth) <= max_depth


def test_dyck_depth_stays_within_bound_at_length_120_and_reaches_it():
    b = get_task("dyck").build(3, 400, 120)
    assert b.labels["depth"].max() == 10
    assert b.labels["depth"].min() >= 0
    small = get_task("dyck", max_depth=3).build(3, 50, 120)
    assert small.labels["depth"].max() == 3


@FAST
@given(seed=seeds, n=st.integers(1, 5), length=st.integers(7, 60),
       n_keys=st.integers(2, 20), n_values=st.integers(2, 20))
def test_assoc_recall_answer_is_the_dict_lookup_at_the_query_only(seed, n, length, n_keys,
                                                                  n_values):
    b = assoc_recall.generate(np.random.default_rng(seed), n, length, n_keys=n_keys,
                              n_values=n_values)
    value_start = assoc_recall.N_SPECIAL + n_keys
    for row in range(n):
        toks = b.tokens[row].tolist()
        answer, query, _ = ar_ref(toks, n_keys)
        keys, values = toks[1:query - 1:2], toks[2:query - 1:2]
        assert len(set(keys)) == len(keys) and len(set(values)) == len(values)
        assert all(3 <= t < value_start for t in keys)
        assert all(value_start <= t < value_start + n_values for t in values)
        expected = np.full(length, -1)
        expected[query] = answer - value_start
        assert b.labels["answer"][row].tolist() == expected.tolist()
        assert toks[query + 1] == answer and toks[query + 2] == assoc_recall.EOS
        assert set(toks[query + 3:]) <= {assoc_recall.PAD}


@FAST
@given(seed=seeds, n=st.integers(1, 5), length=st.integers(8, 80),
       grammar_seed=st.integers(0, 50), max_rhs_len=st.integers(1, 4))
def test_treecall_answer_is_parent_head_of_rightmost_occurrence(seed, n, length, grammar_seed,
                                                               max_rhs_len):
    params = {"grammar_seed": grammar_seed, "max_rhs_len": max_rhs_len, "n_terminals": 8}
    try:
        b, trees = treecall.generate_with_trees(np.random.default_rng(seed), n, length, **params)
    except ValueError as err:  # some tiny grammars have no 3-terminal sentence; allowed
        assert "no sentence of at most" in str(err)
        return
    grammar = treecall.TreecallConfig(**params).grammar()
    for row, tree in enumerate(trees):
        assert_derivable(tree, grammar, 8)
        terminals, parents = tree_walk(tree, 8)
        s = len(terminals)
        toks = b.tokens[row].tolist()
        assert toks[0] == treecall.BOS and [t - 3 for t in toks[1:s + 1]] == terminals
        assert toks[s + 1] == treecall.EOS and toks[s + 4] == treecall.EOS
        assert set(toks[s + 5:]) <= {treecall.PAD}
        query = toks[s + 2] - 3
        rightmost = max(i for i, t in enumerate(terminals) if t == query)
        answer = terminals[parents[rightmost]]
        assert parents[rightmost] >= 0 and toks[s + 3] - 3 == answer
        expected = [-1] * length
        expected[s + 2] = answer
        assert b.labels["answer"][row].tolist() == expected


@FAST
@given(seed=seeds, length=st.integers(1, 120))
def test_code_depth_labels_match_python_tokenize_on_each_window(seed, length):
    b, windows = code_depth.generate_with_sources(np.random.default_rng(seed), 4, length,
                                                  corpus_dir=JSON_DIR)
    opening, closing = "([{", ")]}"
    for row, w in enumerate(windows):
        toks = python_tokens(os.path.join(JSON_DIR, w.path))
        assert toks[w.start_token].start == w.start
        depth = level = 0
        for tok in toks[: w.start_token]:
            depth += tok.type == tokenize.OP and tok.string in opening
            depth -= tok.type == tokenize.OP and tok.string in closing
            level += (tok.type == tokenize.INDENT) - (tok.type == tokenize.DEDENT)
        assert depth == 0  # windows start outside any bracket
        start_level = level
        for pos, tok in enumerate(toks[w.start_token: w.start_token + length]):
            depth += tok.type == tokenize.OP and tok.string in opening
            depth -= tok.type == tokenize.OP and tok.string in closing
            level += (tok.type == tokenize.INDENT) - (tok.type == tokenize.DEDENT)
            kind = code_depth.KINDS[b.tokens[row, pos]]
            assert b.labels["bracket_depth"][row, pos] == min(depth, 15)
            assert b.labels["indent_depth"][row, pos] == min(level - start_level, 15)
            if tok.type == tokenize.OP and tok.string in opening + closing:
                assert kind == tok.string
            elif tok.type == tokenize.NAME:
                assert (kind == "NAME") == (not keyword.iskeyword(tok.string))
            elif tok.type != tokenize.OP:
                name = tokenize.tok_name[tok.type]
                assert kind == ("STRING" if name.endswith("STRING_START") else name)


def test_code_depth_maps_every_keyword_away_from_name_and_vocab_is_small():
    assert set(keyword.kwlist) <= set(code_depth._KEYWORD_KINDS)
    assert len(code_depth.KINDS) < 64 and len(set(code_depth.KINDS)) == len(code_depth.KINDS)


def test_code_depth_default_corpus_is_the_standard_library():
    b, windows = code_depth.generate_with_sources(np.random.default_rng(0), 3, 40)
    stdlib = Path(code_depth.stdlib_dir())
    for w in windows:
        assert (stdlib / w.path).is_file()
        assert not {"test", "tests", "site-packages"} & set(Path(w.path).parts)
    assert b.tokens.shape == (3, 40)


# ---------------------------------------------------------------- split and determinism


def test_code_depth_split_is_disjoint_by_file_and_depends_only_on_relative_path(tmp_path):
    email_dir = os.path.join(os.path.dirname(JSON_DIR), "email")
    train = code_depth.corpus_files(email_dir, "train", 0.3)
    evals = code_depth.corpus_files(email_dir, "eval", 0.3)
    assert train and evals and not set(train) & set(evals)
    every = sorted(p.relative_to(email_dir).as_posix() for p in Path(email_dir).rglob("*.py")
                   if "__pycache__" not in p.parts)
    assert sorted(train + evals) == every
    moved = tmp_path / "elsewhere"
    shutil.copytree(email_dir, moved, ignore=shutil.ignore_patterns("__pycache__"))
    assert code_depth.corpus_files(str(moved), "eval", 0.3) == evals
    _, windows = code_depth.generate_with_sources(np.random.default_rng(1), 6, 40,
                                                  corpus_dir=email_dir, split="eval",
                                                  eval_fraction=0.3)
    assert {w.path for w in windows} <= set(evals)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_same_seed_same_arrays_and_global_rng_untouched(name):
    cfg = config(name)
    np_state, py_state = np.random.get_state(), random.getstate()  # noqa: NPY002
    a, b, c = cfg.build(7, 6, 40), cfg.build(7, 6, 40), cfg.build(8, 6, 40)
    cf1 = cfg.counterfactual(np.random.default_rng(7), 6, 40)
    cf2 = cfg.counterfactual(np.random.default_rng(7), 6, 40)
    after = np.random.get_state()  # noqa: NPY002
    assert all(np.array_equal(x, y) for x, y in zip(np_state[1:], after[1:], strict=True))
    assert random.getstate() == py_state
    assert np.array_equal(a.tokens, b.tokens)
    assert all(np.array_equal(a.labels[k], b.labels[k]) for k in a.labels)
    assert not np.array_equal(a.tokens, c.tokens)
    assert np.array_equal(cf1.corrupted.tokens, cf2.corrupted.tokens)
    assert np.array_equal(cf1.label_position, cf2.label_position)


# ---------------------------------------------------------------- the batch contract


@pytest.mark.parametrize("name", sorted(TASKS))
def test_batches_keep_the_contract_at_every_length_40_to_120(name):
    cfg = config(name)
    for length in range(40, 121):
        b = cfg.generate(np.random.default_rng(length), 3, length)
        assert isinstance(b, TaskBatch) and b.tokens.shape == (3, length)
        assert b.tokens.dtype == np.int64 and 0 <= b.tokens.min() <= b.tokens.max() < cfg.vocab_size
        assert set(b.labels) == set(cfg.n_classes) == set(cfg.label_names)
        assert b.target == cfg.target
        for label, values in b.labels.items():
            assert values.shape == (3, length) and values.dtype == np.int64
            assert values.min() >= -1 and values.max() < cfg.n_classes[label]
        assert np.array_equal(b.mask, b.labels[cfg.target] != -1)
        if name in ("assoc_recall", "treecall"):
            assert (b.mask.sum(axis=1) == 1).all()  # only the query position
        else:
            assert b.mask.all() and all((v >= 0).all() for v in b.labels.values())


@pytest.mark.parametrize("name", sorted(TASKS))
def test_config_is_typed_frozen_documented_and_builds_like_generate(name):
    cls = TASKS[name]
    cfg = config(name)
    assert cls.name == name and len(cfg.token_names()) == cfg.vocab_size
    assert all(f.description for f in cls.model_fields.values())
    for field in cls.model_fields:
        with pytest.raises(ValueError, match="frozen"):
            setattr(cfg, field, getattr(cfg, field))
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        cls(not_a_field=1)
    built = cfg.build(11, 4, 40)
    direct = cfg.generate(np.random.default_rng(11), 4, 40)
    assert np.array_equal(built.tokens, direct.tokens)


# ---------------------------------------------------------------- counterfactuals


@pytest.mark.parametrize("name,params", [
    ("parity", {}), ("s3", {}), ("dyck", {}), ("dyck", {"k": 3, "max_depth": 4}),
    ("code_depth", {}), ("assoc_recall", {"corrupt": "key"}),
    ("assoc_recall", {"corrupt": "value"}), ("treecall", {}),
])
def test_counterfactual_changes_target_label_at_label_position(name, params):
    cfg = config(name, **params)
    cf = cfg.counterfactual(np.random.default_rng(2), 40, 50)
    rows = np.arange(40)
    target = cfg.target
    clean_label = cf.clean.labels[target][rows, cf.label_position]
    corrupted_label = cf.corrupted.labels[target][rows, cf.label_position]
    assert (clean_label != corrupted_label).all() and (clean_label >= 0).all()
    assert (cf.corrupt_position <= cf.label_position).all()
    edited = cf.clean.tokens != cf.corrupted.tokens
    assert edited[rows, cf.corrupt_position].all()
    # Any other edit lies after the label position, where a causal model cannot see it.
    other = edited.copy()
    other[rows, cf.corrupt_position] = False
    assert not (other & (np.arange(50) <= cf.label_position[:, None])).any()
    assert (cf.corrupted.tokens < cfg.vocab_size).all()


def test_parity_and_s3_counterfactual_labels_follow_the_references():
    for module, ref, label in ((parity, parity_ref, "parity"), (s3, s3_ref, "state")):
        cf = module.counterfactual(np.random.default_rng(4), 10, 30)
        for row in range(10):
            corrupted = cf.corrupted.tokens[row].tolist()
            assert cf.corrupted.labels[label][row].tolist() == ref(corrupted)
            assert (cf.clean.tokens[row] != cf.corrupted.tokens[row]).sum() == 1


def test_dyck_counterfactual_stays_well_formed_and_retypes_the_open_bracket():
    cf = dyck.counterfactual(np.random.default_rng(9), 30, 60, k=3)
    for row in range(30):
        depth, top = dyck_ref(cf.corrupted.tokens[row].tolist(), 3)  # asserts matching
        assert cf.corrupted.labels["top"][row].tolist() == top
        assert cf.corrupted.labels["depth"][row].tolist() == depth
        c = cf.corrupt_position[row]
        assert cf.clean.tokens[row, c] < 3 and cf.corrupted.tokens[row, c] < 3


def test_assoc_recall_sites_name_the_pair_divider_and_query():
    cf = get_task("assoc_recall", corrupt="value").counterfactual(np.random.default_rng(3), 8, 41)
    rows = np.arange(8)
    tok = cf.clean.tokens
    assert (tok[rows, cf.sites["key"]] == tok[rows, cf.sites["query"]]).all()
    assert (tok[rows, cf.sites["divider"]] == assoc_recall.EOS).all()
    assert (tok[rows, cf.sites["value"]] == tok[rows, cf.sites["query"] + 1]).all()
    assert np.array_equal(cf.corrupt_position, cf.sites["value"])
    for row in range(8):  # the corrupted answer is the dict lookup in the corrupted context
        answer, query, value_start = ar_ref(cf.corrupted.tokens[row].tolist(), 64)
        assert cf.corrupted.labels["answer"][row, query] == answer - value_start
    key = get_task("assoc_recall", corrupt="key").counterfactual(np.random.default_rng(3), 8, 41)
    for row in range(8):  # the query key is gone from the context: no answer
        answer, query, _ = ar_ref(key.corrupted.tokens[row].tolist(), 64)
        assert answer is None and key.corrupted.labels["answer"][row, query] == -1
    assert np.array_equal(key.corrupt_position, key.sites["key"])


def test_treecall_counterfactual_changes_the_parent_head():
    cf = get_task("treecall").counterfactual(np.random.default_rng(6), 20, 40)
    rows = np.arange(20)
    tok, bad = cf.clean.tokens, cf.corrupted.tokens
    assert (tok[rows, cf.sites["key"]] == tok[rows, cf.sites["query"]]).all()
    assert (tok[rows, cf.sites["divider"]] == treecall.EOS).all()
    new = bad[rows, cf.sites["value"]]
    assert (new != tok[rows, cf.sites["query"]]).all()
    assert (cf.corrupted.labels["answer"][rows, cf.label_position] == new - 3).all()
    assert (bad[rows, cf.sites["query"] + 1] == new).all()


def test_code_depth_counterfactual_opens_an_unmatched_bracket():
    cf = config("code_depth").counterfactual(np.random.default_rng(8), 10, 50)
    rows = np.arange(10)
    assert (cf.corrupted.tokens[rows, cf.corrupt_position] == code_depth.KIND_ID["("]).all()
    after = np.arange(50) >= cf.corrupt_position[:, None]
    expected = np.minimum(cf.clean.labels["bracket_depth"] + after, 15)
    assert np.array_equal(cf.corrupted.labels["bracket_depth"], expected)


# ---------------------------------------------------------------- errors


def test_unknown_task_lists_the_valid_tasks():
    message = ("unknown task 'nope'; valid tasks: "
               "assoc_recall, code_depth, dyck, parity, s3, treecall")
    with pytest.raises(KeyError, match=message):
        get_task("nope")
    with pytest.raises(ValueError, match="valid tasks"):
        get_task("nope")


@pytest.mark.parametrize("name,params,message", [
    ("dyck", {"k": 0}, r"invalid parameters for task 'dyck': k: Input should be greater"),
    ("dyck", {"p_opne": 0.3}, r"p_opne: unknown field; did you mean .p_open.\?.*valid parameters: k, "),
    ("assoc_recall", {"n_pairs": 64}, r"n_pairs=64 must be <= min\(n_keys, n_values\) - 1"),
    ("code_depth", {"corpus_dir": "/no/such/dir"}, r"corpus_dir '/no/such/dir' is not a folder"),
    ("code_depth", {"split": "test"}, r"split: Input should be 'train' or 'eval'"),
])
def test_bad_parameters_name_the_field(name, params, message):
    with pytest.raises(ValueError, match=message):
        get_task(name, **params)


@pytest.mark.parametrize("name,length,minimum", [
    ("parity", 0, 1), ("s3", 0, 1), ("dyck", 0, 1), ("assoc_recall", 6, 7), ("treecall", 7, 8),
])
def test_too_short_length_names_the_minimum(name, length, minimum):
    with pytest.raises(ValueError, match=f"{name}: length must be >= {minimum}"):
        get_task(name).build(0, 2, length)


def test_other_bad_requests_say_how_to_fix_them(tmp_path):
    with pytest.raises(TypeError, match="pass numpy.random.default_rng"):
        parity.generate(0, 2, 10)
    with pytest.raises(ValueError, match="n_pairs=16 needs length >= 37, got 30"):
        assoc_recall.AssocRecallConfig.paper().build(0, 2, 30)
    with pytest.raises(ValueError, match="needs k >= 2"):
        get_task("dyck", k=1).counterfactual(np.random.default_rng(0), 2, 10)
    with pytest.raises(ValueError, match="no sentence of at most 3 terminals"):
        get_task("treecall", n_nonterminals=1, max_rhs_len=1).build(0, 1, 8)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no python here")
    with pytest.raises(ValueError, match="no .py files in .* for split 'train'"):
        get_task("code_depth", corpus_dir=str(tmp_path / "empty")).build(0, 2, 40)
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "tiny.py").write_text("x = 1\n")
    (tmp_path / "short" / "broken.py").write_text("def f(:\n  )))\n")
    with pytest.raises(ValueError, match="tokenizes into a window of 40 tokens"):
        get_task("code_depth", corpus_dir=str(tmp_path / "short"), eval_fraction=0.01).build(
            0, 2, 40)


def test_paper_configs_match_the_papers_sizes():
    ar = assoc_recall.AssocRecallConfig.paper()
    assert (ar.n_keys, ar.n_values, ar.pairs_for(100)) == (4096, 4096, 16)
    easy, medium = treecall.TreecallConfig.paper("easy"), treecall.TreecallConfig.paper("medium")
    assert (easy.n_nonterminals, easy.n_terminals, easy.max_depth) == (40, 20, 10)
    assert (easy.max_rhs_len, medium.max_rhs_len) == (4, 9)
    b = easy.build(0, 4, 40)
    assert b.mask.sum() == 4
