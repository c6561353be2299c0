// The key page's charts (plotly.js, loaded before this file). Data comes from the
// page's JSON block; every string from a report is escaped before plotly sees it,
// because plotly reads a few HTML tags in hover text, names and titles.
"use strict";

function escapeText(value) {
  return String(value)
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");
}

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];

function withAlpha(hex, alpha) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${alpha})`;
}

// A record whose verdict against its explicit baseline asked for review or failed.
function flaggedRecord(records, index) {
  return ["review", "failed"].includes(records.performance[index]) ||
    records.correctness[index] === "failed";
}

// The x axis tells records apart: ordinal, short revision (* when dirty) and date.
function recordTick(records, index) {
  return `#${index + 1} ${escapeText(records.revision[index].slice(0, 7))}` +
    (records.dirty[index] ? "*" : "") +
    `<br>${escapeText(records.created[index].slice(5, 16).replace("T", " "))}`;
}

// A record whose run sampled a contended host (the report's status.host_load).
function contendedRecord(records, index) {
  return Boolean(records.contended && records.contended[index]);
}

function recordText(records, index) {
  return (
    `revision ${escapeText(records.revision[index].slice(0, 12))}` +
    (records.dirty[index] ? " (dirty)" : "") +
    (records.calibration && records.calibration[index] ? "<br>calibration run" : "") +
    (contendedRecord(records, index) ? "<br>contended host" : "") +
    (flaggedRecord(records, index) ? `<br>verdict ${escapeText(records.performance[index])}` : "") +
    `<br>created ${escapeText(records.created[index])}` +
    `<br>record ${escapeText(records.sha[index].slice(0, 12))}`
  );
}

// What a median point says on hover: value, record, n kept, the cell's verdict.
function medianText(series, panel, records, name, i) {
  const r = series.x[i];
  const verdict = series.verdict && series.verdict[i];
  return `<b>${name}</b> median ${series.median[i]} ${panel.unit}` +
    `<br>${recordText(records, r)}<br>n kept ${series.n_kept[i]} of ${series.n[i]}` +
    (verdict ? `<br>cell ${escapeText(verdict.replace("_", " "))} vs its baseline` : "");
}

// Medians marked on top of their series: a run on a contended host, a cell flagged
// (slower or possibly slower) against its record's baseline.
const MARKS = [
  {
    kind: "contended", legend: "contended host", symbol: "square-open", size: 13, color: "#bf8700",
    test: (series, records, i) => contendedRecord(records, series.x[i]),
  },
  {
    kind: "flagged", legend: "flagged vs baseline", symbol: "circle-open", size: 17, color: "#cf222e",
    test: (series, records, i) => Boolean(series.flagged && series.flagged[i]),
  },
];

function drawPanel(element, panel, data) {
  const records = data.records;
  const traces = [];
  const marked = { contended: 0, flagged: 0 };
  const legended = new Set();
  const markTraces = []; // drawn last, over every series
  let points = 0;
  const acquisitions = [];
  panel.series.forEach((series) => {
    if (!acquisitions.includes(series.acquisition)) acquisitions.push(series.acquisition);
  });
  panel.series.forEach((series) => {
    const color = PALETTE[acquisitions.indexOf(series.acquisition) % PALETTE.length];
    const name = escapeText(series.acquisition);
    traces.push({
      x: series.x, y: series.p95, mode: "lines", line: { width: 0 }, hoverinfo: "skip",
      showlegend: false, legendgroup: name, type: "scatter",
    });
    traces.push({
      x: series.x, y: series.p5, mode: "lines", line: { width: 0 }, hoverinfo: "skip",
      fill: "tonexty", fillcolor: withAlpha(color, 0.18), name: `${name} p5-p95`,
      legendgroup: name, type: "scatter",
    });
    traces.push({
      x: series.x, y: series.median, customdata: series.x, type: "scatter",
      mode: series.markers ? "lines+markers" : "lines",
      marker: {
        size: series.x.map((r) => (records.calibration && records.calibration[r] ? 8 : 6)),
        color: color,
        symbol: series.x.map((r) =>
          (records.calibration && records.calibration[r] ? "diamond-open" : "circle")),
      },
      line: { color: color, width: 1.5 },
      name: `${name} median`, legendgroup: name,
      text: series.x.map((r, i) => medianText(series, panel, records, name, i)),
      hovertemplate: "%{text}<extra></extra>",
    });
    if (series.markers) points += series.x.length;
    // the marked medians, each kind its own trace (symbol, colour and legend entry)
    MARKS.forEach((mark) => {
      const at = series.x.map((r, i) => i).filter((i) => mark.test(series, records, i));
      if (at.length === 0) return;
      marked[mark.kind] += at.length;
      markTraces.push({
        x: at.map((i) => series.x[i]), y: at.map((i) => series.median[i]),
        customdata: at.map((i) => series.x[i]), type: "scatter", mode: "markers",
        name: mark.legend, legendgroup: mark.kind, showlegend: !legended.has(mark.kind),
        meta: mark.kind,
        marker: { symbol: mark.symbol, size: mark.size, color: mark.color, line: { width: 2, color: mark.color } },
        text: at.map((i) => `<b>${mark.legend}</b><br>` + medianText(series, panel, records, name, i)),
        hovertemplate: "%{text}<extra></extra>",
      });
      legended.add(mark.kind);
    });
    const trials = series.trials;
    traces.push({
      x: trials.x, y: trials.y, customdata: trials.x, type: "scatter", mode: "markers",
      name: `${name} trials`, legendgroup: name,
      marker: {
        size: 5, color: withAlpha(color, 0.55),
        symbol: trials.kept.map((k) => (k ? "circle" : "x")),
      },
      text: trials.x.map((r, i) =>
        `<b>${name}</b> trial ${trials.trial[i]}: ${trials.y[i]} ${panel.unit}` +
        `<br>label ${escapeText(trials.label[i])}, ${trials.kept[i] ? "kept" : "lost"}` +
        `<br>${recordText(records, r)}`),
      hovertemplate: "%{text}<extra></extra>",
    });
    points += trials.x.length;
  });
  traces.push(...markTraces);
  const shapes = data.change_points
    .filter((c) => c.format === panel.format && c.cache_state === panel.cache_state)
    .map((c) => ({
      type: "line", xref: "x", yref: "paper", x0: c.x, x1: c.x, y0: 0, y1: 1,
      line: { dash: "dash", width: 1.5, color: "#444" }, name: "change point",
    }));
  const n = records.sha.length;
  const step = Math.max(1, Math.ceil(n / 8));
  const ticks = [];
  for (let i = 0; i < n; i += step) ticks.push(i);
  const layout = {
    margin: { l: 60, r: 10, t: 10, b: 70 },
    height: 360,
    hovermode: "closest",
    xaxis: {
      title: { text: `record, in ${escapeText(data.order)}` },
      tickvals: ticks,
      ticktext: ticks.map((i) => recordTick(records, i)),
      range: [-0.5, n - 0.5],
      zeroline: false,
    },
    yaxis: { title: { text: `load time (${panel.unit})` }, rangemode: "tozero" },
    legend: { orientation: "h", y: -0.25 },
    shapes: shapes,
  };
  element.dataset.points = String(points);
  element.dataset.changePoints = String(shapes.length);
  element.dataset.contended = String(marked.contended);
  element.dataset.flagged = String(marked.flagged);
  return Plotly.newPlot(element, traces, layout, { displaylogo: false, responsive: true }).then((gd) => {
    gd.on("plotly_click", (event) => {
      const point = event.points[0];
      if (point.customdata === undefined) return;
      window.location.href = `../records/${records.sha[point.customdata]}.html`;
    });
    element.dataset.rendered = "true";
    return gd;
  });
}

function drawKeyPage(data) {
  window.addEventListener("DOMContentLoaded", () => {
    const drawn = data.panels.map((panel, index) =>
      drawPanel(document.getElementById(`chart-${index}`), panel, data));
    Promise.all(drawn).then(() => { document.body.dataset.chartsReady = "true"; });
  });
}
