#!/usr/bin/env python3
"""ref_render.py: the reference renderer of the chat-template harness.

Renders a Jinja chat template on a chat request the way Hugging Face
transformers' apply_chat_template does (its _compile_jinja_template and
render): Python jinja2's ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and the loopcontrols extension; the filter tojson as
json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...);
the globals raise_exception (raises jinja2's TemplateError) and
strftime_now(fmt), read here from a fixed clock (--now) so that two
renderers can be compared byte for byte.

The variables are those `specula template` (sp_chat_apply_template) gives
the template: every top-level key of the request, with add_generation_prompt
true, tools and documents null and bos_token/eos_token "" when absent, and
the keys of chat_template_kwargs (an object) on top of them.

  ref_render.py [--now YYYY-MM-DD[THH:MM:SS]] TEMPLATE REQUEST.json
      writes the rendered prompt to stdout, exactly (no newline added);
      exit 1 with the message on stderr when the template fails.
  ref_render.py [--now ...] --batch OUTDIR TEMPLATE... -- REQUEST.json...
      renders every template on every request: OUTDIR/T__R.out (the
      prompt) or OUTDIR/T__R.err (the error), T and R the file names without
      their extension; one process for all of them.

Only the standard library and jinja2 (Debian's python3-jinja2).
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def parse_now(s):
    for fmt in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"):
        try:
            return datetime.datetime.strptime(s, fmt).replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            pass
    raise SystemExit("ref_render.py: --now wants YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS, not %r" % s)


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def variables(req):
    if not isinstance(req, dict) or not isinstance(req.get("messages"), list):
        raise ValueError("the request is not a JSON object with a \"messages\" array")
    v = dict(req)
    kw = v.pop("chat_template_kwargs", None)
    v.setdefault("add_generation_prompt", True)
    v.setdefault("tools", None)
    v.setdefault("documents", None)
    v.setdefault("bos_token", "")
    v.setdefault("eos_token", "")
    if isinstance(kw, dict):
        v.update(kw)
    return v


def render(env, template_text, req):
    """(prompt, None) or (None, error message)."""
    try:
        return env.from_string(template_text).render(**variables(req)), None
    except jinja2.exceptions.TemplateSyntaxError as e:
        return None, "line %s: %s" % (e.lineno, e.message)
    except jinja2.exceptions.TemplateError as e:
        return None, str(e)
    except Exception as e:  # a Python error inside the template (bad call, bad type)
        return None, "%s: %s" % (type(e).__name__, e)


def read_text(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def main(argv):
    now = datetime.datetime.now(datetime.timezone.utc)
    args = list(argv)
    if len(args) >= 2 and args[0] == "--now":
        now = parse_now(args[1])
        args = args[2:]
    env = make_env(now)
    if args and args[0] == "--batch":
        if len(args) < 2 or "--" not in args:
            raise SystemExit("usage: ref_render.py [--now DATE] --batch OUTDIR TEMPLATE... -- REQUEST...")
        outdir = args[1]
        cut = args.index("--")
        templates, requests = args[2:cut], args[cut + 1:]
        reqs = [(stem(r), json.loads(read_text(r))) for r in requests]
        for t in templates:
            text = read_text(t)
            for name, req in reqs:
                out, err = render(env, text, req)
                base = os.path.join(outdir, "%s__%s" % (stem(t), name))
                if out is not None:
                    with open(base + ".out", "wb") as f:
                        f.write(out.encode("utf-8"))
                else:
                    with open(base + ".err", "w", encoding="utf-8") as f:
                        f.write(err + "\n")
        return 0
    if len(args) != 2:
        raise SystemExit("usage: ref_render.py [--now YYYY-MM-DD[THH:MM:SS]] TEMPLATE REQUEST.json")
    out, err = render(env, read_text(args[0]), json.loads(read_text(args[1])))
    if out is None:
        sys.stderr.write("ref_render.py: %s: %s\n" % (args[0], err))
        return 1
    sys.stdout.buffer.write(out.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
