"""How a panel row is laid out (ipywidgets): its name in a column of its own, its toggle buttons
wrapping in a narrow panel, never past its edge, the chosen mode marked (``PANEL_CSS``).

A long name ends in an ellipsis, whole on hover; the buttons stay on one line while there is room.
"""

from __future__ import annotations

import ipywidgets as widgets

from .panel_html import escape

#: Wide enough for the longest mode in JupyterLab's 13px UI font with the buttons' padding
#: ("allow_in_graph", "disallow_in_graph"): never cut to "allow_in_gr…".
FUNCTION_BUTTON_WIDTH = "150px"
TORCH_BUTTON_WIDTH = "165px"
LABEL_WIDTH = "220px"
#: The narrowest a row's name gets (with its ellipsis) when the panel has no room for its width.
LABEL_MIN_WIDTH = "120px"
#: Space ipywidgets puts around each toggle button (its margins).
BUTTON_MARGIN_PX = 6


def row_label(name: str, note: str = "", shown: str | None = None, title: str | None = None) -> widgets.HTML:
    """A row's name in a column of its own: a long name (``torch._C._nn.scaled_dot_product_attention``) ends
    in an ellipsis, with the whole name (or ``title``) on hover, instead of running under the buttons; in a
    narrow panel the column narrows (down to ``LABEL_MIN_WIDTH``), never past the panel's edge."""
    return widgets.HTML(
        f"<div class='nbcompile-name' title='{escape(title or name)}' style='white-space:nowrap;overflow:hidden;"
        f"text-overflow:ellipsis;max-width:100%'><code>{escape(shown or name)}</code>{note}</div>",
        layout=widgets.Layout(width=LABEL_WIDTH, min_width=LABEL_MIN_WIDTH, max_width="100%", flex="0 1 auto",
                              overflow="hidden"))


def fitting(toggle: widgets.ToggleButtons, width: str) -> None:
    """A row's buttons on one line while the panel has room (the toggle is as wide as all its buttons);
    in a narrow panel (a long name, a narrow notebook) the row wraps the toggle under the name and the
    toggle shrinks, down to one button's width, its buttons wrapping among themselves: never past the
    panel's edge."""
    px = int(width.removesuffix("px")) + BUTTON_MARGIN_PX
    every = len(toggle.options) * px
    toggle.layout = widgets.Layout(width=f"{every}px", min_width=f"{px}px", max_width="100%", flex=f"0 1 {every}px")


#: A row: its name, its buttons and its counts side by side while they fit, else wrapped onto more lines.
ROW = {"flex_flow": "row wrap", "align_items": "center", "width": "100%", "max_width": "100%"}
#: A part of a row that holds text (counts, what an entry is): it wraps its words rather than overflow.
SHRINKING = {"flex": "0 1 auto", "min_width": "0", "max_width": "100%"}

#: The chosen mode of each toggle, clearly marked (ipywidgets' own is a light grey on grey): white on blue,
#: bold. Scoped to the panel; in a ``<style>`` of the panel itself, so exported pages show it too.
SELECTED_BACKGROUND = "#1a56b0"
SELECTED_COLOR = "#ffffff"
PANEL_CSS = (
    ".nbcompile-panel .nbcompile-modes .jupyter-button.mod-active,"
    ".nbcompile-panel .nbcompile-modes .widget-toggle-button.mod-active {"
    f"background-color:{SELECTED_BACKGROUND};color:{SELECTED_COLOR};font-weight:bold;"
    "box-shadow:inset 0 0 0 2px #0d3575;}"
    ".nbcompile-panel .nbcompile-modes .jupyter-button.mod-active:disabled {opacity:0.75;}"
)
