/* Run overview: fidelity-map tooltip and click-through, step-window control, live timeline and map refresh.
 *
 * Data comes only from the server-rendered DOM: each map cell's <title> (plain text) and the step
 * columns passed through json_script. Tooltips are filled with textContent, never innerHTML.
 */
(function () {
  "use strict";

  var tip = document.createElement("div");
  tip.className = "map-tip";
  tip.setAttribute("role", "tooltip");
  tip.hidden = true;
  document.body.appendChild(tip);

  function columns(map) {
    var id = map.getAttribute("data-columns");
    var node = id && document.getElementById(id);
    if (!node) return [];
    if (!node._parsed) node._parsed = JSON.parse(node.textContent);
    return node._parsed;
  }

  function colAt(svg, ev) {
    var pt = svg.createSVGPoint();
    pt.x = ev.clientX;
    pt.y = ev.clientY;
    var p = pt.matrixTransform(svg.getScreenCTM().inverse());
    var x0 = parseFloat(svg.getAttribute("data-x0"));
    var cw = parseFloat(svg.getAttribute("data-cw"));
    return Math.floor((p.x - x0) / cw);
  }

  function showTip(text, ev) {
    tip.textContent = text;
    tip.hidden = false;
    var pad = 14;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    var x = ev.clientX + pad, y = ev.clientY + pad;
    if (x + w > window.innerWidth - 8) x = ev.clientX - w - pad;
    if (y + h > window.innerHeight - 8) y = ev.clientY - h - pad;
    tip.style.left = Math.max(4, x) + "px";
    tip.style.top = Math.max(4, y) + "px";
  }

  function cellText(cell, col) {
    var title = cell.querySelector("title");
    var text = title ? title.textContent : "";
    var c = col !== null ? columns(cell.ownerSVGElement)[col] : null;
    if (c) text = c.label + "\n" + text;
    return text;
  }

  function bindMap(map) {
    var svg = map.querySelector("svg.fmap");
    if (!svg) return;
    svg.addEventListener("mousemove", function (ev) {
      var cell = ev.target.closest ? ev.target.closest(".fcell") : null;
      if (!cell) { tip.hidden = true; return; }
      showTip(cellText(cell, colAt(svg, ev)), ev);
    });
    svg.addEventListener("mouseleave", function () { tip.hidden = true; });
    svg.addEventListener("click", function (ev) {
      var cell = ev.target.closest ? ev.target.closest(".fcell") : null;
      if (!cell) return;
      var c = columns(svg)[colAt(svg, ev)];
      if (c && c.url) window.location.href = c.url;
    });
  }

  // The map of a live run follows it: after each change of the live fragment (so never while the run
  // is unchanged), the map is asked for again with its own ETag, for the window on screen (the last
  // one unless the reader picked another); the server draws it again only if the run changed.
  function refreshMap(container) {
    var base = container.getAttribute("data-fmap-live");
    if (!base) return;
    var active = document.activeElement;
    if (active && container.contains(active) && active.closest("form")) return; // the reader is moving the window
    var params = new URLSearchParams();
    var here = new URLSearchParams(window.location.search);
    ["agent", "from"].forEach(function (k) { if (here.get(k)) params.set(k, here.get(k)); });
    var headers = { "X-Requested-With": "fetch" };
    var tag = container.getAttribute("data-live-etag");
    if (tag) headers["If-None-Match"] = tag;
    var query = params.toString();
    fetch(base + (query ? "?" + query : ""), { credentials: "same-origin", cache: "no-store", headers: headers })
      .then(function (r) {
        if (r.status === 304 || !r.ok) return;
        return r.text().then(function (html) {
          var tpl = document.createElement("template");
          tpl.innerHTML = html;
          container.replaceChildren(tpl.content);
          container.setAttribute("data-live-etag", r.headers.get("ETag") || "");
          init(container);
          bindWindow(container);
        });
      })
      .catch(function () { /* the next change of the run asks again */ });
  }

  function bindWindow(container) {
    var form = container.querySelector("form.fmap-window");
    if (!form) return;
    var range = form.querySelector("input[type=range]");
    var out = form.querySelector("output");
    var timer = null;
    function load() {
      var params = new URLSearchParams(new FormData(form));
      var url = form.getAttribute("data-fragment-url") + "?" + params.toString();
      fetch(url, { credentials: "same-origin" })
        .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
        .then(function (html) {
          var tpl = document.createElement("template");
          tpl.innerHTML = html;
          container.replaceChildren(tpl.content);
          init(container);
          bindWindow(container);
          var next = new URL(window.location.href);
          params.forEach(function (v, k) { next.searchParams.set(k, v); });
          history.replaceState(null, "", next.toString());
          var r2 = container.querySelector("input[type=range]");
          if (r2) r2.focus();
        })
        .catch(function () { form.submit(); });
    }
    if (range) {
      range.addEventListener("input", function () {
        if (out) out.textContent = range.value;
        clearTimeout(timer);
        timer = setTimeout(load, 250);
      });
    }
    form.addEventListener("submit", function (ev) { ev.preventDefault(); load(); });
  }

  function init(root) {
    root.querySelectorAll("[data-fmap]").forEach(bindMap);
  }

  document.querySelectorAll("[data-fmap-container]").forEach(function (c) { init(c); bindWindow(c); });

  // What filled the context: its own fragment, fetched once the page is shown, in place of the link
  // to it (which stays when the fetch fails or scripts are off).
  document.querySelectorAll("[data-band-url]").forEach(function (slot) {
    fetch(slot.getAttribute("data-band-url"), { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        var tpl = document.createElement("template");
        tpl.innerHTML = html;
        slot.replaceWith(tpl.content);
      })
      .catch(function () { /* the link stays */ });
  });

  var live = document.querySelector("[data-live-url]");
  if (live && window.ArcanaPoll) {
    window.ArcanaPoll.fragment(live, live.getAttribute("data-live-url"), {
      // The fragment also carries the pin lanes and cognitive events (data-part): each goes to the
      // element of its id further down the page; the rest (stats, timeline) replaces #run-live.
      render: window.ArcanaPoll.renderParts(live),
      onUpdate: function () {
        document.querySelectorAll("[data-fmap-live]").forEach(refreshMap);
      },
      onFinish: function (root) {
        var badge = document.getElementById("live-badge");
        var label = (root && root.getAttribute("data-status-label")) || "Finished";
        if (badge) { badge.textContent = label; badge.className = "badge"; }
      },
    });
  }
})();
