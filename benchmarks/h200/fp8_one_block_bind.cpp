// The one-block build of v0.34.0's dynamic_scaled_fp8_quant (common.cu with
// patches/candidates/fp8-quant-one-block.patch) under an op namespace of its own,
// torch.ops._vseries_fp8, so that a process holds it beside vLLM's own _C op.
// Built by benchmarks/h200/stage_quant_cuda.sh.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

void dynamic_scaled_fp8_quant(torch::stable::Tensor& out,
                              torch::stable::Tensor const& input,
                              torch::stable::Tensor& scale);

STABLE_TORCH_LIBRARY(_vseries_fp8, m) {
  m.def(
      "dynamic_scaled_fp8_quant(Tensor! result, Tensor input, Tensor! scale) "
      "-> ()");
}

STABLE_TORCH_LIBRARY_IMPL(_vseries_fp8, CUDA, m) {
  m.impl("dynamic_scaled_fp8_quant", TORCH_BOX(&dynamic_scaled_fp8_quant));
}
