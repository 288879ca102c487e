/* Conversation page (playground or script): live status, transcript, context decisions and pins; sending
 * a message and cancelling through the conversations API.
 *
 * One poll (ArcanaPoll, conditional: 304 until something changed) fetches the live fragment; its parts
 * (data-part="conv-status" / "conv-transcript" / "conv-side") replace the page's elements of the same
 * id. Polling stops while the playground waits for the user and starts again when a message is sent.
 * Send is off unless the conversation accepts a message (the API would answer 409). Every text from
 * the server arrives as escaped HTML or goes in through textContent.
 */
(function () {
  "use strict";

  var holder = document.getElementById("conv-live");
  if (!holder || !window.ArcanaPoll) return;
  var form = document.getElementById("message-form");
  var cancelForm = document.getElementById("cancel-form");
  var send = document.getElementById("message-send");
  var note = document.getElementById("message-note");
  var content = document.getElementById("message-content");
  var sending = false;
  var poller = null;

  function csrf(f) {
    var input = f && f.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function syncControls() {
    var accepts = holder.getAttribute("data-accepts") === "true";
    var finished = holder.getAttribute("data-finished") === "true";
    if (send) send.disabled = sending || !accepts;
    if (note && !sending) {
      if (finished) note.textContent = "This conversation has ended.";
      else if (!accepts) note.textContent = "A turn is running: send is off until it ends.";
      else note.textContent = "";
    }
    if (cancelForm) cancelForm.hidden = finished;
  }

  function chat() {
    return document.querySelector("#conv-transcript .chat");
  }

  function atBottom(list) {
    return !list || list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  }

  function toBottom() {
    var list = chat();
    if (list) list.scrollTop = list.scrollHeight;
  }

  function render(root) {
    if (!root) return;
    // Follow the conversation unless the reader scrolled up to read something earlier.
    var follow = atBottom(chat());
    ["data-live", "data-status", "data-accepts", "data-finished"].forEach(function (name) {
      holder.setAttribute(name, root.getAttribute(name) || "");
    });
    root.querySelectorAll("[data-part]").forEach(function (part) {
      var target = document.getElementById(part.getAttribute("data-part"));
      if (target) target.replaceChildren.apply(target, Array.prototype.slice.call(part.childNodes));
    });
    if (follow) toBottom();
    syncControls();
  }

  function poll() {
    if (poller && !poller.isStopped()) return;
    if (poller) poller.restart();
    else poller = window.ArcanaPoll.fragment(holder, holder.getAttribute("data-live-url"), { render: render });
  }

  function errorText(body, fallback) {
    try {
      var data = JSON.parse(body);
      var parts = [data.error || data.detail || fallback];
      if (Array.isArray(data.detail)) {
        data.detail.forEach(function (d) { parts.push(d.message || JSON.stringify(d)); });
      }
      return parts.join(": ");
    } catch (e) {
      return fallback;
    }
  }

  function post(url, body, csrfToken) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken },
      body: JSON.stringify(body || {}),
    });
  }

  if (form) {
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var text = content.value;
      if (!text.trim() || sending) return;
      sending = true;
      syncControls();
      note.textContent = "Sending…";
      var agent = form.querySelector("select[name=agent]");
      var body = { content: text };
      if (agent) body.agent = agent.value;
      post(form.getAttribute("data-api"), body, csrf(form))
        .then(function (resp) {
          return resp.text().then(function (t) {
            sending = false;
            if (resp.status === 202 || resp.status === 200) {
              content.value = "";
              toBottom();
              holder.setAttribute("data-accepts", "false");
              note.textContent = "Sent: a worker is on it.";
            } else {
              note.textContent = errorText(t, "HTTP " + resp.status);
            }
            if (send) send.disabled = holder.getAttribute("data-accepts") !== "true";
            poll();
          });
        })
        .catch(function () {
          sending = false;
          note.textContent = "Network error: the message was not sent.";
          syncControls();
        });
    });
    content.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        form.requestSubmit ? form.requestSubmit() : form.submit();
      }
    });
  }

  if (cancelForm) {
    cancelForm.addEventListener("submit", function (ev) {
      ev.preventDefault();
      post(cancelForm.getAttribute("data-api"), {}, csrf(cancelForm)).finally(poll);
    });
  }

  syncControls();
  toBottom();
  if (holder.getAttribute("data-live") === "true") poll();
})();
