// The branch page (issue 38): poll the branch's status; when the re-run is done, open the compare page.
(function () {
  "use strict";
  var box = document.getElementById("branch-status");
  if (!box) return;
  var status = box.getAttribute("data-status");
  if (status === "completed" || status === "failed") return;
  var url = box.getAttribute("data-status-url");
  var state = document.getElementById("branch-state");
  function tick() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (b) {
        if (!b) { setTimeout(tick, 2000); return; }
        if (state) state.textContent = b.status;
        if (b.status === "completed" && b.compare_url) { window.location.assign(b.compare_url); return; }
        if (b.status === "failed") { window.location.reload(); return; }
        setTimeout(tick, 1000);
      })
      .catch(function () { setTimeout(tick, 2000); });
  }
  setTimeout(tick, 500);
})();
