"""CSS and JavaScript inlined into the HTML report (no network, no CDN).

The script reads the JSON document in ``<script id="report-data" type="application/json">`` and draws
SVG charts sized to the window (redrawn on resize): ``#overview`` (the whole step on a broken axis:
warm-up, a steady-state period, cool-down, the elided middle marked), ``#detail`` (a zoomable window:
wheel or the buttons zoom, drag pans, a click on the overview moves it), ``#memory`` and ``#breakdown``.

Each chart's SVG carries what the headless-browser test checks: ``data-drawn`` (rectangles drawn),
``data-ops`` (op rectangles at least 1 px wide, per stage in ``data-ops-min``), ``data-op-px`` (their
median width), ``data-comm`` (the communication kinds drawn at least 1 px wide) and ``data-overflow``
(text elements whose box leaves the SVG).
"""

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 20px; color: #222; }
h1 { font-size: 20px; margin-bottom: 4px; } h2 { font-size: 16px; margin: 24px 0 6px; }
h3 { font-size: 13px; margin: 14px 0 4px; color: #444; }
.sub, .note { color: #555; margin-top: 0; font-size: 13px; }
.warn { color: #8a4b00; background: #fff4e0; padding: 4px 8px; border-left: 3px solid #e69500; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border-bottom: 1px solid #e4e4e4; padding: 3px 10px; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.kpi { display: inline-block; margin-right: 28px; } .kpi b { display: block; font-size: 22px; }
.bad { color: #c0392b; font-weight: bold; } .ok { color: #2e7d32; font-weight: bold; }
.legend { margin: 4px 0; } .legend span { display: inline-block; margin-right: 14px; font-size: 12px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -2px; }
.chart { width: 100%; overflow: hidden; }
.controls button { font-size: 12px; margin-right: 4px; padding: 1px 8px; }
.bar { display: inline-block; width: 160px; height: 10px; background: #e8e8e8; vertical-align: middle; }
.bar i { display: block; height: 10px; background: #f28e2b; }
svg text { font-size: 11px; fill: #333; } svg text.in { font-size: 10px; fill: #fff; pointer-events: none; }
svg .brush { fill: none; stroke: #222; stroke-width: 1.5; }
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
  function text(x, y, s, parent, anchor, cls) {
    const t = el('text', {x: x, y: y, 'text-anchor': anchor || 'start'}, parent);
    if (cls) t.setAttribute('class', cls);
    t.textContent = s; return t;
  }
  function nice(raw) {
    const p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    return [1, 2, 5, 10].map(m => m * p).find(s => s >= raw) || raw;
  }
  function unitOf(spanUs) { return spanUs >= 2e6 ? [1e6, 's'] : spanUs >= 2e3 ? [1e3, 'ms'] : [1, 'µs']; }
  function fmt(us, unit, step) {
    const v = us / unit[0], d = Math.max(0, -Math.floor(Math.log10(step / unit[0] + 1e-12)));
    return v.toFixed(Math.min(d, 3)) + ' ' + unit[1];
  }
  function legend(id, items) {
    const box = document.getElementById(id);
    if (!box) return;
    box.textContent = '';
    items.forEach(([name, color]) => { const s = document.createElement('span');
      s.innerHTML = '<i style="background:' + color + '"></i>'; s.appendChild(document.createTextNode(name));
      box.appendChild(s); });
  }
  function widthOf(host) { return Math.max(480, Math.floor(host.getBoundingClientRect().width) || 1000); }
  function checkText(svg, W, H) {  // text elements whose box leaves the SVG (the browser test reads it)
    let out = 0;
    svg.querySelectorAll('text').forEach(t => { const b = t.getBBox();
      if (b.x < -0.5 || b.y < -0.5 || b.x + b.width > W + 0.5 || b.y + b.height > H + 0.5) out++; });
    svg.setAttribute('data-overflow', out);
  }

  // ---------------------------------------------------------------- timeline segments
  const T = data.timeline, K = T.kinds, opKinds = 3, segs = [];
  const shareSum = T.shares.reduce((a, s) => a + s[1], 0);
  for (let i = 0; i < T.ops.length; i += 6) {
    const [r, k, a, d, mb, c] = T.ops.slice(i, i + 6);
    const name = 'FBW'[k] + ' mb' + mb + (T.chunks > 1 ? ' c' + c : '');
    let t = a + d * (1 - shareSum);
    segs.push([r, k, a, t, name, mb]);
    for (const [sk, sh] of T.shares) {
      segs.push([r, sk, t, t + d * sh, name + ': exposed ' + K[sk], -1]); t += d * sh;
    }
  }
  for (let i = 0; i < T.other.length; i += 4) {
    const [r, k, a, d] = T.other.slice(i, i + 4);
    segs.push([r, k, a, a + d, T.labels[K[k]], -1]);
  }
  const rowOf = {}; T.ranks.forEach((r, i) => { rowOf[r] = i; });

  function gantt(host, windows, rowH, onClick, brush, minComm) {
    host.textContent = '';
    const W = widthOf(host), left = 64, right = 14, top = 6, gap = windows.length > 1 ? 26 : 0;
    const H = top + T.ranks.length * rowH + 34;
    const svg = el('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img'}, host);
    const span = windows.reduce((a, w) => a + w[1] - w[0], 0) || 1;
    const px = (W - left - right - gap * (windows.length - 1)) / span, xs = [];
    let x0 = left; windows.forEach(w => { xs.push(x0); x0 += (w[1] - w[0]) * px + gap; });
    const X = (i, t) => xs[i] + (t - windows[i][0]) * px;
    const bins = new Map(), perRow = T.ranks.map(() => 0), widths = [], comm = new Set();
    let drawn = 0;
    function addBin(row, x, k, cover, needed) {
      const key = row * 100000 + x;
      let bin = bins.get(key); if (!bin) { bin = new Float64Array(K.length + 1); bins.set(key, bin); }
      bin[k] += cover; if (needed) bin[K.length] = 1;
    }
    T.ranks.forEach((r, i) => text(left - 6, top + i * rowH + rowH / 2 + 4, 'stage ' + r, svg, 'end'));
    windows.forEach(([wa, wb], wi) => {
      for (const [r, k, a, b, name, mb] of segs) {
        if (b <= wa || a >= wb) continue;
        const xa = X(wi, Math.max(a, wa)), row = rowOf[r];
        let w = X(wi, Math.min(b, wb)) - xa;
        if (w < 1 && minComm && k >= opKinds && k < opKinds + 7) w = 1;  // the zoomed chart shows every comm slice
        if (w < 1) {  // below a pixel: the pixel shows the kind that fills most of it
          addBin(row, Math.floor(xa), k, w, true); continue;
        }
        addBin(row, Math.floor(xa), k, Math.floor(xa) + 1 - xa, false);  // its share of the pixels it half covers
        addBin(row, Math.floor(xa + w), k, xa + w - Math.floor(xa + w), false);
        const y = top + row * rowH + 1, kind = K[k];
        el('rect', {x: xa.toFixed(2), y: y, width: w.toFixed(2), height: rowH - 2, fill: T.colors[kind],
                    stroke: k < opKinds && w >= 4 ? '#fff' : 'none', 'stroke-width': 0.6,
                    'class': 'seg ' + kind}, svg, name + ': ' + fmt(b - a, [1e3, 'ms'], 1));
        drawn++;
        if (k < opKinds) { perRow[row]++; widths.push(w); } else if (k < opKinds + 7) comm.add(kind);
        if (k < opKinds && mb >= 0 && w >= 20 && rowH >= 14) {
          const lab = w >= 48 ? name.replace(' mb', '') : String(mb);
          text(xa + w / 2, y + rowH / 2 + 2.5, lab, svg, 'middle', 'in');
        }
      }
    });
    bins.forEach((bin, key) => {
      if (!bin[K.length]) return;  // only wide bars touch this pixel: they are drawn
      let best = 0; for (let k = 1; k < K.length; k++) if (bin[k] > bin[best]) best = k;
      const row = Math.floor(key / 100000), x = key % 100000;
      el('rect', {x: x, y: top + row * rowH + 1, width: 1, height: rowH - 2, fill: T.colors[K[best]],
                  'class': 'seg px ' + K[best]}, svg);
      drawn++;
    });
    const axisY = top + T.ranks.length * rowH + 3, unit = unitOf(span), step = nice(span / Math.max(2, W / 110));
    let lastX = -1e9;
    windows.forEach(([wa, wb], wi) => {
      el('line', {x1: X(wi, wa), x2: X(wi, wb), y1: axisY, y2: axisY, stroke: '#888'}, svg);
      for (let v = Math.ceil(wa / step) * step; v <= wb + 1e-6; v += step) {
        const x = X(wi, v); if (x - lastX < 70) continue;
        el('line', {x1: x, x2: x, y1: axisY, y2: axisY + 4, stroke: '#888'}, svg);
        text(Math.min(Math.max(x, left + 24), W - right - 30), axisY + 16, fmt(v, unit, step), svg, 'middle');
        lastX = x;
      }
      if (wi > 0) {  // the elided middle
        const g = X(wi, wa) - gap;
        const hidden = fmt(wa - windows[wi - 1][1], unit, step / 100) + ' of steady state elided';
        el('rect', {x: g + 3, y: top, width: gap - 6, height: T.ranks.length * rowH, fill: 'url(#elided)',
                    'class': 'elided'}, svg, hidden);
        text(g + gap / 2, axisY + 14, '≈', svg, 'middle');
      }
    });
    const defs = el('defs', {}, svg), pat = el('pattern', {id: 'elided', width: 6, height: 6,
      patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)'}, defs);
    el('line', {x1: 0, y1: 0, x2: 0, y2: 6, stroke: '#999', 'stroke-width': 2}, pat);
    if (brush) windows.forEach(([wa, wb], wi) => {
      const a = Math.max(brush[0], wa), b = Math.min(brush[1], wb); if (b <= a) return;
      el('rect', {x: X(wi, a), y: top - 2, width: Math.max(2, X(wi, b) - X(wi, a)),
                  height: T.ranks.length * rowH + 4, 'class': 'brush'}, svg);
    });
    const sorted = widths.sort((a, b) => a - b);
    svg.setAttribute('data-drawn', drawn);
    svg.setAttribute('data-ops', sorted.length);
    svg.setAttribute('data-ops-min', Math.min(...perRow));
    svg.setAttribute('data-op-px', sorted.length ? sorted[sorted.length >> 1].toFixed(1) : 0);
    svg.setAttribute('data-comm', [...comm].join(' '));
    checkText(svg, W, H);
    if (onClick) svg.addEventListener('click', ev => {
      const x = ev.clientX - svg.getBoundingClientRect().left;
      windows.forEach(([wa, wb], wi) => { if (x >= X(wi, wa) && x <= X(wi, wb)) onClick(wa + (x - X(wi, wa)) / px); });
    });
    return {svg: svg, toTime: x => windows[0][0] + (x - left) / px, px: px};
  }

  let detail = T.detail.slice();
  const total = T.total_us;
  function clampDetail() {
    const w = Math.min(Math.max(detail[1] - detail[0], 50), total);
    let a = Math.min(Math.max(detail[0], 0), total - w); detail = [a, a + w];
  }
  function drawTimeline() {
    gantt(document.getElementById('overview'), T.windows, 14, t => {
      const w = detail[1] - detail[0]; detail = [t - w / 2, t + w / 2]; clampDetail(); drawTimeline(); }, detail);
    const d = gantt(document.getElementById('detail'), [detail], 22, null, null, true);
    const svg = d.svg;
    svg.addEventListener('wheel', ev => {
      ev.preventDefault();
      const t = d.toTime(ev.clientX - svg.getBoundingClientRect().left), f = ev.deltaY > 0 ? 1.25 : 0.8;
      detail = [t - (t - detail[0]) * f, t + (detail[1] - t) * f]; clampDetail(); drawTimeline();
    }, {passive: false});
    svg.addEventListener('mousedown', ev => {
      const x0 = ev.clientX, start = detail.slice();
      function move(e) { const dt = (x0 - e.clientX) / d.px; detail = [start[0] + dt, start[1] + dt]; clampDetail();
        drawTimeline(); }
      function up() { window.removeEventListener('mousemove', move); window.removeEventListener('mouseup', up); }
      window.addEventListener('mousemove', move); window.addEventListener('mouseup', up);
    });
    const present = new Set(segs.map(s => s[1]));
    legend('timeline-legend', K.filter((k, i) => present.has(i)).map(k => [T.labels[k], T.colors[k]]));
  }
  function zoom(f) { const c = (detail[0] + detail[1]) / 2, w = (detail[1] - detail[0]) * f;
    detail = [c - w / 2, c + w / 2]; clampDetail(); drawTimeline(); }
  function pan(f) { const w = detail[1] - detail[0]; detail = [detail[0] + w * f, detail[1] + w * f]; clampDetail();
    drawTimeline(); }
  const actions = {'zoom-in': () => zoom(0.5), 'zoom-out': () => zoom(2), 'pan-left': () => pan(-0.5),
    'pan-right': () => pan(0.5), 'steady': () => { detail = T.detail.slice(); drawTimeline(); },
    'whole': () => { detail = [0, total]; drawTimeline(); }};
  document.querySelectorAll('.controls button').forEach(b => b.addEventListener('click', actions[b.dataset.act]));

  function drawMemory() {
    const host = document.getElementById('memory'), m = data.memory;
    if (!m) { host.textContent = 'no memory estimate'; return; }
    host.textContent = '';
    const W = widthOf(host), left = 64, top = 14, H = 120, n = m.stages.length;
    const barW = Math.max(6, Math.min(44, (W - left - 120) / n - 8));
    const svg = el('svg', {width: W, height: H + 52, viewBox: '0 0 ' + W + ' ' + (H + 52), role: 'img'}, host);
    const maxGiB = Math.max(m.capacity_gib || 0, ...m.stages.map(s => s.total_gib)) * 1.08 || 1;
    const y = v => top + H - v / maxGiB * H;
    let drawn = 0;
    const step = nice(maxGiB / 3);
    for (let v = 0; v <= maxGiB; v += step) { text(left - 6, y(v) + 4, v.toFixed(0) + ' GiB', svg, 'end');
      el('line', {x1: left, x2: W - 14, y1: y(v), y2: y(v), stroke: '#eee'}, svg); }
    m.stages.forEach((s, i) => {
      const x = left + 8 + i * (barW + 8);
      let acc = 0;
      m.parts.forEach(p => {
        const v = s.parts[p] || 0; if (v <= 0) return;
        el('rect', {x: x, y: y(acc + v), width: barW, height: Math.max(y(acc) - y(acc + v), 0.5),
                    fill: m.colors[p], 'class': 'mem ' + p}, svg, 'stage ' + s.rank + ' ' + p + ': ' +
           v.toFixed(2) + ' GiB');
        acc += v; drawn++;
      });
      if (barW >= 14 || i % Math.ceil(14 / barW) === 0) text(x + barW / 2, top + H + 14, String(s.rank), svg, 'middle');
    });
    if (m.capacity_gib) {
      el('line', {x1: left, x2: W - 14, y1: y(m.capacity_gib), y2: y(m.capacity_gib), stroke: '#c0392b',
                  'stroke-dasharray': '6 4', 'class': 'capacity'}, svg);
      text(W - 16, y(m.capacity_gib) - 4, 'HBM ' + m.capacity_gib.toFixed(1) + ' GiB', svg, 'end');
    }
    text(left + 8, top + H + 32, 'pipeline stage', svg);
    svg.setAttribute('data-drawn', drawn);
    checkText(svg, W, H + 52);
    legend('memory-legend', m.parts.map(p => [p, m.colors[p]]).concat([['HBM (allocatable)', '#c0392b']]));
  }

  function drawBreakdown() {
    const host = document.getElementById('breakdown'), parts = data.breakdown;
    host.textContent = '';
    const W = widthOf(host), left = 4, H = 46;
    const svg = el('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img'}, host);
    const total = parts.reduce((a, p) => a + p.ms, 0) || 1, scale = (W - 2 * left) / total;
    let x = left, drawn = 0;
    parts.forEach(p => { if (p.ms <= 0) return;
      el('rect', {x: x, y: 4, width: Math.max(p.ms * scale, 0.5), height: 24, fill: p.color, 'class': 'part'}, svg,
         p.name + ': ' + p.ms.toFixed(2) + ' ms (' + (100 * p.ms / total).toFixed(1) + '%)');
      x += p.ms * scale; drawn++; });
    const unit = unitOf(total * 1e3);
    text(left, 42, '0', svg); text(W - left, 42, fmt(total * 1e3, unit, total * 10), svg, 'end');
    svg.setAttribute('data-drawn', drawn);
    checkText(svg, W, H);
    legend('breakdown-legend', parts.filter(p => p.ms > 0).map(p =>
      [p.name + ' ' + (100 * p.ms / total).toFixed(1) + '%', p.color]));
  }

  function drawAll() { drawTimeline(); drawMemory(); drawBreakdown(); }
  drawAll();
  let pending = 0;
  window.addEventListener('resize', () => { clearTimeout(pending); pending = setTimeout(drawAll, 150); });
  document.body.setAttribute('data-rendered', 'yes');
})();
"""
