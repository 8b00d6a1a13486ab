"""Planted stores for the stability tests: seeds that see the same sequences, each seed's states
a random rotation of shared ones, the label along the same or along unrelated directions."""

from __future__ import annotations

import numpy as np
from scipy.stats import special_ortho_group

from store import Store


def rotated_seeds(path, *, seeds: int = 4, n: int = 160, length: int = 8, d: int = 12, layer: int = 2,
                  same: bool = True, strength: float = 2.5, noise: float = 0.3, n_classes: int = 2,
                  rotate: bool = True, rng: int = 0, readout: bool = False,
                  at_chance: tuple[int, ...] = ()) -> Store:
    """``seeds`` runs of task toy / arch lstm on the same ``n`` sequences. Shared latent states
    (standard normal, every layer) plus a little seed noise; the label (random per sequence and
    position) is added at ``layer``, every position, along one class direction per class --
    the same for every seed (``same``) or drawn afresh per seed; then each seed's states are
    multiplied by its own random rotation (``rotate``). With ``readout``, each run also stores
    its readout's logits: right everywhere, but a coin for the seeds in ``at_chance``."""
    g = np.random.default_rng(rng)
    st = Store.create(str(path))
    tokens = g.integers(0, 4, size=(n, length))
    y = g.integers(0, n_classes, size=(n, length))
    latent = g.standard_normal((n, length, 3, d))
    shared_dirs = np.linalg.qr(g.standard_normal((d, n_classes)))[0].T
    for s in range(seeds):
        dirs = shared_dirs if same else np.linalg.qr(g.standard_normal((d, n_classes)))[0].T
        h = latent + noise * g.standard_normal(latent.shape)
        h[:, :, layer] += strength * dirs[y]
        if rotate:
            h = h @ special_ortho_group.rvs(d, random_state=g)
        run = f"r{s}"
        st.add_run(run, task="toy", arch="lstm", seed=s)
        said = g.integers(0, n_classes, size=y.shape) if s in at_chance else y
        logits = np.eye(n_classes, dtype=np.float32)[said] if readout else None
        st.write_length(run, hidden=h.astype(np.float32), tokens=tokens, labels={"y": y}, logits=logits,
                        block_size=64)
    return st


def probed(path, **kw) -> Store:
    """:func:`rotated_seeds` probed at the last position (``probes/toy``) and its stability
    stored (``stability/toy``)."""
    from analysis.probes import probe, probe_stability

    st = rotated_seeds(path, **kw)
    probe(st, "y", positions="last", save=True, scheduler="sync")
    probe_stability(st, "probes/toy", save=True)
    return st
