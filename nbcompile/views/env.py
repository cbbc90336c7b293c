"""What the frontend can show."""

from __future__ import annotations


def widgets_supported() -> bool:
    """True in a kernel whose frontend can show ipywidgets (not in terminal IPython)."""
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None
