// The Tasks page's select-all box (docs/panel.md "Tasks"): shown only with script; ticks or
// clears every row's box of the bulk form; it shows "some" (indeterminate) when only part
// of the rows are ticked. Delegated on the document, so a table htmx replaces (search)
// keeps working.
(function () {
  "use strict";
  function rows() { return document.querySelectorAll('input[type=checkbox][name=names][form=bulk]'); }
  function sync() {
    var all = document.getElementById("select-all");
    if (!all) { return; }
    var boxes = rows(), ticked = 0;
    boxes.forEach(function (box) { if (box.checked) { ticked += 1; } });
    var box = document.getElementById("select-all-box");
    if (box) { box.hidden = boxes.length === 0; }
    all.checked = boxes.length > 0 && ticked === boxes.length;
    all.indeterminate = ticked > 0 && ticked < boxes.length;
  }
  document.addEventListener("change", function (ev) {
    var target = ev.target;
    if (target && target.id === "select-all") {
      rows().forEach(function (box) { box.checked = target.checked; });
    }
    sync();
  });
  document.addEventListener("DOMContentLoaded", sync);
  document.addEventListener("htmx:afterSettle", sync);
})();
