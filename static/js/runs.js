/* Runs page: filter selects submit on change; the list refreshes while any run on it is live. */
(function () {
  "use strict";

  var form = document.getElementById("run-filters");
  if (form) {
    form.addEventListener("change", function (ev) {
      if (ev.target && ev.target.matches("select, input[type=checkbox], input[type=date]")) {
        form.requestSubmit ? form.requestSubmit() : form.submit();
      }
    });
  }

  var live = document.querySelector("[data-live-url]");
  if (live && window.ArcanaPoll) {
    window.ArcanaPoll.fragment(live, live.getAttribute("data-live-url"), {});
  }
})();
