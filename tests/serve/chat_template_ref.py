"""chat_template_ref.py URL TOKENIZER_CONFIG - the server's chat template
against Qwen3's own: each conversation below goes to the server's
/apply-template and through the chat_template of TOKENIZER_CONFIG, rendered
with jinja2 the way transformers' apply_chat_template renders it
(trim_blocks, lstrip_blocks, a tojson that is json.dumps with
ensure_ascii=False); the two texts must be equal. Exits 1 on the first
difference."""
import json
import sys
import urllib.request

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

URL, CONFIG = sys.argv[1], sys.argv[2]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Le temps qu'il fait: température, vent \"et\" pluie\n",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "東京 or Paris"},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": None},
        "threshold": {"type": "number", "multipleOf": 0.5, "examples": [1.5, -2, 1e-7]},
        "alerts": {"type": "boolean"}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "array", "items": {"type": "string"}}}}}}

CASES = [
    ("a user turn", {"messages": [{"role": "user", "content": "Hi"}]}),
    ("history with a think block", {"messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!"}, {"role": "user", "content": "Bye"}]}),
    ("thinking on", {"messages": [{"role": "user", "content": "2+2?"}],
                     "chat_template_kwargs": {"enable_thinking": True}}),
    ("tools and a system prompt", {"tools": [WEATHER, SEARCH], "messages": [
        {"role": "system", "content": "You help."}, {"role": "user", "content": "Weather in Paris?"}]}),
    ("tools alone", {"tools": [SEARCH], "messages": [{"role": "user", "content": "Find cats"}]}),
    ("a tool loop", {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call_2", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "東京", "days": 2, "threshold": 0.5}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18}"},
        {"role": "tool", "tool_call_id": "call_2", "content": "22 C"}]}),
    ("a tool loop thinking, with reasoning", {"tools": [WEATHER], "chat_template_kwargs": {"enable_thinking": True},
     "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "\nThe user wants weather.\n",
         "tool_calls": [{"id": "c", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "content": "cold"},
        {"role": "assistant", "content": "<think>\nIt is cold.\n</think>\n\nIt is cold in Oslo."},
        {"role": "tool", "content": "<b>more</b>"}]}),
    ("an earlier turn's reasoning dropped", {"messages": [
        {"role": "user", "content": "A"},
        {"role": "assistant", "content": "B", "reasoning_content": "why B"},
        {"role": "user", "content": "<tool_response>\nx\n</tool_response>"},
        {"role": "assistant", "content": "C", "reasoning_content": "why C"},
        {"role": "user", "content": "D"}]}),
    ("a wrapped tool response is not the query", {"messages": [
        {"role": "user", "content": "A"},
        {"role": "assistant", "content": "B", "reasoning_content": "why B"},
        {"role": "user", "content": "<tool_response>\nx\n</tool_response>"}]}),
    ("a later system message and two </think>", {"messages": [
        {"role": "user", "content": "A"},
        {"role": "assistant", "content": "<think>a</think>b</think>\n\nc"},
        {"role": "system", "content": "Now in French."}, {"role": "user", "content": "B"}]}),
    ("the last message an assistant's", {"messages": [
        {"role": "user", "content": "A"}, {"role": "assistant", "content": "Sure,"}]}),
]


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
template = env.from_string(json.load(open(CONFIG, encoding="utf-8"))["chat_template"])

for name, body in CASES:
    kwargs = body.get("chat_template_kwargs", {"enable_thinking": False})
    want = template.render(messages=body["messages"], tools=body.get("tools"), add_generation_prompt=True,
                           **kwargs)
    request = urllib.request.Request(URL + "/apply-template", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        got = json.load(r)["prompt"]
    if got != want:
        print(f"FAIL {name}:\n  server: {got!r}\n  jinja:  {want!r}", file=sys.stderr)
        sys.exit(1)
    print(f"ok {name} ({len(want)} characters)")
