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

``python -m vseries.recompile`` prints the audit table of the DeepSeek-V4 path and the MoE
path (``AUDIT``); with CUDA present it also sweeps the rope kernel.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

# The sweep of the rope patch's brief: warm up at one token, then token counts that hit every
# specialisation class of the base kernel (1, multiple of 16, other; rounded up to 4 or not).
WARMUP = 1
SWEEP = (2, 3, 5, 16, 17, 31, 33, 128, 1000, 4096, 40000)

# v0.21.0's names (the pin's; the benchmarks import them).
ROPE_MODULE = "vllm.v1.attention.ops.deepseek_v4_ops.fused_inv_rope_fp8_quant"
ROPE_KERNEL = "_fused_inv_rope_fp8_quant_per_head"


@dataclasses.dataclass(frozen=True)
class KernelLocation:
    """Where one release layout of vLLM keeps a Triton kernel.

    Attributes:
        module: dotted module name.
        attr: attribute path of the ``JITFunction`` in that module: a name, or
            ``Class.attribute`` for a kernel held by a class (a staticmethod).
        since: the first release known to use this layout (for messages only).
    """

    module: str
    attr: str
    since: str

    def __str__(self) -> str:
        return f"{self.module}:{self.attr} ({self.since} layout)"


# Module prefixes upstream moved after the pin: (old, new, release that moved them).
MOVES = (
    ("vllm.v1.attention.ops.deepseek_v4_ops.", "vllm.models.deepseek_v4.common.ops.", "v0.22.0"),
)
_DSV4_V22 = MOVES[0][1]

# The rope kernel, oldest layout first. v0.22.0 moved the module (and stopped specialising
# num_tokens); by v0.33.0 the kernel is the staticmethod `kernel` of FusedInvRopeFP8QuantKernel,
# launched through vLLM's VllmTritonJitKernel (and scale_stride_k is unspecialised too). Every
# layout keeps the host function `fused_inv_rope_fp8_quant` in the kernel's module.
ROPE_LOCATIONS = (
    KernelLocation(ROPE_MODULE, ROPE_KERNEL, "v0.21.0"),
    KernelLocation(_DSV4_V22 + "fused_inv_rope_fp8_quant", ROPE_KERNEL, "v0.22.0"),
    KernelLocation(
        _DSV4_V22 + "fused_inv_rope_fp8_quant", "FusedInvRopeFP8QuantKernel.kernel", "v0.33.0"
    ),
)
QUANT_INSERT_KERNEL = "quantize_and_insert_k_kernel"
QUANT_INSERT_LOCATIONS = (
    KernelLocation(MOVES[0][0] + "cache_utils", QUANT_INSERT_KERNEL, "v0.21.0"),
    KernelLocation(_DSV4_V22 + "cache_utils", QUANT_INSERT_KERNEL, "v0.22.0"),
)


@dataclasses.dataclass(frozen=True)
class KernelAudit:
    """One Triton kernel of the audited paths and the integer arguments that follow T.

    Attributes:
        module: dotted module that defines the kernel (vLLM v0.21.0 layout).
        kernel: the ``@triton.jit`` function's name in that module.
        token_args: its non-constexpr integer arguments whose value follows the token count.
        evidence: how the host code derives them from the token count (file:function).
        action: what the rope-nospec patch does about them, or why it leaves them.
        path: where the kernel runs ("decode+prefill", "prefill", "not on the serving path"...).
    """

    module: str
    kernel: str
    token_args: tuple[str, ...]
    evidence: str
    action: str
    path: str

    def locations(self) -> tuple[KernelLocation, ...]:
        """Where the kernel may live in the vLLM under test: the pin's location, then the
        locations of later releases (``MOVES``; ``ROPE_LOCATIONS`` for the rope kernel)."""
        if (self.module, self.kernel) == (ROPE_MODULE, ROPE_KERNEL):
            return ROPE_LOCATIONS
        found = [KernelLocation(self.module, self.kernel, "v0.21.0")]
        for old, new, since in MOVES:
            if self.module.startswith(old):
                found.append(KernelLocation(new + self.module[len(old) :], self.kernel, since))
        return tuple(found)


_DSV4 = "vllm.v1.attention.ops.deepseek_v4_ops."
_MOE = "vllm.model_executor.layers.fused_moe."
_PATCHED = "do_not_specialize (rope-nospec)"
_LEFT_MOE = "left: fused_moe.py belongs to the swap-AB patch"
_LEFT_OTHER = "left: MoE kernel, outside the rope patch's scope"

# Read from the v0.21.0 sources (call sites named in `evidence`); see docs/recompile-audit.md.
AUDIT: tuple[KernelAudit, ...] = (
    KernelAudit(
        _DSV4 + "fused_inv_rope_fp8_quant",
        ROPE_KERNEL,
        ("num_tokens", "scale_stride_group", "scale_stride_k"),
        "num_tokens = o.shape[0]; scale strides = scale_inner * round_up(T, 4) and "
        "round_up(T, 4) (_fused_inv_rope_fp8_quant_kernel_impl). fp8_stride_group = "
        "T * d also follows T, but d is a multiple of 128: its key never changes and "
        "its hint gives 16-byte fp8 stores, so it stays specialised",
        _PATCHED,
        "decode+prefill",
    ),
    KernelAudit(
        _DSV4 + "cache_utils",
        "quantize_and_insert_k_kernel",
        ("num_tokens",),
        "num_tokens = slot_mapping.shape[0] (quantize_and_insert_k_cache)",
        _PATCHED,
        "tests only in v0.21.0 (no caller in vllm/)",
    ),
    KernelAudit(
        _DSV4 + "cache_utils",
        "_dequantize_and_gather_k_kernel",
        (),
        "offset is 0 or N (compressed length); strides from a fixed-size workspace",
        "none needed",
        "prefill",
    ),
    KernelAudit(
        _DSV4 + "cache_utils",
        "_compute_global_topk_indices_and_lens_kernel",
        (),
        "T only sets the grid; strides, topk, block_size are fixed",
        "none needed",
        "decode",
    ),
    KernelAudit(
        _DSV4 + "cache_utils",
        "_combine_topk_swa_indices_kernel",
        (),
        "M = N + window + max_num_batched_tokens, N from max_model_len: fixed",
        "none needed",
        "prefill",
    ),
    KernelAudit(
        _DSV4 + "fused_qk_rmsnorm",
        "_fused_q_kv_rmsnorm_kernel",
        (),
        "T only sets the grid; row strides are fixed",
        "none needed",
        "decode+prefill",
    ),
    KernelAudit(
        _DSV4 + "fused_indexer_q",
        "_fused_indexer_q_rope_quant_kernel",
        (),
        "T only sets the grid; strides are fixed",
        "none needed",
        "decode+prefill",
    ),
    KernelAudit(
        _DSV4 + "fused_indexer_q",
        "_fused_indexer_q_rope_mxfp4_kernel",
        (),
        "T only sets the grid; strides are fixed",
        "none needed",
        "decode+prefill (when CuTe DSL is absent)",
    ),
    KernelAudit(
        _DSV4 + "fused_compress_quant_cache",
        "_fused_kv_compress_norm_rope_insert_sparse_attn",
        (),
        "T only sets the grid; block sizes and strides are fixed",
        "none needed",
        "decode+prefill",
    ),
    KernelAudit(
        _DSV4 + "fused_compress_quant_cache",
        "_fused_kv_compress_norm_rope_insert_indexer_attn",
        (),
        "T only sets the grid; block sizes and strides are fixed",
        "none needed",
        "decode+prefill",
    ),
    KernelAudit(
        _DSV4 + "fused_compress_quant_cache",
        "_fused_kv_compress_norm_rope_insert_indexer_mxfp4_attn",
        (),
        "T only sets the grid; block sizes and strides are fixed",
        "none needed",
        "decode+prefill",
    ),
    # DeepSeek-V4 metadata kernels outside deepseek_v4_ops (reported, not changed).
    KernelAudit(
        "vllm.v1.attention.backends.mla.flashmla_sparse",
        "_build_c128a_topk_metadata_kernel",
        ("num_decode_tokens",),
        "num_decode_tokens of the batch (build_c128a_topk_metadata)",
        "left: outside deepseek_v4_ops (attention metadata builder)",
        "every step",
    ),
    KernelAudit(
        "vllm.v1.attention.backends.mla.sparse_swa",
        "_compute_prefill_metadata_kernel",
        ("num_prefills", "num_decodes"),
        "request counts of the batch; BLOCK_SIZE=next_power_of_2(num_prefills) is a "
        "constexpr and compiles per power of two anyway",
        "left: outside deepseek_v4_ops (attention metadata builder)",
        "steps with prefills",
    ),
    # MoE path.
    KernelAudit(
        _MOE + "fused_moe",
        "fused_moe_kernel",
        ("EM", "num_valid_tokens"),
        "EM = sorted_token_ids.size(0) = T*top_k + E*(BLOCK_SIZE_M-1) (moe_align_"
        "block_size), or min(that, T*top_k*BLOCK_SIZE_M) when T < BLOCK_SIZE_M; "
        "num_valid_tokens = T*top_k (invoke_fused_moe_triton_kernel). vLLM's own "
        "_fused_moe_lora_kernel already puts both in do_not_specialize",
        _LEFT_MOE,
        "decode+prefill",
    ),
    KernelAudit(
        _MOE + "fused_moe",
        "fused_moe_kernel_gptq_awq",
        ("EM", "num_valid_tokens"),
        "as fused_moe_kernel (invoke_fused_moe_wna16_triton_kernel)",
        _LEFT_MOE,
        "decode+prefill (GPTQ/AWQ)",
    ),
    KernelAudit(
        _MOE + "fused_moe",
        "compute_identity_kernel",
        ("num_tokens",),
        "num_tokens = expert_indices.numel()... (zero_experts_compute_triton); "
        "annotated `int`, which Triton still specialises",
        _LEFT_MOE,
        "zero-expert routers only",
    ),
    KernelAudit(
        _MOE + "moe_fused_mul_sum",
        "moe_fused_mul_sum_kernel",
        ("num_tokens",),
        "num_tokens = inputs.shape[0] (moe_fused_mul_sum)",
        _LEFT_OTHER,
        "humming MoE only",
    ),
    KernelAudit(
        _MOE + "utils",
        "_count_expert_num_tokens",
        ("topk_numel",),
        "topk_numel = topk_ids.numel() = T*top_k; BLOCK_SIZE constexpr = "
        "next_power_of_2(min(numel, 1024))",
        _LEFT_OTHER,
        "DeepGEMM MoE",
    ),
    KernelAudit(
        _MOE + "deep_gemm_utils",
        "_fwd_kernel_ep_scatter_2",
        ("total_token_num",),
        "total_token_num = recv_topk.shape[0] (ep_scatter)",
        _LEFT_OTHER,
        "DeepGEMM MoE",
    ),
    KernelAudit(
        _MOE + "deep_gemm_utils",
        "_fwd_kernel_ep_gather",
        ("total_token_num",),
        "total_token_num = output_tensor.shape[0] (ep_gather)",
        _LEFT_OTHER,
        "DeepGEMM MoE",
    ),
    KernelAudit(
        _MOE + "fused_batched_moe",
        "batched_triton_kernel",
        (),
        "max_num_tokens is the fixed per-rank buffer size",
        "none needed",
        "batched (DP/EP) MoE",
    ),
    KernelAudit(
        _MOE + "experts.batched_deep_gemm_moe",
        "_silu_mul_fp8_quant_deep_gemm",
        (),
        "strides of fixed-size (E, T_max, ...) buffers",
        "none needed",
        "batched DeepGEMM MoE",
    ),
)


class NotATritonKernel(LookupError):
    """The attribute exists but is not a Triton JITFunction (vLLM's Triton placeholder)."""


def load_kernel(module: str, name: str) -> Any:
    """Import ``module`` and return its Triton kernel ``name``.

    Args:
        module: dotted module name (imported with importlib: vLLM's deepseek_v4_ops package
            re-exports functions under their module's name, so attribute access on the
            package would return the function, not the module).
        name: attribute path of a ``triton.runtime.jit.JITFunction``: ``kernel`` or
            ``Class.kernel``.

    Returns:
        The JITFunction.

    Raises:
        LookupError: the module does not import or has no such attribute.
        NotATritonKernel: the attribute is not a JITFunction (e.g. vLLM's Triton placeholder
            on a host without a driver: set CUDA_VISIBLE_DEVICES="" before importing vLLM,
            and see ``use_vllm_tree``).
    """
    from triton.runtime.jit import JITFunction

    try:
        obj = importlib.import_module(module)
    except Exception as e:  # an ImportError, or a CUDA-only import on this host
        raise LookupError(f"cannot import {module}: {e}") from e
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise LookupError(f"{module} has no attribute {name}")
    if not isinstance(obj, JITFunction):
        raise NotATritonKernel(
            f"{module}.{name} is {type(obj).__name__}, not a Triton JITFunction (vLLM's Triton "
            'placeholder? set CUDA_VISIBLE_DEVICES="" and see recompile.use_vllm_tree)'
        )
    return obj


def find_kernel(locations: Iterable[KernelLocation]) -> tuple[Any, KernelLocation]:
    """The kernel at the first of ``locations`` that holds one in the vLLM under test.

    Args:
        locations: candidate locations, e.g. ``ROPE_LOCATIONS``.

    Returns:
        (the JITFunction, the location it was found at).

    Raises:
        NotATritonKernel: a location holds the kernel's name but not a Triton kernel (the
            placeholder decides for every location, so the search stops there).
        LookupError: no location holds it; the message names each location and why.
    """
    tried = []
    for loc in locations:
        try:
            return load_kernel(loc.module, loc.attr), loc
        except NotATritonKernel:
            raise
        except LookupError as e:
            tried.append(f"{loc}: {e}")
    raise LookupError("no known location holds the kernel in this vLLM: " + "; ".join(tried))


def rope_kernel() -> tuple[Any, KernelLocation]:
    """The DeepSeek-V4 inverse-RoPE FP8 kernel of the vLLM under test and its location."""
    return find_kernel(ROPE_LOCATIONS)


def use_vllm_tree() -> str | None:
    """Make the vLLM tree that ``import vllm`` loads the only vLLM this process sees.

    Call it before vLLM is imported. A plain checkout put first on PYTHONPATH (the base, or
    plain upstream in the rebase tool) is not the installed vLLM (here: the patched pin,
    installed editable), and the installed one leaks into it in two ways, both fixed here:

    - Metadata. vLLM v0.24.0 and later read ``importlib.metadata.version("vllm")`` to tell a
      CPU build: with "cpu" in it, and no CPU backend in Triton,
      ``vllm/triton_utils/importing.py`` puts its Triton placeholder in place whatever
      ``CUDA_VISIBLE_DEVICES`` says (v0.33.0: through
      ``vllm.platforms.vllm_version_matches_substr``, which also makes the platform CPU). A
      checkout has no metadata of its own, so the installed vLLM answers: "0.21.0+cpu", as it
      was built against a CPU-only torch. The tree gets a metadata entry of its own
      (``vllm-<version>.dist-info`` in a temporary directory put first on ``sys.path``, which
      importlib.metadata searches in order; nothing is importable from it), with the tree's
      version from its ``vllm/_version.py`` or ``PKG-INFO`` when it has one, else "0+unknown".
    - Modules. setuptools' editable finder (on ``sys.meta_path``, after the path finder)
      resolves ``vllm.<name>`` that the tree lacks in the installed tree: ``vllm._C`` and
      ``vllm._moe_C`` (the pin's release kernels) and ``vllm._version`` would be the pin's.
      Meta-path finders that find ``vllm`` outside the tree are removed.

    An installed vLLM (editable or not), or a source release with its egg-info, is left as
    it is.

    Returns:
        The version given to the tree, or None when nothing was done (vllm already imported,
        not importable, or the tree is the installed vLLM).
    """
    if "vllm" in sys.modules:
        return None
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.origin:
        return None
    tree = Path(spec.origin).resolve().parents[1]
    try:
        if _metadata_tree(importlib.metadata.distribution("vllm")) == tree:
            return None
    except importlib.metadata.PackageNotFoundError:
        pass
    for finder in list(sys.meta_path):
        if finder is importlib.machinery.PathFinder or not hasattr(finder, "find_spec"):
            continue
        found = finder.find_spec("vllm", None)
        if found is not None and found.origin and tree not in Path(found.origin).parents:
            sys.meta_path.remove(finder)
    version = _tree_version(tree)
    where = Path(tempfile.mkdtemp(prefix="vseries-vllm-metadata-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    info = where / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    # Names the tree, so that a second call (another contract module) sees it as the tree's.
    url = {"url": tree.as_uri(), "dir_info": {"editable": True}}
    (info / "direct_url.json").write_text(json.dumps(url))
    sys.path.insert(0, str(where))
    importlib.invalidate_caches()
    return version


def _metadata_tree(dist: importlib.metadata.Distribution) -> Path:
    """The directory whose ``vllm/`` package a distribution's metadata describes."""
    url = json.loads(dist.read_text("direct_url.json") or "{}")
    if url.get("dir_info", {}).get("editable") and url.get("url", "").startswith("file:"):
        return Path(unquote(urlparse(url["url"]).path)).resolve()
    return Path(dist.locate_file("")).resolve()


def _tree_version(tree: Path) -> str:
    """A vLLM tree's version: from its vllm/_version.py (setuptools-scm's, in a source
    release) or PKG-INFO; "0+unknown" for a checkout that has neither (the rebase tool's
    plain-upstream worktree: the sdist-only files are removed)."""
    for path, pattern in (
        (tree / "vllm" / "_version.py", r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)"),
        (tree / "PKG-INFO", r"^Version:\s*(\S+)"),
    ):
        m = re.search(pattern, path.read_text(errors="replace"), re.M) if path.is_file() else None
        if m:
            return m.group(1)
    return "0+unknown"


def specialised_token_args(kernel: Any, names: Iterable[str]) -> list[str]:
    """Static check: which of ``names`` the kernel's own JIT metadata still specialises.

    An argument is specialised when it is a ``tl.constexpr`` (every value compiles) or when it
    is not in ``do_not_specialize``. ``do_not_specialize_on_alignment`` alone does not count:
    Triton then still makes the value 1 a constant.

    Args:
        kernel: a ``triton.runtime.jit.JITFunction``.
        names: argument names whose value follows the token count.

    Returns:
        The specialised names, in the order given; empty when none is.

    Raises:
        ValueError: a name is not a parameter of the kernel (a renamed argument must fail the
            check loudly, not pass it).
    """
    params = {p.name: p for p in kernel.params}
    unknown = [n for n in names if n not in params]
    if unknown:
        raise ValueError(
            f"{kernel.fn.__qualname__} has no parameter(s) {unknown}; parameters are {list(params)}"
        )
    return [n for n in names if params[n].is_constexpr or not params[n].do_not_specialize]


@dataclasses.dataclass
class Launch:
    """One recorded kernel launch: ``kernel[grid](*args, **kwargs)``."""

    grid: Any
    args: tuple
    kwargs: dict


@contextlib.contextmanager
def capture_launches(kernel: Any) -> Iterator[list[Launch]]:
    """Record the launches of ``kernel`` made by the host code inside the block.

    ``kernel[grid](...)`` calls the JITFunction's ``run``; the kernel object gets a ``run`` of
    its own for the duration of the block, so whatever host code launches it (a module
    function, or vLLM's VllmTritonJitKernel) hands its real grid, arguments and options to the
    recorder. Nothing is compiled or launched; host code may run on CPU tensors.

    Args:
        kernel: the ``JITFunction`` (e.g. from ``find_kernel``).

    Yields:
        The list that receives one ``Launch`` per launch.
    """
    launches: list[Launch] = []

    def record(*args, grid, warmup, **kwargs):
        launches.append(Launch(grid, args, kwargs))

    kernel.run = record
    try:
        yield launches
    finally:
        del kernel.run


@contextlib.contextmanager
def replace_kernel(loc: KernelLocation, new: Any) -> Iterator[None]:
    """Within the block, host code finds ``new`` at ``loc`` instead of the kernel there.

    Args:
        loc: where the kernel lives (from ``find_kernel``).
        new: a JITFunction, e.g. ``triton.jit(kernel.fn)``, the fully specialised variant.
    """
    holder = importlib.import_module(loc.module)
    *path, name = loc.attr.split(".")
    for part in path:
        holder = getattr(holder, part)
    original = holder.__dict__[name]  # as stored: a staticmethod stays one
    setattr(holder, name, staticmethod(new) if isinstance(original, staticmethod) else new)
    try:
        yield
    finally:
        setattr(holder, name, original)


def _backend(target=None):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    return make_backend(target or GPUTarget("cuda", 90, 32))


def specialisation_keys(kernel: Any, launches: Sequence[Launch], target=None) -> list[tuple]:
    """The JIT cache key each launch selects, computed with Triton's own binder (no GPU).

    Args:
        kernel: the JITFunction that the launches were recorded for (or a re-jitted copy of
            its ``fn`` with other ``do_not_specialize``).
        launches: from ``capture_launches``; tensors may live on the CPU (only dtype and
            ``data_ptr() % 16`` matter to the key).
        target: a ``triton.backends.compiler.GPUTarget``; default sm_90 (Hopper).

    Returns:
        One hashable key per launch: (per-argument specialisation, sorted launch options).
        Equal keys mean one compiled variant serves both launches.
    """
    from triton.runtime.jit import create_function_from_signature

    binder = create_function_from_signature(kernel.signature, kernel.params, _backend(target))
    keys = []
    for launch in launches:
        _, specialization, options = binder(*launch.args, **launch.kwargs)
        keys.append((tuple(specialization), tuple(sorted(options.items()))))
    return keys


def changing_args(kernel: Any, keys: Sequence[tuple]) -> list[str]:
    """Names of the arguments whose specialisation differs between the given keys.

    Args:
        kernel: the JITFunction the keys were computed for.
        keys: from ``specialisation_keys``.

    Returns:
        Parameter names (constexprs included) whose entry is not the same in every key.
    """
    names = [p.name for p in kernel.params]
    return [n for i, n in enumerate(names) if len({k[0][i] for k in keys}) > 1]


def ptx(kernel: Any, launch: Launch, target=None) -> str:
    """Compile one recorded launch for sm_90 (or ``target``) without a GPU; return its PTX.

    Args:
        kernel: the JITFunction (its ``do_not_specialize`` decides the specialisation).
        launch: from ``capture_launches``.
        target: a ``GPUTarget``; default sm_90.

    Returns:
        The PTX text (a few seconds of CPU per call).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import create_function_from_signature

    target = target or GPUTarget("cuda", 90, 32)
    backend = _backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = dict(launch.kwargs)
    bound, specialization, options = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(
        backend, kwargs, bound, specialization, options
    )
    src = ASTSource(kernel, signature, constexprs, attrs)
    return triton.compile(src, target=target, options=options.__dict__).asm["ptx"]


def ptx_code(text: str) -> str:
    """The instructions of a PTX text: debug sections, ``.loc``/``.file`` lines and comments
    removed, so that two compiles of the same code from different source paths compare equal."""
    text = text.split("\t.section\t.debug")[0]
    keep = [
        ln
        for ln in text.splitlines()
        if not ln.strip().startswith((".loc", ".file", "//")) and ln.strip()
    ]
    return "\n".join(keep)


def global_accesses(text: str) -> dict[str, int]:
    """Count of each global load/store instruction form in a PTX text, e.g.
    ``{"st.global.v4.b32": 1, "st.global.b8": 16}``: wider forms mean vectorised access."""
    return dict(Counter(re.findall(r"\b((?:ld|st)\.global[\w.]*)", text)))


def jit_variants(kernel: Any) -> int:
    """Number of compiled variants in a JITFunction's in-memory cache, over all devices
    (``JITFunction.device_caches``: device -> (kernel_cache, key_cache, target, backend,
    binder) in Triton 3.6)."""
    return sum(len(entry[0]) for entry in kernel.device_caches.values())


@dataclasses.dataclass
class CompileEvent:
    """One Triton JIT compile seen by ``CompileRecorder``.

    Attributes:
        kernel: the kernel's qualified name (``module.function``).
        token_count: the token count the recorder was told it was running (None if unset).
        ms: wall milliseconds from Triton's jit_cache_hook to its jit_post_compile_hook (a
            compile, or a load from Triton's on-disk cache; point TRITON_CACHE_DIR at an
            empty directory to measure real compiles).
    """

    kernel: str
    token_count: int | None
    ms: float


class CompileRecorder:
    """Context manager that records every Triton JIT compile in this process.

    It chains onto ``triton.knobs.runtime.jit_cache_hook`` (called before a compile) and
    ``jit_post_compile_hook`` (after it), keeps any hooks already installed, and restores them
    on exit. Set ``token_count`` before each call to attribute compiles to a token count.
    Compiles only happen where Triton has a driver (a CUDA host).
    """

    def __init__(self):
        self.events: list[CompileEvent] = []
        self.token_count: int | None = None
        self._started: dict[tuple[str, str], float] = {}

    def __enter__(self) -> CompileRecorder:
        import triton

        rt = triton.knobs.runtime
        self._saved = (rt.jit_cache_hook, rt.jit_post_compile_hook)
        before, after = self._saved

        # Keyword-only, as Triton calls them; **kw keeps them working when Triton adds
        # arguments (vLLM's own jit_monitor hook does the same).
        def on_cache_miss(**kw):
            self._started[self._id(kw)] = time.perf_counter()
            # A truthy return would tell Triton to skip the compile: pass on the older hook's.
            return before(**kw) if before else None

        def on_compiled(**kw):
            t0 = self._started.pop(self._id(kw), None)
            ms = (time.perf_counter() - t0) * 1e3 if t0 is not None else float("nan")
            self.events.append(CompileEvent(self._name(kw.get("fn")), self.token_count, ms))
            return after(**kw) if after else None

        rt.jit_cache_hook, rt.jit_post_compile_hook = on_cache_miss, on_compiled
        return self

    def __exit__(self, *exc) -> None:
        import triton

        rt = triton.knobs.runtime
        rt.jit_cache_hook, rt.jit_post_compile_hook = self._saved

    @staticmethod
    def _name(fn) -> str:
        return f"{getattr(fn, 'module', '?')}.{getattr(fn, 'name', '?')}"

    @classmethod
    def _id(cls, kw: dict) -> tuple[str, str]:
        return cls._name(kw.get("fn")), str(kw.get("key"))

    def variants(self) -> dict[str, int]:
        """Compiles per kernel (qualified name) recorded so far."""
        return dict(Counter(e.kernel for e in self.events))

    def for_kernel(self, name: str) -> list[CompileEvent]:
        """The events of kernels whose qualified name ends with ``name``."""
        return [e for e in self.events if e.kernel.endswith(name)]


def sweep(
    fn: Callable[[int], object],
    token_counts: Iterable[int] = SWEEP,
    warmup: int | None = WARMUP,
    sync: Callable[[], object] | None = None,
) -> CompileRecorder:
    """Run ``fn(T)`` for a warm-up token count and then each token count; record compiles.

    Args:
        fn: called with the token count; it should launch the kernels under audit.
        token_counts: the sweep (default ``SWEEP``).
        warmup: a first token count, run before the sweep (None: no warm-up).
        sync: called after each ``fn`` (e.g. ``torch.cuda.synchronize``) so that a
            failing launch raises at its own token count.

    Returns:
        The recorder: ``.events`` (kernel, token count, ms) and ``.variants()``.
    """
    with CompileRecorder() as rec:
        for t in ([warmup] if warmup is not None else []) + list(token_counts):
            rec.token_count = t
            fn(t)
            if sync is not None:
                sync()
    return rec


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
        prog="python -m vseries.recompile", description=main.__doc__.split("\n")[0]
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
    bad = [r["kernel"] for r in rows if r["action"] == _PATCHED and r["specialised"] != "none"]
    if bad:
        print(f"still specialised on a token-following argument: {bad}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
