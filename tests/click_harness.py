"""What the click-invariant tests drive (tests/test_click_invariants.py): a library of real training cells and
a harness that, in any IPython shell (the test shell, or a real kernel), applies the user's actions and
nbcompile's to the cell's objects and keeps a shadow: the same cells run plainly (eager, no nbcompile) in a
namespace of their own, to which only the user's own actions are applied. The invariant (CONTRACT.md,
"Fourth wave"): after every step, the user's objects equal the shadow's, the random-number state is what
the user's actions alone leave, and a compared check is ok (these cells compile with backend ``eager``,
whose results are eager's: a fresh float64 judge says ok)."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class TrainingCell:
    name: str
    setup: str  # a plain cell run before: the objects
    body: str  # the %%compile cell's body: the functions
    run: str  # its --run expression (a training step)
    state: tuple[str, ...]  # the names whose objects the invariant compares
    functions: tuple[str, ...]  # the functions a click toggles


CELLS = [
    TrainingCell(
        "adamw_cosine_bn",
        """\
import logging, torch
from torch import nn
torch.manual_seed(0)
log = logging.getLogger("nbcompile.test.train")
class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 8 * 8, 10)
    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv1(x))).flatten(1))
model = CNN()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
xb = torch.randn(8, 1, 8, 8)
yb = torch.randint(0, 10, (8,))
""",
        """\
def log_metrics(loss, logits):
    log.info("loss %s", loss.tolist())
    return logits.argmax(1).tolist()

def train_step(model, opt, sched, xb, yb):
    model.train()
    opt.zero_grad()
    logits = model(xb)
    loss = nn.functional.cross_entropy(logits, yb)
    if loss.item() > 5.0:
        print("big loss")
    loss.backward()
    opt.step()
    sched.step()
    log_metrics(loss, logits)
    return loss
""",
        "train_step(model, opt, sched, xb, yb)",
        ("model", "opt", "sched"),
        ("log_metrics", "train_step"),
    ),
    TrainingCell(
        "sgd_momentum_steplr_dropout",
        """\
import torch
from torch import nn
torch.manual_seed(1)
net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
X, Y = torch.randn(16, 6), torch.randn(16, 1)
""",
        """\
def loss_of(out, y):
    return ((out - y) ** 2).mean()

def step():
    net.train()
    opt.zero_grad()
    loss = loss_of(net(X), Y)
    loss.backward()
    opt.step()
    sched.step()
    return loss.detach()
""",
        "step()",
        ("net", "opt", "sched"),
        ("loss_of", "step"),
    ),
    TrainingCell(
        "adam_grad_clipping",
        """\
import torch
from torch import nn
torch.manual_seed(2)
mlp = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
opt = torch.optim.Adam(mlp.parameters(), lr=1e-2)
X, Y = torch.randn(10, 4), torch.randint(0, 2, (10,))
""",
        """\
def clip(params):
    return torch.nn.utils.clip_grad_norm_(params, 0.5)

def step():
    opt.zero_grad()
    loss = nn.functional.cross_entropy(mlp(X), Y)
    loss.backward()
    norm = clip(mlp.parameters())
    opt.step()
    return loss.detach(), norm
""",
        "step()",
        ("mlp", "opt"),
        ("clip", "step"),
    ),
    TrainingCell(
        "grad_scaler_on_cpu",
        """\
import torch
from torch import nn
torch.manual_seed(3)
lin = nn.Linear(5, 3)
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
X, Y = torch.randn(7, 5), torch.randn(7, 3)
""",
        """\
def scaled(loss):
    return scaler.scale(loss)

def step():
    opt.zero_grad()
    loss = ((lin(X) - Y) ** 2).mean()
    scaled(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss.detach()
""",
        "step()",
        ("lin", "opt", "scaler"),
        ("scaled", "step"),
    ),
    TrainingCell(
        "ema_of_weights",
        """\
import torch
from torch import nn
torch.manual_seed(4)
model = nn.Linear(4, 4)
ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
opt = torch.optim.SGD(model.parameters(), lr=0.1)
X = torch.randn(9, 4)
""",
        """\
def update_ema(decay=0.9):
    with torch.no_grad():
        for k, v in model.state_dict().items():
            ema[k].mul_(decay).add_(v, alpha=1 - decay)

def step():
    opt.zero_grad()
    loss = model(X).pow(2).mean()
    loss.backward()
    opt.step()
    update_ema()
    return loss.detach()
""",
        "step()",
        ("model", "ema", "opt"),
        ("update_ema", "step"),
    ),
    TrainingCell(
        "history_list_and_log",
        """\
import logging, torch
from torch import nn
torch.manual_seed(5)
history = []
log = logging.getLogger("nbcompile.test.history")
model = nn.Linear(3, 1)
opt = torch.optim.Adagrad(model.parameters(), lr=0.1)
X, Y = torch.randn(6, 3), torch.randn(6, 1)
""",
        """\
def record(loss):
    history.append(float(loss))
    log.info("step %d loss %.4f", len(history), history[-1])

def step():
    opt.zero_grad()
    loss = ((model(X) - Y) ** 2).mean()
    loss.backward()
    opt.step()
    record(loss)
    return loss.detach()
""",
        "step()",
        ("model", "opt", "history"),
        ("record", "step"),
    ),
    TrainingCell(
        "rng_in_the_step",
        """\
import torch
from torch import nn
torch.manual_seed(6)
layer = nn.Linear(4, 4)
opt = torch.optim.RMSprop(layer.parameters(), lr=1e-2)
""",
        """\
def noisy_batch():
    return torch.randn(5, 4)

def step():
    opt.zero_grad()
    x = noisy_batch()
    loss = nn.functional.dropout(layer(x), 0.5, training=True).pow(2).sum()
    loss.backward()
    opt.step()
    return loss.detach()
""",
        "step()",
        ("layer", "opt"),
        ("noisy_batch", "step"),
    ),
    TrainingCell(
        "batchnorm_train_and_eval",
        """\
import torch
from torch import nn
torch.manual_seed(7)
bn_net = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 1))
opt = torch.optim.AdamW(bn_net.parameters(), lr=1e-2, weight_decay=0.1)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.9 ** epoch)
X, Y = torch.randn(12, 4), torch.randn(12, 1)
""",
        """\
def evaluate():
    bn_net.eval()
    with torch.no_grad():
        out = bn_net(X).mean()
    bn_net.train()
    return out

def step():
    opt.zero_grad()
    loss = ((bn_net(X) - Y) ** 2).mean()
    loss.backward()
    opt.step()
    sched.step()
    return loss.detach(), evaluate()
""",
        "step()",
        ("bn_net", "opt", "sched"),
        ("evaluate", "step"),
    ),
    TrainingCell(
        "tiny_hugging_face_model",
        """\
import torch
from transformers import BertConfig, BertForSequenceClassification
torch.manual_seed(8)
hf = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                              num_attention_heads=2, intermediate_size=32,
                                              max_position_embeddings=16, num_labels=2))
opt = torch.optim.AdamW(hf.parameters(), lr=1e-3)
ids = torch.randint(0, 50, (2, 6))
labels = torch.tensor([0, 1])
""",
        """\
def loss_of(out):
    return out.loss

def step():
    hf.train()
    opt.zero_grad()
    loss = loss_of(hf(input_ids=ids, labels=labels))
    loss.backward()
    opt.step()
    return loss.detach()
""",
        "step()",
        ("hf", "opt"),
        ("loss_of", "step"),
    ),
    TrainingCell(
        "writes_a_log_file",
        """\
import os, tempfile, torch
from torch import nn
torch.manual_seed(9)
LOG_PATH = os.path.join(tempfile.mkdtemp(prefix="nbcompile-click-"), "train.log")
reg = nn.Linear(2, 1)
opt = torch.optim.SGD(reg.parameters(), lr=0.1)
X, Y = torch.randn(4, 2), torch.randn(4, 1)
""",
        """\
def write_log(loss):
    with open(LOG_PATH, "a") as f:
        f.write(f"{float(loss):.6f}\\n")

def step():
    opt.zero_grad()
    loss = ((reg(X) - Y) ** 2).mean()
    loss.backward()
    opt.step()
    write_log(loss)
    return loss.detach()
""",
        "step()",
        ("reg", "opt", "LOG_PATH"),
        ("write_log", "step"),
    ),
]
BY_NAME = {cell.name: cell for cell in CELLS}


def digest(ns: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The state the invariant compares, as plain values and cloned tensors."""
    out: dict[str, Any] = {}
    for name in names:
        value = ns[name]
        if name == "LOG_PATH":  # a file the run writes: its lines (each namespace has a file of its own)
            out[name] = open(value).read().splitlines() if os.path.exists(value) else []  # noqa: SIM115
        elif isinstance(value, torch.nn.Module):
            out[name] = {"training": value.training,
                         **{k: v.detach().clone() for k, v in value.state_dict().items()},
                         **{f"{k}.grad": p.grad.detach().clone() for k, p in value.named_parameters()
                            if p.grad is not None}}
        elif hasattr(value, "state_dict"):
            out[name] = copy.deepcopy(value.state_dict())
        else:
            out[name] = copy.deepcopy(value)
    return out


def differences(mine: Any, theirs: Any, where: str = "", *, exact: bool = False) -> list[str]:
    """Where two digests differ: bit for bit (``exact``: nbcompile's actions change nothing), or float tensors
    within a tolerance (a compiled run against eager's: AdamW's m / sqrt(v) on a near-zero gradient, a conv's
    bias before BatchNorm, turns float noise into steps of the learning rate's size)."""
    if isinstance(mine, torch.Tensor) or isinstance(theirs, torch.Tensor):
        if not (isinstance(mine, torch.Tensor) and isinstance(theirs, torch.Tensor)) or mine.shape != theirs.shape:
            return [f"{where}: {mine!r:.60} vs {theirs!r:.60}"]
        if mine.is_floating_point() and not exact:
            same = torch.allclose(mine.double(), theirs.double(), rtol=1e-2, atol=2e-2)
        else:
            same = torch.equal(mine, theirs) or (mine.is_floating_point() and torch.equal(mine.isnan(), theirs.isnan())
                                                 and torch.equal(mine.nan_to_num(), theirs.nan_to_num()))
        return [] if same else [f"{where}: tensors differ (max abs diff "
                                f"{(mine.double() - theirs.double()).abs().max().item():.3g})"]
    if isinstance(mine, dict) and isinstance(theirs, dict):
        if set(mine) != set(theirs):
            return [f"{where}: keys {sorted(map(str, set(mine) ^ set(theirs)))[:4]} differ"]
        return [d for k in mine for d in differences(mine[k], theirs[k], f"{where}.{k}", exact=exact)]
    if isinstance(mine, (list, tuple)) and isinstance(theirs, (list, tuple)):
        if len(mine) != len(theirs):
            return [f"{where}: {len(mine)} items vs {len(theirs)}"]
        pairs = enumerate(zip(mine, theirs, strict=True))
        return [d for i, (a, b) in pairs for d in differences(a, b, f"{where}[{i}]", exact=exact)]
    if isinstance(mine, float) and isinstance(theirs, float) and not exact:
        return [] if abs(mine - theirs) <= 1e-2 * max(1.0, abs(theirs)) else [f"{where}: {mine} vs {theirs}"]
    try:
        return [] if mine == theirs else [f"{where}: {mine!r:.60} vs {theirs!r:.60}"]
    except Exception:  # noqa: BLE001
        return [f"{where}: not comparable"]


def _sync(shadow: dict[str, Any], ns: dict[str, Any], names: tuple[str, ...]) -> None:
    """The shadow's objects given the user's values, in place (its functions keep their objects)."""
    for name in names:
        mine, theirs = ns[name], shadow[name]
        if name == "LOG_PATH":  # the user's file's lines, or none yet
            lines = open(mine).read() if os.path.exists(mine) else None  # noqa: SIM115
            if lines is None:
                if os.path.exists(theirs):
                    os.remove(theirs)
            else:
                with open(theirs, "w") as out:
                    out.write(lines)
        elif hasattr(mine, "load_state_dict") and hasattr(mine, "state_dict"):
            theirs.load_state_dict(copy.deepcopy(mine.state_dict()))
            if isinstance(mine, torch.nn.Module):
                theirs.train(mine.training)
                for (_, p), (_, q) in zip(mine.named_parameters(), theirs.named_parameters(), strict=True):
                    q.grad = None if p.grad is None else p.grad.detach().clone()
        elif isinstance(mine, dict):
            for key, value in mine.items():
                if isinstance(value, torch.Tensor):
                    theirs[key].copy_(value)
        elif isinstance(mine, list):
            theirs[:] = copy.deepcopy(mine)


class Harness:
    """One training cell in the running IPython shell, with its shadow. Every method is one step a user
    takes; ``verify()`` returns what breaks the invariant (an empty list when it holds)."""

    def __init__(self, cell_name: str, backend: str = "eager") -> None:
        from IPython import get_ipython

        import nbcompile

        self.nbcompile = nbcompile
        self.shell = get_ipython()
        self.cell = BY_NAME[cell_name]
        self.backend = backend
        self.shadow: dict[str, Any] = {"__name__": "__shadow__"}
        self.log: list[str] = []
        self.checks: list[str] = []
        self.last_user: dict[str, Any] = {}
        self.user_rng = torch.get_rng_state()
        if "transformers" in self.cell.setup:  # transformers imports torchvision, whose CUDA ops cannot load here
            from real_models_oracle import import_torchvision

            import_torchvision()
        self._user(lambda: self._ok(self.shell.run_cell(self.cell.setup)),
                   lambda: exec(self.cell.setup, self.shadow))  # noqa: S102
        self.rerun_cell()

    # -- the user's own actions: applied to the shadow too, from the same random-number state ---------
    def _ok(self, result: Any) -> None:
        if result.error_in_exec is not None or result.error_before_exec is not None:
            raise AssertionError(f"{self.cell.name}: a user cell failed: {result.error_in_exec!r}")

    def _user(self, mine: Any, shadow: Any) -> None:
        """A user's action, and the same on the shadow: their states agree as a compiled run and an eager one
        do; then the shadow takes the user's values (a compiled run's float noise does not pile up), and the
        user's state is kept as what nbcompile's actions must leave bit for bit."""
        start = torch.get_rng_state()
        mine()
        after = torch.get_rng_state()
        torch.set_rng_state(start)
        shadow()
        if not torch.equal(torch.get_rng_state(), after):
            self.checks.append("the user's run drew other random numbers than eager's")
        torch.set_rng_state(after)
        self.user_rng = after
        ns = self.shell.user_ns
        if all(name in ns and name in self.shadow for name in self.cell.state):
            self.checks.extend(f"the user's action against eager's{d}" for d in
                               differences(digest(ns, self.cell.state), digest(self.shadow, self.cell.state)))
            _sync(self.shadow, ns, self.cell.state)
            self.last_user = digest(ns, self.cell.state)

    def rerun_cell(self) -> None:
        self.log.append("run the %%compile cell")
        line = f"%%compile --backend {self.backend} --no-panel --run {json.dumps(self.cell.run)}"
        self._user(lambda: self._ok(self.shell.run_cell(f"{line}\n{self.cell.body}")),
                   lambda: (exec(self.cell.body, self.shadow), eval(self.cell.run, self.shadow)))  # noqa: S102, S307
        self._note_check("the cell's run")

    def plain_call(self) -> None:
        self.log.append("a later plain cell calls the compiled code")
        self._user(lambda: self._ok(self.shell.run_cell(self.cell.run)),
                   lambda: eval(self.cell.run, self.shadow))  # noqa: S307

    # -- nbcompile's actions: they change nothing of the user's ----------------------------------------
    @property
    def session(self) -> Any:
        return self.nbcompile.last()

    def _nb(self, what: str, action: Any) -> None:
        self.log.append(what)
        try:
            action()
        except Exception as exc:  # noqa: BLE001  a refused action (a UsageError) changes nothing either
            self.log.append(f"  -> {type(exc).__name__}: {str(exc)[:120]}")

    def toggle(self, name: str, mode: str) -> None:
        self._nb(f"%nbcompile set {name} {mode}", lambda: self.shell.run_line_magic("nbcompile", f"set {name} {mode}"))
        self._note_check(f"set {name} {mode}")

    def toggle_back(self) -> None:
        def back() -> None:
            for name in list(self.session.toggles):
                self.shell.run_line_magic("nbcompile", f"set {name} compile")
        self._nb("every toggle back to compile", back)
        self._note_check("toggle back")

    def fix(self, budget_s: float = 3.0) -> None:
        self._nb(f"fix search ({budget_s} s)", lambda: self.session.fix(budget_s=budget_s))
        self._note_check("fix")

    def accept(self) -> None:
        def accept() -> None:
            last = getattr(self.session, "last_fix", None)
            best = last.best if last is not None else None
            for rewrite in (best.rewrites if best is not None else [])[:1]:
                self.session.accept(rewrite)
        self._nb("accept the search's first rewrite", accept)

    def stance(self, name: str) -> None:
        self._nb(f"%nbcompile stance {name}", lambda: self.shell.run_line_magic("nbcompile", f"stance {name}"))

    def bench(self) -> None:
        self._nb("bench", lambda: self.session.bench(min_run_time=0.02))

    def interrupt(self, name: str, mode: str) -> None:
        """A toggle interrupted as its run starts (the user pressed stop): nothing half-done stays."""
        from nbcompile.engine.workload import Workload

        original = Workload.evaluate

        def stopped(self_: Any, code: Any) -> Any:
            raise KeyboardInterrupt

        Workload.evaluate = stopped  # type: ignore[method-assign]
        try:
            self.log.append(f"interrupt %nbcompile set {name} {mode}")
            try:
                self.shell.run_line_magic("nbcompile", f"set {name} {mode}")
            except (KeyboardInterrupt, Exception):  # noqa: BLE001
                pass
        finally:
            Workload.evaluate = original  # type: ignore[method-assign]

    def _note_check(self, after: str) -> None:
        session = self.session
        check = session.report.check if session is not None else None
        if check is not None and check.compared and not check.ok:
            self.checks.append(f"after {after}: the check failed ({check.message[:300]}); a fresh float64 judge of "
                               f"a backend-{self.backend} run says ok")

    # -- the invariant ------------------------------------------------------------------------------------
    def verify(self) -> list[str]:
        problems = list(self.checks)
        self.checks.clear()
        mine = digest(self.shell.user_ns, self.cell.state)
        problems += differences(mine, self.last_user, "", exact=True)  # since the user's last action: nothing
        if not torch.equal(torch.get_rng_state(), self.user_rng):
            problems.append("the random-number state moved although only nbcompile acted")
            torch.set_rng_state(self.user_rng)
        return problems

    def close(self) -> None:
        self.shell.run_line_magic("nbcompile", "reset")

