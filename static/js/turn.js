/* Turn page: j / k move to the next / previous turn; live refresh of the turn while its run is live. */
(function () {
  "use strict";

  document.addEventListener("keydown", function (ev) {
    if (ev.defaultPrevented || ev.altKey || ev.ctrlKey || ev.metaKey) return;
    var t = ev.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    var link = null;
    if (ev.key === "j") link = document.querySelector("a[data-nav='next']");
    else if (ev.key === "k") link = document.querySelector("a[data-nav='prev']");
    if (link && link.href) {
      ev.preventDefault();
      window.location.href = link.href;
    }
  });

  var live = document.querySelector("[data-live-url]");
  if (live && window.ArcanaPoll) {
    window.ArcanaPoll.fragment(live, live.getAttribute("data-live-url"), {
      // The fragment also carries the active pins (data-part="turn-pins"), for the sidebar.
      render: window.ArcanaPoll.renderParts(live),
    });
  }
})();
