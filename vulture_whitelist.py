"""Names `vulture` reports as unused that are used, each with where and why (vulture's own
format: ``vulture --make-whitelist`` writes these lines). ``make lint`` runs vulture over the
packages and this file at the confidence set in pyproject.toml's [tool.vulture]."""

# layerstate/cli/base.py, main(debug): click passes the --debug flag to main, and
# _Commands.invoke reads it from ctx.params to let a bad input's traceback through.
_.debug
