"""lab: measuring tools that the command line does not use.

recompile (``python -m vseries.lab.recompile``): the Triton JIT audit of the DeepSeek-V4 and
MoE paths (which kernels re-specialise on the token count), built on kernels.py (where each
kernel lives, by release), triton_jit.py (Triton's binder, compiles and JIT cache, without a
GPU where possible) and vllm_tree.py (import a plain vLLM tree as the one vLLM);
platform.py: vLLM's platform as an SM90 H200 for host-side code on CPU-only hosts;
standins.py: torch stand-ins of the fused-MoE CUDA ops for contracts under Triton's interpreter;
moe_reference.py: the float32 reference of a per-tensor FP8 MoE layer those contracts use. The
contract tests and benchmarks import them; nothing in the verbs does.
"""
