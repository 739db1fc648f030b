"""What torch.compile makes inside ``batch_invariant_mode`` is never served outside it, and the other
way round: in this process (Dynamo's compiled frames) and in others (the on-disk AOTAutograd and FX
graph caches), including a process that never imports this package.

Compiles cost seconds each (Inductor's C++ ones more), so there are two pointed cases: one in this
process with aot_eager, one over three fresh processes sharing a private Inductor cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

import ascend_rmsnorm
from ascend_rmsnorm.integrations import batch_invariant_mode, compile_isolation

from helpers import assert_same_bits, in_a_thread, make_input, same_bits

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")
WORKER = Path(__file__).resolve().parents[1] / "support" / "compile_cache_worker.py"


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def test_compiled_frames_never_cross_the_mode_in_this_process(fresh_dynamo):
    """One compiled nn.RMSNorm model called outside, inside, inside a nested mode of another backend,
    and back: each state compiles its own graph once and runs its own norm; returning to a state
    reuses its graph (no recompile)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.RMSNorm(256, eps=1e-6))
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    x = make_input(33, 256, torch.float32, seed=8)
    with torch.no_grad():
        hidden = model[0](x)
    ours = ascend_rmsnorm.rms_norm(hidden, model[1].weight, 1e-6)

    def run():
        with torch.no_grad():
            out = compiled(x)
        return out, counters["stats"]["unique_graphs"]

    outside, graphs = run()
    assert graphs == 1 and not same_bits(outside, ours)  # torch's own norm; this input tells them apart
    with batch_invariant_mode():
        inside, graphs = run()
        assert graphs == 2, "a frame compiled outside the mode ran inside it"
        assert_same_bits(inside, ours, "compiled outside, called inside")
        with batch_invariant_mode(backend="torch"):
            nested, graphs = run()
            assert graphs == 3, "the nested mode's backend is part of the state"
            assert_same_bits(nested, ours, "nested")
        assert run()[1] == 3
    after, graphs = run()
    assert graphs == 3, "leaving the mode must find the outside graph again, not recompile"
    assert_same_bits(after, outside, "compiled inside, called outside")
    with batch_invariant_mode():
        again, graphs = run()
    assert graphs == 3
    assert_same_bits(again, ours, "inside again")


def test_a_process_whose_first_compile_is_inside_the_mode_compiles_outside_it_after(fresh_dynamo):
    """Dynamo maps torch's functions to its rules once per process, by name, when it first traces: made
    inside the mode, the map held the mode's torch.rms_norm and not torch's, and the first compile of an
    nn.RMSNorm after the mode failed ("marked as skipped"). Dropping the map (Dynamo remakes it) stands in
    for a process whose first compile is inside the mode."""
    from torch._dynamo import trace_rules

    model = torch.nn.RMSNorm(256, eps=1e-6)
    x = make_input(5, 256, torch.float32, seed=3)
    trace_rules.get_torch_obj_rule_map.cache_clear()
    with batch_invariant_mode(), torch.no_grad():
        inside = torch.compile(model, backend="aot_eager", fullgraph=True)(x)
    torch._dynamo.reset()
    with torch.no_grad():
        outside = torch.compile(model, backend="aot_eager", fullgraph=True)(x)
        assert_same_bits(outside, model(x), "compiled after the mode: torch's own norm")
        assert_same_bits(inside, ascend_rmsnorm.rms_norm(x, model.weight, 1e-6), "compiled inside")


def test_leaving_the_mode_keeps_a_rule_map_made_outside_it():
    """Only a rule map made inside the mode is dropped on leaving. One made outside it (Dynamo makes it when
    imported, as here, or at a first compile) maps torch's own rms_norm already and holds what was registered
    into it since (torch's polyfills, a user's substitute_in_graph), which a map Dynamo makes again would not."""
    from torch._dynamo import trace_rules

    made = trace_rules.get_torch_obj_rule_map()
    assert torch.rms_norm in made
    with batch_invariant_mode():
        pass
    assert trace_rules.get_torch_obj_rule_map() is made


def test_on_disk_caches_never_cross_the_mode_between_processes(tmp_path):
    """A: inside the mode compiles into an empty cache. D: the mode entered in the main thread, the
    compile in another (torch.compiler.config, the cache key's tag, is per thread): its entry is this
    package's op all the same. B: never imports this package, compiles the same function: a cache miss
    (not A's or D's entry, which would crash it), torch's norm. C: imports it; outside it gets B's entry
    and torch's bits, inside A's entry and this package's bits; then both again without a recompile."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TORCH_COMPILE_"))}
    env.update(
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
        TORCHINDUCTOR_FX_GRAPH_CACHE="1",
        TORCHINDUCTOR_AUTOGRAD_CACHE="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(WORKER.parent), env.get("PYTHONPATH")])),
    )

    def process(*steps):
        done = subprocess.run([sys.executable, str(WORKER), *steps], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-4000:]
        return [json.loads(line) for line in done.stdout.splitlines()]

    (a,) = process("inside")
    assert a["aot"].get("autograd_cache_saved") == 1 and a["bits"] == a["ours"]
    (d,) = process("inside-thread")
    # where torch keeps one tag per process (2.8 to 2.11), D's compiling thread has A's: A's entry
    d_entry = "autograd_cache_saved" if compile_isolation.PER_THREAD_CONFIG else "autograd_cache_hit"
    assert d["aot"].get(d_entry) == 1 and d["bits"] == d["ours"] == a["ours"], d
    (b,) = process("plain")
    assert b["aot"].get("autograd_cache_miss") == 1 and "autograd_cache_hit" not in b["aot"], b
    assert b["bits"] != a["ours"], "the process that never imported the package got its norm"
    c_out, c_in, c_out2, c_in2 = process("outside", "inside", "outside", "inside")
    assert c_out["aot"].get("autograd_cache_hit") == 1 and c_out["bits"] == b["bits"], c_out
    assert c_in["new_graphs"] == 1 and c_in["aot"].get("autograd_cache_hit") == 1, c_in
    assert c_in["bits"] == c_in["ours"] == a["ours"], "inside the mode got the entry compiled outside"
    for step, want in ((c_out2, b["bits"]), (c_in2, a["ours"])):
        assert step["new_graphs"] == 0 and step["aot"] == {} and step["bits"] == want, step


class _Worker:
    """One long-lived thread that runs what it is given (a thread's cache_key_tag outlives each call)."""

    def __init__(self):
        import queue
        import threading

        self.jobs, self.results = queue.Queue(), queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            fn = self.jobs.get()
            try:
                self.results.put((True, fn()))
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller
                self.results.put((False, err))

    def __call__(self, fn):
        self.jobs.put(fn)
        ok, value = self.results.get()
        if not ok:
            raise value
        return value


def test_threads_in_the_mode_at_once_each_leave_their_own_entry_and_tag(fresh_dynamo):
    """Two threads in the mode at overlapping times: the first to leave takes neither the other's
    backend nor leaves the mode's tag on its own thread, where it would later let code that calls
    aten::rms_norm itself compile unrefused inside the mode and be served outside it."""
    from ascend_rmsnorm.integrations import batch_invariant as bi

    config = torch.compiler.config
    worker = _Worker()
    with batch_invariant_mode(backend="emu"):
        worker(lambda: bi.enable(backend="torch"))
        assert bi._backend() == "torch"
        # the worker's nested mode changed the state: its thread is keyed by it; this one's tag is emu's,
        # where torch keeps a tag per thread, else the one tag is the state's
        assert worker(compile_isolation.keyed_here)
        assert compile_isolation.keyed_here() is not compile_isolation.PER_THREAD_CONFIG
    assert bi._backend() == "torch", "the main thread's exit took the worker's backend"
    worker(bi.disable)
    assert not bi.is_enabled() and config.cache_key_tag == ""
    assert worker(lambda: config.cache_key_tag) == "", "the mode's tag stayed on the worker's thread"
    x = make_input(8, 64, torch.float32)
    by_aten = torch.compile(lambda t: torch.ops.aten.rms_norm(t, [64], None, 1e-6), backend="aot_eager")
    with batch_invariant_mode():
        with pytest.raises(Exception, match="not keyed by the mode"):
            worker(lambda: by_aten(x))
    assert_same_bits(worker(lambda: by_aten(x)), torch.ops.aten.rms_norm(x, [64], None, 1e-6), "outside")


per_thread_tags = pytest.mark.skipif(
    not compile_isolation.PER_THREAD_CONFIG, reason="this torch keeps one cache_key_tag per process (2.8 to 2.11)"
)


@per_thread_tags
def test_leaving_a_mode_another_thread_entered_warns_that_its_tag_stays():
    """A disable() in a thread that entered no mode ends another thread's (documented), but cannot put
    back that thread's cache key tag (a per-thread config value): it says so, rather than leave that
    thread compiling under the mode's key unannounced."""
    from ascend_rmsnorm.integrations import batch_invariant as bi

    worker = _Worker()
    worker(lambda: bi.enable(backend="torch"))
    with pytest.warns(RuntimeWarning, match="entered in another thread .* stay keyed by the mode"):
        bi.disable()
    assert not bi.is_enabled() and torch.compiler.config.cache_key_tag == ""
    assert worker(lambda: torch.compiler.config.cache_key_tag) == compile_isolation.tag_for("torch")  # the stale tag
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with batch_invariant_mode():  # in and out of one thread: no warning
            pass
        in_a_thread(lambda: bi.enable(backend="torch"))  # that thread has ended: no tag of its to warn of
        bi.disable()
    assert not bi.is_enabled()


def test_keyed_here_is_false_once_the_mode_is_off():
    """With the mode off there is no state for a thread's compiles to be keyed by: keyed_here() is False in
    every thread, after a normal exit and after an exception, and in a thread whose mode another thread
    ended, where the mode's tag stays (the warned case) but keys nothing the mode serves now."""
    from ascend_rmsnorm.integrations import batch_invariant as bi

    keyed_here = compile_isolation.keyed_here
    with batch_invariant_mode():
        assert keyed_here()
    assert not keyed_here() and not in_a_thread(keyed_here)
    with pytest.raises(KeyError), batch_invariant_mode(backend="torch"):
        assert keyed_here()
        raise KeyError("inside")
    assert not keyed_here() and not in_a_thread(keyed_here)
    worker = _Worker()
    worker(lambda: bi.enable(backend="torch"))
    assert worker(keyed_here)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        bi.disable()
    # where torch keeps a tag per thread the worker's stays (warned), else the one tag is put back
    stale = compile_isolation.tag_for("torch") if compile_isolation.PER_THREAD_CONFIG else ""
    warned = any("entered in another thread" in str(w.message) for w in said)
    assert warned == bool(stale)
    assert worker(lambda: torch.compiler.config.cache_key_tag) == stale
    assert not worker(keyed_here)


@pytest.mark.skipif(compile_isolation.PER_THREAD_CONFIG, reason="this torch keeps a cache_key_tag per thread (2.12 on)")
def test_one_tag_per_process_stays_while_any_thread_is_in_the_mode_and_goes_with_the_last():
    """torch 2.8 to 2.11 keep one cache_key_tag for the process: the first thread to leave must neither
    take the tag from a thread still in the mode nor leave it behind once the last has left (it would
    key compiles outside the mode as inside: an entry of the mode's served to them). A thread that
    did not enter the mode is still refused, as where tags are per thread."""
    from ascend_rmsnorm.integrations import batch_invariant as bi

    config = torch.compiler.config
    worker = _Worker()
    with batch_invariant_mode(backend="emu"):
        assert config.cache_key_tag == compile_isolation.tag_for("emu")
        worker(lambda: bi.enable(backend="torch"))
        assert config.cache_key_tag == compile_isolation.tag_for("torch") == worker(lambda: config.cache_key_tag)
    assert bi.is_enabled() and config.cache_key_tag == compile_isolation.tag_for("torch"), "taken by the first to leave"
    assert not compile_isolation.keyed_here() and worker(compile_isolation.keyed_here)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing stays behind to warn of
        bi.disable()
    assert not bi.is_enabled() and config.cache_key_tag == "" == worker(lambda: config.cache_key_tag)


@pytest.fixture
def users_tag():
    """A cache_key_tag of the user's own (a config module's patch(): monkeypatch breaks its attributes)."""
    with torch.compiler.config.patch(cache_key_tag="users-own"):
        yield


def test_the_cache_key_tag_and_torch_rms_norm_are_restored_and_a_users_tag_kept(users_tag):
    config = torch.compiler.config
    original = torch.rms_norm
    with batch_invariant_mode():
        kept = torch.rms_norm  # bound inside the mode, called after it: torch's own then
        tag = config.cache_key_tag
        assert tag.startswith("users-own|") and ascend_rmsnorm.__version__ in tag and "(auto)" in tag
        assert torch.rms_norm is not original
        with batch_invariant_mode(backend="torch"):
            assert config.cache_key_tag == "users-own|" + compile_isolation.tag_for("torch")
        assert config.cache_key_tag == tag
        assert compile_isolation.keyed_here()
        config.cache_key_tag = "changed-inside"  # a user's change inside the mode is theirs to keep...
        assert not compile_isolation.keyed_here()  # (the tag no longer carries the mode: not keyed now)
        with batch_invariant_mode(backend="emu"):
            assert config.cache_key_tag == "changed-inside|" + compile_isolation.tag_for("emu")  # ...keyed
    assert config.cache_key_tag == "changed-inside"
    assert torch.rms_norm is original
    with batch_invariant_mode():
        config.cache_key_tag = "set-inside"
    assert config.cache_key_tag == "set-inside", "leaving the mode put back the tag from before over the user's"
    x = make_input(33, 256, torch.float32, seed=8)  # torch's norm and this package's differ on it
    assert not same_bits(original(x, (256,), None, 1e-6), ascend_rmsnorm.rms_norm(x, None, 1e-6))
    assert_same_bits(kept(x, (256,), None, 1e-6), original(x, (256,), None, 1e-6))
    x = make_input(3, 16, torch.float32)
    assert_same_bits(torch.rms_norm(x, (16,), None, 1e-6), torch.nn.functional.rms_norm(x, (16,), None, 1e-6))


def test_inside_the_mode_torch_rms_norm_still_takes_part_in_torch_function():
    """The wrapper calls this package's norm itself, but as the builtin does it first hands tensor
    subclasses and torch-function modes their turn: a mode sees the call, fx.symbolic_trace records it.
    torch.export inside the mode records this package's op (outside: aten's)."""
    from torch.overrides import TorchFunctionMode

    class Norm(torch.nn.Module):
        def forward(self, x):
            return torch.rms_norm(x, (16,), None, 1e-6)

    seen = []

    class Log(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    x = make_input(4, 16, torch.float32)
    with batch_invariant_mode():
        with Log():
            y = torch.rms_norm(x, (16,), None, 1e-6)
        assert seen and seen[0] is torch.rms_norm
        assert_same_bits(y, ascend_rmsnorm.rms_norm(x, None, 1e-6))
        traced = torch.fx.symbolic_trace(Norm())
        assert [n.target for n in traced.graph.nodes if n.op == "call_function"] == [torch.rms_norm]
        inside = torch.export.export(Norm(), (x,))
    outside = torch.export.export(Norm(), (x,))
    targets = lambda ep: [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]  # noqa: E731
    assert targets(inside)[0] == "ascend_rmsnorm.rms_norm.default" and targets(outside) == ["aten.rms_norm.default"]


class _AtenNorm(torch.nn.Module):
    def forward(self, t):
        return torch.ops.aten.rms_norm(t, [64], None, 1e-6)


def test_aten_rms_norm_compiled_where_the_mode_does_not_key_the_caches_is_an_error(fresh_dynamo):
    """Code that calls the aten op itself reaches the mode's dispatcher kernel, not torch.rms_norm's
    wrapper; compiled in a thread whose cache_key_tag does not carry the mode (another thread than the
    one that entered it, or a graph Dynamo captured before the mode was on), its product would be
    cached under torch's own key. That is a clear error; the same code in the entering thread, the
    functional form in any thread, and eager calls anywhere are fine. The same error for a graph that
    Dynamo captured with torch's own rms_norm while another thread turned the mode on."""
    x = make_input(8, 64, torch.float32)

    def by_aten(x):
        return torch.ops.aten.rms_norm(x, [64], None, 1e-6)

    def by_functional(x):
        return torch.nn.functional.rms_norm(x, (64,), None, 1e-6)

    ours = ascend_rmsnorm.rms_norm(x, None, 1e-6)
    aot_eager = torch._dynamo.lookup_backend("aot_eager")

    def racing(gm, example_inputs):  # the mode is turned on in another thread while this one compiles
        in_a_thread(ascend_rmsnorm.integrations.enable)
        return aot_eager(gm, example_inputs)

    try:
        with pytest.raises(Exception, match="not keyed by the mode"):
            torch.compile(by_functional, backend=racing)(x)  # Dynamo captured torch's own rms_norm
    finally:
        ascend_rmsnorm.integrations.disable()
    torch._dynamo.reset()
    with batch_invariant_mode():
        assert_same_bits(torch.compile(by_aten, backend="aot_eager")(x), ours, "entering thread")
        torch._dynamo.reset()
        with pytest.raises(Exception, match="not keyed by the mode"):
            in_a_thread(lambda: torch.compile(by_aten, backend="aot_eager")(x))
        torch._dynamo.reset()
        got = in_a_thread(lambda: torch.compile(by_functional, backend="aot_eager")(x))
        assert_same_bits(got, ours, "functional, another thread")
        assert_same_bits(in_a_thread(lambda: by_aten(x)), ours, "eager, another thread")
        # torch.export has no compile cache to poison: not refused in a thread the mode does not key
        exported = in_a_thread(lambda: torch.export.export(_AtenNorm(), (x,)))
    assert isinstance(exported, torch.export.ExportedProgram)
