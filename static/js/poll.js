/* Arcana Console — conditional polling of server-rendered fragments (run, turn, runs and playground pages).
 *
 * ArcanaPoll.fragment(el, url, opts) keeps el showing the HTML the server renders at url:
 *  - every opts.interval ms (default 500) while the tab is visible, every opts.hiddenInterval ms
 *    (default 15000) while it is hidden, at once when it becomes visible again;
 *  - each request sends the ETag of the copy on screen as If-None-Match; the server answers
 *    304 Not Modified (no body, no rendering) until the run changes, so an idle page costs one tiny
 *    request per tick (traces/live.py says why this, not server push);
 *  - the first tag comes from el's data-live-etag, rendered with the page, so an unchanged page never
 *    re-renders;
 *  - errors double the delay (up to opts.maxInterval);
 *  - it stops when the fragment's root carries data-live="false" (the run finished); restart() starts
 *    it again (the playground after a send).
 * url may be a function returning the URL (pages whose fragment depends on controls); opts.render(root)
 * places a fragment whose parts go to several places of the page (the playground). The server
 * escapes every trace string; this file never builds HTML from data.
 */
(function () {
  "use strict";

  function fragment(el, url, opts) {
    opts = opts || {};
    var interval = opts.interval || 500;
    var hiddenInterval = opts.hiddenInterval || 15000;
    var maxInterval = opts.maxInterval || 30000;
    var delay = interval;
    var timer = null;
    var inflight = null;
    var stopped = false;
    var tag = el.getAttribute("data-live-etag") || "";

    function schedule(ms) {
      clearTimeout(timer);
      if (!stopped) timer = setTimeout(tick, ms);
    }

    function nextDelay() {
      return document.visibilityState === "hidden" ? hiddenInterval : delay;
    }

    function apply(html, etag) {
      var tpl = document.createElement("template");
      tpl.innerHTML = html;
      var root = tpl.content.firstElementChild;
      if (opts.render) opts.render(root);
      else el.replaceChildren(tpl.content);
      tag = etag || "";
      if (opts.onUpdate) opts.onUpdate(root);
      if (root && root.getAttribute("data-live") === "false") {
        stopped = true;
        if (opts.onFinish) opts.onFinish(root);
      }
    }

    function tick() {
      if (inflight || stopped) return;
      var headers = { "X-Requested-With": "fetch" };
      if (tag) headers["If-None-Match"] = tag;
      var target = typeof url === "function" ? url() : url;
      // no-store: the 304 must reach this code (the HTTP cache would turn it into its stored 200).
      inflight = fetch(target, { credentials: "same-origin", cache: "no-store", headers: headers })
        .then(function (resp) {
          if (resp.status === 304) return null;
          if (!resp.ok) throw new Error("HTTP " + resp.status);
          return resp.text().then(function (html) { return [html, resp.headers.get("ETag")]; });
        })
        .then(function (got) {
          delay = interval;
          if (got) apply(got[0], got[1]);
          schedule(nextDelay());
        })
        .catch(function () {
          delay = Math.min(delay * 2, maxInterval);
          schedule(nextDelay());
        })
        .finally(function () { inflight = null; });
    }

    document.addEventListener("visibilitychange", function () {
      // Back to the tab: ask at once rather than waiting out the slow hidden interval.
      if (document.visibilityState === "visible" && !stopped) schedule(0);
    });
    schedule(nextDelay());
    return {
      stop: function () { stopped = true; clearTimeout(timer); },
      /* Poll again (from now), e.g. after the user sent a message that will change the fragment. */
      restart: function () { stopped = false; delay = interval; schedule(0); },
      isStopped: function () { return stopped; },
    };
  }

  /* A `render` for `fragment`: each element of the new fragment marked data-part="<id>" replaces the
     children of the page's element with that id (parts of the page outside `el`, e.g. a sidebar); the
     rest replaces `el`'s children. */
  function renderParts(el) {
    return function (root) {
      if (!root) return;
      root.querySelectorAll("[data-part]").forEach(function (part) {
        var target = document.getElementById(part.getAttribute("data-part"));
        if (target) target.replaceChildren.apply(target, Array.prototype.slice.call(part.childNodes));
        part.remove();
      });
      el.replaceChildren(root);
    };
  }

  window.ArcanaPoll = { fragment: fragment, renderParts: renderParts };
})();
