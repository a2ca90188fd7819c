"""The per-process loader contract (issue 16: "feed each process only its own shards (a
per-process loader callback)"): each block is asked for once, in global coordinates with every
bound spelled out, and a block of the wrong shape or dtype is refused naming the parameter.
No process is started: this is the reader run_distributed hands to jax."""

import numpy as np
import pytest

from exits.distributed.programs import CASES
from tilefoundry.errors import EvalError
from tilefoundry.exits.runtimes.distributed.runtime import _checked_loader


def reader_for(param: int, source: np.ndarray, calls: list):
    fn = CASES[0].function()  # megatron_mlp: x (16, 64), w1 (64, 256), w2 (256, 64)
    type_ = fn.params[param].type

    def loader(i, index):
        calls.append((i, index))
        return source[index]

    return _checked_loader(loader, param, fn, type_, source.shape)


def test_each_block_is_asked_for_once_with_its_bounds_spelled_out():
    w1 = np.arange(64 * 256, dtype=np.float32).reshape(64, 256)
    calls = []
    read = reader_for(1, w1, calls)
    first = read((slice(None), slice(32, 64)))
    again = read((slice(0, 64), slice(32, 64)))  # the same block, asked by another device
    np.testing.assert_array_equal(first, w1[:, 32:64])
    assert again is first
    assert calls == [(1, (slice(0, 64), slice(32, 64)))]


@pytest.mark.parametrize(
    ("block", "match"),
    [
        (np.zeros((64, 31), np.float32), r"shape \(64, 31\) and dtype float32"),
        (np.zeros((64, 32), np.float64), r"shape \(64, 32\) and dtype float64"),
    ],
)
def test_a_wrong_block_is_refused_naming_the_parameter_and_the_index(block, match):
    fn = CASES[0].function()
    bad = _checked_loader(lambda i, index: block, 1, fn, fn.params[1].type, (64, 256))
    with pytest.raises(EvalError, match=match) as refused:
        bad((slice(None), slice(32, 64)))
    message = str(refused.value)
    assert "parameter 'w1'" in message and "global index [0:64, 32:64]" in message
    assert "expected shape (64, 32) and dtype float32" in message
