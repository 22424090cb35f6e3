/* pa-bridge sign-in page: name and password, then the authenticator's code when asked,
 * or the organisation's identity provider. The session is a cookie the server sets. */
(function () {
  "use strict";

  function $(id) { return document.getElementById(id); }
  var params = new URLSearchParams(window.location.search);
  var next = params.get("next") || "/";
  if (next.charAt(0) !== "/" || next.charAt(1) === "/") { next = "/"; }

  var FAILED = {
    expired: "The sign-in took too long. Start again.",
    oidc: "Your organisation's sign-in did not work. Try again, or call IT.",
    refused: "This account may not sign in here. Call IT."
  };

  function problem(text) {
    var p = $("problem");
    p.textContent = text || "";
    p.hidden = !text;
  }
  function say(text) { $("status").textContent = text; }

  function post(path, body) {
    return fetch(path, {
      method: "POST", credentials: "same-origin", cache: "no-store",
      headers: { "Content-Type": "application/json", "Accept": "application/json" },
      body: JSON.stringify(body)
    }).then(function (r) {
      return r.text().then(function (t) {
        var data = null;
        try { data = t ? JSON.parse(t) : null; } catch (e) { data = null; }
        return { status: r.status, data: data };
      });
    });
  }

  function failed(r) {
    var err = r.data && r.data.error;
    if (err && err.code === "locked") { return "Too many failed sign-ins. " + err.message.charAt(0).toUpperCase() + err.message.slice(1) + "."; }
    if (err && err.code === "sign_in_expired") { return "The sign-in took too long. Start again."; }
    if (err && err.code === "sign_in_failed") { return "The name, password or code is not right."; }
    if (err && err.code === "sign_in_busy") { return "Many sign-ins are under way. Try again in a moment."; }
    return "pa-bridge could not sign you in (HTTP " + r.status + ").";
  }

  function done() {
    say("Signed in.");
    window.location.assign(next);
  }

  function showPassword() {
    $("code-form").hidden = true;
    $("password-form").hidden = false;
    $("name-input").focus();
  }

  $("password-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    problem("");
    post("/console/sign-in", { name: $("name-input").value, password: $("password-input").value }).then(function (r) {
      $("password-input").value = "";
      if (r.status === 200 && r.data && r.data.signed_in) { return done(); }
      if (r.status === 200 && r.data && r.data.next === "code") {
        $("password-form").hidden = true;
        $("code-form").hidden = false;
        $("code-input").focus();
        return;
      }
      problem(failed(r));
      $("password-input").focus();
    }, function () { problem("pa-bridge could not be reached."); });
  });

  $("code-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    problem("");
    post("/console/sign-in/code", { code: $("code-input").value }).then(function (r) {
      $("code-input").value = "";
      if (r.status === 200 && r.data && r.data.signed_in) { return done(); }
      problem(failed(r));
      if (r.data && r.data.error && r.data.error.code === "sign_in_expired") { showPassword(); return; }
      $("code-input").focus();
    }, function () { problem("pa-bridge could not be reached."); });
  });

  if (params.get("failed")) { problem(FAILED[params.get("failed")] || FAILED.oidc); }
  if (params.get("ended") === "idle") { say("You were signed out after a while without activity. Sign in again."); }

  // Signed in already (the identity provider's way back): go on.
  fetch("/console/session", { credentials: "same-origin", cache: "no-store" }).then(function (r) {
    if (r.status === 200) { return done(); }
    return fetch("/console/sign-in/options", { credentials: "same-origin", cache: "no-store" })
      .then(function (o) { return o.json(); })
      .then(function (opts) {
        if (!opts.required) { $("no-sign-in").hidden = false; }
        if (opts.oidc) {
          $("oidc").hidden = false;
          $("oidc-link").textContent = opts.oidc.label;
          $("oidc-link").href = "/console/sign-in/oidc?next=" + encodeURIComponent(next);
        }
        showPassword();
      });
  }, function () { problem("pa-bridge could not be reached."); showPassword(); });
})();
