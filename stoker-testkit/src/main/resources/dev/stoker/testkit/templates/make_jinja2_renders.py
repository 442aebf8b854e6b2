"""Regenerates jinja2-renders.jsonl: each template here rendered by Python's Jinja2 as transformers renders it,
on every template case (stoker-text/src/main/resources/dev/stoker/text/template-cases.jsonl), on the chats of EXTRA and on 60
random chats (written with their messages).

The environment is transformers' _compile_jinja_template (src/transformers/utils/chat_template_utils.py):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]),
its tojson filter and raise_exception global; render(messages=..., tools=None, documents=None,
add_generation_prompt=False, **special_tokens_map). Messages are HF typed content as JinjaChatRenderer builds them.

Run from the repository root (needs jinja2 >= 3.1):
    python3 stoker-testkit/src/main/resources/dev/stoker/testkit/templates/make_jinja2_renders.py
"""
import json, os, sys

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "../../../../../../../../stoker-text/src/main/resources/dev/stoker/text/template-cases.jsonl")
TEMPLATES = ["qwen2-vl-instruct.jinja", "qwen2.5-vl-instruct.jinja", "qwen3-vl-instruct.jinja", "qwen3-vl-thinking.jinja"]
SPECIAL_TOKENS = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}

# Shapes the parser admits that the template cases leave out (see TemplateCheck).
EXTRA = [
    ("later_system_turn", [{"role": "user", "content": [{"type": "text", "text": "u"}]},
                           {"role": "system", "content": [{"type": "text", "text": "s"}]},
                           {"role": "assistant", "content": [{"type": "text", "text": "a"}]}]),
    ("image_in_assistant_turn", [{"role": "user", "content": [{"type": "text", "text": "u"}]},
                                 {"role": "assistant", "content": [{"type": "image"}, {"type": "text", "text": "a"}]}]),
    ("image_in_system_turn", [{"role": "system", "content": [{"type": "image"}, {"type": "text", "text": "s"}]},
                              {"role": "user", "content": [{"type": "text", "text": "u"}]}]),
]


def random_chats(n, seed=16):
    """Chats of random shape the parser admits: any role order, images in any role, odd text."""
    import random
    rng = random.Random(seed)
    texts = ["", " ", "\n", "Hello", "  padded  ", "line\nbreak\r\n", "tab\tx", "ünïcödé 你好 🤖", "{{ x }}", "{% if %}",
             "<think>\nr\n</think>\n\nanswer", "</think>tail", "<tool_response>x</tool_response>", "\\ back\"slash'", "a:b::c"]
    chats = []
    for i in range(n):
        messages = []
        for _ in range(rng.randint(1, 6)):
            role = rng.choice(["system", "user", "user", "assistant", "assistant"])
            items = []
            for _ in range(rng.randint(1, 3)):
                items.append({"type": "image"} if rng.random() < 0.3 else {"type": "text", "text": rng.choice(texts)})
            messages.append({"role": role, "content": items})
        chats.append(("random_%02d" % i, messages))
    return chats


class AssistantTracker(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def typed(record_messages):
    """HF typed content as JinjaChatRenderer hands it over: text items and bare {"type": "image"} items."""
    out = []
    for m in record_messages:
        items = []
        for it in m["content"]:
            if it.get("type") == "image":
                items.append({"type": "image"})
            else:
                items.append({"type": "text", "text": it["text"]})
        out.append({"role": m["role"], "content": items})
    return out


def main():
    chats = []
    with open(CASES, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                chats.append((rec["id"], typed(rec["messages"])))
    chats.extend(EXTRA)
    randoms = random_chats(60)
    chats.extend(randoms)
    env = environment()
    with open(os.path.join(HERE, "jinja2-renders.jsonl"), "w", encoding="utf-8") as out:
        for name in TEMPLATES:
            with open(os.path.join(HERE, name), encoding="utf-8") as f:
                template = env.from_string(f.read())
            for case, messages in chats:
                text = template.render(messages=messages, tools=None, documents=None, add_generation_prompt=False, **SPECIAL_TOKENS)
                record = {"template": name, "case": case, "text": text}
                if case.startswith("random_"): record["messages"] = messages
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
    print("jinja2", jinja2.__version__, len(TEMPLATES) * len(chats), "renders", file=sys.stderr)


if __name__ == "__main__":
    main()
