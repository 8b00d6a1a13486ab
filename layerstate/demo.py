"""Write a small store through the public store API (what a user with their own hooks does)."""

from __future__ import annotations

import sys

import numpy as np

from store import Store


def main(path: str) -> None:
    rng = np.random.default_rng(0)
    st = Store.create(path, title="layerstate demo: arrays from your own hooks")
    for seed in range(2):
        rid = f"parity-rnn-s{seed}"
        st.add_run(rid, task="parity", arch="rnn", seed=seed)
        tokens = rng.integers(0, 2, size=(256, 40))
        parity = np.cumsum(tokens, axis=1) % 2
        # Layer l carries the parity signal with strength l: the state is readable late.
        hidden = rng.standard_normal((256, 40, 5, 32)).astype("float32")
        hidden[..., 0] += np.arange(5)[None, None, :] * (2 * parity[..., None] - 1)
        st.write_length(rid, 40, hidden=hidden, tokens=tokens, labels={"parity": parity})
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1])
