// Idem console: the overview's three charts (uPlot), from
// GET /api/overview/series. The data is drawn on canvases and never
// turned into HTML. The container (#charts) carries data-live-keep, so
// the live refresh of console.js leaves it alone and announces each
// refresh with an "idem:refreshed" event: the charts then fetch the
// series again and update the same uPlot instances. A boosted navigation
// replaces the body: the old instances are destroyed, never kept.
(function () {
  "use strict";
  var defs = [
    { id: "chart-throughput", title: "Throughput (per second)", series: [
      { key: "applied", label: "applied/s", color: "#3b5bdb" },
      { key: "retried", label: "retried/s", color: "#b54708" }] },
    { id: "chart-dead-letters", title: "Dead letters (per second)", series: [
      { key: "dead_lettered", label: "dead-lettered/s", color: "#c0262d" }] },
    { id: "chart-latency", title: "Commit latency (ms)", series: [
      { key: "commit_latency_p50_seconds", label: "p50 ms", color: "#16794c", scale: 1000 },
      { key: "commit_latency_p99_seconds", label: "p99 ms", color: "#7048e8", scale: 1000 }] }
  ];
  var plots = []; // the uPlot instances drawn, one per def
  var box = null; // the #charts element they are drawn in
  var busy = false;

  function destroy() {
    for (var i = 0; i < plots.length; i++) plots[i].destroy();
    plots = [];
    if (box) box.textContent = "";
    box = null;
  }

  // columns turns the series into uPlot's data: times, then one array per line.
  function columns(data, def) {
    var out = [data.t || []];
    def.series.forEach(function (s) {
      var k = s.scale || 1;
      out.push((data[s.key] || []).map(function (v) { return v === null ? null : v * k; }));
    });
    return out;
  }

  // note marks each chart with how many points it has and its largest
  // value, for tests and for anyone reading the page with a screen reader.
  function note(el, cols) {
    var max = 0;
    for (var i = 1; i < cols.length; i++) {
      for (var j = 0; j < cols[i].length; j++) if (cols[i][j] !== null && cols[i][j] > max) max = cols[i][j];
    }
    el.dataset.points = String(cols[0].length);
    el.dataset.max = String(max);
  }

  // width is the inner width of a chart's card (the grid sizes the cards).
  function width(div) {
    var cs = getComputedStyle(div);
    return Math.max(200, Math.floor(div.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)));
  }

  function build(el, data) {
    el.hidden = false;
    el.textContent = "";
    var ink = getComputedStyle(document.body).color;
    var line = getComputedStyle(document.documentElement).getPropertyValue("--line").trim() || "rgba(128,128,128,.2)";
    defs.forEach(function (def) {
      var div = document.createElement("div");
      div.className = "chart card";
      div.id = def.id;
      el.appendChild(div);
    });
    defs.forEach(function (def) {
      var div = document.getElementById(def.id);
      var cols = columns(data, def);
      var axis = { stroke: ink, grid: { stroke: line, width: 1 }, ticks: { stroke: line, width: 1 } };
      var opts = {
        title: def.title, width: width(div), height: 180,
        scales: { x: { time: true }, y: { range: function (u, lo, hi) { return [0, Math.max(hi, def.id === "chart-latency" ? 1 : 0.1)]; } } },
        axes: [axis, axis],
        series: [{}].concat(def.series.map(function (s) {
          return { label: s.label, stroke: s.color, width: 2, spanGaps: false, points: { show: false } };
        }))
      };
      plots.push(new window.uPlot(opts, cols, div));
      note(div, cols);
    });
    box = el;
  }

  function update(el, data) {
    plots.forEach(function (p, i) {
      var cols = columns(data, defs[i]);
      p.setData(cols);
      note(p.root.parentNode, cols);
    });
  }

  function refresh() {
    var el = document.getElementById("charts");
    if (box && box !== el) destroy();
    if (!el || !window.uPlot || busy) return;
    busy = true;
    fetch(el.dataset.series, { credentials: "same-origin", headers: { Accept: "application/json" } }).then(function (res) {
      if (!res.ok || res.redirected) throw new Error("charts: " + res.status);
      return res.json();
    }).then(function (data) {
      if (document.getElementById("charts") !== el) return; // navigated meanwhile
      if (box === el) update(el, data);
      else { destroy(); build(el, data); }
    }).catch(function () { /* the charts stay as they were */ }).then(function () { busy = false; });
  }

  function resize() {
    if (!box) return;
    plots.forEach(function (p) {
      p.root.hidden = true; // measure the card without the chart in it
      var w = width(p.root.parentNode);
      p.root.hidden = false;
      p.setSize({ width: w, height: 180 });
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", refresh);
  else refresh();
  document.addEventListener("idem:refreshed", refresh);
  document.addEventListener("htmx:afterSettle", function (e) { if (e.target === document.body) refresh(); });
  window.addEventListener("resize", resize);
})();
