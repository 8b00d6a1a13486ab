"""Whether a call may spawn worker processes (:func:`spawn_safe`): a spawned worker imports the
caller's main module, so a script calling the analysis from unguarded top-level code must not
spawn, while a notebook, an interactive session or a guarded ``__main__`` block may."""

from __future__ import annotations

import ast
import multiprocessing
import sys
import types


def spawn_safe() -> bool:
    """Whether worker processes can be spawned from this call without re-running it.

    A spawned worker imports the caller's main module. That is harmless for a notebook or an
    interactive session (no main file), and for a script or ``python -m`` module whose running
    top-level statement is its ``if __name__ == "__main__":`` block; a script calling the
    analysis from unguarded top-level code would start the analysis again in every worker. A
    process that was itself started by ``multiprocessing`` (a pool's or a cluster's worker, or
    a spawned process importing its parent's main file) starts none.
    """
    me = multiprocessing.current_process()
    # _inheriting: multiprocessing's own flag while a spawned child imports its parent's main
    if multiprocessing.parent_process() is not None or me.daemon or getattr(me, "_inheriting", False):
        return False
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None:
        return True
    frame: types.FrameType | None = sys._getframe(1)
    top = None  # the main file's top-level code, if it is on the stack
    while frame is not None:
        if frame.f_globals is vars(main) and frame.f_code.co_name == "<module>":
            top = frame
        frame = frame.f_back
    if top is None:
        return True  # called from a thread or a callback, not while the main file runs
    return _in_main_guard(path, top.f_lineno)


def _in_main_guard(path: str, line: int) -> bool:
    """Whether line ``line`` of file ``path`` lies in a top-level ``if __name__ == "__main__"``."""
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return False
    for node in tree.body:
        if not isinstance(node, ast.If) or not (node.lineno <= line <= (node.end_lineno or 0)):
            continue
        test = node.test
        return (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == "__name__"
            and len(test.comparators) == 1
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__"
            and not any(line >= (n.lineno) for n in node.orelse)
        )
    return False
