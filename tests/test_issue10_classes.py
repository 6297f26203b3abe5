"""The 29 bug classes an independent fuzzer found (issue 10), one differential test each.

Inputs share storage, sit at nonzero storage offsets, are expanded or
self-overlapping, or change geometry in place (through views, ``.data`` and
``detach()`` aliases). Eager is the oracle: values, gradients, inputs after the
call, strides and offsets, aliasing, version counters, errors.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.oracle import check, params_with_known_wrong


def arange(n: int, grad: str = "none", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``arange(n)``: plain, a leaf requiring grad, or a non-leaf requiring grad."""
    base = torch.arange(n, dtype=dtype)
    if grad == "leaf":
        base.requires_grad_()
    elif grad == "non_leaf":
        base = base.requires_grad_() * 1
    return base


def _mul_first(a, b):
    a.mul_(2)
    return b * 1


def _two_groups(a0, a1, a2, a3):
    a0.mul_(2)
    return a2[1:3]


def _unsqueeze_view(x):
    v = x[1:]
    v.unsqueeze_(0)
    return v


def _t_view(x):
    v = x[1:]
    v.t_()
    return v


def _transpose_view(x):
    v = x[:, 1:]
    v.transpose_(0, 1)
    return v


def _as_strided_view(x):
    v = x[1:]
    v.as_strided_((2,), (2,), v.storage_offset() + 1)
    return v


def _unsqueeze_intermediate_view(x):
    v = (x * 2)[1:]
    v.unsqueeze_(0)
    return v


def _t_intermediate_view(x):
    v = (x * 2)[1:]
    v.t_()
    return v, v + 1


def _unfold_mul_zero(x):
    x.unfold(0, 2, 2).mul_(0)
    return x * 1


def _as_strided_abs_offset(x):
    return x.as_strided((2,), (1,), 9) * 1


def _data_t(x):
    y = torch.tanh(x)
    y.data.t_()
    return y


def _t_(x):
    x.t_()
    return x * 1


def _t_copy_self(x):
    x.t_()
    x.copy_(x)
    return x * 1


def _as_strided_div(x):
    x.as_strided_((2,), (1,), 2)
    x.div_(2)
    return x * 1


def _flip_then_as_strided_(a):
    v = a.flip(0)
    a.as_strided_((1,), (3,), 2)
    return v[2]


def _dup_transpose_index_fill(a0, a1):
    v = a0[0]
    a1.transpose_(0, 1)
    a1.index_fill_(0, torch.tensor([0]), 1.0)
    v.mul_(3)
    return a0 * 100


def _detach_mul_self(x):
    v = x.detach()
    v.mul_(x)
    return v


def _as_strided_offset_(x):
    x.as_strided_((2,), (1,), 9)
    return x * 1


def _as_strided_offset_mul(x):
    x.as_strided((2,), (1,), 9).mul_(0)
    return x * 1


def _imag_as_strided_sin(x):
    im = x.imag
    im.as_strided((2,), (2,), im.storage_offset() + 2).sin_()
    return x * 1


def _expanded_index_put(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # index_put_ on an expanded tensor is deprecated, not yet an error
        return x.index_put_((torch.tensor([0]),), torch.tensor(3.0))


def _expanded_copy(x, y):
    return x.copy_(y)


def _no_grad_empty_write(x):
    with torch.no_grad():
        x[:, 0:0].mul_(2)
    return x * 1


def _neg_second_return_third(a, b, c):
    b.neg_()
    return c


def _neg_then_copy(a0, a1, c):
    a1.neg_()
    a0.copy_(c)
    return a0 * 1


def _view_as_complex_read(a, b):
    return torch.view_as_complex(a.view(1, 2)), torch.view_as_complex(b)


def _view_before_transpose_(x):
    v = x * 1
    w = v[..., 2]
    v.transpose_(2, 0)
    return w


def _detach_unsqueeze_(x):
    x.detach().unsqueeze_(0)
    return x * 1


def _neg_out_data(x):
    torch.neg(x, out=x.data)
    return x * 1


def _resize_fill(x):
    v = x * 1
    v.resize_(6)
    v.fill_(1)
    return v


def _as_strided_then_mul(a):
    a.as_strided_((1,), (3,), 0)
    a.mul_(2)
    return a


def _unsqueeze_abs_then_mul(a):
    y = a.unsqueeze(1).abs()
    a.mul_(0.5)
    return y, a


def _resize_within_then_view(x):
    x.resize_(4)
    return x[1:]


def _t_then_view_flat(x):
    x.t_()
    return x.view(-1)


def _index_put_self(x):
    return x.index_put_((torch.tensor([1, 0, 3, 2]),), x)


def _expanded(grad: bool = False):
    def make():
        scalar = torch.randn((), generator=torch.Generator().manual_seed(0))
        if grad:
            scalar = scalar.requires_grad_() * 1
        return (scalar.expand(2),)

    return make


PROGRAMS = {
    # 1. overlapping views of one storage, neither at offset 0
    "overlapping_offset_views": (_mul_first, lambda: (lambda b: (b[3:9], b[5:11]))(arange(12))),
    "overlapping_offset_views_grad": (_mul_first, lambda: (lambda b: (b[3:9], b[5:11]))(arange(12, "non_leaf"))),
    "column_views": (_mul_first, lambda: (lambda b: (b.view(3, 4)[:, 1], b.view(3, 4)[:, 3]))(arange(12))),
    # 2. two alias groups in one call
    "two_alias_groups": (
        _two_groups,
        lambda: (lambda bi, bf: (bi[1::2], bi[0::2], bf[1], bf[2]))(
            arange(12, dtype=torch.int64), arange(12).view(3, 4)
        ),
    ),
    # 3. metadata mutations of views of inputs and of intermediates
    "unsqueeze_of_input_view": (_unsqueeze_view, lambda: (arange(6),)),
    "unsqueeze_of_input_view_grad": (_unsqueeze_view, lambda: (arange(6, "non_leaf"),)),
    "t_of_input_view": (_t_view, lambda: (arange(12).view(3, 4),)),
    "transpose_of_input_view_grad": (_transpose_view, lambda: (arange(12, "non_leaf").view(3, 4),)),
    "as_strided_of_input_view": (_as_strided_view, lambda: (arange(8),)),
    "unsqueeze_of_intermediate_view": (_unsqueeze_intermediate_view, lambda: (arange(6, "leaf"),)),
    "t_of_intermediate_view": (_t_intermediate_view, lambda: (arange(12, "leaf").view(3, 4),)),
    # 4. inputs at an offset
    "offset_unfold_write": (_unfold_mul_zero, lambda: (arange(16)[8:12],)),
    "offset_as_strided_grad": (_as_strided_abs_offset, lambda: (arange(16, "leaf")[8:12],)),
    # 5. metadata mutation through .data
    "data_t_": (_data_t, lambda: (arange(12, "leaf").view(3, 4),)),
    # 6. non-contiguous inputs changing geometry
    "t_of_strided_grad_input": (_t_, lambda: ((arange(32, "leaf").view(4, 8) * 1)[:, ::2],)),
    "t_copy_self": (_t_copy_self, lambda: (arange(12).view(3, 4)[:, ::2],)),
    "as_strided_then_div": (_as_strided_div, lambda: (arange(20).view(2, 10)[:, ::2],)),
    # 7. a view taken before a metadata mutation
    "flip_then_as_strided_": (_flip_then_as_strided_, lambda: (arange(4, "non_leaf"),)),
    # 8. duplicate input, metadata change through one, writes through a view of the other
    "dup_transpose_index_fill": (
        _dup_transpose_index_fill,
        lambda: (lambda b: (b, b))(arange(4, "non_leaf").view(2, 2)),
    ),
    # 9. a write through detach() reading the input
    "detach_mul_self": (_detach_mul_self, lambda: (arange(3, "non_leaf"),)),
    # 10. absolute-offset geometry on offset inputs
    "offset_as_strided_": (_as_strided_offset_, lambda: (arange(16)[8:12],)),
    "offset_as_strided_write": (_as_strided_offset_mul, lambda: (arange(16)[8:12],)),
    "complex_imag_as_strided_write": (
        _imag_as_strided_sin,
        lambda: (torch.complex(arange(16), arange(16) + 0.5)[8:12],),
    ),
    # 11. expanded (self-overlapping) inputs written
    "expanded_zero_": (lambda x: x.zero_(), _expanded()),
    "expanded_fill_": (lambda x: x.fill_(2.0), _expanded()),
    "expanded_index_put_": (_expanded_index_put, _expanded()),
    "expanded_copy_": (_expanded_copy, lambda: (*_expanded()(), torch.tensor([1.0, 1.0]))),
    "no_grad_empty_write_grad": (_no_grad_empty_write, lambda: (arange(12, "non_leaf").view(3, 4)[:, ::2],)),
    # 12. several inputs, only some aliased
    "aliased_pair_beside_third": (
        _neg_second_return_third,
        lambda: (lambda b: (b[0:4], b[2:6], arange(3)))(arange(8)),
    ),
    "aliased_pair_copy_from_grad": (
        _neg_then_copy,
        lambda: (lambda b: (b[3:6:2], b[4:6], arange(2, "leaf") * 1))(arange(8)),
    ),
    "view_as_complex_overlapping": (
        _view_as_complex_read,
        lambda: (lambda b: (b[3:5], b[4:8].view(2, 2)))(arange(12)),
    ),
    # 13. a view taken before a metadata change of its base, used after
    "view_before_transpose_": (_view_before_transpose_, lambda: (arange(24, "leaf").view(2, 3, 4),)),
    # 14.
    "detach_unsqueeze_": (_detach_unsqueeze_, lambda: (arange(4, "leaf"),)),
    "neg_out_data": (_neg_out_data, lambda: (arange(4, "leaf"),)),
    "resize_fill": (_resize_fill, lambda: (arange(4),)),
    "resize_input_within_storage": (_resize_within_then_view, lambda: (arange(13)[6:10].view(2, 2),)),
    "as_strided_then_mul_grad": (_as_strided_then_mul, lambda: (arange(4, "leaf") * 1,)),
    "expanded_grad_t_": (_t_, lambda: (arange(3, "non_leaf").view(3, 1).expand(3, 2),)),
    # 15.
    "unsqueeze_abs_then_mul": (_unsqueeze_abs_then_mul, lambda: (arange(4, "leaf") * 1,)),
    "t_then_view_flat_raises": (_t_then_view_flat, lambda: (arange(16).view(4, 4)[:, ::2],)),
    "index_put_self_raises": (_index_put_self, lambda: (arange(4),)),
}


# Open: each strict, so a fix shows up.
KNOWN_WRONG = {}


@pytest.mark.parametrize("name", params_with_known_wrong(PROGRAMS, KNOWN_WRONG, "training"))
def test_training(name):
    fn, make = PROGRAMS[name]
    check(fn, make)


@pytest.mark.parametrize("name", params_with_known_wrong(PROGRAMS, KNOWN_WRONG, "inference"))
def test_inference(name):
    fn, make = PROGRAMS[name]
    with torch.no_grad():
        check(fn, make, backward=False)


def test_absolute_offset_program_is_specialized_on_the_offset():
    """``as_strided`` with an absolute offset reads other memory when the input sits elsewhere."""
    import aot

    def f(x):
        return x.as_strided((2,), (1,), 9) * 1

    compiled = aot.aot_function(f, aot.nop)
    base = torch.arange(16.0)
    for start in (8, 7, 8, 6):
        x = base[start : start + 4]
        torch.testing.assert_close(compiled(x), f(x))
    assert len(compiled.entries) == 3


def test_relative_program_is_not_specialized_on_the_offset():
    import aot

    compiled = aot.aot_function(lambda x: x.mul_(2), aot.nop)
    base = torch.arange(16.0)
    for start in (8, 7, 6):
        compiled(base[start : start + 4])
    assert len(compiled.entries) == 1


def test_write_into_a_self_overlapping_view_is_refused_clearly():
    """eager's result depends on the order its kernel writes overlapping elements in: refused, named."""
    import aot
    from aot.errors import UnsupportedMutationError

    def f(x):
        x.unfold(0, 2, 1).neg_()
        return x

    with pytest.raises(UnsupportedMutationError, match="share memory with each other"):
        aot.aot_function(f, aot.nop)(torch.arange(4.0))
