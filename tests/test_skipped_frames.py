"""``Report.skipped`` lists the user's frames only (issue 34): a GRU training cell used to list the standard
library's frozen modules (``<frozen posixpath>``: normcase, basename, _get_sep) beside the model's forward."""

from __future__ import annotations

import pytest

import nbcompile
from nbcompile.core import torch_compat

SETUP = """\
import torch, torch.nn as nn, hashlib
torch.manual_seed(3)
class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(40, 12)
        self.gru = nn.GRU(12, 16, batch_first=True)
        self.head = nn.Linear(16, 3)
    def forward(self, tokens):
        out, _ = self.gru(self.emb(tokens))
        return self.head(out[:, -1])
net = GRUClassifier()
opt = torch.optim.Adam(net.parameters(), lr=3e-3)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=100)
metrics = {"loss": [], "acc": []}
xb, yb = torch.randint(0, 40, (8, 10)), torch.randint(0, 3, (8,))
"""
CELL = """\
%%compile --backend aot_eager --run "train_step(xb, yb)"
def record_metrics(loss, logits, y):
    metrics["loss"].append(loss.item())
    metrics["acc"].append((logits.argmax(1) == y).float().mean().item())

def train_step(x, y):
    net.train()
    opt.zero_grad()
    logits = net(x)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    sched.step()
    record_metrics(loss, logits, y)
    return loss
"""


@pytest.mark.skipif(not torch_compat.SKIP_REASONS, reason="torch keeps no list of the frames Dynamo skips "
                    f"(dynamo_tls.skip_reasons): {torch_compat.MISSING.get('skip reasons', '')}")
def test_skipped_frames_are_the_users_not_the_standard_librarys(ip):
    ip.run_cell(SETUP)
    assert ip.run_cell(CELL).success
    report = nbcompile.last().report
    skipped = report.skipped
    # the frames of the user's code Dynamo gave up on (torch 2.13 gives up on the model's forward at the GRU;
    # torch 2.15 breaks there and resumes after it): each is named, and nothing else is
    given_up = {b.function for b in report.breaks if "Skipping the function" in b.reason
                and b.filename.startswith("<ipython-input-")}
    assert {s.function for s in skipped} == given_up, (skipped, given_up)
    assert all(not s.filename.startswith(("<frozen ", "<eval_with_key>")) for s in skipped), skipped
    assert {s.function for s in skipped} <= {"forward"}, skipped
