// Idem console: live regions and the absolute/relative time toggle.
// Loaded in <head> without defer, so the chosen time form applies before
// the first paint; everything else waits for the DOM.
(function () {
  "use strict";
  var root = document.documentElement;
  function stored(k, def) {
    try { return localStorage.getItem(k) || def; } catch (e) { return def; }
  }
  function store(k, v) {
    try { localStorage.setItem(k, v); } catch (e) { /* private mode: not remembered */ }
  }

  // Time: <time> elements hold both forms; a class on <html> shows one.
  // Without JavaScript the relative form shows (the absolute one is in
  // the title).
  function applyTime() {
    var abs = stored("idem.time", "relative") === "absolute";
    root.classList.toggle("time-abs", abs);
    var b = document.getElementById("time-toggle");
    if (b) {
      b.textContent = abs ? "Times: absolute (UTC)" : "Times: relative";
      b.setAttribute("aria-pressed", abs ? "true" : "false");
    }
  }
  applyTime();

  // Live: the element marked data-live re-fetches its page every
  // data-live seconds and swaps in the new content, unless paused.
  var userPaused = stored("idem.live", "on") === "off";
  var timer = null;

  // pauseReason says why the region must not be replaced now, or "".
  function pauseReason(region) {
    if (userPaused) return "paused";
    if (document.hidden) return "paused: tab hidden";
    var a = document.activeElement;
    if (a && a !== document.body && (a.matches("input, textarea, select") || a.isContentEditable)) return "paused: typing";
    if (region.querySelector("tr .actions:hover, tr button:focus, button:active")) return "paused: pointer on an action";
    var sel = window.getSelection && window.getSelection();
    if (sel && !sel.isCollapsed && String(sel).trim() !== "") return "paused: text selected";
    var fields = document.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if ((f.type === "checkbox" || f.type === "radio") ? f.checked !== f.defaultChecked : f.tagName === "SELECT" ? dirtySelect(f) : (f.type !== "hidden" && f.value !== normalised(f))) {
        return f.type === "checkbox" ? "paused: box ticked" : "paused: unsent input";
      }
    }
    // A details element the refresh keeps as it is (data-live-keep, such as
    // the Saga types page's list of transitions) does not hold the page.
    if (region.querySelector("details[open]:not([data-live-keep] details, [data-live-keep])")) return "paused: details open";
    if (region.querySelector("[role=alertdialog]")) return "paused: confirming";
    return "";
  }
  // normalised is the value a field shows for the one the page came with:
  // a one-line field drops line breaks (and an email or URL field trims
  // spaces), a text area writes every line break as \n. Comparing the raw
  // attribute would read a filter holding a newline as unsent input for good.
  function normalised(f) {
    var v = f.defaultValue;
    if (f.tagName === "TEXTAREA") return v.replace(/\r\n?/g, "\n");
    v = v.replace(/[\r\n]/g, "");
    return f.type === "email" || f.type === "url" ? v.trim() : v;
  }
  // dirtySelect: a choice other than the one the page came with (the
  // option marked selected, or the first one).
  function dirtySelect(s) {
    var def = 0;
    for (var i = 0; i < s.options.length; i++) {
      if (s.options[i].defaultSelected) { def = i; break; }
    }
    return s.options.length > 0 && s.selectedIndex !== def;
  }

  function indicate(region, reason) {
    var b = document.getElementById("live-toggle");
    if (!b) return;
    b.hidden = false;
    if (!reason && stale) {
      b.dataset.state = "stale";
      b.textContent = "⚠ stale since " + stale.since + " (" + stale.status + ")";
      b.title = "The last " + failures + " refresh(es) failed; the page shows what it had at " + stale.since + " UTC. It tries again in " + delayOf(region) + " s; click to pause";
      return;
    }
    b.dataset.state = reason ? "paused" : "live";
    b.textContent = reason ? "❚❚ " + reason : "● live";
    b.title = userPaused ? "Live updates are off: click to resume" : reason ? "Live updates wait until you are done here; click to turn them off" : "This page updates itself every " + region.dataset.live + " s; click to pause";
  }

  // Failed refreshes: since when (UTC hh:mm:ss) and why the page is stale,
  // and how many failed in a row (the next waits longer each time).
  var stale = null, failures = 0;
  function failed(region, status) {
    failures++;
    if (!stale) stale = { since: new Date().toISOString().slice(11, 19), status: status };
    stale.status = status;
    region.dataset.liveFailures = String(failures);
    indicate(region, "");
  }
  function answered(region) {
    stale = null;
    failures = 0;
    region.dataset.liveFailures = "0";
    indicate(region, pauseReason(region));
  }
  // refused reads a failed answer: a 401 carries where to sign in again
  // (HX-Redirect), and the page goes there.
  function refused(res) {
    var to = res.headers.get("HX-Redirect");
    if (res.status === 401 && to) {
      location.assign(to);
      return "signed out";
    }
    return "HTTP " + res.status + (res.statusText ? " " + res.statusText : "");
  }

  // morphChildren turns the children of live into those of next (a
  // parsed copy of the new content) in place: a node that is still there
  // is kept and patched, so a row the page already had stays the same
  // element (hover, scroll and a click under way survive a refresh), and
  // only what changed is touched.
  // Children with an id (every row of a live table has one, derived from
  // its item) are matched by id, wherever they moved to: a row node is
  // never reused for another item, so the button under the pointer stays
  // the one of its row when rows sort in before it.
  function morphChildren(live, next) {
    var keyed = {}, c;
    for (c = live.firstChild; c; c = c.nextSibling) {
      if (c.nodeType === 1 && c.id) keyed[c.id] = c;
    }
    var a = live.firstChild, b = next.firstChild;
    while (b) {
      var nb = b.nextSibling;
      // Whitespace between elements may be on one side only (the parser
      // drops it at the start of a fragment): it does not shift the rest.
      if (a && blank(a) && !(b.nodeType === 3)) { a = a.nextSibling; continue; }
      if (blank(b) && a && a.nodeType !== 3) { b = nb; continue; }
      var id = b.nodeType === 1 ? b.id : "", m = id ? keyed[id] : null;
      if (m) delete keyed[id];
      if (m && m.nodeName === b.nodeName) {
        if (m === a) a = a.nextSibling;
        else live.insertBefore(m, a);
        morph(m, b);
      } else if (!a) {
        live.appendChild(b);
      } else if (id || (a.nodeType === 1 && a.id)) {
        live.insertBefore(b, a); // a new item, or a keyed node that is not b's
      } else if (a.nodeType === b.nodeType && a.nodeName === b.nodeName) {
        morph(a, b);
        a = a.nextSibling;
      } else {
        var na = a.nextSibling;
        live.replaceChild(b, a);
        a = na;
      }
      b = nb;
    }
    while (a) {
      var n = a.nextSibling;
      live.removeChild(a);
      a = n;
    }
  }
  function blank(n) { return n.nodeType === 3 && n.nodeValue.trim() === ""; }
  function morph(live, next) {
    if (live.nodeType !== 1) {
      if (live.nodeValue !== next.nodeValue) live.nodeValue = next.nodeValue;
      return;
    }
    // An element a page script owns (the overview's charts) is kept as it is.
    if (live.hasAttribute("data-live-keep")) return;
    var i, at;
    for (i = 0; i < next.attributes.length; i++) {
      at = next.attributes[i];
      if (live.getAttribute(at.name) !== at.value) live.setAttribute(at.name, at.value);
    }
    for (i = live.attributes.length - 1; i >= 0; i--) {
      at = live.attributes[i];
      if (!next.hasAttribute(at.name)) live.removeAttribute(at.name);
    }
    morphChildren(live, next);
  }

  function tick() {
    var region = document.querySelector("[data-live][id]");
    timer = null;
    if (!region) return;
    region.dataset.liveTicks = String(Number(region.dataset.liveTicks || 0) + 1);
    var reason = pauseReason(region);
    indicate(region, reason);
    var next = function () { schedule(region); };
    if (reason) { next(); return; }
    var url = location.pathname + location.search;
    fetch(url, { headers: { "HX-Request": "true" }, credentials: "same-origin" }).then(function (res) {
      if (!res.ok) return failed(region, refused(res));
      if (res.redirected) return failed(region, "redirected");
      return res.text().then(function (text) {
        answered(region);
        var now = document.getElementById(region.id);
        // The operator may have started something, or left, meanwhile.
        if (now !== region || location.pathname + location.search !== url || pauseReason(region)) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        morphChildren(region, doc.body);
        if (window.htmx) window.htmx.process(region);
        applyTime();
        document.dispatchEvent(new CustomEvent("idem:refreshed"));
      });
    }).catch(function () { failed(region, "no answer"); }).then(next);
  }
  // schedule sets the next tick: the page's period, doubled for each
  // refresh that failed in a row, up to 16 times (at most 2 minutes).
  function delayOf(region) {
    var period = Number(region.dataset.live) || 3;
    return Math.min(period * Math.pow(2, Math.min(failures, 4)), Math.max(period, 120));
  }
  function schedule(region) {
    var delay = delayOf(region);
    region.dataset.liveDelay = String(delay);
    if (timer === null) timer = setTimeout(tick, 1000 * delay);
  }

  function start() {
    applyTime();
    var t = document.getElementById("time-toggle");
    if (t) {
      t.hidden = false;
      t.addEventListener("click", function () {
        store("idem.time", root.classList.contains("time-abs") ? "relative" : "absolute");
        applyTime();
      });
    }
    var region = document.querySelector("[data-live][id]");
    var b = document.getElementById("live-toggle");
    if (b) {
      b.hidden = !region;
      b.addEventListener("click", function () {
        userPaused = !userPaused;
        store("idem.live", userPaused ? "off" : "on");
        var r = document.querySelector("[data-live][id]");
        if (r) indicate(r, pauseReason(r));
      });
    }
    if (region) {
      indicate(region, pauseReason(region));
      schedule(region);
    }
  }
  // Select all: a header box (data-select-all names the form its rows'
  // boxes belong to) ticks or clears every enabled box of that form on the
  // page; it shows ticked when they all are, and mixed when some are.
  // Without JavaScript it stays hidden.
  function boxesOf(all) {
    return Array.prototype.filter.call(document.querySelectorAll('input[type=checkbox][form="' + all.dataset.selectAll + '"]'), function (b) { return !b.disabled; });
  }
  function syncSelectAll() {
    document.querySelectorAll("input[data-select-all]").forEach(function (all) {
      var boxes = boxesOf(all), ticked = boxes.filter(function (b) { return b.checked; }).length;
      all.hidden = boxes.length === 0;
      all.checked = boxes.length > 0 && ticked === boxes.length;
      all.indeterminate = ticked > 0 && ticked < boxes.length;
    });
  }
  document.addEventListener("change", function (e) {
    var t = e.target;
    if (t.dataset && t.dataset.selectAll) {
      boxesOf(t).forEach(function (b) { b.checked = t.checked; });
    }
    if (t.type === "checkbox") syncSelectAll();
  });
  document.addEventListener("idem:refreshed", syncSelectAll);
  document.addEventListener("htmx:afterSettle", syncSelectAll);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", syncSelectAll);
  else syncSelectAll();

  // A question (a confirmation) is brought into view when its page
  // opens, wherever it sits on the page.
  function revealQuestion() {
    var q = document.querySelector("[role=alertdialog]");
    if (q) q.scrollIntoView({ block: "nearest" });
  }
  // After a boosted swap htmx scrolls to the top once it has settled:
  // reveal on the next turn, after that.
  document.addEventListener("htmx:afterSettle", function (e) { if (e.target === document.body) setTimeout(revealQuestion, 0); });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", revealQuestion);
  else revealQuestion();

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
  // A boosted navigation swaps the body: look for the new page's region.
  document.addEventListener("htmx:afterSettle", function (e) {
    if (e.target === document.body) {
      if (timer !== null) { clearTimeout(timer); timer = null; }
      stale = null;
      failures = 0;
      start();
    }
  });
  // A refused action (a form's POST answered with an error page, which
  // the htmx-config in layout.html swaps in) shows that page at the
  // address the form was on: the action's own address has no page, and a
  // reload there would not find one. htmx reads the history object after
  // this event, so the change takes effect.
  document.addEventListener("htmx:beforeHistoryUpdate", function (e) {
    var d = e.detail;
    if (d.failed && d.requestConfig && d.requestConfig.verb !== "get") {
      d.history.type = "replace";
      d.history.path = location.pathname + location.search;
    }
  });
})();
