/// The control API described for tools (`GET /v1/openapi.json`, OpenAPI
/// 3.0): every endpoint `ControlAPI` answers, its parameters and its
/// answers' shapes. `OpenAPITests` holds it to the routes the server has.
enum OpenAPI {
    static let document = #"""
    {
      "openapi": "3.0.3",
      "info": {
        "title": "Vigil control API",
        "version": "1",
        "description": "The control API of a running vigil (vigil run --control): health, status, one monitor's actions, reload, the host's figures, and what a history sink keeps, the console's session and live stream. On a unix socket; over TCP behind a bearer token."
      },
      "components": {
        "securitySchemes": {
          "token": { "type": "http", "scheme": "bearer", "description": "Over TCP only (--control-tcp): the token of --control-token-file." },
          "session": { "type": "apiKey", "in": "cookie", "name": "vigil_session", "description": "A console session (POST /v1/session with the token): a random id in an HttpOnly, SameSite=Strict cookie, ended by DELETE /v1/session or 12 idle hours. A POST or DELETE it authenticates must also carry X-Vigil-CSRF (GET /v1/session gives it)." } },
        "schemas": {
          "Error": { "type": "object", "required": ["error"], "properties": { "error": { "type": "string", "description": "What is wrong, in words." } } },
          "Health": { "type": "object", "required": ["status", "reasons"], "properties": {
            "status": { "type": "string", "enum": ["ok", "unhealthy"] },
            "reasons": { "type": "array", "items": { "type": "string" } } } },
          "Status": { "type": "object", "description": "Every monitor and sink, as `vigil ctl status --json` prints it.", "properties": {
            "pid": { "type": "integer" }, "version": { "type": "string" }, "manifest": { "type": "string" },
            "started_at": { "type": "string" }, "uptime_s": { "type": "number" }, "events": { "type": "integer" },
            "process": { "type": "object", "properties": { "cpu_s": { "type": "number" }, "rss_bytes": { "type": "integer" }, "threads": { "type": "integer" } } },
            "monitors": { "type": "array", "items": { "type": "object" } },
            "sinks": { "type": "array", "items": { "type": "object", "description": "A history sink's entry has `history`: series, points, minutes, bytes, max_memory, dropped by reason, problem." } } } },
          "Accepted": { "type": "object", "properties": { "monitor": { "type": "string" }, "action": { "type": "string" }, "state": { "type": "string" } } },
          "Series": { "type": "object", "required": ["sink", "more", "series"], "properties": {
            "sink": { "type": "string" }, "more": { "type": "boolean", "description": "More series matched than `limit`." },
            "series": { "type": "array", "items": { "type": "object", "required": ["id", "monitor", "kind", "identity", "field", "counter"], "properties": {
              "id": { "type": "string", "description": "What /v1/query takes as `series`; holds while the sink does." },
              "monitor": { "type": "string" }, "kind": { "type": "string" },
              "identity": { "type": "object", "additionalProperties": { "type": "string" } },
              "field": { "type": "string" }, "counter": { "type": "boolean" },
              "first": { "type": "integer", "nullable": true, "description": "ms since the epoch" },
              "last": { "type": "integer", "nullable": true, "description": "ms since the epoch" } } } } } },
          "Query": { "type": "object", "required": ["series", "field", "counter", "rate", "from", "to", "step_ms", "tier", "points"], "properties": {
            "series": { "type": "string" }, "field": { "type": "string" }, "counter": { "type": "boolean" },
            "rate": { "type": "boolean", "description": "The points are a counter's rate per second." },
            "from": { "type": "integer" }, "to": { "type": "integer" },
            "step_ms": { "type": "integer", "description": "0: every point, as [time, value]; else [time, min, max, mean, last] per step." },
            "tier": { "type": "string", "enum": ["points", "minutes"] },
            "points": { "type": "array", "items": { "type": "array", "items": { "type": "number", "nullable": true } } } } },
          "Events": { "type": "object", "required": ["sink", "last_seq", "events"], "properties": {
            "sink": { "type": "string" }, "last_seq": { "type": "integer" },
            "events": { "type": "array", "items": { "type": "object", "description": "An event as the JSON Lines sinks write it." } } } },
          "Session": { "type": "object", "required": ["auth"], "properties": {
            "csrf": { "type": "string", "description": "The value of X-Vigil-CSRF for changes the cookie authenticates; absent when not logged in." },
            "auth": { "type": "string", "enum": ["none", "bearer", "cookie", "required"], "description": "How the request was let in; `required`: it was not (log in)." } } },
          "Conditions": { "type": "object", "required": ["thresholds", "rules"], "properties": {
            "thresholds": { "type": "array", "items": { "type": "object", "required": ["monitor", "kind", "field", "per", "state"], "properties": {
              "monitor": { "type": "string" }, "kind": { "type": "string" }, "field": { "type": "string" },
              "per": { "type": "object", "additionalProperties": { "type": "string" } },
              "state": { "type": "string", "enum": ["nominal", "warning", "critical", "stale"] },
              "value": { "type": "number" }, "since": { "type": "string" },
              "warning": { "type": "object" }, "critical": { "type": "object" }, "for_s": { "type": "number" }, "stale_after_s": { "type": "number" } } } },
            "rules": { "type": "array", "items": { "type": "object", "required": ["name", "condition", "severity", "active", "pending"], "properties": {
              "name": { "type": "string" }, "condition": { "type": "string" }, "severity": { "type": "string" },
              "active": { "type": "boolean" }, "pending": { "type": "boolean", "description": "Its condition holds; its `for` runs." },
              "last_fired": { "type": "string" }, "last_change": { "type": "string" }, "for_s": { "type": "number" } } } } } },
          "Manifest": { "type": "object", "required": ["file", "files", "monitors"], "properties": {
            "file": { "type": "string" },
            "files": { "type": "array", "items": { "type": "object", "properties": { "path": { "type": "string" }, "text": { "type": "string" } } } },
            "monitors": { "type": "object", "additionalProperties": { "type": "object", "properties": {
              "file": { "type": "string" }, "line": { "type": "integer" }, "text": { "type": "string" } } } },
            "last_reload": { "type": "object", "properties": { "at": { "type": "string" }, "reason": { "type": "string" }, "result": { "type": "object" } } } } },
          "Sparklines": { "type": "object", "required": ["sink", "from", "step_ms", "monitors"], "properties": {
            "sink": { "type": "string" }, "from": { "type": "integer" }, "step_ms": { "type": "integer" },
            "monitors": { "type": "object", "additionalProperties": { "type": "object", "properties": {
              "series": { "type": "string" }, "field": { "type": "string" }, "counter": { "type": "boolean" },
              "points": { "type": "array", "items": { "type": "array", "items": { "type": "number" } } } } } } } }
        },
        "responses": {
          "Error": { "description": "What is wrong with the request, or why it cannot be done now.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
        }
      },
      "security": [ {}, { "token": [] }, { "session": [] } ],
      "paths": {
        "/v1/health": { "get": { "summary": "ok, or the reasons it is not", "responses": {
          "200": { "description": "healthy", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Health" } } } },
          "503": { "description": "unhealthy", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Health" } } } } } } },
        "/v1/status": { "get": { "summary": "every monitor and sink", "responses": {
          "200": { "description": "status", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Status" } } } } } } },
        "/v1/monitors/{name}/{action}": { "post": { "summary": "one monitor: poll now, stop, start, restart",
          "parameters": [
            { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } },
            { "name": "action", "in": "path", "required": true, "schema": { "type": "string", "enum": ["poll", "stop", "start", "restart"] } } ],
          "responses": {
            "202": { "description": "done or under way", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Accepted" } } } },
            "404": { "$ref": "#/components/responses/Error" }, "409": { "$ref": "#/components/responses/Error" } } } },
        "/v1/reload": { "post": { "summary": "the manifest again, applied as a diff", "responses": {
          "200": { "description": "applied: the diff" }, "422": { "description": "refused, nothing changed: the errors" } } } },
        "/v1/series": { "get": { "summary": "the series a history sink keeps",
          "parameters": [
            { "name": "monitor", "in": "query", "schema": { "type": "string" }, "description": "a glob" },
            { "name": "kind", "in": "query", "schema": { "type": "string" }, "description": "a glob" },
            { "name": "field", "in": "query", "schema": { "type": "string" }, "description": "a glob" },
            { "name": "limit", "in": "query", "schema": { "type": "integer", "minimum": 1, "maximum": 10000, "default": 1000 } },
            { "name": "sink", "in": "query", "schema": { "type": "string" }, "description": "a history sink's name (the first by default)" } ],
          "responses": {
            "200": { "description": "the series", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Series" } } } },
            "400": { "$ref": "#/components/responses/Error" }, "404": { "$ref": "#/components/responses/Error" } } } },
        "/v1/query": { "get": { "summary": "one series' points, every one or per step",
          "parameters": [
            { "name": "series", "in": "query", "required": true, "schema": { "type": "string" }, "description": "an id from /v1/series" },
            { "name": "from", "in": "query", "schema": { "type": "string" }, "description": "ms since the epoch, or a duration before now (-5m); an hour before `to` by default" },
            { "name": "to", "in": "query", "schema": { "type": "string" }, "description": "ms since the epoch, or a duration before now; now by default" },
            { "name": "step", "in": "query", "schema": { "type": "string" }, "description": "ms or a duration (10s); none: every point. At most 11,000 points come back: a larger step is taken and said." },
            { "name": "rate", "in": "query", "schema": { "type": "boolean", "default": true }, "description": "a counter as its rate per second" },
            { "name": "sink", "in": "query", "schema": { "type": "string" } } ],
          "responses": {
            "200": { "description": "the points", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Query" } } } },
            "400": { "$ref": "#/components/responses/Error" }, "404": { "$ref": "#/components/responses/Error" } } } },
        "/v1/events": { "get": { "summary": "the last events a history sink was given, whole, oldest first",
          "parameters": [
            { "name": "monitor", "in": "query", "schema": { "type": "string" }, "description": "a glob" },
            { "name": "kind", "in": "query", "schema": { "type": "string" }, "description": "a glob" },
            { "name": "severity", "in": "query", "schema": { "type": "string", "enum": ["debug", "info", "notice", "warning", "error", "critical"] }, "description": "this or worse" },
            { "name": "since", "in": "query", "schema": { "type": "integer", "minimum": 0 }, "description": "after this sequence number (last_seq of an earlier answer)" },
            { "name": "limit", "in": "query", "schema": { "type": "integer", "minimum": 1, "maximum": 10000, "default": 100 } },
            { "name": "sink", "in": "query", "schema": { "type": "string" } } ],
          "responses": {
            "200": { "description": "the events", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Events" } } } },
            "400": { "$ref": "#/components/responses/Error" }, "404": { "$ref": "#/components/responses/Error" } } } },
        "/v1/session": {
          "get": { "summary": "who is in, and the CSRF value for changes; answered to anyone", "security": [ {} ], "responses": {
            "200": { "description": "in, or `auth: required`", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Session" } } } } } },
          "post": { "summary": "the console's log-in: the token, kept in an HttpOnly, SameSite=Strict cookie", "security": [ {} ],
            "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "required": ["token"], "properties": { "token": { "type": "string" } } } } } },
            "responses": {
              "200": { "description": "in: Set-Cookie", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Session" } } } },
              "400": { "$ref": "#/components/responses/Error" }, "401": { "$ref": "#/components/responses/Error" },
              "403": { "$ref": "#/components/responses/Error" }, "415": { "$ref": "#/components/responses/Error" },
              "429": { "$ref": "#/components/responses/Error" } } },
          "delete": { "summary": "the console's log-out: the cookie cleared", "responses": { "200": { "description": "out" } } } },
        "/v1/stream": { "get": { "summary": "Server-Sent Events: events (event: event, id: seq) and new points (event: points) as they come; a ping comment every 15 s",
          "parameters": [
            { "name": "events", "in": "query", "schema": { "type": "boolean" }, "description": "send events (the default without series)" },
            { "name": "series", "in": "query", "schema": { "type": "string" }, "description": "ids from /v1/series, comma-separated, at most 64: their new points" },
            { "name": "monitor", "in": "query", "schema": { "type": "string" }, "description": "a glob" },
            { "name": "kind", "in": "query", "schema": { "type": "string" }, "description": "a glob" },
            { "name": "severity", "in": "query", "schema": { "type": "string", "enum": ["debug", "info", "notice", "warning", "error", "critical"] } },
            { "name": "since", "in": "query", "schema": { "type": "integer", "minimum": 0 }, "description": "events after this sequence number (or the Last-Event-ID header)" },
            { "name": "sink", "in": "query", "schema": { "type": "string" } } ],
          "responses": {
            "200": { "description": "text/event-stream, until the client goes; a client whose unread data passes 256 KiB is dropped" },
            "400": { "$ref": "#/components/responses/Error" }, "404": { "$ref": "#/components/responses/Error" },
            "503": { "$ref": "#/components/responses/Error" } } } },
        "/v1/conditions": { "get": { "summary": "every threshold and rule, with its state and when it last changed or fired", "responses": {
          "200": { "description": "the states", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Conditions" } } } } } } },
        "/v1/manifest": { "get": { "summary": "the manifest in force, file by file, each monitor's section, and the last reload tried", "responses": {
          "200": { "description": "the manifest", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Manifest" } } } } } } },
        "/v1/sparklines": { "get": { "summary": "each monitor's main series over a short span, per step",
          "parameters": [
            { "name": "from", "in": "query", "schema": { "type": "string", "default": "-5m" } },
            { "name": "step", "in": "query", "schema": { "type": "string", "default": "10s" }, "description": "at least 1s" },
            { "name": "sink", "in": "query", "schema": { "type": "string" } } ],
          "responses": {
            "200": { "description": "the sparklines", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Sparklines" } } } },
            "400": { "$ref": "#/components/responses/Error" }, "404": { "$ref": "#/components/responses/Error" } } } },
        "/v1/openapi.json": { "get": { "summary": "this description", "responses": { "200": { "description": "OpenAPI 3.0" } } } },
        "/metrics": { "get": { "summary": "the host's figures (and the prometheus sinks' series) in Prometheus' text format", "responses": {
          "200": { "description": "text/plain; version=0.0.4" } } } }
      }
    }
    """#
}
