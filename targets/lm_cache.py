"""The host's half of a decoder LM artifact's cache, shared by every format's entry points.

An artifact's entry point reads the cache and returns only the T new keys and values (layers × KV heads ×
T × head size); the app writes them into its cache at their positions. `writing` wraps such an entry point
into the form the stepping loops (edgekit.targets.lm_child) and an app use: (tokens, input_pos, k_cache,
v_cache) → (logits, k_cache, v_cache), the caches written in place and returned.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def writing(call: Callable) -> Callable:
    """`call` (→ logits, new keys, new values) with the new entries written into the caches it was given."""

    def step(tokens, input_pos, k_cache, v_cache):
        logits, k_new, v_new = call(tokens, input_pos, k_cache, v_cache)
        positions = np.asarray(input_pos, np.int64).reshape(-1)
        k_cache[:, :, positions] = k_new
        v_cache[:, :, positions] = v_new
        return logits, k_cache, v_cache

    return step
