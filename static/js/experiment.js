/* Arcana Console — the experiment page: its progress and items follow the workers through ArcanaPoll
 * (conditional polls: 304 until an item finishes), and stop once the experiment has finished. */
(function () {
  "use strict";
  var holder = document.getElementById("experiment-live");
  if (!holder || !window.ArcanaPoll) return;
  var root = holder.firstElementChild;
  if (root && root.getAttribute("data-live") === "false") return;
  window.ArcanaPoll.fragment(holder, holder.getAttribute("data-live-url"), { interval: 1000 });
})();
