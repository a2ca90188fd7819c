"""What the 8-device worker runs for test_platforms.py: the SPMD module run_xla calls, declared
for `cuda` and lowered for it with the worker's 8 CPU devices standing in for the GPUs."""


def spmd_lowered_for_cuda(name: str) -> str:
    import jax

    from exits.spmd.sharded_programs import PROGRAMS
    from tilefoundry.exits.runtimes.xla_spmd import spmd_function

    program = PROGRAMS[name]
    function = spmd_function(program.sharded, program.devices, {}, platforms=("cuda",))
    structs = [
        jax.ShapeDtypeStruct(p.type.shape, p.type.dtype.to_numpy()) for p in program.sharded.params
    ]
    return function.call.trace(*structs).lower(lowering_platforms=("cuda",)).as_text()
