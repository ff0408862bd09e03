// Draws the report's plots as SVG from the inline JSON data (no library, no network).
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const colors = {};
  data.categories.forEach(function (c) { colors[c.key] = c.color; });

  function el(tag, attrs, parent, text) {
    const node = document.createElementNS(NS, tag);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    if (parent) { parent.appendChild(node); }
    return node;
  }
  function tip(node, text) { el("title", {}, node, text); }
  function fmt(s) {
    if (s === 0) { return "0 s"; }
    if (s >= 100) { return s.toFixed(0) + " s"; }
    if (s >= 1) { return s.toFixed(2) + " s"; }
    return (s * 1000).toFixed(1) + " ms";
  }
  function size(svg, height) {
    const width = Math.max(svg.clientWidth || 0, 600);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("height", height);
    return width;
  }
  function ticks(lo, hi, n) {
    const span = hi - lo || 1;
    const raw = span / n;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map(function (m) { return m * mag; }).find(function (s) { return s >= raw; });
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9; t += step) { out.push(t); }
    out.step = step;
    return out;
  }
  // the labels of an axis's ticks (seconds): one unit and one number of decimals for them all
  // (never "50.00 s" beside "100 s"), the unit that of the largest
  function tickLabels(marks) {
    const hi = marks.length ? marks[marks.length - 1] : 0;
    const unit = hi >= 1 ? 1 : 1000;
    const step = (marks.step || 1) * unit;
    const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    return marks.map(function (t) { return (t * unit).toFixed(decimals) + (unit === 1 ? " s" : " ms"); });
  }

  // 1. goodput breakdown: one bar, 100% of the wall time
  (function () {
    const svg = document.getElementById("breakdown");
    const width = size(svg, 70);
    const left = 10, right = width - 10, top = 10, h = 30;
    let x = left;
    data.categories.forEach(function (c) {
      const w = (right - left) * c.share;
      if (w <= 0) { return; }
      const r = el("rect", { x: x, y: top, width: Math.max(w, 0.5), height: h, fill: c.color, "class": "category", "data-category": c.key }, svg);
      tip(r, c.title + ": " + c.text + " (" + (c.share * 100).toFixed(1) + "%)");
      if (w > 60) { el("text", { x: x + 4, y: top + 19, fill: "#fff" }, svg, (c.share * 100).toFixed(1) + "%"); }
      x += w;
    });
    el("text", { x: left, y: top + h + 20 }, svg, "wall time " + fmt(data.wall) + ", goodput " + (data.goodput * 100).toFixed(1) + "%");
  })();

  // 2. job timeline: lanes per process
  (function () {
    const svg = document.getElementById("timeline");
    const lanes = data.lanes;
    const laneH = 12, gap = 8, head = 14, left = 90, top = 4, axisH = 24;
    const blockH = head + lanes.length * laneH + gap;
    const blocks = data.processes.length;
    const height = top + blocks * blockH + axisH;
    const width = size(svg, height);
    const right = width - 10;
    const scale = function (t) { return left + (right - left) * (t / (data.wall || 1)); };
    data.runs.forEach(function (run, i) {
      if (i === 0) { return; }
      const prev = data.runs[i - 1];
      const r = el("rect", { x: scale(prev.end), y: top, width: Math.max(scale(run.start) - scale(prev.end), 1), height: height - top - axisH, fill: colors.restart, opacity: 0.35, "class": "restart" }, svg);
      tip(r, "restart: " + fmt(run.start - prev.end));
    });
    data.processes.forEach(function (p, b) {
      const y0 = top + b * blockH;
      el("text", { x: 4, y: y0 + 11, "font-weight": "bold" }, svg, p.label);
      lanes.forEach(function (lane, k) {
        const y = y0 + head + k * laneH;
        el("line", { x1: left, x2: right, y1: y + laneH, y2: y + laneH, "class": "grid" }, svg);
        el("text", { x: left - 4, y: y + 10, "text-anchor": "end", fill: "#8a93a3" }, svg, lane.title);
      });
    });
    data.bars.forEach(function (bar) {
      const p = bar[0], lane = bar[1], start = bar[2], end = bar[3];
      const y = top + data.processIndex[p] * blockH + head + lane * laneH + 1;
      const x = scale(start);
      const r = el("rect", { x: x, y: y, width: Math.max(scale(end) - x, 0.75), height: laneH - 2, fill: lanes[lane].color, "class": "bar" }, svg);
      if (bar[6]) { r.setAttribute("stroke", "#c0392b"); }
      tip(r, bar[4] + (bar[5] !== "" ? " " + bar[5] : "") + ": " + fmt(end - start) + " at " + fmt(start));
    });
    const axisY = height - axisH + 4;
    el("line", { x1: left, x2: right, y1: axisY, y2: axisY, "class": "axis" }, svg);
    const marks = ticks(0, data.wall, 8);
    const labels = tickLabels(marks);
    marks.forEach(function (t, k) {
      el("text", { x: scale(t), y: axisY + 14, "text-anchor": k === 0 ? "start" : "middle", "class": "time-tick" }, svg, labels[k]);
    });
    // the legend of the lanes' colours (and of the marks on them), beside the plot
    const legend = document.getElementById("timeline-legend");
    const swatch = function (li, attrs) {
      const icon = el("svg", { width: 16, height: 12, "aria-hidden": "true" }, li);
      el("rect", Object.assign({ x: 1, y: 1, width: 14, height: 10 }, attrs), icon);
    };
    const item = function (key, text, attrs) {
      const li = document.createElement("li");
      li.setAttribute("data-lane", key);
      swatch(li, attrs);
      li.appendChild(document.createTextNode(text));
      legend.appendChild(li);
    };
    lanes.forEach(function (lane) { item(lane.title, lane.title, { fill: lane.color }); });
    if (data.runs.length > 1) { item("restart", "restart (between runs)", { fill: colors.restart, opacity: 0.35 }); }
    if (data.bars.some(function (bar) { return bar[6]; })) {
      item("error", "a span that ended in an error", { fill: "#fff", stroke: "#c0392b" });
    }
  })();

  // 3. step time per iteration (the slowest rank's), the first iteration marked
  (function () {
    const svg = document.getElementById("steps");
    const steps = data.steps;
    const height = 232, left = 60, top = 22, bottom = 30;
    const width = size(svg, height);
    const right = width - 10;
    if (!steps.length) {
      el("text", { x: left, y: 40, "class": "empty" }, svg, "No iteration spans in the capture (the step group was not recorded).");
      return;
    }
    const ymax = Math.max.apply(null, steps.map(function (s) { return s[2]; })) * 1.05 || 1;
    // the points start inset from the y axis's labels: no label touches the first point
    const inset = 12;
    const xs = function (i) { return left + inset + (right - left - inset) * (steps.length > 1 ? i / (steps.length - 1) : 0.5); };
    const ys = function (v) { return top + (height - top - bottom) * (1 - v / ymax); };
    const ymarks = ticks(0, ymax, 4);
    const ylabels = tickLabels(ymarks);
    ymarks.forEach(function (t, k) {
      el("line", { x1: left, x2: right, y1: ys(t), y2: ys(t), "class": "grid" }, svg);
      el("text", { x: left - 4, y: ys(t) + 4, "text-anchor": "end", "class": "ytick" }, svg, ylabels[k]);
    });
    if (data.stepMedian !== null) {
      const m = el("line", { x1: left, x2: right, y1: ys(data.stepMedian), y2: ys(data.stepMedian), stroke: "#8e44ad", "stroke-dasharray": "4 3" }, svg);
      tip(m, "median (first iteration apart): " + fmt(data.stepMedian));
    }
    // one line per run: a restart is a gap (a dashed rule), never a line from one run's last
    // iteration to the next run's first
    let segment = [];
    let run = null;
    const line = function () {
      if (!segment.length) { return; }
      el("polyline", { points: segment.join(" "), fill: "none", stroke: colors.goodput, "stroke-width": 1.5, "class": "step-line", "data-run": String(run) }, svg);
    };
    steps.forEach(function (s, i) {
      if (i > 0 && s[0] !== steps[i - 1][0]) {
        line();
        segment = [];
        const x = (xs(i - 1) + xs(i)) / 2;
        el("line", { x1: x, x2: x, y1: top, y2: height - bottom, stroke: "#999", "stroke-dasharray": "2 3", "class": "run-break" }, svg);
      }
      run = s[0];
      segment.push(xs(i).toFixed(1) + "," + ys(s[2]).toFixed(1));
    });
    line();
    const every = Math.max(1, Math.floor(steps.length / 400));
    steps.forEach(function (s, i) {
      if (i % every !== 0 && !s[3]) { return; }
      const c = el("circle", { cx: xs(i), cy: ys(s[2]), r: s[3] ? 4 : 2.5, fill: s[3] ? colors.first_iteration : colors.goodput, "class": "step" }, svg);
      tip(c, "run " + s[0] + ", iteration " + s[1] + ": " + fmt(s[2]) + (s[3] ? " (first iteration)" : "") + ", slowest: " + s[4]);
    });
    el("line", { x1: left, x2: right, y1: height - bottom, y2: height - bottom, "class": "axis" }, svg);
    // x ticks: about eight points, each labelled with its iteration (and its run, after a restart)
    const marks = ticks(0, steps.length - 1, 8).filter(function (t) { return t === Math.round(t); });
    if (marks[marks.length - 1] !== steps.length - 1) { marks.push(steps.length - 1); }
    marks.forEach(function (i, k) {
      const label = (steps[i][0] !== steps[0][0] ? "run " + steps[i][0] + ": " : "") + steps[i][1];
      el("line", { x1: xs(i), x2: xs(i), y1: height - bottom, y2: height - bottom + 4, "class": "axis" }, svg);
      if (k === marks.length - 1 || xs(marks[k + 1]) - xs(i) > 40) {
        const anchor = k === 0 ? "start" : k === marks.length - 1 ? "end" : "middle";
        el("text", { x: xs(i), y: height - bottom + 15, "text-anchor": anchor, "class": "xtick" }, svg, label);
      }
    });
    el("text", { x: left - 6, y: height - bottom + 15, "text-anchor": "end", "class": "axis-title" }, svg, "iteration");
    el("text", { x: 4, y: 12, "class": "axis-title" }, svg, "step time");
  })();

  // 4. heat strip: step time per rank (row) and iteration (column), relative to the median
  (function () {
    const svg = document.getElementById("heat");
    const heat = data.heat;
    const rowH = 16, left = 150, top = 8, bottom = 22;
    const height = top + Math.max(heat.rows.length, 1) * rowH + bottom;
    const width = size(svg, height);
    const right = width - 10;
    if (!heat.rows.length || !heat.columns.length) {
      el("text", { x: 10, y: 24, "class": "empty" }, svg, "One process per run: no spread across ranks to show.");
      return;
    }
    const lo = heat.min, hi = heat.max > heat.min ? heat.max : heat.min + 1e-9;
    const w = (right - left) / heat.columns.length;
    heat.rows.forEach(function (row, r) {
      el("text", { x: 4, y: top + r * rowH + 12 }, svg, row.label);
      row.values.forEach(function (v, c) {
        if (v === null) { return; }
        const f = (v - lo) / (hi - lo);
        const light = 92 - 55 * f;
        const cell = el("rect", { x: left + c * w, y: top + r * rowH, width: Math.max(w, 0.5), height: rowH - 2, fill: "hsl(8, 75%, " + light.toFixed(0) + "%)", "class": "cell" }, svg);
        tip(cell, row.label + ", " + heat.columns[c] + ": " + fmt(v));
      });
    });
    el("text", { x: left, y: height - 6 }, svg, heat.columns[0]);
    el("text", { x: right, y: height - 6, "text-anchor": "end" }, svg, heat.columns[heat.columns.length - 1] + " (darker: slower; " + fmt(lo) + " to " + fmt(hi) + ")");
  })();

  document.body.setAttribute("data-rendered", "true");
})();
