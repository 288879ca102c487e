/* The page of a run before its first event (templates/traces/run_waiting.html): poll the run's live
 * fragment (poll.js); when the server answers with the run's own fragment, the run exists: load its page. */
(function () {
  "use strict";
  var el = document.getElementById("run-waiting");
  if (!el || !window.ArcanaPoll) return;
  window.ArcanaPoll.fragment(el, el.getAttribute("data-live-url"), {
    render: function (root) {
      if (root && root.classList.contains("run-waiting")) el.replaceChildren(root);
      else window.location.reload();
    },
  });
})();
