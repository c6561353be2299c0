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

function recordText(records, index) {
  return (
    `revision ${escapeText(records.revision[index].slice(0, 12))}` +
    (records.dirty[index] ? " (dirty)" : "") +
    (records.calibration && records.calibration[index] ? "<br>calibration run" : "") +
    (flaggedRecord(records, index) ? `<br>verdict ${escapeText(records.performance[index])}` : "") +
    `<br>created ${escapeText(records.created[index])}` +
    `<br>record ${escapeText(records.sha[index].slice(0, 12))}`
  );
}

function drawPanel(element, panel, data) {
  const records = data.records;
  const traces = [];
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
        line: {
          width: series.x.map((r) => (flaggedRecord(records, r) ? 2 : 0)),
          color: "#cf222e",
        },
      },
      line: { color: color, width: 1.5 },
      name: `${name} median`, legendgroup: name,
      text: series.x.map((r, i) =>
        `<b>${name}</b> median ${series.median[i]} ${panel.unit}` +
        `<br>${recordText(records, r)}<br>n kept ${series.n_kept[i]} of ${series.n[i]}`),
      hovertemplate: "%{text}<extra></extra>",
    });
    if (series.markers) points += series.x.length;
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
