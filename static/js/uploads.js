/* Uploads page: drag-and-drop or pick files; one progress bar per file.
 *
 * Each file is POSTed to /api/v1/uploads as its raw body (session + CSRF token). The bar shows the bytes sent, then the
 * lines the worker has ingested, read by polling GET /api/v1/uploads/<id> until the upload is done or
 * failed. All text from the server goes in through textContent.
 */
(function () {
  "use strict";

  var form = document.getElementById("upload-form");
  if (!form) return;
  var input = document.getElementById("upload-files");
  var zone = document.getElementById("dropzone");
  var list = document.getElementById("progress-list");
  var tpl = document.getElementById("progress-item");
  var project = document.getElementById("upload-project");
  var csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  var api = form.getAttribute("data-api");

  function el(item, cls) { return item.querySelector("." + cls); }

  function setBar(item, fraction, label) {
    var pct = Math.max(0, Math.min(100, Math.round(fraction * 100)));
    el(item, "progress__fill").style.width = pct + "%";
    var bar = el(item, "progress");
    bar.setAttribute("aria-valuenow", String(pct));
    if (label) bar.setAttribute("aria-valuetext", label);
  }

  function setStatus(item, text, kind) {
    var badge = el(item, "progress-item__status");
    badge.textContent = text;
    badge.className = "progress-item__status badge" + (kind ? " badge--" + kind : "");
  }

  function refreshList() {
    var url = form.getAttribute("data-list-url");
    fetch(url, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var t = document.createElement("template");
        t.innerHTML = html;
        document.getElementById("uploads-list").replaceChildren(t.content);
      })
      .catch(function () {});
  }

  function errorText(xhrOrJson) {
    try {
      var data = typeof xhrOrJson === "string" ? JSON.parse(xhrOrJson) : xhrOrJson;
      var parts = [data.error || "upload failed"];
      (data.detail || []).forEach(function (d) { parts.push(d.message || JSON.stringify(d)); });
      return parts.join(": ");
    } catch (e) {
      return "upload failed";
    }
  }

  function finish(item, data) {
    var ok = data.status === "done";
    item.classList.add(ok ? "is-done" : "is-failed");
    setBar(item, 1, ok ? "done" : "failed");
    setStatus(item, ok ? "done" : "failed", ok ? "ok" : "bad");
    var detail = data.accepted + " events accepted · " + data.duplicates + " duplicates · " +
      data.rejected + " rejected";
    if (data.error) detail = data.error + " — " + detail;
    if (data.line_errors && data.line_errors.length) {
      detail += " · first error: line " + data.line_errors[0].line + ": " +
        (data.line_errors[0].error || data.line_errors[0].message || "");
    }
    el(item, "progress-item__detail").textContent = detail;
    var runs = el(item, "progress-item__runs");
    // The server builds every run address (project + encoded run id); the page never does.
    (data.run_links || []).slice(0, 20).forEach(function (link) {
      var li = document.createElement("li");
      var a = document.createElement("a");
      a.href = link.page_url;
      a.textContent = "Open run " + link.run_id.slice(0, 8);
      a.className = "mono";
      li.appendChild(a);
      runs.appendChild(li);
    });
    refreshList();
  }

  function poll(item, url, delay) {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (data) {
        if (data.status === "done" || data.status === "failed") return finish(item, data);
        var total = data.lines_total || 0;
        var frac = total ? data.lines_done / total : 0;
        setBar(item, 0.05 + 0.95 * frac, data.lines_done + " of " + (total || "?") + " lines");
        setStatus(item, data.status === "running" ? "processing" : "queued", "accent");
        el(item, "progress-item__detail").textContent = total
          ? data.lines_done + " of " + total + " lines ingested"
          : "waiting for a worker…";
        var next = document.visibilityState === "hidden" ? 5000 : 600;
        setTimeout(function () { poll(item, url, next); }, next);
      })
      .catch(function () {
        var next = Math.min((delay || 600) * 2, 15000);
        setTimeout(function () { poll(item, url, next); }, next);
      });
  }

  function send(file) {
    var item = tpl.content.firstElementChild.cloneNode(true);
    el(item, "progress-item__name").textContent = file.name;
    el(item, "progress").setAttribute("aria-label", "Progress of " + file.name);
    list.prepend(item);
    setStatus(item, "uploading", "accent");
    // The file goes as the raw request body (project and name in the query string): the API reads
    // it as a stream, and the session's CSRF check never has to parse a multipart body.
    var params = new URLSearchParams({ project: project.value, filename: file.name });
    var team = project.selectedOptions[0] && project.selectedOptions[0].getAttribute("data-team");
    if (team) params.set("team", team);
    var xhr = new XMLHttpRequest();
    xhr.open("POST", api + "?" + params.toString());
    xhr.setRequestHeader("X-CSRFToken", csrf);
    xhr.setRequestHeader("Accept", "application/json");
    xhr.setRequestHeader("Content-Type", /\.gz$/i.test(file.name) ? "application/gzip" : "application/x-ndjson");
    xhr.upload.onprogress = function (ev) {
      if (ev.lengthComputable) setBar(item, 0.05 * (ev.loaded / ev.total), "sending");
    };
    xhr.onload = function () {
      if (xhr.status === 202 || xhr.status === 201 || xhr.status === 200) {
        var data = JSON.parse(xhr.responseText);
        setBar(item, 0.05, "queued");
        setStatus(item, "queued");
        poll(item, data.url || api + "/" + data.id, 600);
      } else {
        item.classList.add("is-failed");
        setBar(item, 1, "failed");
        setStatus(item, "rejected", "bad");
        el(item, "progress-item__detail").textContent = errorText(xhr.responseText);
      }
    };
    xhr.onerror = function () {
      item.classList.add("is-failed");
      setStatus(item, "network error", "bad");
    };
    xhr.send(file);
  }

  function sendAll(files) {
    Array.prototype.forEach.call(files, send);
  }

  input.addEventListener("change", function () {
    sendAll(input.files);
    input.value = "";
  });
  ["dragenter", "dragover"].forEach(function (name) {
    zone.addEventListener(name, function (ev) { ev.preventDefault(); zone.classList.add("is-over"); });
  });
  ["dragleave", "drop"].forEach(function (name) {
    zone.addEventListener(name, function (ev) { ev.preventDefault(); zone.classList.remove("is-over"); });
  });
  zone.addEventListener("drop", function (ev) {
    if (ev.dataTransfer && ev.dataTransfer.files.length) sendAll(ev.dataTransfer.files);
  });
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    if (input.files.length) sendAll(input.files);
  });
})();
