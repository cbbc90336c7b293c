/**
 * CodeMirror 6 gutter markers for graph breaks and recompiles. The markers live in a state
 * field that maps them through every edit (they shift with the text) and drops those on lines
 * the edit touched (the report no longer describes them). Hovering a marker opens a CodeMirror
 * tooltip (JupyterLab attaches tooltips to document.body, so the gutter cannot clip it) with the
 * break's reason, hints, fix and GB link; it stays open while the mouse is on the marker or on it.
 */
import { Extension, RangeSet, RangeSetBuilder, StateEffect, StateField, Text } from '@codemirror/state';
import { EditorView, GutterMarker, Tooltip, gutter, showTooltip } from '@codemirror/view';

import { IMarker, TIP_CAUSE_CHARS, cutText } from './report';

/** How long the tooltip waits, after the mouse left the marker or the tooltip, before it closes. */
export const TIP_CLOSE_DELAY_MS = 300;

class Marker extends GutterMarker {
  constructor(readonly info: IMarker) {
    super();
  }

  eq(other: GutterMarker): boolean {
    return other instanceof Marker && sameInfo(other.info, this.info);
  }

  toDOM(): Node {
    const dot = document.createElement('span');
    dot.className = `nbcompile-marker nbcompile-marker-${this.info.kind}`;
    dot.textContent = this.info.kind === 'break' ? '●' : this.info.kind === 'origin' ? '◆' : '↻';
    // no `title`: the browser's plain tooltip would cover ours and cannot hold a link
    dot.setAttribute('aria-label', this.info.title);
    dot.setAttribute('data-line', String(this.info.line));
    return dot;
  }
}

function sameInfo(a: IMarker, b: IMarker): boolean {
  return a.kind === b.kind && a.title === b.title && a.lines.join('\n') === b.lines.join('\n') &&
    a.links.map(l => l.href).join('\n') === b.links.map(l => l.href).join('\n');
}

/** The tooltip's most height: past it, it scrolls (a line with many causes never covers the notebook). */
export const TIP_MAX_HEIGHT_PX = 220;

/**
 * The tooltip's content: the marker's causes, one line each with its count (cut with an ellipsis, whole
 * on hover), then its hints and fixes, then its links (the GB pages); at most TIP_MAX_HEIGHT_PX tall.
 */
export function tipDOM(info: IMarker): HTMLElement {
  const tip = document.createElement('div');
  tip.className = `nbcompile-tip nbcompile-tip-${info.kind}`;
  // inline, so it holds wherever the stylesheet is not loaded; style/index.css says the same
  tip.style.maxHeight = `${TIP_MAX_HEIGHT_PX}px`;
  tip.style.overflowY = 'auto';
  const causes = Math.max(1, info.causes ?? 1);
  info.lines.forEach((line, i) => {
    const row = document.createElement('div');
    row.className = i < causes ? 'nbcompile-tip-reason nbcompile-tip-cause' : 'nbcompile-tip-line';
    // a cause in one short line, cut between words with an ellipsis (never inside its GB id), whole on hover
    row.textContent = i < causes ? cutText(line, TIP_CAUSE_CHARS) : line;
    if (i < causes) {
      row.title = line;
    }
    tip.appendChild(row);
  });
  for (const link of info.links) {
    const a = document.createElement('a');
    a.href = link.href;
    a.target = '_blank';
    a.rel = 'noopener';
    a.textContent = link.text;
    a.title = link.href;
    const row = document.createElement('div');
    row.className = 'nbcompile-tip-link';
    row.append('docs: ', a);
    tip.appendChild(row);
  }
  return tip;
}

export const setMarkers = StateEffect.define<IMarker[]>();

export function buildMarkers(markers: IMarker[], doc: Text): RangeSet<GutterMarker> {
  const builder = new RangeSetBuilder<GutterMarker>();
  for (const m of [...markers].sort((a, b) => a.line - b.line)) {
    if (m.line >= 1 && m.line <= doc.lines) {
      const line = doc.line(m.line);
      builder.add(line.from, line.from, new Marker(m));
    }
  }
  return builder.finish();
}

export const markerField = StateField.define<RangeSet<GutterMarker>>({
  create: () => RangeSet.empty,
  update(set, tr) {
    if (tr.docChanged) {
      set = set.map(tr.changes);
      const touched: [number, number][] = [];
      tr.changes.iterChangedRanges((_fromA, _toA, fromB, toB) => {
        touched.push([tr.state.doc.lineAt(fromB).from, tr.state.doc.lineAt(toB).to]);
      });
      set = set.update({ filter: from => !touched.some(([a, b]) => from >= a && from <= b) });
    }
    for (const effect of tr.effects) {
      if (effect.is(setMarkers)) {
        set = buildMarkers(effect.value, tr.state.doc);
      }
    }
    return set;
  }
});

/** Opens the tooltip of the marker on a line (1-based), or closes it (null). */
export const setTip = StateEffect.define<number | null>();

interface ITip {
  line: number;
  info: IMarker;
  tooltip: Tooltip;
}

function markerAt(set: RangeSet<GutterMarker>, doc: Text, line: number): IMarker | null {
  if (line < 1 || line > doc.lines) {
    return null;
  }
  const from = doc.line(line).from;
  let found: IMarker | null = null;
  set.between(from, from, (start, _end, value) => {
    if (start === from && value instanceof Marker) {
      found = value.info;
      return false;
    }
    return undefined;
  });
  return found;
}

function makeTip(line: number, info: IMarker, doc: Text): ITip {
  const hold = (view: EditorView, dom: HTMLElement) => {
    dom.addEventListener('mouseenter', () => cancelClose(view));
    dom.addEventListener('mouseleave', () => scheduleClose(view));
  };
  return {
    line, info,
    tooltip: {
      pos: doc.line(line).from,
      above: false,
      create: view => {
        const dom = tipDOM(info);
        hold(view, dom);
        return { dom, offset: { x: -4, y: 2 } };
      }
    }
  };
}

/** The open tooltip: it follows its marker (new report, same line: new content) and goes with it. */
export const tipField = StateField.define<ITip | null>({
  create: () => null,
  update(tip, tr) {
    let line = tip?.line ?? null;
    if (tip && tr.docChanged) {
      line = null;  // the line moved or changed: the report no longer describes it
    }
    for (const effect of tr.effects) {
      if (effect.is(setTip)) {
        line = effect.value;
      }
    }
    if (line === null) {
      return null;
    }
    const info = markerAt(tr.state.field(markerField), tr.state.doc, line);
    if (!info) {
      return null;
    }
    if (tip && tip.line === line && sameInfo(tip.info, info)) {
      return tip;
    }
    return makeTip(line, info, tr.state.doc);
  },
  provide: field => showTooltip.compute([field], state => state.field(field)?.tooltip ?? null)
});

const closeTimers = new WeakMap<EditorView, ReturnType<typeof setTimeout>>();

function cancelClose(view: EditorView): void {
  const timer = closeTimers.get(view);
  if (timer !== undefined) {
    clearTimeout(timer);
    closeTimers.delete(view);
  }
}

function scheduleClose(view: EditorView): void {
  cancelClose(view);
  closeTimers.set(view, setTimeout(() => {
    closeTimers.delete(view);
    if (view.state.field(tipField, false)) {
      view.dispatch({ effects: setTip.of(null) });
    }
  }, TIP_CLOSE_DELAY_MS));
}

/** Opens the tooltip of the marker on `line` (1-based), as hovering it does. */
export function openTip(view: EditorView, line: number): void {
  cancelClose(view);
  if (view.state.field(tipField)?.line !== line) {
    view.dispatch({ effects: setTip.of(line) });
  }
}

export const markerGutter: Extension = [
  markerField,
  tipField,
  gutter({
    class: 'nbcompile-gutter',
    markers: view => view.state.field(markerField),
    domEventHandlers: {
      mouseover(view, block, event) {
        const line = view.state.doc.lineAt(block.from).number;
        if ((event.target as Element | null)?.closest?.('.nbcompile-marker') &&
            markerAt(view.state.field(markerField), view.state.doc, line)) {
          openTip(view, line);
        }
        return false;
      },
      mouseout(view) {
        if (view.state.field(tipField)) {
          scheduleClose(view);
        }
        return false;
      }
    }
  })
];

/** The lines (1-based) that carry a marker now. */
export function markedLines(view: EditorView): number[] {
  const lines: number[] = [];
  const cursor = view.state.field(markerField).iter();
  for (; cursor.value; cursor.next()) {
    lines.push(view.state.doc.lineAt(cursor.from).number);
  }
  return lines;
}
