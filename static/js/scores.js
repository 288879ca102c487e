// Scores (issue 36): the score forms from the keyboard.
//   s            open the page's score form and focus its first input (not while typing)
//   Ctrl+Enter   submit the score form from any of its inputs, the comment included
//   Enter        submits from a radio or number input, as any form does
// On a review page (data-review) also:  Alt+S skip this run,  Alt+N take the next one.
(function () {
  "use strict";
  function typing(el) {
    return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }
  function firstInput(form) {
    return form.querySelector("[data-score-first]") || form.querySelector("input:not([type=hidden]), textarea");
  }
  document.addEventListener("keydown", function (ev) {
    var form = document.querySelector("[data-score-form]");
    if (!form) return;
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey) && form.contains(ev.target)) {
      ev.preventDefault();
      form.requestSubmit ? form.requestSubmit() : form.submit();
      return;
    }
    if (ev.altKey && !ev.ctrlKey && !ev.metaKey) {
      var key = (ev.key || "").toLowerCase();
      var target = key === "s" ? document.querySelector("[data-review-skip]") : key === "n" ? document.querySelector("[data-review-next]") : null;
      if (target) {
        ev.preventDefault();
        target.click();
        return;
      }
    }
    if (ev.key === "s" && !ev.ctrlKey && !ev.metaKey && !ev.altKey && !typing(ev.target)) {
      var details = form.closest("details");
      if (details) details.open = true;
      var input = firstInput(form);
      if (input) {
        ev.preventDefault();
        input.focus();
      }
    }
  });
  // A review page focuses its form at once: the reviewer scores without reaching for the mouse.
  if (document.querySelector("[data-review]")) {
    var form = document.querySelector("[data-score-form]");
    var input = form && firstInput(form);
    if (input) input.focus();
  }
})();
