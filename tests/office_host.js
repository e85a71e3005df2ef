/* A stand-in for Excel's host side of the custom functions runtime (tests only).
 *
 * Microsoft's custom-functions-runtime.js talks to its host through a native bridge
 * (`window._richApiNativeBridge`, set before the runtime loads): the host sends invocations as
 * messages of type 3 (category 1, type 1000: [invocationId, functionName, parameterValues, address,
 * flags]); the runtime calls the associated function with the parameter values and its invocation
 * object last, and sends the results back as a ProcessQuery request (SetInvocationArrayResults:
 * [invocationId, succeeded, value, ...]) that the host answers. `OfficeHost.recalculate(cells)` is one
 * recalculation: every cell's invocation in one message, resolved with each cell's value as Excel
 * would write it (an error as {error: message}).
 */
(function (root) {
  "use strict";
  var nextId = 1;
  var waiting = {};  // invocationId -> resolve
  var requests = 0;
  var bridge = {
    sendMessageToHost: function (text) {
      var m = JSON.parse(text);
      if (m.type !== 1) return;
      requests += 1;
      var actions = (m.message && m.message.body && m.message.body.Actions) || [];
      actions.forEach(function (a) {
        if (a.Name !== "SetInvocationArrayResults" && a.Name !== "SetInvocationResults") return;
        (a.ArgumentInfo.Arguments[0] || []).forEach(function (r) {
          var id = Array.isArray(r) ? r[0] : r.id;
          var ok = Array.isArray(r) ? r[1] : !r.failed;
          var value = Array.isArray(r) ? r[2] : r.value;
          var done = waiting[id];
          delete waiting[id];
          if (done) done(ok ? value : { error: value });
        });
      });
      setTimeout(function () {
        bridge.onMessageFromHost(JSON.stringify({
          id: m.id, type: 2, message: { statusCode: 200, headers: {}, body: JSON.stringify({ Results: [] }) },
        }));
      }, 0);
    },
  };
  root._richApiNativeBridge = bridge;
  root.OfficeHost = {
    // cells: [{fn, args, address}] with every declared parameter in args (null where left out)
    recalculate: function (cells) {
      var entries = [];
      var results = cells.map(function (c) {
        var id = nextId++;
        entries.push([1, 1000, 0, JSON.stringify([id, c.fn, c.args, c.address || "Sheet1!Z1", 0]), id]);
        return new Promise(function (ok) { waiting[id] = ok; });
      });
      bridge.onMessageFromHost(JSON.stringify({ type: 3, message: { entries: entries } }));
      return Promise.all(results);
    },
    requests: function () { return requests; },
  };
})(window);
