"""The signature's fast paths (frontend/parse.py, annotations.py) decide exactly what the slow
paths do: a plain `Tensor[(ints), "dtype"]` spelling is built once and errors are not
remembered; the source check for `P()` (parser §1.4: P() needs its reduction) still finds the
call whatever the line holds before it."""

from __future__ import annotations

import pytest

from tilefoundry.errors import VerifyError
from tilefoundry.frontend import parse_source
from tilefoundry.ir.types import TensorType, f32

HEADER = (
    "from tilefoundry.frontend import Tensor, func\n"
    "from tilefoundry.ir.types.shard import P, make_mesh\n"
    "M = make_mesh((2, 4), ('x', 'y'))\n"
)


def test_one_plain_spelling_gives_the_same_type_each_time():
    text = HEADER + (
        '@func\ndef f(a: Tensor[(4, 8), "f32"], b: Tensor[(4, 8), "f32"]):\n    return a + b\n'
    )
    fn = parse_source(text, "plain.py")["f"]
    assert [p.type for p in fn.params] == [TensorType((4, 8), f32)] * 2


def test_a_bad_plain_spelling_is_refused_every_time():
    text = HEADER + '@func\ndef f(a: Tensor[(4, 8), "f99"]):\n    return a\n'
    for attempt in range(2):
        with pytest.raises(VerifyError, match="f99"):
            parse_source(text, f"bad_dtype_{attempt}.py")


@pytest.mark.parametrize(
    "before",
    ["", 'é: Tensor[(8,), "f32"], ', 'long_name_before: Tensor[(8,), "f32"], '],
)
def test_p_without_reduction_is_found_after_any_prefix(before):
    """A non-ASCII name earlier on the line shifts byte columns against characters: the check
    must still see the `P()` (the fast path only skips ASCII lines without a parenthesis)."""
    text = HEADER + (f'@func\ndef f({before}x: Tensor[(8, {{M.y @ P()}}), "f32"]):\n    return x\n')
    with pytest.raises(VerifyError, match=r"P\(\) needs its reduction") as err:
        parse_source(text, "partial.py")
    assert err.value.location.line == 5
