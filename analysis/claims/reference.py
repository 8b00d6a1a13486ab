"""The claims reference, ``docs/claims.md``, written from the claim model itself.

Every field, its type, default and description comes from :class:`~analysis.claims.kinds.base.ClaimBase`;
the fields each kind needs, owns and its worked example from its class (:data:`~analysis.claims.kinds.KINDS`); the outcomes from
:data:`~analysis.claims.spec.OUTCOMES`. The worked examples below are checked by
:func:`analysis.claims.spec.parse_claims` as the page is written, so a field renamed or a rule
tightened fails the build of the page, not a reader. Regenerate with::

    python -m analysis.claims.reference > docs/claims.md

(``tests/analysis/claims/test_reference.py`` fails when the page and the model disagree.)
"""

from __future__ import annotations

import tomllib
import types
import typing
from typing import Any

from analysis.claims.kinds import KINDS, ClaimBase, ReadableByClaim
from analysis.claims.kinds.base import OWNED, listed
from analysis.claims.spec import (
    ALPHA,
    CROSSCHECK,
    DEFAULT_MODEL,
    MODEL_NAMES,
    OUTCOMES,
    REQUIRED,
    parse_claims,
)
from analysis.stats.decision import Verdict

#: One worked example per kind: the TOML a user writes, and what it asks (each kind's own).
EXAMPLES: dict[str, tuple[str, str]] = {name: (cls.example, cls.explained) for name, cls in KINDS.items()}

#: A worked example of each outcome: the numbers and why they give it.
OUTCOME_EXAMPLES: dict[str, str] = {
    Verdict.SUPPORTED: "difference, direction less, margin 0.05: estimate -0.12 [-0.15, -0.09], p = 0.001: "
                 "different from 0 and the whole interval beyond the margin",
    Verdict.NEGLIGIBLE: "difference, margin 0.05: estimate -0.004 [-0.008, -0.001], p = 0.01: real, but "
                  "inside the margin",
    Verdict.EQUIVALENT: "difference, margin 0.05: estimate +0.003 [-0.02, +0.03], p = 0.6: not different from 0 "
                  "and inside the margin (an equivalence claim would be supported)",
    Verdict.INCONCLUSIVE: "difference, margin 0.05: estimate -0.04 [-0.11, +0.03]: neither different from 0 nor "
                    "inside the margin; the row gives the power and the seeds a verdict would need",
    Verdict.CONTRADICTED: "difference, direction greater: estimate -0.09 [-0.12, -0.06]: wholly on the other "
                    "side, and that side's test survives Holm's correction",
    Verdict.NOT_EVALUABLE: "fewer than 2 seeds with a value (e.g. one seed trained, or restoration undefined "
                     "because the corruption does not move the answer): the reason is given; the "
                     "other claims are still evaluated",
}


def _type(annotation: Any) -> str:
    """A field's type as a reader writes it in TOML: ``"a" | "b"``, ``string``, ``list of strings``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f'`"{a}"`' for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args if a is not type(None))
    if origin is list:
        return f"list of {_type(args[0])}s" if args else "list"
    return {str: "string", int: "integer", float: "number", bool: "true/false"}.get(annotation, str(annotation))


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.default
    if value is None:
        return "none"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")

#: The section on what a stored verdict was decided on (:mod:`analysis.claims.record`).
STORED_VERDICTS = [
        '',
        '## What a stored verdict was decided on',
        '',
        '`layerstate stats` and `layerstate run` store the verdicts (`results/claims`) and their seed plan',
        '(`results/seed_plan`) with a decision record; `run --design` stores one with its stages',
        '(`results/sequential`). The record names every stored result the decision read, with the',
        'digest of its data and the number of runs it held, the claims decided together and their',
        'level (store format, S31b). Whatever shows a stored verdict checks the record first:',
        '',
        "- the report shows the verdicts, the seed plan and the design's stages only while every result",
        '  they read is as it was; a result computed again since (other settings, more runs) or forgotten',
        '  turns the section into one line naming it, and the command that decides them again;',
        '- `layerstate combine` refuses a part whose stored verdicts are out of date, in one line, with',
        '  the same reason.',
        '',
        "Runs trained in the claims' cells after the verdicts were decided make them out of date the same",
        "way (the record of each cell's runs). `stats`, `sequential` and `plan` decide from the results as",
        'they are now, so what they print is never stale.',
]


def render() -> str:
    """The text of ``docs/claims.md``."""
    for kind, (toml, _) in EXAMPLES.items():  # every example is a valid claim of its kind
        (claim,) = parse_claims(tomllib.loads(toml)["claims"], source=f"example of {kind}")
        assert claim.kind == kind, kind
    kinds = list(KINDS)
    missing = [k for k in kinds if not (EXAMPLES[k][0] and EXAMPLES[k][1])]
    if missing:
        raise ValueError(f"claim kinds without an example: {sorted(missing)}")
    out = [
        "# Claims: a reference",
        "",
        "<!-- Written by `python -m analysis.claims.reference > docs/claims.md` from the claim model "
        "(analysis/claims/kinds/); edit the model, not this page. -->",
        "",
        "A claim is a hypothesis declared before looking at the results. `layerstate stats STORE --claims "
        "FILE` evaluates the claims of FILE on STORE's stored results; `layerstate run` evaluates those "
        "of its experiment. FILE is either an experiment TOML (its `[[claims]]` are checked against its "
        "grid as it loads) or a TOML file that holds only `[[claims]]` tables, e.g.:",
        "",
        "```toml",
        ReadableByClaim.example,
        "```",
        "",
        f"Every claim gets an estimate, a 95% interval, the test used, a p-value Holm-corrected across "
        f"all claims of the file (alpha = {ALPHA}), the power at the seeds there are, a verdict and one "
        "line saying why. Seeds (independently trained models) are the unit of replication.",
        "",
        "## Kinds",
        "",
        "| kind | needs | what it tests |",
        "|---|---|---|",
    ]
    for kind in kinds:
        need = ", ".join(f"`{f}`" for f in REQUIRED[kind])
        out.append(f"| `{kind}` | {need} | {_cell(EXAMPLES[kind][1])} |")
    out += ["", "### Worked examples", ""]
    for kind in kinds:
        toml, what = EXAMPLES[kind]
        out += [f"#### `{kind}`", "", "```toml", toml, "```", "", what, ""]
    out += [
        "## Fields",
        "",
        "Every field a claim may hold (any other is refused, naming the closest field). `required` "
        "fields must be given; the fields a kind needs are in the table above. A field that belongs to "
        "some kinds only says which; a claim of another kind that gives it is refused.",
        "",
        "| field | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for name, field in ClaimBase.model_fields.items():
        only = f" ({listed(OWNED[name])} claims only)" if name in OWNED else ""
        typed = " \\| ".join(f'`"{k}"`' for k in KINDS) if name == "kind" else _type(field.annotation)
        out.append(f"| `{name}` | {typed} | {_default(field)} | "
                   f"{_cell(field.description or '')}{only} |")
    out += [
        "",
        "## Defaults that decide",
        "",
        f"- `model`: accuracy claims use `{DEFAULT_MODEL}` ({MODEL_NAMES[DEFAULT_MODEL]}) unless they name "
        "another; each is cross-checked by a second model: "
        + ", ".join(f"`{a}` by `{b}`" for a, b in CROSSCHECK.items()) + ".",
        "- `length`: " + _cell(ClaimBase.model_fields["length"].description or ""),
        "- `result`: " + _cell(ClaimBase.model_fields["result"].description or ""),
        "- `variant`: `\"default\"`, pinned only when the results hold several variants or the claim names one.",
        "- `direction`: `\"two-sided\"`; a `bound` claim must say `greater` or `less`.",
        "",
        "## Outcomes",
        "",
        "The `verdict` column; claims with a `margin` also get an `outcome` (effect, negligible, "
        "equivalent, inconclusive) saying which of the two tests passed.",
        "",
        "| verdict | when | worked example |",
        "|---|---|---|",
    ]
    for verdict, when in OUTCOMES.items():
        out.append(f"| `{verdict}` | {_cell(when)} | {_cell(OUTCOME_EXAMPLES[verdict])} |")
    out += [
        "",
        "More on the tests, the models and the correction across claims: the docstring of "
        "`analysis.claims` (`python -c 'import analysis.claims; help(analysis.claims)'`).",
        *STORED_VERDICTS,
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(render(), end="")
