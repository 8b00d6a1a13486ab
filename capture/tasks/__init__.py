"""The tasks models are trained and probed on, one module each.

=============  ===========================================  =================  ==========
name           what the model reads                         labels             target
=============  ===========================================  =================  ==========
parity         bits                                         parity             parity
s3             elements of the permutation group S3         state              state
dyck           bracket sequences of k types, bounded depth  depth, top         top
code_depth     token kinds of real Python source            bracket_depth,     bracket_depth
                                                            indent_depth
assoc_recall   key-value pairs, then a query key            answer             answer
treecall       a random-PCFG sentence, then a query         answer             answer
=============  ===========================================  =================  ==========

``get_task("dyck", k=3)`` returns a validated, frozen config; ``config.build(seed, n,
length)`` returns a :class:`~capture.tasks.base.TaskBatch`.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from capture.tasks.assoc_recall import AssocRecallConfig
from capture.tasks.base import IGNORE, CounterfactualBatch, TaskBatch, TaskConfig
from capture.tasks.code_depth import CodeDepthConfig
from capture.tasks.dyck import DyckConfig
from capture.tasks.parity import ParityConfig
from capture.tasks.s3 import S3Config
from capture.tasks.treecall import TreecallConfig
from store.errors import InvalidArgumentError, MissingError, validation_problems

_CONFIGS: list[type[TaskConfig]] = [
    AssocRecallConfig, CodeDepthConfig, DyckConfig, ParityConfig, S3Config, TreecallConfig,
]
TASKS: dict[str, type[TaskConfig]] = {
    cls.name: cls for cls in sorted(_CONFIGS, key=lambda c: c.name)
}
"""Task name -> config class."""


class UnknownTaskError(MissingError, ValueError):
    """A task name that is not in :data:`TASKS`: a project error, and both a KeyError and a
    ValueError for callers that catch either."""


def get_task(name: str, **params: Any) -> TaskConfig:
    """A validated config for the task ``name``.

    Parameters
    ----------
    name : str
        A key of :data:`TASKS`.
    **params
        Fields of that task's config class.

    Raises
    ------
    UnknownTaskError
        (a KeyError and a ValueError) if ``name`` is not a task.
    store.errors.InvalidArgumentError
        (a ValueError) One line naming the bad field, what it got and the valid fields, if a
        parameter is unknown or out of range.
    """
    if name not in TASKS:
        raise UnknownTaskError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    cls = TASKS[name]
    try:
        return cls(**params)
    except ValidationError as err:
        raise InvalidArgumentError(_one_line(name, cls, err)) from None


def _one_line(name: str, cls: type[TaskConfig], err: ValidationError) -> str:
    problems = validation_problems(err, cls.model_fields, show_input=True)
    fields = ", ".join(cls.model_fields) or "none"
    return (f"invalid parameters for task {name!r}: {'; '.join(problems)}; "
            f"valid parameters: {fields}")


__all__ = [
    "IGNORE",
    "TASKS",
    "CounterfactualBatch",
    "TaskBatch",
    "TaskConfig",
    "UnknownTaskError",
    "get_task",
]
