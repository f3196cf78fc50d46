"""Triton's JIT, asked directly: load a kernel, record its launches, compute the JIT cache key
each launch selects, compile one launch to PTX for sm_90 (no GPU needed for any of these),
and record the compiles of a real run (CUDA hosts).

Triton's JIT specialises every integer argument that is not a ``tl.constexpr`` and not named
in ``do_not_specialize``: the value 1 becomes a constant, and a multiple of 16 gets a
divisibility hint (``BaseBackend.get_int_specialization`` in Triton 3.6). Each combination is
a separate variant in the kernel's JIT cache (``JITFunction.device_caches``) and costs a
compile when it is first met. Triton 3.6 internals used: ``create_function_from_signature``,
``JITFunction._pack_args``, ``knobs.runtime.jit_cache_hook``/``jit_post_compile_hook``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from vseries.lab.kernels import SWEEP, WARMUP, KernelLocation


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


def sm90_key_deriver(kernel: Any) -> Callable[[dict], set[tuple]]:
    """For vLLM's JIT warm-up (v0.34.0: ``jit_warmup_triton_helper._triton_key_deriver``) on
    a host without a GPU: the key of a warm-up launch from Triton's own sm_90 binder, as
    ``specialisation_keys`` computes it, not from the driver's current device. With it, the
    warm-up expands and deduplicates a kernel's compile keys as on an H100/H200, and its
    compile step reaches ``JITFunction.run`` (``capture_launches``).

    Raises:
        TypeError: ``kernel`` is not a plain JITFunction (an autotuned or heuristics wrapper
            needs vLLM's own deriver).
    """
    from triton.runtime.jit import JITFunction, create_function_from_signature

    if not isinstance(kernel, JITFunction):
        raise TypeError(f"sm90_key_deriver takes a JITFunction, not {type(kernel).__name__}")
    binder = create_function_from_signature(kernel.signature, kernel.params, _backend())

    def derive(kwargs: dict) -> set[tuple]:
        _, specialization, options = binder(**kwargs)
        return {(id(kernel), tuple(specialization), tuple(sorted(options.items())))}

    return derive


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
