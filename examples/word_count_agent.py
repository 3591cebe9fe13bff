"""An agent of your own, written against the `openai` package only, for the WordCount tasks.

It plays `agent_rl/WordCount-v0`'s tasks the way that env's `ToolEnv` loop does (the same system
text and tool schemas, its `count_words` tool run here, the same feedback when a turn calls no
tool), so on the same model its greedy episodes are token for token the env's. Nothing here
imports agent-rl: any agent loop over an OpenAI client can take its place.

    agent-rl eval --model tiny --tasks agent_rl/WordCount-v0 --agent examples.word_count_agent:run
"""

from __future__ import annotations

import json
import re
from typing import Any

SYSTEM_PROMPT = (
    "You are a helpful assistant that solves tasks step by step. Use the tools when they help. "
    "When you know the final answer, call the `answer` tool with it."
)
NO_TOOL_CALL = (
    'No tool call found. Call a tool with <tool_call>{"name": ..., "arguments": {...}}'
    "</tool_call>, or give your final answer with the 'answer' tool."
)
MAX_TURNS = 8
TOOLS = [
    {"type": "function", "function": {
        "name": "count_words",
        "description": "Count the words in a text, splitting on whitespace.",
        "parameters": {"type": "object", "properties": {"text": {
            "type": "string", "description": "The text whose words to count."}},
            "required": ["text"]}}},
    {"type": "function", "function": {
        "name": "answer",
        "description": "Submit your final answer. This ends the episode; call it once, when "
                       "you are sure.",
        "parameters": {"type": "object", "properties": {"answer": {
            "type": "string", "description": 'The final answer alone, e.g. "42", or the full '
                                            "code for code tasks."}},
            "required": ["answer"]}}},
]


def count_words(text: str) -> int:
    """The agent's own tool."""
    return len(text.split())


def reward(answer: str, expected: str) -> float:
    """1 for the right count, 0.1 when off by one (the env's verifier, restated)."""
    numbers = re.findall(r"-?\d+", answer)
    if not numbers:
        return 0.0
    seen = int(numbers[-1])
    return 1.0 if seen == int(expected) else 0.1 if abs(seen - int(expected)) == 1 else 0.0


async def run(task: dict[str, Any], client: Any) -> float:
    """Play one task; `client` is an `openai.AsyncOpenAI` whose base URL is this episode's."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                      {"role": "user", "content": task["prompt"]}]
    for _ in range(MAX_TURNS):
        reply = await client.chat.completions.create(model="policy", messages=messages,
                                                     tools=TOOLS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            written = re.search(r"<answer>(.*?)</answer>", message.content or "", re.S)
            if written:
                return reward(written.group(1).strip(), task["answer"])
            messages.append({"role": "user", "content": NO_TOOL_CALL})
            continue
        for call in message.tool_calls:
            arguments = json.loads(call.function.arguments)
            if call.function.name == "answer":
                return reward(str(arguments.get("answer", "")), task["answer"])
            if call.function.name == "count_words":
                content = json.dumps(count_words(**arguments))
            else:
                content = f"Error: there is no tool named {call.function.name!r}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return 0.0
