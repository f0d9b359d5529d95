// Troupe dashboard: makes the buttons in parts of a page that a live update
// replaced work like those the page loaded with. After each Server-Sent
// Event swap, what was swapped into the element is handed to htmx to
// process (the element itself, which holds the event's listener, is not).
(function () {
  "use strict";
  document.addEventListener("htmx:sseMessage", function (event) {
    var target = event.target;
    if (!window.htmx || !(target instanceof Element)) {
      return;
    }
    Array.prototype.forEach.call(target.children, function (child) {
      window.htmx.process(child);
    });
  });
})();
