"""The IR facts (ir/hir/facts.py) against independent definitions: free variables and loop reads
against a naive recursive reading of hir §1.2's scoping (a loop binds its induction variable and
carries in its body, nothing else binds), loop invariants against their defining postcondition,
and the meshes a program lives on against every type written anywhere in it."""

import gc
import random
import weakref

from tilefoundry.dsl import tf
from tilefoundry.frontend import Tensor, func
from tilefoundry.ir.core import Constant, Expr, Tuple, Var
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr
from tilefoundry.ir.hir.facts import (
    LoopReads,
    body_order,
    device_count,
    free_vars,
    function_free_vars,
    loop_invariants,
    mesh_sites,
    program_meshes,
)
from tilefoundry.ir.types import TensorType, TupleType, f32
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh
from tilefoundry.passes import compile as compile_fn

SCALAR = TensorType((), f32)


# ---- random bodies with loops, escaped loop variables and foreign Vars ------------------------


class _Builder:
    def __init__(self, rng: random.Random):
        self.rng = rng
        self.loops: list[GridRegionExpr] = []
        self.count = 0

    def var(self, name: str) -> Var:
        self.count += 1
        return Var(f"{name}{self.count}", SCALAR)

    def block(self, pool: list[Expr], depth: int) -> Expr:
        """A few values over `pool` (the values in scope), returned as a Tuple."""
        made: list[Expr] = []
        for _ in range(self.rng.randint(1, 5)):
            choice = self.rng.random()
            scope = pool + made
            if choice < 0.55:
                picks = tuple(self.rng.choice(scope) for _ in range(self.rng.randint(1, 3)))
                made.append(Tuple(picks))
            elif choice < 0.75 and depth < 3:
                loop = self.loop(scope, depth)
                made.append(loop)
                if self.rng.random() < 0.2:  # a loop variable read outside its loop
                    made.append(Tuple((loop.induction_var,)))
            elif choice < 0.85:
                made.append(self.var("foreign"))  # bound by nothing
            else:
                made.append(Constant(1.0))
        return Tuple(tuple(made[-2:]))

    def loop(self, scope: list[Expr], depth: int) -> GridRegionExpr:
        induction = self.var("i")
        carries = tuple(self.var("c") for _ in range(self.rng.randint(0, 2)))
        inits = tuple(self.rng.choice(scope) for _ in carries)
        inner = [*scope, induction, *carries]
        body = self.block(inner, depth + 1)
        yields = tuple(self.rng.choice([*inner, body]) for _ in carries)
        loop = GridRegionExpr(induction, carries, inits, body, yields, extent=2, step=1)
        self.loops.append(loop)
        return loop


def _naive_free(node: Expr) -> frozenset[Var]:
    """hir §1.2 read recursively: a Var reads itself; a loop reads its inits, and its body and
    yields minus the Vars it binds; any other node reads what its operands read."""
    if isinstance(node, Var):
        return frozenset((node,))
    if isinstance(node, GridRegionExpr):
        inner = frozenset().union(*map(_naive_free, (node.body, *node.yield_values)))
        own = {node.induction_var, *node.carried_args}
        return frozenset().union(*map(_naive_free, node.init_args)) | (inner - own)
    return frozenset().union(*map(_naive_free, node.operands()))


def _programs(count: int):
    rng = random.Random(2024)
    for _ in range(count):
        builder = _Builder(rng)
        params = [builder.var("p") for _ in range(rng.randint(1, 3))]
        yield builder.block(params, 0), tuple(params), builder.loops


def test_free_vars_are_the_naive_recursive_reading_on_random_bodies():
    """A Var is free when neither a parameter nor an enclosing loop binds it: foreign Vars and
    loop variables read outside their loop, and nothing else."""
    for body, params, _ in _programs(200):
        assert free_vars((body,), params) == _naive_free(body) - set(params)
        fn = Function("f", params, body, TupleType((SCALAR,)))
        assert function_free_vars(fn) == _naive_free(body) - set(params)


def test_loop_reads_are_the_free_loop_variables_of_every_node():
    """A loop variable is one a loop of the program binds (a loop the body never reaches binds
    nothing in it)."""
    for body, _, _ in _programs(200):
        nodes = post_order((body,))
        loops = [n for n in nodes if isinstance(n, GridRegionExpr)]
        loop_vars = {v for loop in loops for v in (loop.induction_var, *loop.carried_args)}
        reads = LoopReads(nodes)
        for node in nodes:
            assert reads.of(node) == _naive_free(node) & loop_vars
        asked_late, known = LoopReads(), set()  # walked when asked, outer loops first
        for loop in reversed(loops):
            walked = [n for n in post_order((loop,)) if isinstance(n, GridRegionExpr)]
            known |= {v for n in walked for v in (n.induction_var, *n.carried_args)}
            assert asked_late.of(loop) == _naive_free(loop) & known


def _per_iteration_frontier(loop: GridRegionExpr) -> set[Expr]:
    """The defining postcondition of loop invariants, written recursively: walking down from the
    body and yields through nodes that read the loop's variables (a nested loop ends the walk),
    the first non-Var nodes that read none of them."""
    own = {loop.induction_var, *loop.carried_args}
    found: set[Expr] = set()
    seen: set[Expr] = set()

    def visit(node: Expr) -> None:
        if node in seen or isinstance(node, Var):
            return
        seen.add(node)
        if not _naive_free(node) & own:
            found.add(node)
        elif not isinstance(node, GridRegionExpr):
            for operand in node.operands():
                visit(operand)

    for root in (loop.body, *loop.yield_values):
        visit(root)
    return found


def test_loop_invariants_are_the_frontier_of_values_that_read_no_loop_variable():
    rng = random.Random(11)
    checked = 0
    for _, _, loops in _programs(200):
        for loop in loops:
            expected = _per_iteration_frontier(loop)
            found = loop_invariants(loop, LoopReads(), {})
            assert len(found) == len(set(found)) and set(found) == expected
            done = {n: None for n in expected if rng.random() < 0.5}
            assert set(loop_invariants(loop, LoopReads(), done)) == expected - done.keys()
            checked += bool(expected)
    assert checked > 20


# ---- meshes and devices -----------------------------------------------------------------------

TP = make_mesh((4,), ("tp",))
DP = make_mesh((2,), ("dp",))
CTAS = make_mesh((2,), ("c",), topology="cta")
REPLICATED = ShardLayout(Layout((8, 4)), (B,), TP)


@func
def plain(x: Tensor[(8, 4), "f32"]):
    return tf.relu(x)


@func
def signature_only(x: Tensor[(8 @ DP.dp, 4), "f32"]):
    return tf.relu(x)


@func
def body_only(x: Tensor[(8, 4), "f32"]):
    y = tf.reshard(x, layout=(8 @ TP.tp, 4), storage="gmem")
    return tf.reshard(tf.relu(y), layout=REPLICATED, storage="gmem") + x


@func
def calls_a_sharded_function(x: Tensor[(8, 4), "f32"]):
    return body_only(x) * x


@func
def on_ctas(x: Tensor[(8 @ CTAS.c, 4), "f32"]):
    return tf.relu(x)


def _every_mesh_written(fn: Function) -> set:
    """Every mesh any type in the program mentions, read recursively: parameters, every node,
    the bodies of called functions and of fusion regions."""
    found: set = set()

    def types_of(t):
        if isinstance(t, TupleType):
            for f in t.fields:
                types_of(f)
        elif isinstance(t, TensorType) and isinstance(t.layout, ShardLayout):
            found.add(t.layout.mesh)

    def visit(node: Expr, seen: set) -> None:
        if node in seen:
            return
        seen.add(node)
        types_of(node.type)
        for operand in node.operands():
            visit(operand, seen)
        target = getattr(node, "target", None)
        if isinstance(target, Function):
            visit(target.body, seen)
        if isinstance(target, FusionRegion):
            for output in target.outputs:
                visit(output, seen)

    for param in fn.params:
        types_of(param.type)
    visit(fn.body, set())
    return found


def test_program_meshes_are_every_mesh_the_program_writes_signature_and_body():
    """Issue 24/28: the CLI and the exits ask one question, and a mesh that appears only in the
    body (or only in a called function's body) is part of the answer."""
    cases = {
        plain: [],
        signature_only: [DP],
        body_only: [TP],
        calls_a_sharded_function: [TP],
        on_ctas: [CTAS],
    }
    for fn, meshes in cases.items():
        assert program_meshes(fn) == meshes, fn.name
        assert set(program_meshes(fn)) == _every_mesh_written(fn), fn.name
        fused = compile_fn(fn)[0] if fn is not on_ctas else fn
        assert set(program_meshes(fused)) == _every_mesh_written(fused), fn.name


def test_the_device_count_is_the_device_mesh_size_and_a_cta_grid_needs_one_device():
    """DESIGN §4.13: a device mesh maps onto that many devices; a cta mesh tiles one device."""
    assert device_count(plain) is None
    assert device_count(signature_only) == 2
    assert device_count(body_only) == 4
    assert device_count(calls_a_sharded_function) == 4
    assert device_count(on_ctas) is None


def test_a_mesh_is_located_at_the_first_parameter_typed_on_it_else_where_the_body_uses_it():
    assert mesh_sites(signature_only) == {DP: signature_only.params[0]}
    (site,) = mesh_sites(body_only).values()
    assert isinstance(site, Expr) and site not in body_only.params
    assert site.type.layout.mesh == TP


def test_facts_are_computed_once_and_go_with_their_function():
    @func
    def scratch(x: Tensor[(8 @ DP.dp, 4), "f32"]):
        return tf.relu(x) + x

    assert body_order(scratch) is body_order(scratch)
    assert mesh_sites(scratch) is mesh_sites(scratch)
    alive = weakref.ref(scratch)
    del scratch
    gc.collect()
    assert alive() is None  # nothing process-wide holds a Function for its facts
