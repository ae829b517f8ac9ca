// diagram.js draws the state diagrams of the Saga types page. Each
// <div class="diagram" data-graph="…"> holds a machine as JSON (see
// admin/console_dagre.go); this script lays it out with dagre
// (dagre.min.js, loaded from beside this file only on pages with a
// diagram) and draws the SVG. State and event names are user strings: they
// only ever reach the page through textContent and setAttribute.
(function () {
  "use strict";

  var NS = "http://www.w3.org/2000/svg";
  var NODE_H = 46, NODE_MIN_W = 112, INITIAL = 18, LINE_H = 13, PAD = 4, MARGIN = 10;
  var here = document.currentScript && document.currentScript.src;
  var serial = 0;
  var loading = null;

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(e);
    return e;
  }

  function text(parent, cls, lines) {
    var t = el("text", { "text-anchor": "middle", "class": cls }, parent);
    lines.forEach(function (line, i) {
      var s = el("tspan", { x: 0, y: i * LINE_H }, t);
      s.textContent = line;
    });
    return t;
  }

  // centre moves a text measured at the origin so that its box is centred
  // on (x, y), by its tspans' own coordinates (no transform, so getBBox
  // reports where it is drawn).
  function centre(t, box, x, y) {
    var dy = y - (box.y + box.height / 2);
    Array.prototype.forEach.call(t.childNodes, function (s, i) {
      s.setAttribute("x", x);
      s.setAttribute("y", i * LINE_H + dy);
    });
  }

  function drawNode(layer, n) {
    var parent = layer;
    if (n.href && n.href.charAt(0) === "/") parent = el("a", { href: n.href }, layer);
    var cls = "node" + (n.initial ? " initial" : "") + (n.final ? " final" : "") + (n.count > 0 ? " busy" : "");
    var g = el("g", { "class": cls }, parent);
    g.dataset.state = n.name;
    el("title", {}, g).textContent = n.initial ? "start" : n.name + ": " + n.count + " instance(s)";
    if (n.initial) {
      n.shape = el("circle", { r: INITIAL / 2 }, g);
      return { width: INITIAL, height: INITIAL };
    }
    n.shape = el("rect", { rx: 10, height: NODE_H }, g);
    if (n.final) n.inner = el("rect", { "class": "inner", rx: 8, height: NODE_H - 6 }, g);
    n.nameText = text(g, "name", [n.name]);
    n.countText = text(g, "count", [String(n.count)]);
    n.nameBox = n.nameText.getBBox();
    n.countBox = n.countText.getBBox();
    return { width: Math.max(NODE_MIN_W, Math.ceil(n.nameBox.width) + 32), height: NODE_H };
  }

  function placeNode(n, p) {
    if (n.initial) {
      n.shape.setAttribute("cx", p.x);
      n.shape.setAttribute("cy", p.y);
      return;
    }
    n.shape.setAttribute("x", p.x - p.width / 2);
    n.shape.setAttribute("y", p.y - NODE_H / 2);
    n.shape.setAttribute("width", p.width);
    if (n.inner) {
      n.inner.setAttribute("x", p.x - p.width / 2 + 3);
      n.inner.setAttribute("y", p.y - NODE_H / 2 + 3);
      n.inner.setAttribute("width", p.width - 6);
    }
    centre(n.nameText, n.nameBox, p.x, p.y - 8);
    centre(n.countText, n.countBox, p.x, p.y + 9);
  }

  // curve is a Catmull-Rom spline through pts as cubic Bézier segments:
  // it passes through every point dagre routed, the label's included.
  function curve(pts) {
    var d = "M " + pts[0].x + " " + pts[0].y;
    for (var i = 0; i + 1 < pts.length; i++) {
      var p0 = pts[Math.max(i - 1, 0)], p1 = pts[i], p2 = pts[i + 1], p3 = pts[Math.min(i + 2, pts.length - 1)];
      d += " C " + (p1.x + (p2.x - p0.x) / 6) + " " + (p1.y + (p2.y - p0.y) / 6) + ", " +
        (p2.x - (p3.x - p1.x) / 6) + " " + (p2.y - (p3.y - p1.y) / 6) + ", " + p2.x + " " + p2.y;
    }
    return d;
  }

  // onCircle moves an end of an edge from dagre's box around the Initial
  // dot onto the dot itself.
  function onCircle(p, c) {
    var dx = p.x - c.x, dy = p.y - c.y, len = Math.hypot(dx, dy) || 1;
    return { x: c.x + dx / len * INITIAL / 2, y: c.y + dy / len * INITIAL / 2 };
  }

  // loop is a self-transition: a curve leaving and re-entering the side of
  // the state that faces its label (dagre reserves the label's place beside
  // the state), reaching to 1 unit short of the label's place.
  function loop(p, l) {
    var dx = l.x - p.x, dy = l.y - p.y, sideways = Math.abs(dx) * p.height > Math.abs(dy) * p.width;
    var sx = sideways ? Math.sign(dx) : 0, sy = sideways ? 0 : Math.sign(dy) || -1;
    var bx = p.x + sx * p.width / 2, by = p.y + sy * p.height / 2;
    var gap = sideways ? Math.abs(dx) - p.width / 2 - l.width / 2 : Math.abs(dy) - p.height / 2 - l.height / 2;
    var reach = Math.max(gap - 1, 12) / 0.75, w = sideways ? 10 : 14;
    var a = { x: bx - sy * w, y: by - sx * w }, b = { x: bx + sy * w, y: by + sx * w };
    return "M " + a.x + " " + a.y + " C " + (a.x + sx * reach - sy * w) + " " + (a.y + sy * reach - sx * w) + ", " +
      (b.x + sx * reach + sy * w) + " " + (b.y + sy * reach + sx * w) + ", " + b.x + " " + b.y;
  }

  function draw(box) {
    var data = JSON.parse(box.dataset.graph);
    box.dataset.drawn = "1";
    var marker = "idem-arrow-" + (++serial);
    var svg = el("svg", { xmlns: NS, role: "img", "aria-label": "state diagram" });
    var m = el("marker", { id: marker, viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" }, el("defs", {}, svg));
    el("path", { d: "M 0 0 L 10 5 L 0 10 z", "class": "arrowhead" }, m);
    var root = el("g", {}, svg), edges = el("g", {}, root), nodes = el("g", {}, root);
    box.replaceChildren(svg);

    var g = new window.dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 24, edgesep: 12, ranksep: 36, marginx: 0, marginy: 0 });
    var byID = {};
    data.nodes.forEach(function (n) {
      byID[n.id] = n;
      g.setNode(n.id, drawNode(nodes, n));
    });
    data.edges.forEach(function (e) {
      var eg = el("g", { "class": "edge" }, edges);
      eg.dataset.from = byID[e.from].name;
      eg.dataset.to = byID[e.to].name;
      el("title", {}, eg).textContent = e.title;
      e.path = el("path", { "marker-end": "url(#" + marker + ")" }, eg);
      e.text = text(eg, "event", e.lines);
      e.box = e.text.getBBox();
      g.setEdge(e.from, e.to, { width: e.box.width + 2 * PAD, height: e.box.height + 2 * PAD, labelpos: "c" });
    });
    window.dagre.layout(g);

    data.nodes.forEach(function (n) { placeNode(n, g.node(n.id)); });
    data.edges.forEach(function (e) {
      var l = g.edge(e.from, e.to);
      var from = g.node(e.from), to = g.node(e.to);
      if (e.from === e.to) {
        e.path.setAttribute("d", loop(from, l));
      } else {
        var pts = l.points.slice();
        if (byID[e.from].initial) pts[0] = onCircle(pts[0], from);
        if (byID[e.to].initial) pts[pts.length - 1] = onCircle(pts[pts.length - 1], to);
        e.path.setAttribute("d", curve(pts));
      }
      centre(e.text, e.box, l.x, l.y);
    });

    var b = root.getBBox();
    var vb = [b.x - MARGIN, b.y - MARGIN, b.width + 2 * MARGIN, b.height + 2 * MARGIN].map(Math.round);
    vb[2] += 1;
    vb[3] += 1;
    svg.setAttribute("viewBox", vb.join(" "));
    svg.setAttribute("width", vb[2]);
    svg.setAttribute("height", vb[3]);
    var list = box.parentElement.querySelector(":scope > details.transitions");
    if (list) list.removeAttribute("open");
  }

  function drawAll() {
    var boxes = document.querySelectorAll(".diagram[data-graph]:not([data-drawn])");
    if (boxes.length === 0) return;
    if (!window.dagre) {
      load();
      return;
    }
    boxes.forEach(function (box) {
      try {
        draw(box);
      } catch (err) {
        box.replaceChildren();
        delete box.dataset.drawn;
        console.error("idem: state diagram:", err);
      }
    });
  }

  // load adds dagre.min.js, which lies beside this script, then draws.
  function load() {
    if (loading || !here) return;
    loading = document.createElement("script");
    loading.src = here.replace(/diagram\.js(\?.*)?$/, "dagre.min.js");
    loading.onload = drawAll;
    document.head.appendChild(loading);
  }

  document.addEventListener("DOMContentLoaded", drawAll);
  document.addEventListener("htmx:load", drawAll);
  // The live refresh (console.js) morphs the page: a diagram box comes back
  // empty, without data-drawn, and is drawn again with its new counts.
  document.addEventListener("idem:refreshed", drawAll);
  if (document.readyState !== "loading") drawAll();
})();
