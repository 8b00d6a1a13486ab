"""GPU tests: deterministic cuBLAS (a resumed training must give the same weights) and no
TF32 (stored float16 states are compared with the CPU's). Set before CUDA starts."""

from __future__ import annotations

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
