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
        "description": "The control API of a running vigil (vigil run --control): health, status, one monitor's actions, reload, the host's figures, and what a history sink keeps. On a unix socket; over TCP behind a bearer token."
      },
      "components": {
        "securitySchemes": { "token": { "type": "http", "scheme": "bearer", "description": "Over TCP only (--control-tcp): the token of --control-token-file." } },
        "schemas": {
          "Error": { "type": "object", "required": ["error"], "properties": { "error": { "type": "string", "description": "What is wrong, in words." } } },
          "Health": { "type": "object", "required": ["status", "reasons"], "properties": {
            "status": { "type": "string", "enum": ["ok", "unhealthy"] },
            "reasons": { "type": "array", "items": { "type": "string" } } } },
          "Status": { "type": "object", "description": "Every monitor and sink, as `vigil ctl status --json` prints it.", "properties": {
            "pid": { "type": "integer" }, "version": { "type": "string" }, "manifest": { "type": "string" },
            "started_at": { "type": "string" }, "uptime_s": { "type": "number" }, "events": { "type": "integer" },
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
            "events": { "type": "array", "items": { "type": "object", "description": "An event as the JSON Lines sinks write it." } } } }
        },
        "responses": {
          "Error": { "description": "What is wrong with the request, or why it cannot be done now.", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
        }
      },
      "security": [ {}, { "token": [] } ],
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
            { "name": "since", "in": "query", "schema": { "type": "integer" }, "description": "after this sequence number (last_seq of an earlier answer)" },
            { "name": "limit", "in": "query", "schema": { "type": "integer", "minimum": 1, "maximum": 10000, "default": 100 } },
            { "name": "sink", "in": "query", "schema": { "type": "string" } } ],
          "responses": {
            "200": { "description": "the events", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Events" } } } },
            "400": { "$ref": "#/components/responses/Error" }, "404": { "$ref": "#/components/responses/Error" } } } },
        "/v1/openapi.json": { "get": { "summary": "this description", "responses": { "200": { "description": "OpenAPI 3.0" } } } },
        "/metrics": { "get": { "summary": "the host's figures (and the prometheus sinks' series) in Prometheus' text format", "responses": {
          "200": { "description": "text/plain; version=0.0.4" } } } }
      }
    }
    """#
}
