module @looped_sequence_parallel attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32, tilefoundry.stablehlo_target = "1.13.0"} {
  sdy.mesh @mesh = <["tp"=8]>
  func.func public @main(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"tp"}, {}]>}, %arg1: tensor<3x32x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>}, %arg2: tensor<3x64x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>}) -> (tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"tp"}, {}]>}) {
    %results = sdy.manual_computation(%arg0, %arg1, %arg2) in_shardings=[<@mesh, [{"tp"}, {}]>, <@mesh, [{}, {}, {}]>, <@mesh, [{}, {}, {}]>] out_shardings=[<@mesh, [{"tp"}, {}]>] manual_axes={"tp"} (%l0: tensor<2x32xf32>, %l1: tensor<3x32x64xf32>, %l2: tensor<3x64x32xf32>) {
      %0 = stablehlo.constant dense<0.1> : tensor<f32>
      %1 = stablehlo.constant dense<0.2> : tensor<f32>
      %2 = stablehlo.constant dense<0> : tensor<i64>
      %54:6 = "stablehlo.while"(%2, %l0, %0, %1, %l1, %l2) ({
        ^bb0(%3: tensor<i64>, %4: tensor<2x32xf32>, %5: tensor<f32>, %6: tensor<f32>, %7: tensor<3x32x64xf32>, %8: tensor<3x64x32xf32>):
          %9 = stablehlo.constant dense<3> : tensor<i64>
          %10 = stablehlo.compare LT, %3, %9, SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
          "stablehlo.return"(%10) : (tensor<i1>) -> ()
      }, {
        ^bb0(%3: tensor<i64>, %4: tensor<2x32xf32>, %5: tensor<f32>, %6: tensor<f32>, %7: tensor<3x32x64xf32>, %8: tensor<3x64x32xf32>):
          %11 = "stablehlo.all_gather"(%4) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> : (tensor<2x32xf32>) -> tensor<16x32xf32>
          %12 = "stablehlo.gather"(%7, %3) <{dimension_numbers = #stablehlo.gather<offset_dims = [0, 1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 0>, indices_are_sorted = false, slice_sizes = array<i64: 1, 32, 64>}> : (tensor<3x32x64xf32>, tensor<i64>) -> tensor<32x64xf32>
          %13 = stablehlo.constant dense<0> : tensor<i32>
          %14 = "stablehlo.partition_id"() : () -> tensor<ui32>
          %15 = stablehlo.convert %14 : (tensor<ui32>) -> tensor<i32>
          %16 = stablehlo.constant dense<1> : tensor<i32>
          %17 = stablehlo.divide %15, %16 : tensor<i32>
          %18 = stablehlo.constant dense<8> : tensor<i32>
          %19 = stablehlo.remainder %17, %18 : tensor<i32>
          %20 = stablehlo.constant dense<8> : tensor<i32>
          %21 = stablehlo.multiply %19, %20 : tensor<i32>
          %22 = stablehlo.dynamic_slice %12, %13, %21, sizes = [32, 8] : (tensor<32x64xf32>, tensor<i32>, tensor<i32>) -> tensor<32x8xf32>
          %23 = stablehlo.broadcast_in_dim %6, dims = [] : (tensor<f32>) -> tensor<32x8xf32>
          %24 = stablehlo.multiply %22, %23 : tensor<32x8xf32>
          %25 = stablehlo.dot_general %11, %24, contracting_dims = [1] x [0] : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
          %26 = stablehlo.constant dense<0.5> : tensor<16x8xf32>
          %27 = stablehlo.multiply %26, %25 : tensor<16x8xf32>
          %28 = stablehlo.multiply %25, %25 : tensor<16x8xf32>
          %29 = stablehlo.multiply %28, %25 : tensor<16x8xf32>
          %30 = stablehlo.constant dense<0.044715> : tensor<16x8xf32>
          %31 = stablehlo.multiply %30, %29 : tensor<16x8xf32>
          %32 = stablehlo.add %25, %31 : tensor<16x8xf32>
          %33 = stablehlo.constant dense<0.7978845608028654> : tensor<16x8xf32>
          %34 = stablehlo.multiply %33, %32 : tensor<16x8xf32>
          %35 = stablehlo.tanh %34 : tensor<16x8xf32>
          %36 = stablehlo.constant dense<1.0> : tensor<16x8xf32>
          %37 = stablehlo.add %36, %35 : tensor<16x8xf32>
          %38 = stablehlo.multiply %27, %37 : tensor<16x8xf32>
          %39 = "stablehlo.gather"(%8, %3) <{dimension_numbers = #stablehlo.gather<offset_dims = [0, 1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 0>, indices_are_sorted = false, slice_sizes = array<i64: 1, 64, 32>}> : (tensor<3x64x32xf32>, tensor<i64>) -> tensor<64x32xf32>
          %40 = stablehlo.constant dense<8> : tensor<i32>
          %41 = stablehlo.multiply %19, %40 : tensor<i32>
          %42 = stablehlo.constant dense<0> : tensor<i32>
          %43 = stablehlo.dynamic_slice %39, %41, %42, sizes = [8, 32] : (tensor<64x32xf32>, tensor<i32>, tensor<i32>) -> tensor<8x32xf32>
          %44 = stablehlo.broadcast_in_dim %5, dims = [] : (tensor<f32>) -> tensor<8x32xf32>
          %45 = stablehlo.multiply %43, %44 : tensor<8x32xf32>
          %46 = stablehlo.dot_general %38, %45, contracting_dims = [1] x [0] : (tensor<16x8xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
          %50 = "stablehlo.reduce_scatter"(%46) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids, scatter_dimension = 0 : i64}> ({
            ^bb0(%47: tensor<f32>, %48: tensor<f32>):
              %49 = stablehlo.add %47, %48 : tensor<f32>
              stablehlo.return %49 : tensor<f32>
          }) : (tensor<16x32xf32>) -> tensor<2x32xf32>
          %51 = stablehlo.add %4, %50 : tensor<2x32xf32>
          %52 = stablehlo.constant dense<1> : tensor<i64>
          %53 = stablehlo.add %3, %52 : tensor<i64>
          "stablehlo.return"(%53, %51, %5, %6, %7, %8) : (tensor<i64>, tensor<2x32xf32>, tensor<f32>, tensor<f32>, tensor<3x32x64xf32>, tensor<3x64x32xf32>) -> ()
      }) : (tensor<i64>, tensor<2x32xf32>, tensor<f32>, tensor<f32>, tensor<3x32x64xf32>, tensor<3x64x32xf32>) -> (tensor<i64>, tensor<2x32xf32>, tensor<f32>, tensor<f32>, tensor<3x32x64xf32>, tensor<3x64x32xf32>)
      sdy.return %54#1 : tensor<2x32xf32>
    } : (tensor<16x32xf32>, tensor<3x32x64xf32>, tensor<3x64x32xf32>) -> tensor<16x32xf32>
    return %results : tensor<16x32xf32>
  }
}
