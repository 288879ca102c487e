/* Runs page: filter selects submit on change; the list refreshes while any run on it is live; ticking two
 * runs enables Compare. */
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

  // Compare: two ticked rows enable the button; the ticks survive the live list's refreshes.
  var picked = [];
  var button = document.getElementById("compare-button");
  var hint = document.getElementById("compare-hint");
  var hintText = hint ? hint.textContent : "";

  function boxes() {
    return Array.prototype.slice.call(document.querySelectorAll('input[type=checkbox][form="compare-runs"]'));
  }

  function sync() {
    boxes().forEach(function (box) { box.checked = picked.indexOf(box.value) !== -1; });
    if (button) button.disabled = picked.length !== 2;
    if (hint) {
      hint.textContent = picked.length === 2 ? "Compare the two selected runs."
        : picked.length > 2 ? "Select only two runs (" + picked.length + " selected)."
        : picked.length === 1 ? "Select one more run." : hintText;
    }
  }

  document.addEventListener("change", function (ev) {
    var box = ev.target;
    if (!box || !box.matches || !box.matches('input[type=checkbox][form="compare-runs"]')) return;
    var at = picked.indexOf(box.value);
    if (box.checked && at === -1) picked.push(box.value);
    if (!box.checked && at !== -1) picked.splice(at, 1);
    sync();
  });
  boxes().forEach(function (box) { if (box.checked) picked.push(box.value); });
  sync();

  var live = document.querySelector("[data-live-url]");
  if (live && window.ArcanaPoll) {
    window.ArcanaPoll.fragment(live, live.getAttribute("data-live-url"), { onUpdate: sync });
  }
})();
