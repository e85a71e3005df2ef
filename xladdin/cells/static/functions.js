/* xladdin worksheet functions for the Office add-in (and, through wps/main.js, WPS Spreadsheets).
 *
 * Every call a recalculation makes is gathered for WINDOW_MS into one POST to the cell service
 * (`xladdin cells serve`, which serves this file); the same call twice in a window is sent once.
 * Answered calls come back at once (memory or the disk cache, no engine); pending ones settle over
 * one settle request: a stream of their values as they settle where the host's fetch can read one, else a
 * long poll. Every failure is a `#QWEN! …` value: a call never hangs, even when the service stops.
 * The names and how many arguments each declares are the function table's (xladdin/sheet/table.py,
 * functions.json; a test checks them). A host passes more than the declared arguments: Office adds its
 * invocation object last to every call (with every declared parameter, null where the cell left one
 * out), so a function takes its declared ones and nothing after them.
 */
(function (root) {
  "use strict";

  var NAMES = ["QWEN_SCREEN", "QWEN", "QWEN_EXTRACT", "QWEN_CLASSIFY", "QWEN_HIGHLIGHTS", "QWEN_STATUS"];
  var ARITY = { QWEN_SCREEN: 3, QWEN: 2, QWEN_EXTRACT: 3, QWEN_CLASSIFY: 2, QWEN_HIGHLIGHTS: 3, QWEN_STATUS: 0 };
  var SPILL = { QWEN_SCREEN: true, QWEN_STATUS: true };
  var PENDING = "#QWEN\u2026 \u8ba1\u7b97\u4e2d pending";  // the placeholder of a cell still waiting (WPS)
  var WINDOW_MS = 20;
  var MAX_CALL_BYTES = 1 << 20;
  var MAX_BATCH = 2000;
  var POLL_S = 20;

  function keyFromLocation() {
    try {
      var m = /(?:^|[#&])key=([^&]+)/.exec(root.location.hash || "");
      return m ? decodeURIComponent(m[1]) : null;
    } catch (e) {
      return null;
    }
  }

  function shaped(name, value) {
    // a spill's value is rows; an empty cell is "" (Office shows no null in an array)
    if (SPILL[name] && !Array.isArray(value)) value = [[value]];
    if (Array.isArray(value)) {
      return value.map(function (row) {
        return (Array.isArray(row) ? row : [row]).map(function (v) { return v === null || v === undefined ? "" : v; });
      });
    }
    return value === null || value === undefined ? "" : value;
  }

  function errorText(e) {
    return "#QWEN! " + (e && e.message ? e.message : String(e));
  }

  function CellClient(options) {
    options = options || {};
    this.base = options.base || "";
    this.key = options.key !== undefined ? options.key : keyFromLocation();
    this.windowMs = options.windowMs !== undefined ? options.windowMs : WINDOW_MS;
    this.maxCallBytes = options.maxCallBytes || MAX_CALL_BYTES;
    this.pollSeconds = options.pollSeconds || POLL_S;
    this.fetch = options.fetch || root.fetch.bind(root);
    this.stream = options.stream !== undefined ? options.stream : canStream();  // settle as a stream
    this.queue = [];      // calls to send: {name, args, text, settle: [fn]}
    this.queued = {};     // text -> its queued call (one call per window)
    this.waiting = {};    // id -> pending call
    this.timer = null;
    this.covered = {};    // id -> true while a poll asks for it
    this.stats = { calls: 0, sent: 0, posts: 0, polls: 0, errors: 0 };
  }

  CellClient.prototype.headers = function () {
    var h = { "Content-Type": "application/json" };
    if (this.key) h["X-Xladdin-Key"] = this.key;
    return h;
  };

  CellClient.prototype.call = function (name, args) {
    var self = this;
    self.stats.calls += 1;
    args = Array.prototype.map.call(args || [], function (a) { return a === undefined ? null : a; });
    while (args.length && args[args.length - 1] === null) args.pop();
    var text;
    try {
      text = JSON.stringify([name, args]);
    } catch (e) {
      return Promise.resolve(shaped(name, errorText(e)));
    }
    if (text.length > self.maxCallBytes) {
      return Promise.resolve(shaped(name, "#QWEN! call too large (" + text.length + " characters; at most " +
        self.maxCallBytes + "): pass a report file's path instead of its text"));
    }
    return new Promise(function (resolve) {
      var call = self.queued[text];
      if (!call) {
        call = self.queued[text] = { name: name, args: args, text: text, settle: [] };
        self.queue.push(call);
      }
      call.settle.push(function (value) { resolve(shaped(name, value)); });
      if (self.timer === null) self.timer = setTimeout(function () { self.flush(); }, self.windowMs);
    });
  };

  CellClient.prototype.finish = function (call, value) {
    call.settle.forEach(function (f) { f(value); });
    call.settle = [];
  };

  CellClient.prototype.request = function (path, body, seconds, attempt, onPart) {
    // onPart: a settle stream's parts, each handed over as it arrives (an answer of one JSON is its one part)
    var self = this;
    attempt = attempt || 0;
    var abort = typeof AbortController !== "undefined" ? new AbortController() : null;
    var timer = abort ? setTimeout(function () { abort.abort(); }, seconds * 1000) : null;
    function done() { if (timer) clearTimeout(timer); }
    function unreachable(e) {
      return new Error("cell service unreachable (" + (e && e.name === "AbortError" ? "no answer" : e.message) +
        "): start it with xladdin cells serve, then recalculate");
    }
    return self.fetch(self.base + path, {
      method: "POST", headers: self.headers(), body: JSON.stringify(body), signal: abort ? abort.signal : undefined,
    }).then(function (r) {
      if (r.status === 429 && attempt < 3) {
        done();
        var wait = Number(r.headers.get("Retry-After") || 1);
        return new Promise(function (ok) { setTimeout(ok, wait * 1000); })
          .then(function () { return self.request(path, body, seconds, attempt + 1, onPart); });
      }
      var type = (r.headers && r.headers.get("Content-Type")) || "";
      if (onPart && r.ok && type.indexOf("ndjson") >= 0 && r.body && r.body.getReader) {
        return readParts(r.body.getReader(), onPart).then(done, function (e) { done(); throw unreachable(e); });
      }
      done();
      return r.json().catch(function () { return {}; }).then(function (data) {
        if (!r.ok) throw new Error("cell service: " + (data.error || ("HTTP " + r.status)));
        if (onPart) onPart(data);
        return data;
      });
    }, function (e) {
      done();
      throw unreachable(e);
    });
  };

  function readParts(reader, onPart) {
    // a stream of JSON lines, each handed to onPart as it is complete
    var decoder = new TextDecoder();
    var buffer = "";
    function pump() {
      return reader.read().then(function (chunk) {
        if (chunk.done) {
          if (buffer.trim()) onPart(JSON.parse(buffer));
          return;
        }
        buffer += decoder.decode(chunk.value, { stream: true });
        var lines = buffer.split("\n");
        buffer = lines.pop();
        lines.forEach(function (line) { if (line.trim()) onPart(JSON.parse(line)); });
        return pump();
      });
    }
    return pump();
  }

  function canStream() {
    // whether the host's fetch gives a response's body as it arrives (else a settle is a long poll)
    return typeof TextDecoder !== "undefined" && typeof ReadableStream !== "undefined";
  }

  CellClient.prototype.flush = function () {
    var self = this;
    self.timer = null;
    var calls = self.queue;
    self.queue = [];
    self.queued = {};
    var sent = [];
    for (var i = 0; i < calls.length; i += MAX_BATCH) sent.push(calls.slice(i, i + MAX_BATCH));
    return Promise.all(sent.map(function (batch) {
      self.stats.posts += 1;
      self.stats.sent += batch.length;
      var body = { calls: batch.map(function (c) { return { fn: c.name, args: c.args }; }) };
      return self.request("/api/calls", body, 120).then(function (data) {
        var results = data.results || [];
        batch.forEach(function (call, j) {
          var r = results[j] || { state: "error", value: "#QWEN! no answer for this call" };
          if (r.state === "pending") {
            var w = self.waiting[r.id];
            if (w) w.settle = w.settle.concat(call.settle);
            else self.waiting[r.id] = call;
          } else {
            if (r.state === "error") self.stats.errors += 1;
            self.finish(call, r.value);
          }
        });
        self.poll();
      }, function (e) {
        batch.forEach(function (call) { self.finish(call, errorText(e)); });
      });
    }));
  };

  CellClient.prototype.poll = function () {
    // one settle for the pending calls no settle covers yet (a new batch's do not wait for an older one): a
    // stream of their values as they settle where the host can read one, else a long poll; the calls still
    // pending at its end are asked for again
    var self = this;
    var ids = Object.keys(self.waiting).filter(function (id) { return !self.covered[id]; });
    if (!ids.length) return;
    ids.forEach(function (id) { self.covered[id] = true; });
    self.stats.polls += 1;
    var stopping = false;
    function take(data) {
      var results = data.results || {};
      Object.keys(results).forEach(function (id) {
        var call = self.waiting[id];
        delete self.waiting[id];
        if (call) self.finish(call, results[id].value);
      });
      (data.unknown || []).forEach(function (id) {  // the service restarted: ask again, once
        var call = self.waiting[id];
        delete self.waiting[id];
        if (call && !call.retried) {
          call.retried = true;
          self.queue.push(call);
          if (self.timer === null) self.timer = setTimeout(function () { self.flush(); }, self.windowMs);
        } else if (call) {
          self.finish(call, "#QWEN! the cell service lost this call: recalculate");
        }
      });
      if (data.stopping) stopping = true;
    }
    var body = { ids: ids, wait: self.pollSeconds };
    if (self.stream) body.stream = true;
    self.request("/api/settle", body, self.pollSeconds + 30, 0, take).then(function () {
      if (stopping) throw new Error("the cell service stopped: start it with xladdin cells serve, then recalculate");
    }).catch(function (e) {
      ids.forEach(function (id) {
        var call = self.waiting[id];
        delete self.waiting[id];
        if (call) self.finish(call, errorText(e));
      });
    }).then(function () {
      ids.forEach(function (id) { delete self.covered[id]; });
      self.poll();
    });
  };

  function declared(name, args) {
    // the arguments the function declares, without what the host adds after them (Office's invocation)
    return Array.prototype.slice.call(args, 0, ARITY[name]);
  }

  function register(associate, client) {
    NAMES.forEach(function (name) {
      associate(name, function () { return client.call(name, declared(name, arguments)); });
    });
  }

  var api = { NAMES: NAMES, ARITY: ARITY, SPILL: SPILL, declared: declared, PENDING: PENDING, CellClient: CellClient, register: register,
              shaped: shaped, client: null };
  root.XladdinCells = api;
  if (typeof CustomFunctions !== "undefined" && CustomFunctions.associate) {
    api.client = new CellClient();
    register(function (name, fn) { CustomFunctions.associate(name, fn); }, api.client);
  }
})(typeof window !== "undefined" ? window : this);
