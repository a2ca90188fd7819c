module @partial_to_split attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32, tilefoundry.stablehlo_target = "1.13.0"} {
  sdy.mesh @mesh = <["x"=2, "y"=4]>
  func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}, %arg1: tensor<16x12xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"y"}, {}]>}) -> (tensor<8x12xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}) {
    %results = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{"x"}, {"y"}]>, <@mesh, [{"y"}, {}]>] out_shardings=[<@mesh, [{"x"}, {"y"}]>] manual_axes={"x", "y"} (%l0: tensor<4x4xf32>, %l1: tensor<4x12xf32>) {
      %0 = stablehlo.dot_general %l0, %l1, contracting_dims = [1] x [0] : (tensor<4x4xf32>, tensor<4x12xf32>) -> tensor<4x12xf32>
      %4 = "stablehlo.reduce_scatter"(%0) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, use_global_device_ids, scatter_dimension = 1 : i64}> ({
        ^bb0(%1: tensor<f32>, %2: tensor<f32>):
          %3 = stablehlo.add %1, %2 : tensor<f32>
          stablehlo.return %3 : tensor<f32>
      }) : (tensor<4x12xf32>) -> tensor<4x3xf32>
      sdy.return %4 : tensor<4x3xf32>
    } : (tensor<8x16xf32>, tensor<16x12xf32>) -> tensor<8x12xf32>
    return %results : tensor<8x12xf32>
  }
}
