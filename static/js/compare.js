/* Compare page while a run is still being written: poll the progress fragment (traces/live.py's
 * conditional polling through poll.js) and load the comparison once both runs are complete. */
(function () {
  "use strict";
  var live = document.getElementById("compare-live");
  if (live && window.ArcanaPoll) {
    window.ArcanaPoll.fragment(live, live.getAttribute("data-live-url"), {
      onFinish: function () { window.location.reload(); },
    });
  }
})();
