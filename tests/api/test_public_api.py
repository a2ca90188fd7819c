"""DESIGN §3 is the contract users and tests rely on: every public name it lists imports from the
module it names, and the core stays importable without jax (DESIGN §5)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PUBLIC_API = {
    "tilefoundry": "func module Tensor ConstTensor DimVar DimVarRangePat tile VerifyError",
    "tilefoundry.dsl": "tf",
    "tilefoundry.ir.types": (
        "DType StorageKind TensorType TupleType CallableType make_tensor_type "
        "make_shard_tensor_type bool_ i8 i16 i32 i64 u8 u16 u32 u64 f16 bf16 f32 f64 fp8e4m3 "
        "f8e8m0 f4e2m1"
    ),
    "tilefoundry.ir.types.shard": (
        "Layout ComposedLayout ShardLayout Mesh MeshAxis Topology Split Broadcast Dynamic "
        "Partial S P B make_mesh shard_layout_local_shape canonical_shard_layout"
    ),
    "tilefoundry.ir.types.shard.int_tuple": "flatten product prefix_product crd2idx idx2crd",
    "tilefoundry.ir.types.shard.layout": (
        "make_layout coalesce composition complement logical_divide logical_product "
        "right_inverse left_inverse"
    ),
    "tilefoundry.ir.core": "Expr Var Constant Tuple Call Op Module Target",
    "tilefoundry.ir.hir": "Function GridRegionExpr FusionRegion elaborate",
    "tilefoundry.ir.hir.math": "Binary BinaryKind Unary UnaryKind",
    "tilefoundry.ir.hir.tensor": (
        "Reshape Cast Gather Zeros Reduce ReduceKind InsertSlice CacheUpdate TopK Transpose "
        "Slice Concat Stack ShapeOf Rank Where BroadcastTo TupleGetItem"
    ),
    "tilefoundry.ir.hir.nn": (
        "MatMul Conv2D ReLU Sigmoid Tanh SoftMax LayerNorm Gelu Silu RMSNorm RoPE"
    ),
    "tilefoundry.ir.hir.shape": "ShapeExtract ShapeCompose",
    "tilefoundry.ir.hir.sharding": "Reshard Local",
    "tilefoundry.visitor_registry": "typeinfer_call",
    "tilefoundry.visitor_registry.access_relation": "AffineAccess BoundaryRelation AccessRelations",
    "tilefoundry.visitor_registry.shard_propagate": (
        "derive_output_shard_layout partial_reductions_by_axis"
    ),
    "tilefoundry.evaluator": "evaluate",
    "tilefoundry.passes": "legalize verify fuse compile",
    "tilefoundry.exits.stablehlo": "emit_stablehlo STABLEHLO_TARGET_VERSION",
    "tilefoundry.exits.xla": "run_xla",
    "tilefoundry.exits.pallas": "run_pallas",
}

DSL_NAMES = (
    "matmul relu sigmoid tanh softmax layer_norm gelu silu rms_norm rope conv2d reshape cast "
    "gather zeros reduce insert_slice cache_update topk transpose concat stack where reshard "
    "local exp log neg abs rsqrt square ceil round exp2 log2 logical_not add sub mul div "
    "floor_div mod minimum maximum cmp_eq cmp_ne cmp_lt cmp_le cmp_gt cmp_ge logical_and "
    "logical_or"
)
"""DESIGN §3: the op namespace spells each op in lower snake case, each Unary/Binary kind too."""


@pytest.mark.parametrize("module_name", sorted(PUBLIC_API))
def test_design_section_3_names_import(module_name):
    module = importlib.import_module(module_name)
    missing = [n for n in PUBLIC_API[module_name].split() if not hasattr(module, n)]
    assert not missing, f"{module_name} lacks {missing}"


def test_the_core_imports_without_jax():
    code = (
        "import sys, tilefoundry, tilefoundry.evaluator, tilefoundry.passes, "
        "tilefoundry.exits.stablehlo, tilefoundry.exits.pallas\n"
        "assert 'jax' not in sys.modules and 'jaxlib' not in sys.modules, 'jax was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_command_entry_imports_no_compiler_before_its_signal_handler():
    """Issue 28: a Ctrl-C while the command is still importing must end it as any other (exit
    130), so importing the entry (which runs the package top first) loads neither numpy nor the
    compiler; the public names stay importable from the package top."""
    code = (
        "import sys, tilefoundry.cli\n"
        "heavy = {'numpy', 'tilefoundry.autodiff', 'tilefoundry.frontend'}\n"
        "loaded = sorted(heavy & set(sys.modules))\n"
        "assert not loaded, loaded\n"
        "from tilefoundry import Tensor, func, grad, vjp\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_dsl_op_namespace_spells_design_names():
    from tilefoundry.dsl import tf

    names = DSL_NAMES.split()
    missing = [n for n in names if not hasattr(tf, n)]
    assert not missing, f"tf lacks {missing}"
