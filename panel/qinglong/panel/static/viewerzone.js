// The cluster's task form (docs/panel.md "Cluster"): put the browser's IANA time zone in
// #viewer_zone and ask htmx for the preview again, so the next fire times show in the
// viewer's zone too. Without script the preview shows the task's zone only.
(function () {
  "use strict";
  var done = false;
  document.addEventListener("htmx:load", function (event) {
    var field = document.getElementById("viewer_zone");
    var schedule = document.getElementById("schedule");
    if (done || !field || !schedule || !event.target.contains(schedule)) { return; }
    done = true;  // once: htmx has set up the form, so the event below reaches it
    var zone = "";
    try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { zone = ""; }
    if (!zone) { return; }
    field.value = zone;
    schedule.dispatchEvent(new Event("viewer-zone"));
  });
})();
