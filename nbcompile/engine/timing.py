"""``nbcompile.bench``: speedups measured right.

- Steady-state time per call, eager against each configuration. On CPU with
  ``torch.utils.benchmark`` (blocked autorange: median and IQR over blocks);
  on CUDA with CUDA events around each call, after warm-up, with the L2 cache
  flushed before every call, plus the end-to-end wall time per call (Dynamo's
  guards and the launches included).
- Compile time apart, with a cold cache (Inductor's caches disabled) and a
  warm one (a second compile of the same graphs).
- The check first: a configuration whose result differs from eager is not
  timed; its row says why.
- Achieved memory bandwidth (bytes in and out per call over the time) as a
  fraction of the device's peak, measured by a copy in the same run; shown for
  memory-bound work (few FLOPs per byte).
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..capture.hub import HUB, Recording
from ..core import dynconfig, torch_compat
from ..core.errors import NbcompileError
from ..core.options import MODES, CompileOptions
from ..model.plots import bench_figure
from ..model.report import Report
from . import check as check_ops
from .compiler import applied, compiled_copy, replay_for, toggle_engine
from .replay import Replay
from .workload import Workload

#: Fewest timed samples a median and an IQR are given from.
MIN_SAMPLES = 5
#: IQR over median above which a timing is re-measured once, and then called noisy (a spread this
#: wide makes any ratio built on the median indefensible; 10-30% is common for small calls on a busy CPU).
NOISE_SPREAD = 0.5
#: Eager timed again after the plans: outside this ratio of its first time, every row is noisy.
EAGER_DRIFT = (0.67, 1.5)
#: FLOPs per byte below which a call counts as memory-bound (elementwise work, norms, softmax).
MEMORY_BOUND_FLOPS_PER_BYTE = 4.0
L2_FLUSH_BYTES = 256 * 2**20
PRESETS = {"default": None, **{m: m for m in MODES if m != "default"}}


@dataclass
class BenchConfig:
    """One way to compile: a name, the torch.compile options, and toggles as ``inspect`` takes them."""

    name: str
    backend: str = "inductor"
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    toggles: dict[Any, str] = field(default_factory=dict)

    def options(self) -> CompileOptions:
        return CompileOptions(self.backend, self.mode, self.fullgraph, self.dynamic).validate()


@dataclass
class BenchRow:
    config: str
    median_s: float | None
    iqr_s: float | None
    speedup: float | None
    compile_s: float | None
    compile_warm_s: float | None = None
    end_to_end_s: float | None = None
    check: str = ""
    timed: bool = True
    gbps: float | None = None
    peak_fraction: float | None = None
    #: Why the timing cannot be trusted (spread too wide after a re-measure, threads changed); "" if fine.
    noisy: str = ""


@dataclass
class BenchResult:
    rows: list[BenchRow]
    device: str
    timer: str
    peak_gbps: float | None
    bytes_per_call: int
    flops_per_call: int

    @property
    def memory_bound(self) -> bool:
        return self.bytes_per_call > 0 and self.flops_per_call / self.bytes_per_call < MEMORY_BOUND_FLOPS_PER_BYTE

    def row(self, config: str) -> BenchRow:
        for row in self.rows:
            if row.config == config:
                return row
        raise KeyError(f"no row {config!r}; rows: {', '.join(r.config for r in self.rows)}")

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "memory_bound": self.memory_bound}

    def figure(self) -> Any:

        return bench_figure(self)

    def __str__(self) -> str:
        lines = [f"bench on {self.device} ({self.timer})"]
        for r in self.rows:
            if not r.timed:
                lines.append(f"  {r.config:<22} not timed: {r.check}")
                continue
            speed = f"{r.speedup:.2f}x" if r.speedup is not None else "-"
            if r.noisy:
                speed = f"(noisy: {r.noisy})"
            comp = ""
            if r.compile_s is not None:
                comp = f", compile {r.compile_s:.2f} s cold"
                if r.compile_warm_s is not None:
                    comp += f" / {r.compile_warm_s:.2f} s warm"
            assert r.median_s is not None and r.iqr_s is not None  # a timed row has its times
            bw = ""
            if r.peak_fraction is not None and self.memory_bound:
                bw = f", {r.peak_fraction * 100:.0f}% of peak bandwidth"
            lines.append(f"  {r.config:<22} {r.median_s * 1e6:10.1f} us ± {r.iqr_s * 1e6:.1f} (IQR)  {speed}{comp}{bw}")
        return "\n".join(lines)

    def html_bars(self) -> str:
        """Speedups as HTML bars, no script: what an exported notebook shows with no network."""
        import html

        timed = [r for r in self.rows if r.timed and r.speedup is not None and not (r.noisy and r.config != "eager")]
        top = max([r.speedup for r in timed if r.speedup is not None] + [1.0])
        lines = []
        for r in self.rows:
            label = html.escape(r.config)
            if not r.timed:
                lines.append(f"<tr><td>{label}</td><td colspan=2>not timed: {html.escape(r.check)}</td></tr>")
            elif r.noisy and r.config != "eager":
                lines.append(f"<tr><td>{label}</td><td colspan=2 style='color:#b00'>noisy, not shown: "
                             f"{html.escape(r.noisy)}</td></tr>")
            elif r.speedup is not None:
                assert r.median_s is not None  # a timed row has its times
                width = max(1, int(300 * r.speedup / top))
                lines.append(f"<tr><td>{label}</td><td><div style='width:{width}px;height:12px;background:#4C78A8'>"
                             f"</div></td><td>{r.speedup:.2f}x ({r.median_s * 1e6:.1f} us)</td></tr>")
        return (f"<div class='nbcompile-bench'><b>speedup over eager</b> <small>{html.escape(self.device)}, "
                f"{html.escape(self.timer)}</small><table>{''.join(lines)}</table></div>")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"application/vnd.nbcompile.bench+json": self.to_json()}
        try:
            figure = self.figure()
            bundle.update(figure._repr_mimebundle_(include, exclude))
            # Frontends without a plotly renderer (nbconvert's HTML, classic viewers) take this one: the
            # bars in plain HTML first (they show offline), then the interactive figure (plotly.js from
            # its CDN; `python -m nbcompile run --html` puts plotly.js inline instead).
            bundle["text/html"] = self.html_bars() + figure.to_html(include_plotlyjs="cdn", full_html=False)
        except Exception:  # a plot must never hide the figures
            bundle["text/html"] = self.html_bars()
        bundle["text/plain"] = str(self)
        return bundle


# --- timing -------------------------------------------------------------------------------

def _device_of(values: Iterable[Any]) -> torch.device:
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_cuda:
            return value.device
    return torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(call: Callable[[], Any], device: torch.device, min_run_time: float = 0.5) -> tuple[float, float, float]:
    """(median, IQR, end-to-end) seconds per call of ``call``."""
    if device.type != "cuda":
        from torch.utils.benchmark import Timer

        for _ in range(3):  # warm-up: a first call that still compiles is not steady state
            call()
        # torch.utils.benchmark times with one thread unless told otherwise; the user's code runs with all.
        m = Timer(stmt="call()", globals={"call": call}, num_threads=torch.get_num_threads()).blocked_autorange(
            min_run_time=min_run_time)
        times: list[float] = [t for t in m.times]
        while len(times) < MIN_SAMPLES:  # a slow call fills min_run_time in one block: no spread to judge by
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        if len(times) == len(m.times):
            return m.median, m.iqr, m.median
        q = statistics.quantiles(times, n=4)
        return statistics.median(times), q[2] - q[0], statistics.median(times)
    for _ in range(3):
        call()
    _sync(device)
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    times = []
    deadline = time.perf_counter() + min_run_time
    while len(times) < 10 or (time.perf_counter() < deadline and len(times) < 1000):
        flush.zero_()
        # torch leaves torch.cuda.Event unannotated
        begin = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        begin.record()
        call()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) / 1e3)
    q = statistics.quantiles(times, n=4)
    n = max(10, min(1000, int(min_run_time / max(statistics.median(times), 1e-6))))
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    _sync(device)
    return statistics.median(times), q[2] - q[0], (time.perf_counter() - t0) / n


def steady_time(call: Callable[[], Any], device: torch.device, min_run_time: float,
                timer: Callable[..., tuple[float, float, float]] | None = None) -> tuple[float, float, float, str]:
    """(median, IQR, end-to-end, noisy): ``time_call`` (or ``timer``), measured again for longer when
    its spread (IQR over median) is wide; ``noisy`` says why the figure is not to be trusted, or is empty."""
    timer = timer or time_call
    threads = torch.get_num_threads()
    timing = timer(call, device, min_run_time)
    if timing[1] > NOISE_SPREAD * timing[0]:
        again = timer(call, device, 2 * min_run_time)
        timing = min(timing, again, key=lambda t: t[1] / t[0] if t[0] else float("inf"))
    noisy = ""
    if torch.get_num_threads() != threads:
        noisy = f"the thread count changed from {threads} to {torch.get_num_threads()} while timing"
    elif timing[1] > NOISE_SPREAD * timing[0]:
        noisy = (f"IQR {timing[1] / timing[0]:.0%} of the median after a second, longer measurement "
                 "(the machine is busy, or the call is not in a steady state)")
    return timing[0], timing[1], timing[2], noisy


def peak_bandwidth(device: torch.device, nbytes: int = 128 * 2**20) -> float:
    """Bytes per second of a device copy (read + write), measured now."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    median, _, _ = time_call(lambda: dst.copy_(src), device, min_run_time=0.3)
    return 2 * nbytes / median


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, torch.nn.Module):
        return sum(_tensor_bytes(t) for t in value.state_dict().values())
    return 0


def _flops(call: Callable[[], Any]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        call()
    return int(counter.get_total_flops())


@contextlib.contextmanager
def _cold_caches() -> Any:
    import warnings

    with warnings.catch_warnings(), torch_compat.inductor_caches_disabled():
        warnings.simplefilter("ignore")  # "dynamo_pgo force disabled": that is the point
        yield


def _first_call(call: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    _sync(device)
    start = time.perf_counter()
    out = call()
    _sync(device)
    return time.perf_counter() - start, out


# --- the benchmark -------------------------------------------------------------------------

def _configs(configs: None | Iterable[Any], default: BenchConfig | None = None) -> list[BenchConfig]:
    if configs is None:
        return [default or BenchConfig("default")]
    if isinstance(configs, (str, dict, BenchConfig)):
        configs = [configs]
    out = []
    for c in configs:
        if isinstance(c, BenchConfig):
            out.append(c)
        elif isinstance(c, str):
            if c not in PRESETS:
                raise NbcompileError(f"unknown config {c!r}; valid names: {', '.join(PRESETS)}, or a dict of options")
            out.append(BenchConfig(c, mode=PRESETS[c]))
        elif isinstance(c, dict):
            c = dict(c)
            valid = [f.name for f in dataclasses.fields(BenchConfig)]
            unknown = sorted(set(c) - set(valid))
            if unknown:
                raise NbcompileError(f"unknown config key {unknown[0]!r}; valid keys: {', '.join(valid)}")
            out.append(BenchConfig(c.pop("name", c.get("mode") or c.get("backend") or "config"), **c))
        else:
            raise NbcompileError(f"a config is a preset name, a dict or a BenchConfig, not {type(c).__name__}")
    for c in out:
        c.options()
    return out


def eager_row(timing: tuple[float, float, float] | tuple[float, float, float, str], nbytes: int,
              peak: float) -> BenchRow:
    """The reference row: eager's (median, IQR, end-to-end[, noisy]) time per call."""
    median, iqr, e2e = timing[:3]
    noisy = str(timing[3]) if len(timing) > 3 else ""
    return BenchRow("eager", median, iqr, 1.0, None, None, e2e, "reference", True,
                    nbytes / median / 1e9 if nbytes else None, nbytes / median / peak if nbytes else None, noisy)


def result(rows: list[BenchRow], device: torch.device, peak: float, nbytes: int, flops: int) -> BenchResult:
    timer = "CUDA events, L2 flushed per call" if device.type == "cuda" else "torch.utils.benchmark"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return BenchResult(rows, name, timer, peak / 1e9, nbytes, flops)


def measure(
    name: str,
    first_call: Callable[[], tuple[float, float, Any]],
    steady: Callable[[], Any],
    expected: Any,
    eager_median: float | None,
    device: torch.device,
    min_run_time: float,
    nbytes: int,
    peak: float | None,
    eager_noisy: str = "",
) -> BenchRow:
    """One row: compile (cold, warm), check against eager, then time the steady state (re-measured,
    or marked noisy, when its spread is wide or eager's was)."""
    cold, warm, out = first_call()
    comparison = check_ops.compare(out, expected) if expected is not _STATEFUL else check_ops.Comparison()
    if comparison.problems:
        return BenchRow(name, None, None, None, None, None, None,
                        "differs from eager, not timed: " + "; ".join(comparison.problems[:2]), timed=False)
    median, iqr, e2e, noisy = steady_time(steady, device, min_run_time)
    if not noisy and eager_noisy:
        noisy = f"the eager reference is noisy ({eager_noisy})"
    gbps = nbytes / median / 1e9 if nbytes else None
    return BenchRow(
        name, median, iqr, (eager_median / median) if eager_median else None,
        max(cold - median, 0.0), max(warm - median, 0.0), e2e,
        "not compared: each run changes the state it runs on (a training step), so outputs differ by design"
        if expected is _STATEFUL else
        f"matches eager (max abs diff {comparison.max_abs_diff:.3g})"
        if comparison.max_abs_diff is not None else "matches eager",
        True, gbps, (gbps * 1e9 / peak) if gbps and peak else None, noisy,
    )


#: Stands for the expected output of a run that changes its own state (nothing to compare with).
_STATEFUL = object()

#: One configuration to time: its row name and a context that sets it up and yields
#: (first_call, steady): first_call() -> (cold compile s, warm compile s, output); steady() runs it once.
Plan = tuple[str, Callable[[], Any]]


def run_plans(eager: Callable[[], Any], plans: list[Plan], device: torch.device, min_run_time: float,
              nbytes: Callable[[Any], int], stateful: Callable[[], bool] = lambda: False) -> BenchResult:
    """The one bench path (``nbcompile.bench``, ``Session.bench``): eager first, then each plan.

    ``stateful()`` says whether the first eager run changed the state it runs on (a training
    step): then later runs' outputs differ by design and are not compared with the first.
    The random-number state is given back as it was: timing draws many times.
    """
    rng = check_ops.RngState()
    try:
        peak = peak_bandwidth(device)
        with torch_compat.force_eager():  # once, outside the timed call
            expected = eager()
            if stateful():
                expected = _STATEFUL
            flops = _flops(eager)
            timing = steady_time(eager, device, min_run_time)
        size = nbytes(expected)
        rows = [eager_row(timing, size, peak)]
        for name, setup in plans:
            with setup() as (first_call, steady):
                rows.append(measure(name, first_call, steady, expected, timing[0], device, min_run_time, size, peak,
                                    eager_noisy=timing[3]))
        with torch_compat.force_eager():  # eager once more: did the machine change under the bench?
            after = time_call(eager, device, min_run_time / 2)[0]
        drift = after / timing[0] if timing[0] else 1.0
        if not EAGER_DRIFT[0] <= drift <= EAGER_DRIFT[1]:
            why = (f"eager's own time moved from {timing[0] * 1e6:.1f} to {after * 1e6:.1f} us during the bench "
                   "(other work on the machine, or thread pools fighting)")
            for row in rows:
                row.noisy = f"{row.noisy}; {why}" if row.noisy else why
        return result(rows, device, peak, size, flops)
    finally:
        rng.restore()


def bench(fn: Callable[..., Any], *args: Any, configs: None | Iterable[Any] = None,
          min_run_time: float = 0.5, **kwargs: Any) -> BenchResult:
    """Time ``fn(*args, **kwargs)`` eager and compiled under each config (default: Inductor, default mode).

    The calls run on copies of what ``fn`` reaches (its arguments, its module, the
    globals it reads), so timing a training step does not train the user's model.
    """
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # a print in the timed code would flood the output
        return _bench(fn, args, kwargs, configs, min_run_time)


def _bench(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
           configs: None | Iterable[Any], min_run_time: float) -> BenchResult:

    if not callable(fn):
        raise NbcompileError(f"bench needs a callable, got {type(fn).__name__}")
    plans = _configs(configs)
    engines = [toggle_engine(fn, plan.toggles) for plan in plans]
    device = _device_of([*args, *kwargs.values()])
    replay = replay_for(fn, args, kwargs)
    if replay.refused is not None:
        raise NbcompileError(f"not timed: {replay.refusal}")
    with replay.swapped() as (target, c_args, c_kwargs):

        def setup(plan: BenchConfig, engine: Any) -> Any:
            @contextlib.contextmanager
            def context() -> Any:
                def fresh() -> Callable[..., Any]:
                    compiled: Callable[..., Any] = compiled_copy(target, plan.options())
                    return compiled

                with applied(*engine):
                    steady_fn = fresh()

                    def first_call() -> tuple[float, float, Any]:
                        _first_call(lambda: fresh()(*c_args, **c_kwargs), device)  # fills the caches
                        with _cold_caches():
                            cold, _ = _first_call(lambda: fresh()(*c_args, **c_kwargs), device)
                        warm, out = _first_call(lambda: steady_fn(*c_args, **c_kwargs), device)
                        return cold, warm, out

                    yield first_call, lambda: steady_fn(*c_args, **c_kwargs)
            return context

        return run_plans(lambda: target(*c_args, **c_kwargs),
                         [(p.name, setup(p, e)) for p, e in zip(plans, engines, strict=True)],
                         device, min_run_time,
                         lambda out: _tensor_bytes(c_args) + _tensor_bytes(c_kwargs) + _tensor_bytes(out),
                         stateful=replay.touched)


@contextlib.contextmanager
def _forgetting(code_state: dict[Any, Any], recording: Any) -> Iterator[None]:
    """Dynamo's automatic-dynamic memory of what the bench compiled, given back afterwards."""
    try:
        yield
    finally:
        torch_compat.restore_code_state(code_state, recording.codes)


def bench_session(workload: Workload, code: Any, replay: Replay, min_run_time: float) -> BenchResult:
    """``Session.bench``: the session's toggles, and (if any is set) all at compile, each on fresh
    compiled copies of the entries (their own caches) and on the copies ``replay`` holds of the state
    the expression reaches. The session's compiled code, its report and the user's objects stay as
    they were; the plans' toggles go through the toggle engine, on a scratch namespace."""
    saved = workload.toggles
    configs: list[tuple[str, dict[str, str], dict[str, Any]]] = [("session", saved, {})]
    if any(mode != "compile" for mode in saved.values()):
        configs.append(("all toggles compile", {}, {}))
    return _bench_configs(workload, code, replay, configs, min_run_time)


def bench_configs(workload: Workload, configs: list[tuple[str, dict[str, str], dict[str, Any]]],
                  min_run_time: float = 0.5, also_track: tuple[str, ...] = ()) -> BenchResult:
    """The session's ``--run`` expression timed eager and under each named configuration (toggles, and
    compile options such as ``dynamic``), side by side in one run, as ``Session.bench`` times it."""
    code = workload.run_code
    if code is None:
        raise NbcompileError("nothing to time: the workload has no --run expression")
    replay = workload.replay(code)
    if replay.refused is not None:
        raise ValueError(f"not timed: {replay.refusal}")
    return _bench_configs(workload, code, replay, configs, min_run_time, also_track)


def _bench_configs(workload: Workload, code: Any, replay: Replay,
                   configs: list[tuple[str, dict[str, str], dict[str, Any]]], min_run_time: float,
                   also_track: tuple[str, ...] = ()) -> BenchResult:

    device = _device_of(v for v in replay.copies.values() if isinstance(v, torch.Tensor))
    run = lambda: workload.evaluate(code)  # noqa: E731

    def plan(modes: dict[str, str], overrides: dict[str, Any]) -> Callable[[], Any]:
        options = dataclasses.replace(workload.options.compile_options(),
                                      **{k: v for k, v in overrides.items() if not k.startswith("_")})
        if overrides.get("_config"):  # a search's config values, over the session's own
            options.dynamo_config = {**options.dynamo_config, **overrides["_config"]}

        def fresh_compile(name: str, obj: Any) -> Any:
            if name not in workload.entries:
                return obj
            return compiled_copy(replay.counterpart(torch_compat.unwrap_compiled(obj)), options)  # a module: its copy

        @contextlib.contextmanager
        def context() -> Any:
            with workload.scratch(modes, fresh_compile, also_track, overrides.get("_replace")) as (engine, bind):
                def first_call() -> tuple[float, float, Any]:
                    bind()
                    _first_call(run, device)  # fills Inductor's caches
                    engine.rebind()
                    bind()
                    with _cold_caches():
                        cold, _ = _first_call(run, device)
                    engine.rebind()
                    bind()
                    warm, out = _first_call(run, device)
                    return cold, warm, out

                yield first_call, run
        return context

    plans = [(name, plan(modes, overrides)) for name, modes, overrides in configs]
    tensors = [v for v in replay.copies.values() if isinstance(v, torch.Tensor)]
    scratch_recording = Recording(Report(title="bench"))  # the bench's compiles are not the session's
    code_state = torch_compat.code_state_snapshot()
    with replay.swapped(), HUB.active(scratch_recording), _forgetting(code_state, scratch_recording), \
            check_ops.quiet():  # a print or a log line in the timed code would run hundreds of times
        return run_plans(run, plans, device, min_run_time,
                         lambda out: _tensor_bytes(out) + sum(_tensor_bytes(v) for v in tensors),
                         stateful=replay.touched)


# --- the fix search's timer ----------------------------------------------------------------------

#: Most samples one configuration is timed for in the search (each sample a few calls).
SEARCH_MAX_SAMPLES = 200
#: A sample is this many seconds of calls at least (calls grouped so that the timer's cost is small).
SEARCH_SAMPLE_S = 1e-3


@dataclass
class SearchTime:
    """One configuration timed for the fix search: the median, IQR and range of its samples, or why
    it was not timed."""

    config: str
    median_s: float | None = None
    iqr_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    samples: int = 0
    #: Why it was not timed ("the budget ran out", "the run changes a module attribute..."), or "".
    why: str = ""
    #: Not timed because the search's budget ran out (not because of the configuration).
    out_of_budget: bool = False

    @property
    def timed(self) -> bool:
        return self.median_s is not None


def time_search(workload: Workload, configs: list[tuple[str, dict[str, str], dict[str, Any]]], *,
                deadline: float, min_run_time: float = 0.2, also_track: tuple[str, ...] = (),
                eager: bool = False) -> list[SearchTime]:
    """Each configuration timed on fresh copies of the state the ``--run`` expression reaches, and fresh
    compiled copies of the entries; before every call the copies are rewound (``Replay.rewind``), so
    what a run appends never accumulates; timing stops at ``deadline`` whatever it has (a configuration
    it could not time says so). ``eager``: the original functions timed too, as the row ``"eager"``."""
    code = workload.run_code
    if code is None:
        raise NbcompileError("nothing to time: the workload has no --run expression")
    rows: list[SearchTime] = []
    todo: list[tuple[str, dict[str, str] | None, dict[str, Any]]] = [*configs]
    if eager:
        todo.append(("eager", None, {}))
    for name, modes, overrides in todo:
        if time.perf_counter() + (workload.run_s if modes is not None else 0.0) >= deadline:
            rows.append(SearchTime(name, why="not timed: the budget ran out (or would, compiling it)",
                                   out_of_budget=True))
            continue
        try:
            rows.append(_time_one(workload, code, name, modes, overrides, deadline, min_run_time, also_track))
        except check_ops.OutsideEffect as exc:
            rows.append(SearchTime(name, why=f"not timed: the run {exc}"))
        except Exception as exc:  # a configuration that fails here was proven by its trial: say so, go on
            rows.append(SearchTime(name, why=f"not timed ({type(exc).__name__}: {check_ops.one_line(str(exc))})"))
    return rows


def _time_one(workload: Workload, code: Any, name: str, modes: dict[str, str] | None, overrides: dict[str, Any],
              deadline: float, min_run_time: float, also_track: tuple[str, ...]) -> SearchTime:
    replay = workload.replay(code)  # fresh copies for each configuration
    if replay.refused is not None:
        return SearchTime(name, why=f"not timed: {replay.refusal}")
    device = _device_of(v for v in replay.copies.values() if isinstance(v, torch.Tensor))
    options = dataclasses.replace(workload.options.compile_options(),
                                  **{k: v for k, v in overrides.items() if not k.startswith("_")})

    recording = Recording(Report(title="fix search timing"))  # not the session's compiles
    recording.deadline = deadline  # a compile still going at the deadline is cut at its next graph

    def fresh_compile(entry: str, obj: Any) -> Any:
        if entry not in workload.entries:
            return obj
        return compiled_copy(replay.counterpart(torch_compat.unwrap_compiled(obj)), options, recording=recording)

    code_state = torch_compat.code_state_snapshot()
    rng = check_ops.RngState()
    with contextlib.ExitStack() as stack:
        if modes is None:  # eager: the originals, every compiled callable forced eager
            stack.enter_context(replay.swapped(workload.originals()))
            stack.enter_context(torch_compat.force_eager())
            bind: Callable[[], None] = lambda: None  # noqa: E731
        else:
            stack.enter_context(replay.swapped())
            stack.enter_context(HUB.active(recording))
            stack.enter_context(_forgetting(code_state, recording))
            _, bind = stack.enter_context(workload.scratch(modes, fresh_compile, also_track,
                                                           overrides.get("_replace")))
            stack.enter_context(dynconfig.applied(overrides.get("_config", {})))
        stack.enter_context(check_ops.quiet())  # what it prints or logs, thousands of times, is not the user's
        stack.enter_context(check_ops.no_outside_effects(compiler_may=True, watch=replay))
        stack.callback(rng.restore)

        def once() -> None:
            replay.rewind()
            bind()
            workload.evaluate(code)

        try:
            once()  # compiles
            once()
        except Exception:
            if recording.cut:
                return SearchTime(name, why="not timed: the budget ran out while it compiled", out_of_budget=True)
            raise
        if time.perf_counter() >= deadline:
            return SearchTime(name, why="not timed: the budget ran out while it compiled", out_of_budget=True)
        _sync(device)
        began = time.perf_counter()
        once()
        _sync(device)
        per_call = max(time.perf_counter() - began, 1e-7)
        group = max(1, min(100, int(SEARCH_SAMPLE_S / per_call)))
        times: list[float] = []
        until = time.perf_counter() + min_run_time
        while len(times) < SEARCH_MAX_SAMPLES and (len(times) < MIN_SAMPLES or time.perf_counter() < until):
            if time.perf_counter() >= deadline:
                break
            began = time.perf_counter()
            for _ in range(group):
                once()
            _sync(device)
            times.append((time.perf_counter() - began) / group)
    written = replay.shared_written()
    if written is not None:  # shared with the user's objects over the copy budget: never again
        workload.unshare()
        return SearchTime(name, why=f"not timed: the run wrote {written} in place, a tensor of yours your own run "
                                    "only read (shared with the copies, as the state is over the copy budget)")
    if len(times) < 3:
        return SearchTime(name, samples=len(times), why="not timed: the budget ran out while it was timed",
                          out_of_budget=True)
    q = statistics.quantiles(times, n=4)
    return SearchTime(name, statistics.median(times), q[2] - q[0], min(times), max(times), len(times))
