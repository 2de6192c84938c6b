#!/usr/bin/env python3
"""Renders chat templates exactly as Hugging Face transformers' apply_chat_template does.

The reference of serve/chat_template's differential test (reference_check.cc). Reads a JSON
request on stdin:
  {"now": "2024-07-26T12:00:00", "cases": [{"template": "...", "context": {...}}, ...]}
and writes one result per case on stdout:
  [{"ok": true, "text": "..."} | {"ok": false, "error": "TemplateError: ..."}, ...]
The environment is transformers' _compile_jinja_template (chat_template_utils.py):
ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks, loopcontrols + {% generation %}),
its tojson, raise_exception and strftime_now, the last on the request's fixed "now".
"""
import datetime
import json
import sys

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} block, here without the index tracking."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers' override: no HTML escaping, non-ASCII kept.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    request = json.load(sys.stdin)
    now = datetime.datetime.fromisoformat(request.get("now", "2024-07-26T12:00:00"))
    env = make_env(now)
    compiled = {}
    results = []
    for case in request["cases"]:
        try:
            source = case["template"]
            if source not in compiled:
                compiled[source] = env.from_string(source)
            text = compiled[source].render(**case["context"])
            results.append({"ok": True, "text": text})
        except Exception as e:  # the test compares that both sides fail, and raise_exception's text.
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
