// Times in the viewer's zone (docs/panel.md "Pages", Workers): each <time data-local
// datetime="ISO"> shows that instant as YYYY-MM-DD HH:MM:SS +HH:MM in the browser's own
// zone, its title naming the zone. Without script the server's UTC text stays.
(function () {
  "use strict";
  function pad(n) { return String(n).padStart(2, "0"); }
  function show(root) {
    var zone = "";
    try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { zone = ""; }
    root.querySelectorAll("time[data-local]").forEach(function (el) {
      var at = new Date(el.getAttribute("datetime"));
      if (isNaN(at.getTime())) { return; }
      var off = -at.getTimezoneOffset();
      var sign = off >= 0 ? "+" : "-";
      off = Math.abs(off);
      el.textContent = at.getFullYear() + "-" + pad(at.getMonth() + 1) + "-" + pad(at.getDate()) +
        " " + pad(at.getHours()) + ":" + pad(at.getMinutes()) + ":" + pad(at.getSeconds()) +
        " " + sign + pad(Math.floor(off / 60)) + ":" + pad(off % 60);
      if (zone) { el.title = zone; }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { show(document); });
  document.addEventListener("htmx:afterSettle", function (ev) { show(ev.target || document); });
  // the run page's facts, replaced by its log stream (logview.js)
  document.addEventListener("ql3:times", function (ev) { show(ev.detail || document); });
})();
