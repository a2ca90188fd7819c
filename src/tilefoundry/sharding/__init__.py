"""The sharding engine: how ShardLayout types propagate through ops and how a sharded program
is carried out on devices.

Propagation (`shard_propagate`, with the canonical regroup of `shard_regroup`) types every op's
output shards from its access relation (semantic-analysis §3); `shard_reading` is how every
engine reads a ShardLayout; the plans (`block_plan`, `reshard_plan`, over the views of
`mesh_views`) are what the mesh simulation, the SPMD exit and the inspector all carry out, so
they agree. Not to be confused with the op namespace `tilefoundry.ir.hir.sharding` (Reshard,
Local), whose ops this engine types.
"""
