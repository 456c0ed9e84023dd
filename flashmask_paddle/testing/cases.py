"""Cases for the kernel tests and the fuzzer: shapes, the (causal, C) form, dtype, and random
valid ``startend_row_indices`` drawn from the definition of each form (docs/MASKS_AND_API.md),
independent of ``flashmask_paddle.masks``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# (causal, C); C = 0: no startend_row_indices (plain causal or full attention).
FORMS = [(True, 0), (False, 0), (True, 1), (True, 2), (False, 2), (False, 4)]
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # short names accepted
CPU_DTYPES = ("float32", "float16", "bfloat16")
CUDA_DTYPES = ("float16", "bfloat16")
CUDA_HEAD_DIMS = (64, 128, 256)  # the instantiations
# Every D and Dv the CUDA kernels take: multiples of 8 from 32 to 256 (flashmask/check.h).
CUDA_ANY_HEAD_DIMS = tuple(range(32, 257, 8))


def form_id(form) -> str:
    causal, c = form
    return f"{'causal' if causal else 'full'}-C{c or 0}"


@dataclass
class Case:
    """One attention call. Bounds: ``indices`` when given, else drawn for (causal, ``columns``)
    with ``mask_heads`` heads ("1", "hk", "hq" or a count); ``seed`` seeds what the backends draw.
    The shape has no defaults: every case states it."""
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_k: int
    head_dim: int
    causal: bool = False
    columns: int = 0
    mask_heads: str | int = "1"
    dtype: str = "float32"
    masked_rows: bool = False  # force a band of fully masked query rows
    softmax_scale: float | None = None
    deterministic: bool = False
    seed: int = 0
    indices: np.ndarray | None = None  # int32 [B, Hm, Sk, C]
    head_dim_v: int | None = None  # Dv of value and out; None: head_dim

    def __post_init__(self):
        self.dtype = DTYPE_NAMES.get(self.dtype, self.dtype)
        if self.indices is not None:
            self.columns = int(self.indices.shape[-1])
            self.mask_heads = int(self.indices.shape[1])

    def dv(self) -> int:
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

    def hm(self) -> int:
        if isinstance(self.mask_heads, int):
            return self.mask_heads
        return {"1": 1, "hk": self.heads_k, "hq": self.heads_q}[self.mask_heads.lower()]

    def bounds(self, rng: np.random.Generator) -> np.ndarray | None:
        if self.indices is not None or not self.columns:
            return self.indices
        return random_bounds(rng, (self.causal, self.columns), self.batch, self.hm(), self.seqlen_q,
                             self.seqlen_k, masked_rows=self.masked_rows)

    def __str__(self) -> str:
        return (f"B={self.batch} Sq={self.seqlen_q} Sk={self.seqlen_k} Hq={self.heads_q} Hk={self.heads_k} "
                f"Hm={self.hm() if self.columns else 0} D={self.head_dim} Dv={self.dv()} {self.dtype} causal={self.causal} "
                f"C={self.columns} scale={self.softmax_scale} masked_rows={self.masked_rows} "
                f"deterministic={self.deterministic} seed={self.seed}")


def random_bounds(rng: np.random.Generator, form, batch: int, mask_heads: int, seqlen_q: int,
                  seqlen_k: int, *, masked_rows: bool = False) -> np.ndarray | None:
    """Random valid int32 ``[B, Hm, Sk, C]`` bounds for ``form`` = (causal, C), None for C = 0.

    Each bound vector is one of: uniform, sorted (document-like: whole tiles masked or visible), or
    piecewise constant over random runs of columns with jitter (fully masked, partial and unmasked
    tiles at every tile size); a few values sit on 0 and Sq, one column is fully masked, and
    ``masked_rows`` adds a band of rows masked in every column.
    """
    causal, c = form
    if not c:
        return None
    shape = (batch, mask_heads, seqlen_k)

    def draw():
        style = rng.integers(3)
        if style == 0:
            vals = rng.integers(0, seqlen_q + 1, size=shape)
        elif style == 1:
            vals = np.sort(rng.integers(0, seqlen_q + 1, size=shape), axis=-1)
        else:
            run = int(rng.integers(1, 97))
            base = rng.integers(0, seqlen_q + 1, size=shape)
            blocky = np.repeat(base[..., ::run], run, axis=-1)[..., :seqlen_k]
            jitter = rng.integers(-3, 4, size=shape) * (rng.random(shape) < 0.3)
            vals = np.clip(blocky + jitter, 0, seqlen_q)
        edge = rng.random(shape)
        return np.where(edge < 0.05, 0, np.where(edge > 0.95, seqlen_q, vals))

    def interval():
        a, b = draw(), draw()
        return [np.minimum(a, b), np.maximum(a, b)]

    if causal:
        cols = [draw()] if c == 1 else interval()
    elif c == 2:
        cols = [draw(), draw()]  # LTS, UTE: any values; UTE > LTS masks the whole column
    else:
        cols = interval() + interval()
    idx = np.stack(cols, axis=-1)
    if seqlen_k > 2:  # one fully masked column
        j = rng.integers(0, seqlen_k)
        if causal or c == 2:
            idx[:, :, j, 0] = 0
            if causal and c == 2:
                idx[:, :, j, 1] = seqlen_q
        else:
            idx[:, :, j, :2] = (0, seqlen_q)
    if masked_rows and seqlen_q > 0:
        a = int(rng.integers(0, seqlen_q))
        b = int(rng.integers(a + 1, seqlen_q + 1))
        idx[..., 0] = np.minimum(idx[..., 0], a)  # LTS <= a in every column
        if c == 4 or (causal and c == 2):
            idx[..., 1] = np.maximum(idx[..., 1], b)  # LTE >= b: rows [a, b) masked everywhere
    return idx.astype(np.int32)


def random_case(rng: np.random.Generator, device: str = "cpu", max_len: int = 150) -> Case:
    """A random case over forms, lengths (Sq != Sk), GQA, Hm, dtypes, head dims, masked rows,
    softmax scale (and on CUDA the deterministic backward) valid for ``device``."""
    heads_k = int(rng.integers(1, 4))
    cuda = device == "cuda"
    causal, columns = FORMS[int(rng.integers(len(FORMS)))]
    batch = int(rng.integers(1, 3))
    seqlen_q, seqlen_k = int(rng.integers(1, max_len + 1)), int(rng.integers(1, max_len + 1))
    heads_q = heads_k * int(rng.choice([1, 2, 4]))
    head_dim, head_dim_v = int(rng.choice(CUDA_HEAD_DIMS if cuda else (8, 16, 40, 64))), None
    if cuda and rng.random() < 0.25:  # any supported D and Dv: padded to an instantiation
        head_dim = int(rng.choice(CUDA_ANY_HEAD_DIMS))
        head_dim_v = int(rng.choice(CUDA_ANY_HEAD_DIMS)) if rng.random() < 0.5 else None
    return Case(
        batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads_k=heads_k, heads_q=heads_q,
        head_dim=head_dim, head_dim_v=head_dim_v,
        causal=causal, columns=columns,
        mask_heads=str(rng.choice(["1", "hk", "hq"])),
        dtype=str(rng.choice(CUDA_DTYPES if cuda else ("float32", "float32", "float16", "bfloat16"))),
        masked_rows=bool(rng.integers(2)),
        softmax_scale=[None, 0.3, 1.5][int(rng.integers(3))],
        deterministic=cuda and bool(rng.integers(2)),
        seed=int(rng.integers(2**31)),
    )


# ---- pytest / hypothesis helpers (imported lazily: the fuzzer needs neither) -----------------

# (B, Sq, Sk, Hq, Hk, Hm, D): lengths that are no multiple of any block, Sq < Sk, Sq > Sk,
# GQA 1:1, 4:1 and all-to-one, every mask-head broadcast.
SHAPES = [
    (1, 17, 17, 2, 2, "hq", 16),
    (2, 65, 129, 4, 1, "1", 32),
    (1, 129, 63, 4, 2, "hk", 80),
    (1, 1, 65, 2, 1, "hq", 16),
    (2, 63, 1, 3, 3, "hk", 24),
]


def form_shape_cases() -> list:
    """Every (causal, C) form on every SHAPES entry, as pytest params with readable ids."""
    import pytest

    return [pytest.param(Case(b, sq, sk, hq, hk, d, causal=causal, columns=columns, mask_heads=hm),
                         id=f"causal{int(causal)}_C{columns}-B{b}_Sq{sq}_Sk{sk}_Hq{hq}_Hk{hk}_Hm{hm}_D{d}")
            for causal, columns in FORMS for b, sq, sk, hq, hk, hm, d in SHAPES]


def every_dtype_and_head_dim(test):
    """The dtype x head-dim sweep of the CPU op tests, as one decorator."""
    import pytest

    test = pytest.mark.parametrize("head_dim", [16, 64, 80, 128, 256])(test)
    return pytest.mark.parametrize("dtype", list(CPU_DTYPES))(test)


def dtype_sweep_case(rng, dtype: str, head_dim: int, mask_heads: str) -> Case:
    """The dtype x head-dim sweeps' case: odd lengths (Sq 67, Sk 131), GQA 4:2, a random form."""
    causal, columns = FORMS[int(rng.integers(len(FORMS)))]
    return Case(1, 67, 131, 4, 2, head_dim, causal=causal, columns=columns, mask_heads=mask_heads, dtype=dtype)


def draw_case(data, max_len: int = 150) -> tuple[Case, np.random.Generator]:
    """A hypothesis-drawn case over shapes, forms, GQA, Hm, dtype, masked rows and scale, plus the
    numpy generator for its values (seeded from hypothesis, so a failure replays)."""
    from hypothesis import strategies as st

    heads_k = data.draw(st.integers(1, 3))
    case = Case(
        batch=data.draw(st.integers(1, 2)),
        seqlen_q=data.draw(st.integers(1, max_len)),
        seqlen_k=data.draw(st.integers(1, max_len)),
        heads_k=heads_k,
        heads_q=heads_k * data.draw(st.sampled_from([1, 2, 4])),
        head_dim=data.draw(st.sampled_from([8, 16, 40, 64])),
        mask_heads=data.draw(st.sampled_from(["1", "hk", "hq"])),
        dtype=data.draw(st.sampled_from(["float32", "float32", "float16", "bfloat16"])),
        masked_rows=data.draw(st.booleans()),
        softmax_scale=data.draw(st.sampled_from([None, 0.3, 1.5])),
    )
    case.causal, case.columns = data.draw(st.sampled_from(FORMS))
    return case, np.random.default_rng(data.draw(st.integers(0, 2**63)))
