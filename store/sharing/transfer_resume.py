"""Where a store copy (:mod:`store.sharing.transfer`) starts, resumes and ends at its target.

Progress is the target itself: a marker file (``layerstate-transfer.json``) names the source,
the selection (the plan's key) and the chunks found absent at the source; a copy started
again with the same plan resumes, one with another is refused. The copy ends by writing every
node's document, then the root document and a consolidation: only then is the target a store.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
import zarr.storage

from ..access.location import Location
from ..core import Store
from ..errors import RunConflictError
from ..metadata.digests import ZARR_JSON, digest, file_of, own_document, parse, render
from ..zarrutil import quiet
from .transfer_plan import CopyPlan, CopySelection

if TYPE_CHECKING:
    from .transfer_side import Side


#: The marker of an unfinished copy, at the target's root (removed when the copy is done).
MARKER = "layerstate-transfer.json"
MARKER_FORMAT = "layerstate-transfer/1"


# ---------------------------------------------------------------------- the target
def plan_key(src: str, sel: CopySelection, plan: CopyPlan) -> str:
    body = json.dumps({"source": src, "selection": sel.record(),
                       "nodes": {p: digest(d) for p, d in sorted(plan.nodes.items())}},
                      sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def marker_bytes(marker: dict[str, Any], absent: set[str]) -> bytes:
    return json.dumps({**marker, "absent": sorted(absent)}, indent=1, sort_keys=True).encode()


def claim(target: Side, key: str, src: Location, dst: Location, sel: CopySelection) -> dict[str, Any]:
    """Start a copy at ``target``, or resume the unfinished copy of the same plan there; the
    marker (with the chunks found absent at the source so far)."""
    if target.exists():
        raw = target.get(MARKER)
        found, _ = parse(raw) if raw is not None else (None, None)
        if found is None:
            listing = target.sizes()
            if listing:
                what = "a store" if ZARR_JSON in listing else "files"
                raise RunConflictError(f"{dst} exists and holds {what}; copy into a new directory or URL")
        elif found.get("plan") != key:
            raise RunConflictError(
                f"{dst} holds an unfinished copy of {found.get('source')} with another selection "
                f"or an older version of it ({found.get('selection')}); finish that one with the "
                "same options, or copy into a new directory"
            )
        else:
            if target.local:  # a killed copy leaves at most temp files: clear them
                for stray in Path(target.root).rglob("*.partial"):
                    stray.unlink(missing_ok=True)
            return found
    marker = {"format": MARKER_FORMAT, "plan": key, "source": str(src), "selection": sel.record()}
    target.put(MARKER, marker_bytes(marker, set()))
    return marker


def write_nodes(target: Side, plan: CopyPlan, root: dict[str, Any], sel: CopySelection, src: str) -> None:
    """Every node's document, the rewritten ``layer`` coordinates, then the root document and a
    consolidation (snapshot + digests): only then is the target a store."""
    docs = {file_of(p): render(d) for p, d in sorted(plan.nodes.items())}
    target.put_many(docs)
    attrs = dict(root.get("attributes") or {})
    if not sel.whole:
        attrs["copied_from"] = {"url": src, **sel.record()}
    root_doc = {**own_document(root), "attributes": attrs}
    target.put(ZARR_JSON, render(root_doc))
    if plan.layer_coords:
        zs = target.loc.zarr_store(read_only=False, guarded=False)
        with quiet():
            for path, values in plan.layer_coords.items():
                arr = zarr.open_array(store=zs, path=path, mode="r+", zarr_format=3)
                arr[...] = np.asarray(values, dtype=str)
    with warnings.catch_warnings():  # zarr notes the marker file when it lists the root
        warnings.filterwarnings("ignore", message=f"Object at {re.escape(MARKER)} is not recognized")
        st = Store.open(target.loc.url, mode="r+", storage_options=target.loc.storage_options)
        st.consolidate()

