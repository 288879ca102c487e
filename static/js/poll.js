/* Arcana Console — adaptive polling of server-rendered fragments (shared by the run and turn pages).
 *
 * ArcanaPoll.fragment(el, url, opts) replaces el's content with the HTML the server renders at url,
 * every opts.interval ms while the tab is visible, every opts.hiddenInterval ms while it is hidden,
 * doubling the delay after errors (up to opts.maxInterval). It stops when the fragment's root carries
 * data-live="false" (the run finished). The server escapes every trace string; this file never builds
 * HTML from data.
 */
(function () {
  "use strict";

  function fragment(el, url, opts) {
    opts = opts || {};
    var interval = opts.interval || 3000;
    var hiddenInterval = opts.hiddenInterval || 30000;
    var maxInterval = opts.maxInterval || 60000;
    var delay = interval;
    var timer = null;
    var inflight = false;
    var stopped = false;

    function schedule(ms) {
      clearTimeout(timer);
      if (!stopped) timer = setTimeout(tick, ms);
    }

    function nextDelay() {
      return document.visibilityState === "hidden" ? hiddenInterval : delay;
    }

    function tick() {
      if (inflight || stopped) return;
      inflight = true;
      fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
        .then(function (resp) {
          if (!resp.ok) throw new Error("HTTP " + resp.status);
          return resp.text();
        })
        .then(function (html) {
          var tpl = document.createElement("template");
          tpl.innerHTML = html;
          var root = tpl.content.firstElementChild;
          el.replaceChildren(tpl.content);
          delay = interval;
          if (opts.onUpdate) opts.onUpdate(root);
          if (root && root.getAttribute("data-live") === "false") {
            stopped = true;
            if (opts.onFinish) opts.onFinish(root);
            return;
          }
          schedule(nextDelay());
        })
        .catch(function () {
          delay = Math.min(delay * 2, maxInterval);
          schedule(nextDelay());
        })
        .finally(function () { inflight = false; });
    }

    document.addEventListener("visibilitychange", function () {
      // Coming back to the tab: refresh at once rather than waiting out the slow hidden interval.
      if (document.visibilityState === "visible" && !stopped) schedule(200);
    });
    schedule(nextDelay());
    return { stop: function () { stopped = true; clearTimeout(timer); } };
  }

  window.ArcanaPoll = { fragment: fragment };
})();
