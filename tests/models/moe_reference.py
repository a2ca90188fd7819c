"""examples/moe.py's layer in float64 numpy, token by token as the routing rules read (Mixtral's
top-2 router with renormalised weights, GShard's capacity: first choices before second ones,
tokens in order), and the inputs the tests give it."""

from __future__ import annotations

import numpy as np

from models.programs import example

EXAMPLE = "examples/moe.py"


def constants() -> dict:
    return example(EXAMPLE)


def routing(x, w_router) -> list[list[tuple[int, int, float]]]:
    """Per group, the kept choices as (token, expert, weight), in capacity order."""
    c = constants()
    groups, tokens, top_k, capacity = c["GROUPS"], c["TOKENS"], c["TOP_K"], c["CAPACITY"]
    kept = []
    for g in range(groups):
        logits = x[g].astype(np.float64) @ w_router.astype(np.float64)
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        top = np.argsort(-probs, axis=-1, kind="stable")[:, :top_k]
        weights = np.take_along_axis(probs, top, axis=-1)
        weights /= weights.sum(axis=-1, keepdims=True)
        load = np.zeros(c["EXPERTS"], dtype=int)
        chosen = []
        for k in range(top_k):
            for t in range(tokens):
                expert = int(top[t, k])
                if load[expert] < capacity:
                    load[expert] += 1
                    chosen.append((t, expert, float(weights[t, k])))
        kept.append(chosen)
    return kept


def layer(x, w_router, w1, w3, w2) -> np.ndarray:
    x, w1, w3, w2 = (a.astype(np.float64) for a in (x, w1, w3, w2))
    out = np.zeros_like(x)
    for g, chosen in enumerate(routing(x, w_router)):
        for token, expert, weight in chosen:
            h = x[g, token]
            gate = h @ w1[expert]
            y = (gate / (1.0 + np.exp(-gate)) * (h @ w3[expert])) @ w2[expert]
            out[g, token] += weight * y
    return out


def inputs(seed: int = 0) -> tuple[np.ndarray, ...]:
    """Tokens ~ N(0, 1), the router and the experts' weights scaled by 1/sqrt(fan-in)."""
    c = constants()
    groups, tokens, hidden, ffn, experts = (
        c["GROUPS"], c["TOKENS"], c["HIDDEN"], c["FFN"], c["EXPERTS"]
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    arrays = (
        rng.standard_normal((groups, tokens, hidden)),
        rng.standard_normal((hidden, experts)) / np.sqrt(hidden),
        rng.standard_normal((experts, hidden, ffn)) / np.sqrt(hidden),
        rng.standard_normal((experts, hidden, ffn)) / np.sqrt(hidden),
        rng.standard_normal((experts, ffn, hidden)) / np.sqrt(ffn),
    )
    return tuple(a.astype(np.float32) for a in arrays)
