// Troupe dashboard login: exchanges the one-time code in this page's URL
// fragment (#login=CODE) for the dashboard's session cookie, then loads the
// page again without the fragment. The code leaves the address bar and the
// history before it is sent.
(function () {
  "use strict";
  var prefix = "#login=";
  var hash = window.location.hash;
  if (hash.indexOf(prefix) !== 0) {
    return;
  }
  var code = hash.slice(prefix.length);
  var here = window.location.pathname + window.location.search;
  window.history.replaceState(null, "", here);
  function say(text) {
    var status = document.getElementById("login-status");
    if (status) {
      status.textContent = text;
    }
  }
  window.fetch("/login", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ code: code })
  }).then(function (response) {
    if (response.status === 204) {
      window.location.replace(here);
    } else {
      say("This login link was used already or has expired: run `troupe dashboard` for a new one.");
    }
  }, function () {
    say("The daemon could not be reached.");
  });
})();
