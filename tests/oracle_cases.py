"""Functions whose graph and break counts are checked against an independent oracle."""

import torch


def straight(x):
    return (x.sin() + 1).relu()


def with_print(x):
    y = x.cos()
    print("oracle")
    return y * 2


def forced(x):
    x = x + 1
    torch._dynamo.graph_break()
    x = x * 2
    torch._dynamo.graph_break()
    return x - 1


def branchy(x):
    if x.sum() > 0:
        return x.exp()
    return x.abs()


def item_user(x):
    return x * x.max().item()


def _inner(x):
    print("inner")
    return x.sigmoid()


def nested(x):
    return _inner(x + 1) * 3


CASES = {
    "straight": straight,
    "with_print": with_print,
    "forced": forced,
    "branchy": branchy,
    "item_user": item_user,
    "nested": nested,
}
