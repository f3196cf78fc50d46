"""recompile: audit Triton kernels for recompiles driven by the token count.

Triton's JIT specialises every integer argument that is not a ``tl.constexpr`` and not named in
``do_not_specialize``: the value 1 becomes a constant, and a multiple of 16 gets a divisibility
hint (``BaseBackend.get_int_specialization`` in Triton 3.6). Each combination is a separate
variant in the kernel's JIT cache (``JITFunction.device_caches``) and costs a compile when it is
first met. An argument whose value follows the number of tokens in the batch therefore compiles
new variants while a server runs: measured on an H200 with vLLM v0.21.0, the DeepSeek-V4 kernel
``_fused_inv_rope_fp8_quant_per_head`` compiled 4 variants over num_tokens 1..1024 (first at
T=1, then T=2, 13, 16), 200-540 ms each after the first.

The API, smallest first:

- ``specialised_token_args(kernel, names)``: static; which of the named arguments the kernel's
  own JIT metadata (``params``, ``do_not_specialize``) still specialises. Runs on any host.
- ``find_kernel(locations)``: the kernel in whichever vLLM imports, from a tuple of known
  locations (upstream moved the DeepSeek-V4 ops in v0.22.0 and wrapped the rope kernel in a
  class later: ``ROPE_LOCATIONS``, ``QUANT_INSERT_LOCATIONS``); says which location it used.
- ``capture_launches(kernel)`` + ``specialisation_keys(kernel, launches)``: record the
  arguments the real host code launches a kernel with (nothing is launched) and compute, with
  Triton's own binder for sm_90, the JIT cache key each launch selects. Runs on a CPU host.
- ``ptx(kernel, launch)`` / ``ptx_code(text)``: compile one launch for sm_90 without a GPU, to
  check whether giving up a divisibility hint changes the generated code.
- ``CompileRecorder`` / ``sweep(fn, ...)``: on a CUDA host, run a callable over a token-count
  sweep and record every Triton compile (kernel, token count, milliseconds) through Triton's
  ``jit_cache_hook`` / ``jit_post_compile_hook``.
- ``use_vllm_tree()``: before vLLM is imported, make the vLLM tree under test the only one the
  process sees (its own metadata, none of the installed vLLM's modules), so that a plain
  upstream checkout keeps the real Triton on a CPU host (the contract tests call it).

``python -m vseries.lab.recompile`` prints the audit table of the DeepSeek-V4 path and the MoE
path (``AUDIT``); with CUDA present it also sweeps the rope kernel.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from vseries.lab.kernels import (  # noqa: F401  (the audit's API, one import away)
    AUDIT,
    MOVES,
    PATCHED,
    QUANT_INSERT_KERNEL,
    QUANT_INSERT_LOCATIONS,
    ROPE_KERNEL,
    ROPE_LOCATIONS,
    ROPE_MODULE,
    SWEEP,
    WARMUP,
    KernelAudit,
    KernelLocation,
)
from vseries.lab.triton_jit import (  # noqa: F401
    CompileEvent,
    CompileRecorder,
    Launch,
    NotATritonKernel,
    capture_launches,
    changing_args,
    find_kernel,
    global_accesses,
    jit_variants,
    load_kernel,
    ptx,
    ptx_code,
    replace_kernel,
    specialisation_keys,
    specialised_token_args,
    sweep,
)
from vseries.lab.vllm_tree import use_vllm_tree


def rope_kernel() -> tuple[Any, KernelLocation]:
    """The DeepSeek-V4 inverse-RoPE FP8 kernel of the vLLM under test and its location."""
    return find_kernel(ROPE_LOCATIONS)


def rope_launches(
    token_counts: Iterable[int], heads: int = 16, groups: int = 2, tma_aligned_scales: bool = False
) -> list[Launch]:
    """Launches of the DeepSeek-V4 rope kernel for each token count, by its real host code.

    Calls vLLM's ``fused_inv_rope_fp8_quant`` on uninitialised tensors under
    ``capture_launches``; shapes follow DeepSeek-V4 (head_dim 512 = 448 nope + 64 rope, fp32
    cos/sin cache; the default 16 heads in 2 groups keeps vLLM's 8 heads per group). The
    tensors live where vLLM registered its custom op: on the GPU where CUDA is present (the
    op has no CPU kernel there), else on the CPU, where the memory is reserved, not touched.

    Args:
        token_counts: the token counts T (about 2 * T * heads KiB each, held by the result).
        heads, groups: attention heads and output groups of the layer slice.
        tma_aligned_scales: the SM100 INT32 scale layout (False: SM90 FP32 scales).

    Returns:
        One ``Launch`` per token count.

    Raises:
        LookupError: as ``find_kernel`` (no known location holds the rope kernel).
        RuntimeError: the release's host code asserts on these inputs (its signature or
            checks changed); raised as RuntimeError so that a contract test does not read it
            as a failed assertion about the kernel.
    """
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    kernel, loc = rope_kernel()
    mod = importlib.import_module(loc.module)
    cache = torch.empty(4096, 64, dtype=torch.float32, device=device)
    with _pdl_as_on_hopper(), capture_launches(kernel) as launches:
        for t in token_counts:
            o = torch.empty(t, heads, 512, dtype=torch.bfloat16, device=device)
            positions = torch.zeros(t, dtype=torch.int64, device=device)
            try:
                mod.fused_inv_rope_fp8_quant(
                    o,
                    positions,
                    cache,
                    groups,
                    heads // groups,
                    tma_aligned_scales=tma_aligned_scales,
                )
            except AssertionError as e:  # not a finding about the kernel: the inputs do not fit
                raise RuntimeError(f"{loc}: the host code rejected the inputs: {e!r}") from e
    return launches


@contextlib.contextmanager
def _pdl_as_on_hopper() -> Iterator[None]:
    """On a host without CUDA, vLLM's platform says that PDL (programmatic dependent launch)
    is not supported; an SM90 device says it is. v0.24.0's rope host code passes the kernel's
    ``launch_pdl`` constexpr only then (and the launch fails to bind without it), so answer as
    Hopper does while host code runs on the CPU."""
    import torch
    from vllm.platforms import current_platform

    if torch.cuda.is_available() or not hasattr(current_platform, "is_arch_support_pdl"):
        yield
        return
    current_platform.is_arch_support_pdl = lambda: True  # the instance's, over the class's
    try:
        yield
    finally:
        del current_platform.is_arch_support_pdl


def _audit_rows(keys_for_rope: bool) -> list[dict]:
    rows = []
    for a in AUDIT:
        row = {
            "kernel": f"{a.module.removeprefix('vllm.')}:{a.kernel}",
            "token_args": ", ".join(a.token_args) or "-",
            "path": a.path,
            "action": a.action,
        }
        try:
            kernel, loc = find_kernel(a.locations())
            row["kernel"] = f"{loc.module.removeprefix('vllm.')}:{loc.attr}"
            spec = specialised_token_args(kernel, a.token_args)
            row["specialised"] = ", ".join(spec) or "none"
            row["do_not_specialize"] = ", ".join(map(str, kernel.do_not_specialize)) or "-"
        except (LookupError, ValueError) as e:
            row["specialised"] = f"n/a ({e})"
            row["do_not_specialize"] = "n/a"
        rows.append(row)
    if keys_for_rope:
        ts = [WARMUP, *SWEEP]
        kernel, _ = rope_kernel()
        for tma in (False, True):
            keys = specialisation_keys(kernel, rope_launches(ts, tma_aligned_scales=tma))
            rows[0][f"keys_tma={tma}"] = (
                f"{len(set(keys))} variant(s) over T={ts}; "
                f"changing: {changing_args(kernel, keys) or 'none'}"
            )
    return rows


def _gpu_sweep() -> dict:
    import torch

    _, loc = rope_kernel()
    mod = importlib.import_module(loc.module)
    heads, groups = 16, 2
    cache = torch.randn(4096, 64, device="cuda", dtype=torch.float32)

    def run(t: int) -> None:
        o = torch.randn(t, heads, 512, device="cuda", dtype=torch.bfloat16)
        positions = torch.randint(0, 4096, (t,), device="cuda")
        mod.fused_inv_rope_fp8_quant(o, positions, cache, groups, heads // groups)

    rec = sweep(run, sync=torch.cuda.synchronize)
    # CompileRecorder names a kernel module.qualname (Triton's JitFunctionInfo), i.e. loc.
    events = rec.for_kernel(f"{loc.module}.{loc.attr}")
    return {
        "kernel": str(loc),
        "variants": len(events),
        "compiles": [{"T": e.token_count, "ms": round(e.ms, 1)} for e in events],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: print the recompile audit of the DeepSeek-V4 and MoE paths.

    Static columns come from each kernel's JIT metadata (any host; vLLM must import with the
    real Triton: set CUDA_VISIBLE_DEVICES="" on a host without a driver). It audits whichever
    vllm imports first (printed; ``python -P`` keeps a vllm/ in the current directory out).
    ``--keys`` adds the rope kernel's JIT keys over the sweep, computed on the CPU. With CUDA
    present, ``--sweep`` runs the rope kernel over the sweep and reports compiled variants and
    compile ms.

    Returns:
        0, or 1 when a kernel patched by the rope-nospec patch still specialises a
        token-following argument (so that CI can use it as a check).
    """
    p = argparse.ArgumentParser(
        prog="python -m vseries.lab.recompile", description=main.__doc__.split("\n")[0]
    )
    p.add_argument(
        "--keys",
        action="store_true",
        help="CPU: JIT keys of the rope kernel "
        "over the sweep, from its real host code and Triton's binder",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help="CUDA: run the rope kernel over the sweep and count compiled variants",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)

    use_vllm_tree()  # before vLLM is imported: keep the real Triton on a CPU host
    rows = _audit_rows(args.keys)
    vllm = sys.modules.get("vllm")
    result: dict[str, Any] = {"vllm": getattr(vllm, "__file__", None), "audit": rows}
    if args.sweep:
        import torch

        result["sweep"] = _gpu_sweep() if torch.cuda.is_available() else "skipped: no CUDA device"
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"vllm under audit: {result['vllm']}")
        cols = ["kernel", "token_args", "specialised", "do_not_specialize", "action", "path"]
        width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
        print("  ".join(c.ljust(width[c]) for c in cols))
        for r in rows:
            print("  ".join(str(r[c]).ljust(width[c]) for c in cols))
        for r in rows:
            for k in sorted(k for k in r if k.startswith("keys_")):
                print(f"{r['kernel']} {k}: {r[k]}")
        if "sweep" in result:
            print("sweep:", json.dumps(result["sweep"]))
    bad = [r["kernel"] for r in rows if r["action"] == PATCHED and r["specialised"] != "none"]
    if bad:
        print(f"still specialised on a token-following argument: {bad}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
