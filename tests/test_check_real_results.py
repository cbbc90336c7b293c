"""What real models return: values with autograd history are shown, never copied, and objects with no
tensor-aware ``==`` (Hugging Face's ``DynamicCache``, caches with ``__slots__``, deques) are compared by
the tensors they hold (issue 34, point 7)."""

from __future__ import annotations

import collections
import copy
import textwrap

import pytest
import torch

import nbcompile
from nbcompile.engine.check import compare, verdict
from nbcompile.model.report import MIME_TYPE

from nbhelpers import run_compile_cell

# --- a run's value is shown by its summary, never copied ---------------------------------------

#: A module whose output has autograd history (requires_grad, not a graph leaf), reached through a forward
#: pre-hook, a print in forward (a graph break) and a method compiled eagerly (torch.compiler.disable).
NON_LEAF_CELL = textwrap.dedent(
    """\
    import torch
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
        @torch.compiler.disable
        def shift(self, y):
            return y + 1
        def forward(self, x):
            print("in forward")
            return self.shift(self.lin(x)).relu()
    net = Net()
    net.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    def f(x):
        return net(x) * 2
    """
)


class Uncopyable:
    """A run's value that refuses every copy protocol (as a non-leaf tensor refuses ``deepcopy``)."""

    def __init__(self, value):
        self.value = value

    def __deepcopy__(self, memo):
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                           "protocol at the moment")

    def __copy__(self):
        raise RuntimeError("not copyable")

    def __reduce_ex__(self, protocol):
        raise RuntimeError("not copyable")

    def __repr__(self):
        return "Uncopyable(...)"


def _shown(session) -> dict:
    """Everything a notebook shows of ``session``: its mime bundle, the report's, and the panel."""
    bundle = session._repr_mimebundle_()
    assert {MIME_TYPE, "text/html", "text/plain"} <= set(bundle)
    assert session.report._repr_mimebundle_()[MIME_TYPE] == bundle[MIME_TYPE]
    assert session.panel() is not None
    return bundle


@pytest.mark.parametrize("panel", ["", "--no-panel"])
def test_a_non_leaf_result_is_shown_through_toggles_and_reruns(ip, panel):
    ip.run_cell("import torch\nx = torch.randn(2, 4)")
    assert run_compile_cell(ip, f'--backend eager {panel} --run "f(x)"', NON_LEAF_CELL).success
    session = nbcompile.last()
    result = session.report.result
    assert isinstance(result, torch.Tensor) and result.requires_grad and result.grad_fn is not None
    with pytest.raises(RuntimeError, match="graph leaves"):  # what showing must never do
        copy.deepcopy(result)
    assert _shown(session)[MIME_TYPE]["result"] == "Tensor(shape=(2, 4), dtype=torch.float32, device=cpu)"
    assert session.report.check.compared and session.report.check.ok, session.report.check.message
    for change in ("set Net.forward disable", "set Net.forward compile", "set f disable", "set f compile"):
        outcome = ip.run_cell(f"%nbcompile {change}")
        assert outcome.success, change
        _shown(session)  # the kept report recalled on the toggle back, too
    assert session.run() is not None
    assert _shown(session)[MIME_TYPE]["result"].startswith("Tensor(shape=(2, 4)")


def test_a_result_that_refuses_every_copy_is_shown_after_a_toggle_back(ip):
    body = textwrap.dedent(
        """\
        import torch
        from test_check_real_results import Uncopyable
        def g(x):
            return x.sin() * 2
        def f(x):
            return Uncopyable(g(x))
        """
    )
    assert run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3, requires_grad=True))"', body).success
    session = nbcompile.last()
    assert _shown(session)[MIME_TYPE]["result"] == "Uncopyable(...)"
    for change in ("set g disable", "set g compile", "set g disable"):  # the last two recall kept reports
        assert ip.run_cell(f"%nbcompile {change}").success, change
        assert _shown(session)[MIME_TYPE]["result"] in ("Uncopyable(...)", None)
    session.run()
    assert _shown(session)[MIME_TYPE]["result"] == "Uncopyable(...)"


# --- objects without a meaningful == are compared by their tensors -----------------------------------

class IdentityCache:
    """A cache whose ``==`` is identity (``object``'s, spelled out): two runs' caches are never ``==``."""

    def __init__(self, keys, values):
        self.layers = [(keys, values)]

    def __eq__(self, other):
        return self is other

    __hash__ = object.__hash__

    def __repr__(self):
        return "IdentityCache(...)"


class ReprCache:
    """A cache whose ``==`` compares reprs, as some library classes do."""

    def __init__(self, keys):
        self.keys = keys

    def __eq__(self, other):
        return repr(self) == repr(other)

    __hash__ = object.__hash__

    def __repr__(self):
        return f"ReprCache(at {id(self):#x})"


class AmbiguousCache:
    """A cache whose ``==`` compares its tensors with ``==`` (ambiguous for more than one element)."""

    def __init__(self, keys):
        self.keys = keys

    def __eq__(self, other):
        return bool(self.keys == other.keys)

    __hash__ = object.__hash__


class SlotLayer:
    """A cache layer with its tensors in ``__slots__``, behind properties (``transformers``' layers may be)."""

    __slots__ = ("_keys", "_values")

    def __init__(self, keys, values):
        self._keys, self._values = keys, values

    @property
    def keys(self):
        return self._keys

    @property
    def values(self):
        return self._values


class SlotLayerWithDict(SlotLayer):
    """A subclass without ``__slots__``: its instances have a ``__dict__`` too, and the slots still hold the
    tensors."""

    def __init__(self, keys, values):
        super().__init__(keys, values)
        self.is_initialized = True


def _cache_pair(cls, delta=0.0):
    keys, values = torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4)
    return cls(keys.clone(), values.clone()), cls(keys + delta, values.clone())


@pytest.mark.parametrize("make", [
    lambda k, v: IdentityCache(k, v),
    lambda k, v: ReprCache(k),
    lambda k, v: AmbiguousCache(k),
    lambda k, v: SlotLayer(k, v),
    lambda k, v: SlotLayerWithDict(k, v),
    lambda k, v: collections.deque([k, v]),
], ids=["identity-eq", "repr-eq", "ambiguous-eq", "slots", "slots-and-dict", "deque"])
def test_a_cache_is_compared_by_the_tensors_it_holds(make):
    compiled, eager = _cache_pair(make)
    same = compare({"logits": torch.ones(2), "past_key_values": compiled},
                   {"logits": torch.ones(2), "past_key_values": eager})
    assert not same.problems and not same.skipped, same
    assert same.compared >= 2  # the logits and at least the keys: the tensors inside were reached
    check = verdict(same, (), "eager")
    assert check.ok and check.compared and "differs" not in check.message

    compiled, eager = _cache_pair(make, delta=0.5)
    differs = compare(compiled, eager)
    assert differs.problems and differs.max_abs_diff == pytest.approx(0.5)
    assert "keys" in differs.problems[0] or "[0]" in differs.problems[0], differs.problems
    assert "compiled gives" not in differs.problems[0]  # named by the tensor that differs, not by repr


def test_attributes_set_in_another_order_are_the_same_attributes():
    class Layer:
        pass

    a, b = Layer(), Layer()
    a.keys, a.values = torch.ones(3), torch.zeros(3)
    b.values, b.keys = torch.zeros(3), torch.ones(3)  # what a cache rebuilt by Dynamo may do
    comparison = compare(a, b)
    assert not comparison.problems and comparison.compared == 2


def test_a_class_defined_again_with_the_same_name_is_compared_by_contents():
    def define():
        class DynamicCache:
            def __init__(self, keys):
                self.layers = [keys]

            def __repr__(self):
                return "DynamicCache(layers=[DynamicLayer])"
        return DynamicCache

    old, new = define(), define()  # a cell run twice: two classes, one name
    comparison = compare(new(torch.ones(3)), old(torch.ones(3)))
    assert not comparison.problems and comparison.compared == 1
    differs = compare(new(torch.ones(3)), old(torch.zeros(3)))
    assert differs.problems and "layers[0]" in differs.problems[0]


def test_a_module_cache_is_compared_by_its_plain_tensor_attributes():
    class ModuleCache(torch.nn.Module):  # transformers 4.42 to 4.47: Cache was an nn.Module holding lists
        def __init__(self, keys):
            super().__init__()
            self.key_cache = [keys]

    same = compare(ModuleCache(torch.ones(3)), ModuleCache(torch.ones(3)))
    assert not same.problems and same.compared == 1
    differs = compare(ModuleCache(torch.ones(3)), ModuleCache(torch.ones(3) * 2))
    assert differs.problems and "key_cache[0]" in differs.problems[0]


def test_a_difference_with_equal_floats_does_not_say_max_abs_diff_0():
    comparison = compare({"logits": torch.ones(3), "steps": 3}, {"logits": torch.ones(3), "steps": 4})
    check = verdict(comparison, (), "eager")
    assert not check.ok and "differs" in check.message and "steps" in check.message
    assert "max abs diff 0" not in check.message
    assert "floating-point values agree" in check.message


#: A cache in the manner of transformers' DynamicCache, with an identity ``==`` and layers in ``__slots__``,
#: returned from a module's forward through a --run.
SLOT_CACHE_CELL = textwrap.dedent(
    """\
    import torch
    class Layer:
        __slots__ = ("keys", "values")
        def __init__(self, keys, values):
            self.keys, self.values = keys, values
    class Cache:
        def __init__(self):
            self.layers = []
        def __eq__(self, other):
            return self is other
        __hash__ = object.__hash__
        def __repr__(self):
            return f"Cache(layers={len(self.layers)})"
    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(8, 16)
        def forward(self, x):
            keys, values = self.qkv(x).chunk(2, dim=-1)
            cache = Cache()
            cache.layers.append(Layer(keys, values))
            return {"logits": (keys * values).sum(-1), "past_key_values": cache}
    torch.manual_seed(0)
    attention = Attention()
    """
)


def test_a_cache_returned_by_a_module_is_not_a_false_mismatch(ip):
    assert run_compile_cell(ip, '--backend eager --no-panel --run "attention(torch.randn(2, 8))"',
                            SLOT_CACHE_CELL).success
    check = nbcompile.last().report.check
    assert check.ok and check.compared, check.message
    assert "past_key_values" not in check.message and "3 values compared" in check.message


@pytest.mark.models
def test_gpt2_full_output_with_its_dynamic_cache_matches_eager(ip):
    pytest.importorskip("transformers")
    from real_models_oracle import import_torchvision

    import_torchvision()  # transformers imports torchvision when it is installed
    body = textwrap.dedent(
        """\
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=32))
        ids = torch.randint(0, 50, (1, 8))
        """
    )
    assert run_compile_cell(ip, '--backend eager --no-panel --entry model --run "model(ids)"', body).success
    report = nbcompile.last().report
    cache = report.result.past_key_values
    assert type(cache).__name__ == "DynamicCache"
    layer_tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    assert layer_tensors and all(isinstance(t, torch.Tensor) for t in layer_tensors)
    assert report.check.ok and report.check.compared, report.check.message
    assert "DynamicCache" not in report.check.message and "differs" not in report.check.message
    _shown(nbcompile.last())
    # the cache's tensors are what is compared: two eager runs match, a key changed in one is found by its path
    model = ip.user_ns["model"].eval()
    with torch.no_grad():
        first, second = model(ip.user_ns["ids"]), model(ip.user_ns["ids"])
    same = compare(first, second)
    assert not same.problems and same.compared >= 1 + len(layer_tensors)
    second.past_key_values.layers[0].keys.add_(0.25)
    differs = compare(first, second)
    where = differs.problems[0]  # transformers 5 keys the cache "cache" (past_key_values is its old name)
    assert ("['cache']" in where or "past_key_values" in where) and ".layers[0].keys" in where, where
    assert differs.max_abs_diff == pytest.approx(0.25)
