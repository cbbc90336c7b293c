/**
 * CodeMirror 6 gutter markers for graph breaks and recompiles. The markers live in a state
 * field that maps them through every edit (they shift with the text) and drops those on lines
 * the edit touched (the report no longer describes them).
 */
import { Extension, RangeSet, RangeSetBuilder, StateEffect, StateField, Text } from '@codemirror/state';
import { EditorView, GutterMarker, gutter } from '@codemirror/view';

import { IMarker } from './report';

class Marker extends GutterMarker {
  constructor(readonly info: IMarker) {
    super();
  }

  eq(other: GutterMarker): boolean {
    return other instanceof Marker && other.info.kind === this.info.kind && other.info.title === this.info.title &&
      other.info.lines.join('\n') === this.info.lines.join('\n');
  }

  toDOM(): Node {
    const dot = document.createElement('span');
    dot.className = `nbcompile-marker nbcompile-marker-${this.info.kind}`;
    dot.textContent = this.info.kind === 'break' ? '●' : '↻';
    dot.title = this.info.lines.join('\n');
    dot.setAttribute('data-line', String(this.info.line));
    const tip = document.createElement('div');
    tip.className = 'nbcompile-tip';
    for (const line of this.info.lines) {
      const row = document.createElement('div');
      row.textContent = line;
      tip.appendChild(row);
    }
    for (const link of this.info.links) {
      const a = document.createElement('a');
      a.href = link.href;
      a.target = '_blank';
      a.rel = 'noopener';
      a.textContent = `${link.text}: ${link.href}`;
      tip.appendChild(a);
    }
    dot.appendChild(tip);
    return dot;
  }
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

export const markerGutter: Extension = [
  markerField,
  gutter({ class: 'nbcompile-gutter', markers: view => view.state.field(markerField) })
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
