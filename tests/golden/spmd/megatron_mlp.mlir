module @megatron_mlp attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32, tilefoundry.stablehlo_target = "1.13.0"} {
  sdy.mesh @mesh = <["tp"=8]>
  func.func public @main(%arg0: tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg1: tensor<32x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"tp"}]>}, %arg2: tensor<64x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"tp"}, {}]>}) -> (tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %results = sdy.manual_computation(%arg0, %arg1, %arg2) in_shardings=[<@mesh, [{}, {}]>, <@mesh, [{}, {"tp"}]>, <@mesh, [{"tp"}, {}]>] out_shardings=[<@mesh, [{}, {}]>] manual_axes={"tp"} (%l0: tensor<8x32xf32>, %l1: tensor<32x8xf32>, %l2: tensor<8x32xf32>) {
      %0 = stablehlo.dot_general %l0, %l1, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x8xf32>) -> tensor<8x8xf32>
      %1 = stablehlo.constant dense<0.5> : tensor<8x8xf32>
      %2 = stablehlo.multiply %1, %0 : tensor<8x8xf32>
      %3 = stablehlo.multiply %0, %0 : tensor<8x8xf32>
      %4 = stablehlo.multiply %3, %0 : tensor<8x8xf32>
      %5 = stablehlo.constant dense<0.044715> : tensor<8x8xf32>
      %6 = stablehlo.multiply %5, %4 : tensor<8x8xf32>
      %7 = stablehlo.add %0, %6 : tensor<8x8xf32>
      %8 = stablehlo.constant dense<0.7978845608028654> : tensor<8x8xf32>
      %9 = stablehlo.multiply %8, %7 : tensor<8x8xf32>
      %10 = stablehlo.tanh %9 : tensor<8x8xf32>
      %11 = stablehlo.constant dense<1.0> : tensor<8x8xf32>
      %12 = stablehlo.add %11, %10 : tensor<8x8xf32>
      %13 = stablehlo.multiply %2, %12 : tensor<8x8xf32>
      %14 = stablehlo.dot_general %13, %l2, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
      %18 = "stablehlo.all_reduce"(%14) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
        ^bb0(%15: tensor<f32>, %16: tensor<f32>):
          %17 = stablehlo.add %15, %16 : tensor<f32>
          stablehlo.return %17 : tensor<f32>
      }) : (tensor<8x32xf32>) -> tensor<8x32xf32>
      sdy.return %18 : tensor<8x32xf32>
    } : (tensor<8x32xf32>, tensor<32x64xf32>, tensor<64x32xf32>) -> tensor<8x32xf32>
    return %results : tensor<8x32xf32>
  }
}
