/* The WPS Spreadsheets adapter of functions.js. WPS's add-in custom functions are synchronous (WPS
 * 12.1.0.20540 and later: no promises), so a call returns its value when this page has it, else the
 * pending placeholder while the shared client asks the cell service; when answers arrive the sheet is
 * recalculated and the same calls return their values. Errors are kept 30 s, then asked again.
 * WPS opens the add-in's folder (/addin/wps/ on the cell service: index.html), whose page loads this file;
 * it loads ../functions.js, whose client takes the service's key from the page URL's fragment (#key=...,
 * written into jsplugins.xml's entry by xladdin cells wps when XLADDIN_CELLS_KEY is set).
 */
(function (root) {
  "use strict";
  var ERROR_TTL_MS = 30000;

  function adapter(cells, app) {
    var client = new cells.CellClient();
    var known = {};     // call -> {value, at}
    var asking = {};    // call -> true while the client asks
    var recalc = null;
    function recalculate() {
      if (recalc !== null) return;
      recalc = setTimeout(function () {
        recalc = null;
        var a = typeof app === "function" ? app() : app;
        if (a && a.CalculateFull) a.CalculateFull(); else if (a && a.Calculate) a.Calculate();
      }, 100);
    }
    function call(name, args) {
      args = cells.declared(name, args);
      var key = JSON.stringify([name, args]);
      var had = known[key];
      if (had && !(String(had.value).indexOf("#QWEN!") === 0 && Date.now() - had.at > ERROR_TTL_MS)) {
        return had.value;
      }
      if (!asking[key]) {
        asking[key] = true;
        client.call(name, args).then(function (value) {
          delete asking[key];
          known[key] = { value: value, at: Date.now() };
          recalculate();
        });
      }
      return cells.shaped(name, cells.PENDING);
    }
    var fns = {};
    cells.NAMES.forEach(function (name) { fns[name] = function () { return call(name, arguments); }; });
    return { client: client, functions: fns, call: call };
  }

  function install() {
    var cells = root.XladdinCells;
    var app = function () { return root.Application || (root.wps && root.wps.EtApplication && root.wps.EtApplication()); };
    var made = adapter(cells, app);
    root.XladdinWps = made;
    cells.NAMES.forEach(function (name) {
      root[name] = made.functions[name];  // functions.json's ids, as globals of the add-in's page
    });
  }

  root.XladdinWpsAdapter = adapter;
  if (root.XladdinCells) {
    install();
  } else if (root.document) {
    var s = root.document.createElement("script");
    s.src = new URL("../functions.js", root.document.currentScript ? root.document.currentScript.src : root.location.href).href;
    s.onload = install;
    (root.document.head || root.document.documentElement).appendChild(s);
  }
})(window);
