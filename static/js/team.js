// Team settings pages: "Copy" buttons next to a secret shown once (an invite link, an API key and
// its snippets). The button names the element to copy in data-copy; no inline script (CSP).
(function () {
  "use strict";
  function textOf(el) {
    return el.value !== undefined && el.tagName === "INPUT" ? el.value : el.textContent;
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    if (!button) return;
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) return;
    var text = textOf(source);
    var done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 2000);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { select(source); });
    } else {
      select(source);
    }
  });
  function select(el) {
    if (el.select) { el.select(); return; }
    var range = document.createRange();
    range.selectNodeContents(el);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }
})();
