/* New run form: picking a scripted scenario fills in its suggested settings and script; the script
 * box shows in script mode only; the pool's agent rows show when "A pool of agents" is ticked.
 * The form works without this file (everything is visible and posts the same fields).
 * Scenario details come from a json_script block; values go in through .value, never as HTML.
 */
(function () {
  "use strict";

  var form = document.getElementById("newrun-form");
  if (!form) return;
  var detailsNode = document.getElementById("scenario-details");
  var scenarios = detailsNode ? JSON.parse(detailsNode.textContent) : {};
  var model = form.elements.namedItem("model");
  var script = form.elements.namedItem("script");
  var system = form.elements.namedItem("system");
  var windowField = form.elements.namedItem("context_window");
  var pool = form.elements.namedItem("pool");
  var scriptField = document.getElementById("script-field");
  var agentsBox = document.getElementById("pool-agents");

  function setPrimitives(names) {
    form.querySelectorAll("input[name=cognitive_primitives]").forEach(function (box) {
      box.checked = names.indexOf(box.value) !== -1;
    });
  }

  function scenarioOf(value) {
    var cut = (value || "").indexOf("/");
    return value && value.slice(0, cut) === "scripted" ? scenarios[value.slice(cut + 1)] || null : null;
  }

  function scriptLines(s) {
    return (s.script || []).map(function (text, k) {
      var who = s.script_agents && s.script_agents[k];
      return who ? who + ": " + text : text;
    }).join("\n");
  }

  // The scenario whose settings the form holds (the server prefills the preselected demo).
  var filled = scenarioOf(model.value);

  // Leaving the demo for a configured model: the demo's own settings (its 2,400-token window, its
  // system prompt and script, its pool) would make a real model's run look broken, so those the user
  // left as filled in are cleared; anything they typed stays.
  function clearScenario(s) {
    if (String(windowField.value) === String(s.context_window || "")) windowField.value = "";
    if (system.value === (s.system || "")) system.value = "";
    if (script.value === scriptLines(s)) script.value = "";
    if ((s.agents || []).length && pool.checked) pool.checked = false;
    sync();
  }

  function fillScenario() {
    var s = scenarioOf(model.value);
    if (!s) {
      if (filled) clearScenario(filled);
      filled = null;
      return;
    }
    filled = s;
    system.value = s.system || "";
    windowField.value = s.context_window || "";
    setPrimitives(s.cognitive_primitives || []);
    var agents = s.agents || [];
    pool.checked = agents.length > 0;
    for (var i = 0; ; i++) {
      var name = form.elements.namedItem("agent" + i + "-name");
      if (!name) break;
      var a = agents[i] || {};
      name.value = a.name || "";
      form.elements.namedItem("agent" + i + "-system").value = a.system || "";
      form.elements.namedItem("agent" + i + "-primitives_mode").value = "inherit";
    }
    script.value = scriptLines(s);
    sync();
  }

  function sync() {
    var mode = form.querySelector("input[name=mode]:checked");
    scriptField.hidden = !!mode && mode.value === "playground";
    agentsBox.hidden = !pool.checked;
    form.querySelectorAll(".agent-row").forEach(function (row) {
      var sel = row.querySelector("select");
      var own = sel && sel.value === "override";
      row.querySelectorAll(".agent-row__prims input").forEach(function (box) { box.disabled = !own; });
    });
  }

  model.addEventListener("change", fillScenario);
  form.addEventListener("change", function (ev) {
    if (ev.target !== model) sync();
  });
  sync();
})();
