"""CSS and JavaScript inlined into the HTML report (no network, no CDN).

The script reads the JSON document in ``<script id="report-data" type="application/json">`` and
draws three SVG charts into ``#timeline``, ``#memory`` and ``#breakdown``; each chart's SVG gets a
``data-drawn`` attribute with the number of bars drawn (the headless-browser test reads it).
"""

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; margin-bottom: 4px; } h2 { font-size: 16px; margin-top: 28px; }
h3 { font-size: 13px; margin: 14px 0 4px; color: #444; }
.sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border-bottom: 1px solid #e4e4e4; padding: 3px 10px; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.kpi { display: inline-block; margin-right: 28px; } .kpi b { display: block; font-size: 22px; }
.bad { color: #c0392b; font-weight: bold; } .ok { color: #2e7d32; font-weight: bold; }
.legend span { display: inline-block; margin-right: 14px; font-size: 12px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -2px; }
svg text { font-size: 11px; fill: #333; }
"""

JS = r"""
(function () {
  const data = JSON.parse(document.getElementById('report-data').textContent);
  const NS = 'http://www.w3.org/2000/svg';
  function el(tag, attrs, parent, title) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (title) { const t = document.createElementNS(NS, 'title'); t.textContent = title; e.appendChild(t); }
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(x, y, s, parent, anchor) {
    const t = el('text', {x: x, y: y, 'text-anchor': anchor || 'start'}, parent);
    t.textContent = s; return t;
  }
  function ticks(max, n) {
    const raw = max / n, p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    const step = [1, 2, 5, 10].map(m => m * p).find(s => s >= raw) || raw;
    const out = []; for (let v = 0; v <= max + 1e-9; v += step) out.push(v); return out;
  }
  function legend(id, kinds, colors) {
    const box = document.getElementById(id);
    if (!box) return;
    kinds.forEach(k => { const s = document.createElement('span');
      s.innerHTML = '<i style="background:' + colors[k] + '"></i>' + k; box.appendChild(s); });
  }

  function drawTimeline() {
    const host = document.getElementById('timeline'), t = data.timeline;
    const W = 1100, left = 70, right = 20, rowH = 22, top = 10;
    const H = top + t.ranks.length * rowH + 40;
    const svg = el('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img'}, host);
    const scale = (W - left - right) / (t.total_ms || 1);
    let drawn = 0;
    t.ranks.forEach((r, i) => text(left - 8, top + i * rowH + 15, 'stage ' + r, svg, 'end'));
    const rowOf = {}; t.ranks.forEach((r, i) => { rowOf[r] = i; });
    for (const s of t.segments) {
      const [rank, k, a, b, label] = s, kind = t.kinds[k];
      const w = Math.max((b - a) * scale, 0.4);
      el('rect', {x: (left + a * scale).toFixed(2), y: top + rowOf[rank] * rowH + 2, width: w.toFixed(2),
                  height: rowH - 4, fill: t.colors[kind], 'class': 'seg ' + kind}, svg,
         kind + ' ' + (label || '') + ': ' + (b - a).toFixed(3) + ' ms');
      drawn++;
    }
    const axisY = top + t.ranks.length * rowH + 4;
    el('line', {x1: left, x2: W - right, y1: axisY, y2: axisY, stroke: '#888'}, svg);
    ticks(t.total_ms, 8).forEach(v => {
      const x = left + v * scale;
      el('line', {x1: x, x2: x, y1: axisY, y2: axisY + 4, stroke: '#888'}, svg);
      text(x, axisY + 16, v >= 1000 ? (v / 1000).toFixed(2) + ' s' : v.toFixed(v < 10 ? 2 : 0) + ' ms', svg,
           'middle');
    });
    svg.setAttribute('data-drawn', drawn);
    legend('timeline-legend', t.kinds, t.colors);
  }

  function drawMemory() {
    const host = document.getElementById('memory'), m = data.memory;
    if (!m) { host.textContent = 'no memory estimate'; return; }
    const W = 1100, left = 70, barW = Math.min(60, (W - left - 40) / m.stages.length - 10), top = 20, H = 260;
    const svg = el('svg', {width: W, height: H + 56, viewBox: '0 0 ' + W + ' ' + (H + 56), role: 'img'}, host);
    const maxGiB = Math.max(m.capacity_gib || 0, ...m.stages.map(s => s.total_gib)) * 1.08 || 1;
    const y = v => top + H - v / maxGiB * H;
    let drawn = 0;
    ticks(maxGiB, 5).forEach(v => { text(left - 8, y(v) + 4, v.toFixed(0) + ' GiB', svg, 'end');
      el('line', {x1: left, x2: W - 20, y1: y(v), y2: y(v), stroke: '#eee'}, svg); });
    m.stages.forEach((s, i) => {
      const x = left + 10 + i * (barW + 10);
      let acc = 0;
      m.parts.forEach(p => {
        const v = s.parts[p] || 0; if (v <= 0) return;
        el('rect', {x: x, y: y(acc + v), width: barW, height: Math.max(y(acc) - y(acc + v), 0.5),
                    fill: m.colors[p], 'class': 'mem ' + p}, svg, 'stage ' + s.rank + ' ' + p + ': ' +
           v.toFixed(2) + ' GiB');
        acc += v; drawn++;
      });
      text(x + barW / 2, top + H + 16, String(s.rank), svg, 'middle');
    });
    if (m.capacity_gib) {
      el('line', {x1: left, x2: W - 20, y1: y(m.capacity_gib), y2: y(m.capacity_gib), stroke: '#c0392b',
                  'stroke-dasharray': '6 4', 'class': 'capacity'}, svg);
      text(W - 22, y(m.capacity_gib) - 4, 'HBM ' + m.capacity_gib.toFixed(1) + ' GiB', svg, 'end');
    }
    text(left + 10, top + H + 34, 'pipeline stage', svg);
    svg.setAttribute('data-drawn', drawn);
    legend('memory-legend', m.parts, m.colors);
  }

  function drawBreakdown() {
    const host = document.getElementById('breakdown'), parts = data.breakdown;
    const W = 1100, left = 10, H = 46;
    const svg = el('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img'}, host);
    const total = parts.reduce((a, p) => a + p.ms, 0) || 1, scale = (W - 2 * left) / total;
    let x = left, drawn = 0;
    parts.forEach(p => { if (p.ms <= 0) return;
      el('rect', {x: x, y: 4, width: Math.max(p.ms * scale, 0.5), height: 24, fill: p.color, 'class': 'part'}, svg,
         p.name + ': ' + p.ms.toFixed(2) + ' ms (' + (100 * p.ms / total).toFixed(1) + '%)');
      x += p.ms * scale; drawn++; });
    text(left, 42, '0', svg); text(W - left, 42, total.toFixed(1) + ' ms', svg, 'end');
    svg.setAttribute('data-drawn', drawn);
  }

  drawTimeline(); drawMemory(); drawBreakdown();
  document.body.setAttribute('data-rendered', 'yes');
})();
"""
