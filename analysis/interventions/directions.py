"""What an ablation or a subspace patch removes: the settings (`probe`, `leace`, `pca:4`, ...), and
the directions each fits from a layer's labelled rows, or reads (stored probe directions,
given arrays). Used by :mod:`analysis.interventions.ablation` and
:mod:`analysis.interventions.patching` (its `subspace=`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import xarray as xr

from analysis.interventions import erasure
from analysis.interventions._common import (
    layer_list,
    open_group,
    read_layer,
    target_of,
)
from analysis.interventions.engine import (
    InterventionPlan,
)
from analysis.probes import find_result
from store import MissingError, Store
from store.errors import InvalidArgumentError, InvalidArrayError

#: method -> whether it takes ``:k``.
METHODS = {
    "probe": False,
    "stored": False,
    "given": False,
    "leace": False,
    "inlp": True,
    "pca": True,
    "svd": True,
    "random": True,
}


@dataclass(frozen=True)
class Setting:
    """One way of erasing: a method and, for subspace methods, its size ``k``; a matched
    control (method ``"matched"``) names the setting it matches in ``of``."""

    method: str
    k: int | None = None
    of: Setting | None = None

    @property
    def name(self) -> str:
        """``"pca:4"``, ``"leace"``, ``"matched:leace"``, ..."""
        if self.of is not None:
            return f"{self.method}:{self.of.name}"
        return self.method if self.k is None else f"{self.method}:{self.k}"

    @property
    def base(self) -> Setting:
        """The setting whose directions this one starts from (itself unless matched)."""
        return self if self.of is None else self.of


def parse_settings(settings: Sequence[str]) -> list[Setting]:
    """Parse setting strings (``"probe"``, ``"inlp:8"``, ``"pca:1,2,4"``).

    Returns
    -------
    list of Setting
        In the order given, sweeps expanded, duplicates dropped.
    """
    if isinstance(settings, str):
        settings = [settings]
    forms = ", ".join(f"{m}:K" if needs_k else m for m, needs_k in METHODS.items())
    forms += ", matched:SETTING"
    out: list[Setting] = []
    for text in settings:
        method, _, ks = str(text).partition(":")
        if method == "matched":
            inner = parse_settings([ks]) if ks else []
            if not inner or any(s.method in ("matched", "random") for s in inner):
                raise InvalidArgumentError(
                    f"setting {text!r}: matched needs the setting it matches, e.g. "
                    "'matched:leace' or 'matched:inlp:4' (not random or matched)"
                )
            out += [m for m in (Setting("matched", None, s) for s in inner) if m not in out]
            continue
        if method not in METHODS:
            raise InvalidArgumentError(f"unknown ablation setting {text!r}; valid forms: {forms}")
        if METHODS[method] != bool(ks):
            need = "needs a size, e.g. 'pca:4'" if METHODS[method] else "takes no ':k'"
            raise InvalidArgumentError(f"setting {text!r}: {method} {need}; valid forms: {forms}")
        try:
            sizes = [int(k) for k in ks.split(",")] if ks else [None]
        except ValueError:
            raise InvalidArgumentError(f"setting {text!r}: k must be integers like 'pca:1,2,4'") from None
        for k in sizes:
            if Setting(method, k) not in out:
                out.append(Setting(method, k))
    return out


# ----------------------------------------------------------------------------- directions
def fit_directions(
    store: Store,
    run_id: str,
    length: int,
    *,
    method: str = "probe",
    k: int | None = None,
    layers: Sequence[str] | None = None,
    sequences: slice | np.ndarray | None = None,
    rng: np.random.Generator | None = None,
) -> xr.DataArray:
    """Fit erasure directions per layer from stored activations.

    Parameters
    ----------
    store : Store
    run_id : str
    length : int
        Stored length to fit at (e.g. the training length 40).
    method : {"probe", "inlp", "pca", "svd", "random"}
        See the module docstring; ``k`` is the number of INLP rounds or the subspace size.
    k : int, optional
    layers : list of str, optional
        Default: every stored layer.
    sequences : slice or array of int, optional
        Which stored sequences to fit on (default all).
    rng : numpy.random.Generator, optional
        Needed for ``"random"``.

    Returns
    -------
    xarray.DataArray, (layer, direction, feature)
        Zero-padded to the largest number of directions over layers (a zero row removes
        nothing); attrs ``method``, ``k``, ``run``, ``length``.
    """
    setting = parse_settings([method if k is None else f"{method}:{k}"])[0]
    if setting.method in ("given", "stored", "leace"):
        raise InvalidArgumentError(
            f"fit_directions fits probe, inlp, pca, svd or random directions, not "
            f"{setting.method!r}; for LEACE use analysis.interventions.leace"
        )
    if setting.method == "random" and rng is None:
        raise InvalidArgumentError("method 'random' needs rng=numpy.random.default_rng(seed)")
    ds = open_group(store, run_id, length)
    names = layer_list(ds, layers)
    idx = np.arange(ds.sizes["sequence"])[sequences if sequences is not None else slice(None)]
    rows = []
    for name in names:
        x, y, groups = fit_rows(ds, name, idx)
        rows.append(setting_directions(x, y, setting, rng, ds.sizes["feature"], groups=groups))
    width = max(r.shape[0] for r in rows)
    padded = np.zeros((len(names), width, ds.sizes["feature"]))
    for i, r in enumerate(rows):
        padded[i, : r.shape[0]] = r
    return xr.DataArray(
        padded,
        dims=("layer", "direction", "feature"),
        coords={"layer": names},
        attrs={"method": setting.method, "k": -1 if k is None else int(k), "run": run_id,
               "length": int(length)},
    )


def load_probe_directions(
    store: Store, target: str, *, run_id: str | None = None, length: int | None = None
) -> xr.DataArray:
    """Probe directions stored by ``layerstate probe`` under ``results/probes/<target>``.

    Read, in this order of preference: ``direction``; ``weights`` when it has no ``position``
    dim (a pooled sweep); ``pooled_weights`` (the train length's pooled probe of a
    per-position sweep). All are in raw feature space (``logits = hidden @ weights +
    intercept``). Dims ``run`` and ``fit_length`` (or ``length``) are selected when present;
    ``class`` becomes ``direction``. Rows and features may be NaN-padded (classes a run lacks,
    features beyond its width); ablation drops them.

    Parameters
    ----------
    store : Store
    target : str
        The label the probes were fitted to.
    run_id : str, optional
        Needed when the result has a ``run`` dim.
    length : int, optional
        The fit length; needed when the result has a ``fit_length``/``length`` dim.

    Returns
    -------
    xarray.DataArray, (layer, direction, feature)

    Raises
    ------
    MissingError
        No probes were fitted for `target` (names ``layerstate probe``).
    """
    name = find_result(store, target, run_id)  # probes/<task> holds the task's own target
    if name not in store.results():
        raise MissingError(
            f"no probe directions for target {target!r} in {store.location} (results/{name}); "
            "fit probes first with `layerstate probe`, or use the ablation setting 'probe', "
            "which fits them here"
        )
    ds = store.read_result(name)
    candidates = [
        v for v in ("direction", "weights", "pooled_weights")
        if v in ds.data_vars and "position" not in ds[v].dims
    ]
    if not candidates:
        raise MissingError(
            f"results/{name} holds no pooled probe weights (variables: "
            f"{', '.join(map(str, ds.data_vars))}); re-run `layerstate probe` with pooled "
            "positions or a train length, or use the ablation setting 'probe'"
        )
    da = ds[candidates[0]]
    for dims, value in ((("run",), run_id), (("fit_length", "length"), length)):
        for dim in dims:
            if dim not in da.dims:
                continue
            if value is None:
                raise InvalidArgumentError(f"results/{name} has a {dim!r} dim; pass the {dim} to pick")
            if value not in da[dim].values:
                raise MissingError(
                    f"results/{name} has no {dim} {value!r}; it has "
                    f"{', '.join(map(str, da[dim].values))}; fit probes there with `layerstate probe`"
                )
            da = da.sel({dim: value})
    da = da.rename({"class": "direction"}) if "class" in da.dims else da
    return check_directions(da, f"results/{name}")


def check_directions(da: xr.DataArray, what: str) -> xr.DataArray:
    if set(da.dims) != {"layer", "direction", "feature"}:
        raise InvalidArrayError(
            f"{what} has dims {da.dims}; directions must be (layer, direction, feature) "
            "(optionally with a 'run' dim); select or rename the others"
        )
    return da.transpose("layer", "direction", "feature")


def fit_rows(ds: xr.Dataset, layer: str,
             idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labelled rows of one layer: x (row, feature) float32, y (row,) int64 and each row's
    sequence (row,) (the groups a probe's choice of C splits)."""
    hidden = read_layer(ds, layer, idx)  # (sequence, position, feature)
    target = target_of(ds)
    labels = np.asarray(ds[target].isel(sequence=idx).values, dtype=np.int64)
    mask = np.asarray(ds["mask"].isel(sequence=idx).values, dtype=bool) & (labels >= 0)
    sequence = np.broadcast_to(np.asarray(idx)[:, None], mask.shape)
    return hidden[mask], labels[mask], sequence[mask]


def setting_directions(x, y, setting: Setting, rng, n_features: int, *,
                       groups: np.ndarray | None = None) -> np.ndarray:
    """Directions (direction, feature) of one fitted setting on rows x, y (``groups``: each
    row's sequence, for the probes' choice of C)."""
    if setting.method == "probe":
        return erasure.probe_directions_np(x, y, groups=groups)
    k = setting.k
    assert k is not None, setting  # parse_settings gives every subspace method a k
    if setting.method == "inlp":
        return erasure.inlp_np(x, y, k, groups=groups).T
    if setting.method in ("pca", "svd"):
        return erasure.pca_np(x, k, center=setting.method == "pca")
    return erasure.random_np(n_features, k, rng)


def fixed_directions(plan: InterventionPlan, given: dict, rid: str, layer: str, setting: Setting):
    """The (direction, feature) rows of a given/stored setting at one layer (else None)."""
    if setting.method not in given:
        return None
    da = given[setting.method]
    if layer not in [str(v) for v in da.layer.values]:
        raise MissingError(
            f"{setting.method} directions have no layer {layer!r} (they have "
            f"{', '.join(map(str, da.layer.values))}); fit them for every ablated layer"
        )
    values = np.asarray(da.sel(layer=layer).values, dtype=np.float64)
    d = plan.n_features[rid]
    if values.shape[-1] < d or np.isfinite(values[:, d:]).any():
        raise InvalidArrayError(
            f"{setting.method} directions have {values.shape[-1]} features; run {rid!r} has {d} "
            "(wider directions may only be NaN-padded)"
        )
    values = values[:, :d]
    return values[np.isfinite(values).all(1)]  # NaN rows: classes the run lacks
